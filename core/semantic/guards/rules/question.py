"""Question rules (``question.*``): what kind of answer is asked for: which fact (the
question word), or a fact against a yes or no."""

from __future__ import annotations

import re

from ..analysis import Analysis
from ..lexicon import phrases, words


def wh_word(a: Analysis, b: Analysis) -> str | None:
    """ "When does it open?" vs "Where does it open?" (``Analysis.wh``, both languages)."""
    return "question_word" if a.wh and b.wh and a.wh != b.wh else None


def question_form(a: Analysis, b: Analysis) -> str | None:
    """A question asking for a fact against one asking yes or no: "How tall is the Eiffel
    Tower?" / "Is the Eiffel Tower tall?", "How can I reset it?" / "Can I reset it?", 怎么注册 /
    可以注册吗.  (Which fact, when both ask for one, is the question-word guard's.)"""
    forms = {form_of(a), form_of(b)}
    return "question_form" if forms == {"fact", "yes/no"} else None


def form_of(a: Analysis) -> str | None:
    """ "fact", "yes/no", or ``None`` when the question says neither."""
    return _form_zh(a) if a.zh else _form_en(a)


# English: by the first word ------------------------------------------------------------------

_FACT_EN = words("fact_en")
_AUXILIARIES_EN = words("auxiliaries_en")


def _form_en(a: Analysis) -> str | None:
    first = a.tokens[0] if a.tokens else ""
    if first in _FACT_EN:
        return "fact"
    return "yes/no" if first in _AUXILIARIES_EN else None


# Chinese: by a word anywhere in the text -----------------------------------------------------

_FACT_ZH = phrases("fact_zh")
_YES_NO_ZH = re.compile(r"吗[?？]?$|是不是|能不能|可不可以|有没有|会不会|要不要|对不对|行不行")


def _form_zh(a: Analysis) -> str | None:
    if any(w in a.text for w in _FACT_ZH):
        return "fact"
    return "yes/no" if _YES_NO_ZH.search(a.text) else None
