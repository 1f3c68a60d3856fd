"""British spellings and their American forms: "colour" / "color", "centre" / "center".

:func:`american` gives the American spelling of a British one, from the regular patterns
(-our, -tre/-bre, -ise/-yse, a doubled final l before a suffix) and a short list of the
irregular ones; the American form must be a dictionary word, and the spelling reconciler
(``spelling.reconcile``) only uses it when the other question has that very word.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["american"]

_IRREGULAR = {
    "grey": "gray", "greys": "grays", "tyre": "tire", "tyres": "tires", "cheque": "check",
    "cheques": "checks", "plough": "plow", "mum": "mom", "sceptic": "skeptic",
    "sceptical": "skeptical", "jewellery": "jewelry", "aluminium": "aluminum",
    "pyjamas": "pajamas", "programme": "program", "programmes": "programs",
    "doughnut": "donut", "mould": "mold", "kerb": "curb", "draught": "draft",
    "licence": "license", "defence": "defense", "offence": "offense", "pretence": "pretense",
    "catalogue": "catalog", "dialogue": "dialog", "analogue": "analog", "enrol": "enroll",
    "fulfil": "fulfill", "instalment": "installment", "skilful": "skillful",
}  # fmt: skip
_PATTERNS = (
    # colour, favourite, behaviours, honourable (not four, your, hour: two letters before)
    (re.compile(r"(?<=[a-z]{2})our(?=$|s$|ed$|ing$|ite|able|ful|less|er|ist|al)"), "or"),
    (re.compile(r"(?<=[a-z]{2}[tb])re(s?)$"), r"er\1"),  # centre, theatres, fibre
    (re.compile(r"(?<=[a-z]{2})is(e|es|ed|ing|ation|ations|er|ers)$"), r"iz\1"),  # realise
    (re.compile(r"(?<=[a-z]{2})ys(e|es|ed|ing)$"), r"yz\1"),  # analyse, paralysed
    # travelled, cancelling, labelled: only when the single-l stem is a word (not filling)
    (re.compile(r"(?<=[aeiou])ll(ed|ing|er|ers)$"), r"l\1"),
)


@lru_cache(maxsize=20_000)
def american(word: str) -> str | None:
    """The American spelling of the British ``word`` (lower case), or ``None``."""
    from .spelling import common_on_the_web, is_english_word

    if word in _IRREGULAR:
        return _IRREGULAR[word]
    for pattern, replacement in _PATTERNS:
        match = pattern.search(word)
        if match is None:
            continue
        if replacement.startswith("l") and not is_english_word(word[: match.start()] + "l"):
            return None  # "filling" is no "filing": "fil" is no word
        us = pattern.sub(replacement, word)
        return us if us != word and common_on_the_web(us) else None
    return None
