"""Content rules (``content.*``): one question asks more (a content word added), or about
another thing (content words swapped)."""

from __future__ import annotations

import re

from ....key.script import CJK
from ..analysis import Analysis
from .shared import content_stems, unmatched


def added_content(a: Analysis, b: Analysis) -> str | None:
    """One question asks more: "best haircut" vs "best haircut for men", "手表" vs "女手表"."""
    only_a, only_b = unmatched(a, b), unmatched(b, a)
    if bool(only_a) != bool(only_b):
        return "added_content"
    return None


def any_substitution(a: Analysis, b: Analysis) -> str | None:
    """Any content word swapped for another: what a candidate scoring under the calibrated
    threshold must not differ in (the FAQ's 0.80 - 0.92: "Does home insurance cover fire
    damage?" / "… burst pipes?"), where the embedder tells paraphrases from look-alikes least."""
    only_a, only_b = unmatched(a, b), unmatched(b, a)
    return "substitution" if only_a and only_b else None


def substitution(a: Analysis, b: Analysis) -> str | None:
    """The same question about another thing: one content word swapped for one or two others
    ("将军令丢了" vs "将军令坏了", "the chemistry game" vs "the biology game", "用花呗付款"
    vs "用信用卡付款", where jieba splits 花呗 in two), or as many swapped as kept, every
    content word another included ("What is hypothyroidism?" vs "What is hyperthyroidism?":
    the threshold alone would decide)."""
    only_a, only_b = unmatched(a, b), unmatched(b, a)
    if not (only_a and only_b):
        return None
    shared = len(set(content_stems(a)) & set(content_stems(b)))
    if _another_topic(only_a, only_b, shared):
        return "substitution"
    if a.zh and b.zh and _another_topic(_spans(a, only_a, b), _spans(b, only_b, a), shared):
        return "substitution"  # a word jieba does not know comes in pieces: 魇魔 → 里的魇 / 魔
    return None


# Both languages ------------------------------------------------------------------------------


def _another_topic(only_a: set[str], only_b: set[str], shared: int) -> bool:
    """One word for one or two; or as many words swapped as kept ("the maximum dose of
    ibuprofen for adults" / "the side effects of …"), no word kept among them (hypo- /
    hyper-): another topic."""
    return len(only_a) + len(only_b) <= 3 or max(len(only_a), len(only_b)) >= shared


# Chinese -------------------------------------------------------------------------------------


def _spans(a: Analysis, words: set[str], b: Analysis) -> set[str]:
    """The runs of ``a``'s text made of the characters of ``words`` that ``b`` lacks: one
    swapped word however jieba cut it; ``words`` itself where none is found."""
    missing = "".join({c for w in words for c in w if CJK.match(c) and c not in b.text})
    runs = {m.group() for m in re.finditer(f"[{missing}]+", a.text)} if missing else set()
    return runs or words
