"""Polarity rules (``polarity.*``): a negation, a word against its opposite, or a negation on
another verb turns the answer around."""

from __future__ import annotations

from functools import lru_cache

from ..analysis import Analysis
from ..lexicon import ANTONYMS_EN, ANTONYMS_ZH, NEGATING_PREFIXES, table
from .shared import stem, stems


def negation(a: Analysis, b: Analysis) -> str | None:
    """ "Is it safe?" vs "Is it not safe?", "推荐" vs "不推荐" (``Analysis.negations``, both
    languages)."""
    return "negation" if a.negations != b.negations else None


def antonym(a: Analysis, b: Analysis) -> str | None:
    """ "enable" vs "disable", "注册" vs "注销": one holds a word, the other its opposite."""
    if _antonym_en(a, b) or ((a.zh or b.zh) and _antonym_zh(a, b)):
        return "antonym"
    return None


def negated_verb(a: Analysis, b: Analysis) -> str | None:
    """ "What happens if you don't eat?" / "… if you can't eat?": as many negations, on verbs
    of another kind ("can't I" = "can I not"; "didn't" / "don't" is the relation guard's).
    English only."""
    if a.zh or b.zh:
        return None
    verbs_a, verbs_b = _negated(a.tokens), _negated(b.tokens)
    return "negation" if len(verbs_a) == len(verbs_b) and verbs_a != verbs_b else None


def _opposite(ax: bool, ay: bool, bx: bool, by: bool) -> bool:
    return (ax and not ay and by and not bx) or (ay and not ax and bx and not by)


# English -------------------------------------------------------------------------------------


def _antonym_en(a: Analysis, b: Analysis) -> bool:
    """A pair of opposites by stems ("hired" / "fired"), or a word against its negated form."""
    words_a, words_b = stems(a), stems(b)
    for x, y in antonym_stems():
        if _opposite(x in words_a, y in words_a, x in words_b, y in words_b):
            return True
    return _negated_forms(words_a, words_b) or _negated_forms(words_b, words_a)


def _negated_forms(words_a: frozenset[str], words_b: frozenset[str]) -> bool:
    """ "fair" vs "unfair", "advantages" vs "disadvantages", "careful" vs "careless"."""
    for word in words_a:
        if len(word) < 3 or not word.isalpha():
            continue
        for prefix in NEGATING_PREFIXES:
            if prefix + word in words_b and prefix + word not in words_a and word not in words_b:
                return True
        if word.endswith("ful") and word[:-3] + "less" in words_b and word not in words_b:
            return True
    return False


@lru_cache(maxsize=1)
def antonym_stems() -> list[tuple[str, str]]:  # (stemming reads the word lists: on first use)
    """The English pairs of opposites, stemmed."""
    return [(stem(x), stem(y)) for x, y in ANTONYMS_EN]


# The verb a negation sits on, by class ("don't" and "didn't" both "do"; tense is not here)
_AUXILIARY = table("auxiliary_en")


def _negated(tokens: tuple[str, ...]) -> list[str]:
    """The auxiliary class before each "not" (up to two words back: "can I not")."""
    out = []
    for i, token in enumerate(tokens):
        if token == "not":
            before = [_AUXILIARY[t] for t in tokens[max(0, i - 2) : i] if t in _AUXILIARY]
            out.append(before[-1] if before else "")
    return sorted(out)


# Chinese -------------------------------------------------------------------------------------


def _antonym_zh(a: Analysis, b: Analysis) -> bool:
    """A pair of opposites found in the texts (Chinese words are not stemmed)."""
    for x, y in ANTONYMS_ZH:
        if _opposite(x in a.text, y in a.text, x in b.text, y in b.text):
            return True
    return False
