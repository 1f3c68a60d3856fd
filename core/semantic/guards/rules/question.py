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
    可以注册吗; or how to tell whether something is so against how to do it ("How do I know if
    someone changed my password?" / "How do I change my password?").  (Which fact, when both
    ask for one, is the question-word guard's.)"""
    forms = {form_of(a), form_of(b)}
    if forms == {"fact", "yes/no"} or _asks_whether(a) != _asks_whether(b):
        return "question_form"
    if a.zh and b.zh and {_how_many_zh(a), _how_many_zh(b)} == {"one", "several"}:
        return "question_form"  # 哪个国家人口最多 / 哪些国家人口最多
    return None


def _how_many_zh(a: Analysis) -> str | None:
    """Whether a Chinese question asks for one (哪个, 哪位) or several (哪些, 哪几)."""
    one, several = _ONE_ZH.search(a.text), _SEVERAL_ZH.search(a.text)
    if bool(one) == bool(several):
        return None
    return "one" if one else "several"


# (English pairs of this kind — "Which is the largest ocean?" / "Which are the largest
# oceans?" — are labelled the same question in qqp and the gptcache positives: not refused)
_ONE_ZH = re.compile(r"哪(?:一)?(?:个|位|家|只|款|座|国|部|本|条|件|台|辆)")
_SEVERAL_ZH = re.compile(r"哪些|哪几")


def _asks_whether(a: Analysis) -> bool:
    """How to tell whether something is so ("How do I know if someone changed my password?",
    怎么知道别人屏蔽了我): another question than how to do it, or what it is."""
    return (_WHETHER_ZH if a.zh else _WHETHER_EN).search(a.text) is not None


_WHETHER_EN = re.compile(
    r"\b(?:know|tell|find out|check|see|sure|verify|determine|detect)\s+(?:if|whether)\b|"
    r"\bhow (?:do|can|could|would|should|will) (?:i|you|we|one|people) (?:ever )?"
    r"(?:know|tell|be sure|verify|determine|detect)\b"
)
_WHETHER_ZH = re.compile(r"(?:怎么|如何|怎样|咋)(?:才能)?(?:知道|判断|看出|确定|发现|查出)")


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
