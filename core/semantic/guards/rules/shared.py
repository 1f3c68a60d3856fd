"""What several families read: a light English stem, and a question's content words
and which of them the other question lacks."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

from ....key.script import CJK
from ....key.words import known
from ..analysis import Analysis
from ..lexicon import (  # (the English and the Chinese list of each kind)
    FILLERS_EN,
    FILLERS_ZH,
    IRREGULAR_EN,
    NUMBER_WORDS_EN,
    PERSONS_EN,
    PRONOUNS_ZH,
    RELATIONS_EN,
    STOPWORDS_EN,
    STOPWORDS_ZH,
    words,
)


@lru_cache(maxsize=50_000)
def stem(word: str) -> str:
    """A light English stem: plural, -ed and -ing off, then a final "e" (hire/hires/hired/
    hiring → "hir"), so inflections of one word compare equal."""
    if word in IRREGULAR_EN:  # "made" → "make" → "mak", as "make" stems
        return stem(IRREGULAR_EN[word])
    if not _VOWEL.search(word):
        return word  # an acronym or a code, not a plural: "https" is no "http"
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    base = word
    if len(word) > 4 and word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        base = word[:-2]
    elif (
        len(word) > 3
        and word.endswith("s")
        and not word.endswith(("ss", "us", "is"))
        and not (known(word) and not known(word[:-1]))  # "canvas" is no plural of "Canva"
    ):
        base = word[:-1]
    elif len(word) > 5 and word.endswith("ing"):
        base = word[:-3]
    elif len(word) > 5 and word.endswith("est"):
        base = word[:-3]  # fastest → fast
    elif len(word) > 4 and word.endswith("ed"):
        base = word[:-2]
    if base != word and len(base) >= 3 and base[-1] == base[-2] and base[-1] not in "lsz":
        base = base[:-1]  # stopped → stop
    return base[:-1] if len(base) > 3 and base.endswith("e") else base


def stems(a: Analysis) -> frozenset[str]:
    """The question's words, stemmed."""
    return frozenset(stem(w) for w in a.tokens)


_VOWEL = re.compile("[aeiouy]")


def content(a: Analysis) -> list[str]:
    """The question's words without its stopwords (the courtesy words kept in a question about
    words)."""
    # In Chinese text a Latin letter is a name ("A比B"), never the English article; in English
    # a stopword the rules found as a name is one too ("blood type A")
    kept = _COURTESY if a.about_words else frozenset()  # "say yes, please"
    if a.zh:
        return [t for t in a.tokens if t not in STOPWORDS_ZH or t in kept]
    return [t for t in a.tokens if t not in STOPWORDS_EN or t in a.entities or t in kept]


_COURTESY = words("courtesy_en") | words("courtesy_zh")


def content_stems(a: Analysis) -> list[str]:
    """Content words, stemmed; numbers are left to the number guard."""
    skip = FILLERS_ZH | PRONOUNS_ZH if a.zh else FILLERS_EN | RELATIONS_EN | PERSONS_EN.keys()
    if a.about_words:  # "How do you write yes, please in French?": please is asked
        skip = skip - FILLERS_ZH - FILLERS_EN
    out = []
    for token in content(a):
        if token in skip or token in NUMBER_WORDS_EN or _NUMERIC.fullmatch(token):
            continue
        if CJK.match(token):
            token = _ZH_NUMERAL_CHARS.sub("", token)  # "三天" → "天"
            if not token:
                continue
        out.append(stem(token))
    return out


_NUMERIC = re.compile(r"[\d.,]+")
_ZH_NUMERAL_CHARS = re.compile("[零〇一二两三四五六七八九十百千万亿]")


def unmatched(a: Analysis, b: Analysis) -> set[str]:
    """Content words of ``a`` that ``b`` lacks, or has fewer times ("a Roth IRA and a Roth
    401k" asks more than "a Roth IRA and a 401k").  Chinese segmentation varies between two
    phrasings, so a Chinese word is matched when all its characters occur in ``b``."""
    stems_b = Counter(content_stems(b))
    extra = Counter(content_stems(a)) - stems_b
    return {w for w in extra if not (CJK.match(w) and w not in stems_b and within(w, b))}


def within(word: str, b: Analysis) -> bool:
    """Every character of ``word`` in ``b``'s text, in order (two segmentations keep the order
    of the characters: 价保 is no 保价)."""
    rest = iter(b.text)
    return all(c in rest for c in word)
