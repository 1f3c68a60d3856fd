"""The analysis of one question that the guards compare: ``Analysis`` and ``analyze``.

Owns what is read from a question's text (its folded form, words and their parts of speech,
negations, numbers, names, question words, literals, whether it is about its words) and the
text helpers that read it.  The guards that compare two analyses are in ``checks``;
``is_cacheable`` is in ``cacheable``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ...key.canonical import about_its_words
from ...key.forms import literals
from ...key.script import CJK, HAN
from . import entities
from .lexicon import (
    NEGATIONS_EN,
    NEGATIONS_ZH,
    NUMBER_WORDS_EN,
    WH_EN,
    WH_ZH,
    ZH_DIGITS,
    ZH_MEASURES,
    ZH_NOT_NUMBERS,
    ZH_UNITS,
)
from .segmenter import tagger

__all__ = ["Analysis", "analyze", "use_entity_recognizer"]

_WORD = re.compile(rf"[a-z0-9]+(?:[-'’.][a-z0-9]+)*|[{HAN}]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_ZH_NUMERAL = re.compile("[零〇一二两三四五六七八九十百千万亿]+(?:点[零〇一二三四五六七八九]+)?")


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the guards need to know about one question."""

    text: str  # NFKC, case-folded, single-spaced
    zh: bool  # contains Chinese characters
    tokens: tuple[str, ...]  # words (English) and jieba words (Chinese), in order
    tags: tuple[str, ...]  # jieba's part of speech of each Chinese token ("" for the others)
    negations: tuple[str, ...]  # sorted multiset of negation markers
    numbers: tuple[str, ...]  # sorted multiset of canonical numbers
    entities: frozenset[str]  # names, product variants, codes
    wh: frozenset[str]  # when/where/who/why and their Chinese forms
    literals: tuple[str, ...]  # symbols, code, flags, math (forms.literals)
    typed: str  # the question as typed, in its canonical form (the case guard reads it)
    about_words: bool  # about words, a phrase or "this" text: its courtesy words are content


@lru_cache(maxsize=20_000)
def analyze(question: str, typed: str | None = None) -> Analysis:
    """Analyze a question (memoized: cached questions are analyzed again on every lookup).
    ``question`` is the text the guards compare (``check`` passes the canonical question, its
    compounds written as the other question writes them); the case of its words is read from
    ``typed``, the question as typed, when given: removing "Please" from "Please Polish this"
    must not hide the capital."""
    folded = " ".join(unicodedata.normalize("NFKC", question).casefold().split())
    zh = bool(CJK.search(folded))
    words, tags, names = _tokens(folded, zh)
    return Analysis(
        text=folded,
        zh=zh,
        tokens=words,
        tags=tags,
        negations=_negations(*_without_tag(folded, words, zh)),
        numbers=_numbers(folded, words),
        entities=entities.latin_entities(question) | names,
        wh=frozenset([w for w in words if w in WH_EN] + [w for w in WH_ZH if w in folded]),
        literals=literals(question),
        typed=question if typed is None else typed,
        about_words=about_its_words(folded),
    )


def use_entity_recognizer(mode: entities.Mode) -> None:
    """Find English names with the rules ("auto", the default) or with spaCy on top."""
    entities.use(mode)
    analyze.cache_clear()


def _tokens(folded: str, zh: bool) -> tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """Words in order, their parts of speech (Chinese only), and the Chinese names (person,
    place, organization, other proper noun) that jieba's tagger finds along the way (one
    pass does all)."""
    text = _CONTRACTED.sub(lambda m: _CONTRACTED_STEMS[m.group(1)] + " not", folded)
    text = re.sub(r"(\w)n[’']t\b", r"\1 not", text)  # "don't" → "do not"
    words: list[str] = []
    tags: list[str] = []
    names: set[str] = set()
    for word in _WORD.findall(text):
        if zh and CJK.match(word):
            # (jieba's tagger finds new words with an HMM whose cost grows fast with the run:
            # 40 s for 2,000 rare characters; a long run is cut by the dictionary alone)
            for token in tagger().lcut(word, HMM=len(word) <= _HMM_MAX_RUN):
                words.append(token.word)
                tags.append(token.flag)
                if token.flag in _NAME_TAGS and len(token.word) > 1:
                    names.add(token.word)
        else:
            words.append(word.replace("’", "'").removesuffix("'s"))
            tags.append("")
    return tuple(words), tuple(tags), frozenset(names)


