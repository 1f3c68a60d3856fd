"""Literal rules (``literal.*``): code, symbols, quoted text, the case of a word and its
apostrophe are never paraphrased, so both questions must have them alike."""

from __future__ import annotations

import re

from ....key.forms import case_differs
from ....key.words import known
from ..analysis import Analysis
from ..lexicon import words


def literal(a: Analysis, b: Analysis) -> str | None:
    """ "`ls -R`" vs "`ls -r`", "\\W" vs "\\w", "10³" vs "103", an emoji with or without its
    joiners: code, flags, math and symbols are never paraphrased, so they must be identical;
    and so must what both questions put in quotes ("break a leg" / "break the leg")."""
    if a.literals != b.literals:
        return "literal"
    quoted_a, quoted_b = _quoted(a.text), _quoted(b.text)
    return "literal" if quoted_a and quoted_b and quoted_a != quoted_b else None


def _quoted(text: str) -> list[str]:
    return [" ".join(filter(None, m.groups())).strip() for m in _QUOTES.finditer(text)]


_QUOTES = re.compile(r"[\"“”]([^\"“”]+)[\"“”]|(?:^|\s)['‘]([^'‘’]+)['’]")


def case(a: Analysis, b: Analysis) -> str | None:
    """ "Please Polish this" vs "Please polish this", ``US`` / ``us``, ``mW`` / ``MW``: the
    case of a word that tells two words apart (``forms.case_differs``, the same rule that
    decides whether two questions are one in form).  A question typed all in lower case (or
    capitals) tells no case, and is compared without it."""
    return "case" if case_differs(a.typed, b.typed) else None


def apostrophe(a: Analysis, b: Analysis) -> str | None:
    """ "When do you use its?" / "… it's?", "were" / "we're", "well" / "we'll": a word with an
    apostrophe against the same letters without it, when those letters are a word of their
    own, is another word (a missing apostrophe is form only where the letters are no word:
    "dont", "whats"; "cant" and "wont" read as the negations on both sides).  English only:
    Chinese has no apostrophes."""
    for x, y in ((a, b), (b, a)):
        bare_y = set(_LATIN.findall(y.text))
        for word in _APOSTROPHED.findall(x.text):
            bare = re.sub("['’]", "", word)
            if bare in bare_y and bare not in _READ_AS_NEGATION and known(bare):
                return "apostrophe"
    return None


_LATIN = re.compile(r"[a-z]+")
_APOSTROPHED = re.compile(r"\b[a-z]+(?:['’][a-z]+)+")
_READ_AS_NEGATION = words("read_as_negation_en")