_CONTRACTED_STEMS = {"ca": "can", "wo": "will", "sha": "shall"}
_CONTRACTED = re.compile(r"\b(ca|wo|sha)n[’']t\b")
_NAME_TAGS = frozenset(("nr", "ns", "nt", "nz", "nrt", "nrfg"))
_HMM_MAX_RUN = 64


def _without_tag(folded: str, words: tuple[str, ...], zh: bool) -> tuple[str, tuple[str, ...]]:
    """The question without an English question tag: "That's bad, isn't it?" asks whether it
    is bad, so its "n't" must not count against "That's not bad, is it?"."""
    match = None if zh else _TAG.search(folded)
    if match is None:
        return folded, words
    stripped = folded[: match.start()]
    return stripped, _tokens(stripped, zh)[0]


_TAG = re.compile(
    r",\s*(?:is|are|was|were|do|does|did|have|has|had|can|could|will|would|should|ai|wo|ca)"
    r"(?:n[’']t|\s+not)?\s+(?:it|you|he|she|we|they|i|there|that)\s*\?*\s*$"
)


def _negations(folded: str, words: Sequence[str]) -> tuple[str, ...]:
    found = ["not" for w in words if w in NEGATIONS_EN]
    for marker, exceptions in NEGATIONS_ZH.items():
        count = folded.count(marker)
        for compound in exceptions.split():
            count -= folded.count(compound) if marker in compound else 0
        found += [marker] * max(count, 0)
    return tuple(sorted(found))


def _numbers(folded: str, words: Sequence[str]) -> tuple[str, ...]:
    found = [_canonical(n.replace(",", "")) for n in _NUMBER.findall(folded)]
    found += [_canonical(str(NUMBER_WORDS_EN[w])) for w in words if w in NUMBER_WORDS_EN]
    text = folded
    for phrase in ZH_NOT_NUMBERS:
        text = text.replace(phrase, " ")
    for match in _ZH_NUMERAL.finditer(text):
        numeral = match.group()
        after = text[match.end() : match.end() + 1]
        if numeral == "一" and after not in ZH_MEASURES:
            continue  # "一" alone is an article or an adverb far more often than a number
        found.append(_canonical(str(_zh_value(numeral))))
    return tuple(sorted(found))


def _canonical(number: str) -> str:
    try:
        value = float(number)
    except ValueError:
        return number
    whole, dot, fraction = number.partition(".")
    if dot and whole.isdigit() and fraction.isdigit():  # "3.10" is no "3.1", "3.0" no "3"
        return f"{int(whole)}.{fraction}"  # (a version, an amount typed to the cent)
    return str(int(value)) if value.is_integer() else repr(value)


def _zh_value(numeral: str) -> float:
    """三十 → 30, 两万五千 → 25000, 二零二四 → 2024, 零点九 → 0.9."""
    whole, _, fraction = numeral.partition("点")
    if whole and all(c in ZH_DIGITS for c in whole):
        value: float = int("".join(str(ZH_DIGITS[c]) for c in whole))
    else:
        total = section = digit = 0
        for char in whole:
            if char in ZH_DIGITS:
                digit = ZH_DIGITS[char]
            elif ZH_UNITS[char] < 10_000:
                section += (digit or 1) * ZH_UNITS[char]
                digit = 0
            else:
                total += (section + digit) * ZH_UNITS[char]
                section = digit = 0
        value = total + section + digit
    if fraction:
        value += float("0." + "".join(str(ZH_DIGITS[c]) for c in fraction))
    return value
