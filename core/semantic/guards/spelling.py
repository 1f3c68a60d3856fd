"""Spelling and spacing variants and typos, reconciled between two questions for the guards.

Two questions compared by the guards may spell one word differently: ``wifi`` / ``Wi-Fi`` /
``Wi Fi``, ``checkin`` / ``check-in``, ``PS5`` / ``ps 5``, ``whats`` / ``what's``, or with a
typo: ``windos`` / ``Windows``, ``scholarhsip`` / ``scholarship``, 该签 / 改签.
:func:`reconcile` rewrites both questions so that such a word reads the same on both sides,
under rules that cannot turn one word into another:

- **variants** — tokens that are equal once hyphens, apostrophes and the spaces inside a
  compound are removed become one token, unless both spellings are dictionary words
  ("log in" / "login", "re-sign" / "resign" stay apart) or the apostrophe-less spelling is
  another word ("were" / "we're");
- **typos (English)** — a lower-case word of five letters or more that neither symspellpy's
  bundled English dictionary (82,765 words) nor wordfreq's list of common English words knows,
  one edit (a swap of two neighbours counts one) from exactly one known word that only the
  other side has, counts as that word; two real words (affect / effect, tumor / tutor) never
  do, nor a capitalized word inside a sentence (a name);
- **typos (Chinese)** — a span that differs from a word of the other side (jieba's dictionary)
  in one character of the same pinyin, and is itself no word, counts as that word.
"""

from __future__ import annotations

import importlib.util
import json
import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

from .british import american

__all__ = [
    "common_on_the_web",
    "corrected",
    "is_english_word",
    "is_lower_case_word",
    "known",
    "reconcile",
]

_LATIN = re.compile(r"[A-Za-z0-9]+(?:[-'’][A-Za-z0-9]+)*")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Prefixes whose hyphen changes the word: re-sign / resign, co-op / coop, un-ionized
_PREFIXES = frozenset("re un de pre co non anti dis mis over under out".split())
# Contractions typed without their apostrophe that spell another word: were / we're
_CONTRACTION_WORDS = frozenset("were well ill shell hell wed shed id hed".split())


@lru_cache(maxsize=20_000)
def reconcile(a: str, b: str) -> tuple[str, str]:
    """``a`` and ``b`` with spelling variants and typos of one word rewritten to one form
    (memoized: the tier scores a candidate, then the guards judge it, on the same pair)."""
    if a == b:
        return a, b
    a, b = _unify_british(a, b)
    a, b = _unify_variants(a, b)
    a, b = _fix_typos(a, b), _fix_typos(b, a)
    if _CJK_RUN.search(a) and _CJK_RUN.search(b):
        a, b = _fix_zh_typos(a, b), _fix_zh_typos(b, a)
    return a, b


# variants ----------------------------------------------------------------------------------
def _unify_british(a: str, b: str) -> tuple[str, str]:
    """A British spelling whose American form the other side has reads as that form."""
    words_a = {m.group().casefold() for m in _LATIN.finditer(a)}
    words_b = {m.group().casefold() for m in _LATIN.finditer(b)}

    def rewrite(x: str, other: set[str]) -> str:
        def american_form(m: re.Match[str]) -> str:
            us = american(m.group().casefold())
            if us is None or us not in other:
                return m.group()
            return us.capitalize() if m.group()[0].isupper() else us

        return _LATIN.sub(american_form, x)

    return rewrite(a, words_b), rewrite(b, words_a)


def _key(token: str) -> str:
    return re.sub(r"[-'’\s]", "", token.casefold())


def _unify_variants(a: str, b: str) -> tuple[str, str]:
    unified: dict[str, str] = {}  # spelling (folded) → the form both sides get
    for x, y in ((a, b), (b, a)):
        keys_y = {_key(m.group()): m.group() for m in _LATIN.finditer(y)}
        tokens_x = list(_LATIN.finditer(x))
        for size in (1, 2, 3):
            for i in range(len(tokens_x) - size + 1):
                run = tokens_x[i : i + size]
                if size > 1 and any(x[p.end() : q.start()] != " " for p, q in pairwise(run)):
                    continue
                spelled = x[run[0].start() : run[-1].end()]
                key = _key(spelled)
                other = keys_y.get(key)
                if other is None or other == spelled or len(key) < 3:
                    continue
                if _variants(spelled, other):
                    unified[spelled.casefold()] = _unified_form(spelled, other)
                    unified[other.casefold()] = _unified_form(spelled, other)
    if not unified:
        return a, b
    spellings = sorted(unified, key=len, reverse=True)
    pattern = re.compile(
        r"(?<![\w'’-])(?:"
        + "|".join(re.escape(s).replace(r"\ ", r"\s") for s in spellings)
        + r")(?![\w'’-])",
        re.IGNORECASE,
    )

    def rewrite(text: str) -> str:
        return pattern.sub(lambda m: unified.get(m.group().casefold(), m.group()), text)

    return rewrite(a), rewrite(b)


def _unified_form(x: str, y: str) -> str:
    """An apostrophe form wins ("what's": the guards read its contraction); otherwise the
    compound written as one lower-case word ("wifi", "ps5", "holidayinn")."""
    for spelled in (x, y):
        if "'" in spelled or "’" in spelled:
            return spelled.casefold().replace("’", "'")
    return _key(x)


def _variants(x: str, y: str) -> bool:
    """Two spellings of one word: not both dictionary words (or both made of dictionary
    words), and no meaning-changing prefix split off."""
    for spelled in (x, y):
        parts = re.split(r"[-\s]", spelled.casefold())
        if len(parts) > 1 and parts[0] in _PREFIXES:
            return False
        if sum(any(c.isdigit() for c in p) for p in parts) > 1:
            return False  # "1-2 days" / "12 days", "2 5 kg" / "25 kg": other numbers
    if ("'" in x + y or "’" in x + y) and not re.search(r"[-\s]", x + y):
        return _key(x) not in _CONTRACTION_WORDS
    split = x if re.search(r"[-\s]", x) else y
    parts = [p for p in re.split(r"[-\s]", split.casefold()) if p]
    whole = _key(x)
    return not (is_english_word(whole) and all(is_english_word(p) for p in parts))


# English typos ------------------------------------------------------------------------------
def _fix_typos(x: str, y: str) -> str:
    """``x`` with each of its unknown words that is one edit from a word of ``y`` rewritten."""
    keys_y = {_key(m.group()) for m in _LATIN.finditer(y)}
    keys_x = {_key(m.group()) for m in _LATIN.finditer(x)}
    targets = [k for k in keys_y - keys_x if k.isalpha() and known(k)]
    if not targets:
        return x
    out, last = [], 0
    for m in _LATIN.finditer(x):
        word = m.group()
        if not _may_be_typo(word, at_start=not x[: m.start()].strip()):
            continue
        near = [t for t in targets if _distance(word.lower(), t) <= 1]
        if len(near) == 1:
            fixed = near[0].capitalize() if word[0].isupper() else near[0]
            out.append(x[last : m.start()] + fixed)
            last = m.end()
    return "".join(out) + x[last:] if out else x


def _may_be_typo(word: str, *, at_start: bool) -> bool:
    if len(word) < 5 or not word.isalpha() or not word.isascii():
        return False
    if not (word.islower() or (at_start and word[1:].islower())):
        return False  # a capital inside a sentence: a name, not a typo
    return not known(word.lower())


def known(word: str) -> bool:
    """A word of symspellpy's dictionary, or one common on the web (wordfreq's small English
    list: a frequency of one in a million or more).  symspellpy's list is British and dated:
    without wordfreq "tumor" would be a typo of "tutor", "theater" of "cheater"."""
    return is_english_word(word) or common_on_the_web(word)


@lru_cache(maxsize=50_000)
def common_on_the_web(word: str) -> bool:
    from wordfreq import word_frequency

    return word_frequency(word, "en", wordlist="small") > 0


def _distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of
    two neighbours ("scholarhsip") each count one."""
    if abs(len(a) - len(b)) > 2:
        return 3
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def corrected(text: str) -> str:
    """``text`` with each English non-word (lower case, five letters or more) replaced by the
    most frequent dictionary word one edit away ("scholarhsip" → "scholarship").  A guess, for
    the embedder's search only, so that a typo does not sink the score; the guards never see
    it (they accept a typo only for a word the other question has: :func:`reconcile`)."""
    out, last = [], 0
    for m in _LATIN.finditer(text):
        word = m.group()
        if not _may_be_typo(word, at_start=not text[: m.start()].strip()):
            continue
        best = _best_correction(word.lower())
        if best is not None:
            out.append(text[last : m.start()] + (best.capitalize() if word[0].isupper() else best))
            last = m.end()
    return "".join(out) + text[last:] if out else text


@lru_cache(maxsize=20_000)
def _best_correction(word: str) -> str | None:
    counts = _english_counts()
    found = [(counts[w], w) for w in _one_edit(word) if w in counts]
    return max(found)[1] if found else None


def _one_edit(word: str) -> set[str]:
    """Every string one deletion, swap, substitution or insertion away from ``word``."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return (
        {a + b[1:] for a, b in splits if b}
        | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
        | {a + c + b[1:] for a, b in splits if b for c in letters}
        | {a + c + b for a, b in splits for c in letters}
    )


def is_english_word(word: str) -> bool:
    """True for a word of symspellpy's English dictionary (lower case)."""
    return word in _english_counts()


def is_lower_case_word(word: str) -> bool:
    """True when ``word`` (folded) is also an ordinary word in lower case — "polish", "turkey",
    "us", "windows" — in Webster's list (english-words' web2, which keeps names capitalized)
    and in symspellpy's; false for a name only: "facebook", "gmail", "europe"."""
    forms = {word}
    if len(word) > 3 and word.endswith("s"):  # a plural: "windows" → "window"
        forms |= {word[:-1], word[:-2] if word.endswith("es") else word, word[:-3] + "y"}
    return any(w in _lower_case_words() for w in forms)


@lru_cache(maxsize=1)
def _lower_case_words() -> frozenset[str]:
    from english_words import get_english_words_set

    counts = _english_counts()
    return frozenset(w for w in get_english_words_set(["web2"], alpha=True) if w in counts)


@lru_cache(maxsize=1)
def _english_counts() -> dict[str, int]:
    """symspellpy's bundled English dictionary: 82,765 words with their corpus counts."""
    path = _package_dir("symspellpy") / "frequency_dictionary_en_82_765.txt"
    counts = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            word, _, count = line.strip().partition(" ")
            if word:
                counts[word] = int(count or 0)
    return counts


# Chinese typos ------------------------------------------------------------------------------
def _fix_zh_typos(x: str, y: str) -> str:
    """``x`` with each span that is a same-pinyin misspelling of a word of ``y`` rewritten."""
    for word in _zh_words(y):
        if word in x:
            continue
        for run in _CJK_RUN.findall(x):
            for i in range(len(run) - len(word) + 1):
                span = run[i : i + len(word)]
                if _same_pinyin_typo(span, word) and span not in y:
                    swapped = i + next(k for k in range(len(word)) if span[k] != word[k])
                    if not _in_a_word(run, swapped, span):
                        x = x.replace(span, word)
                        break
    return x


def _in_a_word(run: str, position: int, span: str) -> bool:
    """The character at ``position`` makes a dictionary word with its neighbours in ``run``
    (other than ``span``): then it was meant — 期终考试 holds 期终, 应该签 holds 应该."""
    freq = _jieba_freq()
    for size in (2, 3, 4):
        for start in range(max(0, position - size + 1), min(position, len(run) - size) + 1):
            piece = run[start : start + size]
            if piece != span and freq.get(piece):
                return True
    return False


def _zh_words(text: str) -> Iterable[str]:
    """The dictionary words of two characters or more in ``text`` (jieba)."""
    import jieba

    freq = jieba.dt.FREQ if jieba.dt.initialized else _jieba_freq()
    for run in _CJK_RUN.findall(text):
        for word in jieba.lcut(run):
            if len(word) >= 2 and freq.get(word):
                yield word


def _jieba_freq() -> dict[str, int]:
    import jieba

    jieba.initialize()
    return jieba.dt.FREQ  # type: ignore[no-any-return]


def _same_pinyin_typo(span: str, word: str) -> bool:
    """``span`` is ``word`` with one character swapped for another of the same pinyin (tones
    aside), and is no word itself."""
    diffs = [i for i, (s, w) in enumerate(zip(span, word, strict=True)) if s != w]
    if len(diffs) != 1 or _jieba_freq().get(span):
        return False
    i = diffs[0]
    return bool(_pinyin(span[i]) & _pinyin(word[i]))


def _pinyin(char: str) -> frozenset[str]:
    """The readings of a character without tones ("行" → xing, hang, heng)."""
    return _pinyin_table().get(ord(char), frozenset())


@lru_cache(maxsize=1)
def _pinyin_table() -> dict[int, frozenset[str]]:
    """pypinyin's character table, read from its data file: importing the package would load
    its phrase tables too (some 50 MB), which one character does not need."""
    path = _package_dir("pypinyin") / "pinyin_dict.json"
    with path.open(encoding="utf-8") as f:
        table = json.load(f)
    return {
        int(code): frozenset(_toneless(r) for r in readings.split(","))
        for code, readings in table.items()
    }


def _toneless(reading: str) -> str:
    return unicodedata.normalize(
        "NFC", "".join(c for c in unicodedata.normalize("NFD", reading) if c not in _TONE_MARKS)
    )


_TONE_MARKS = frozenset("\u0300\u0301\u0304\u030c")  # grave, acute, macron, caron (ü stays)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"tricache's typo tolerance needs {name}: pip install {name}")
    return Path(next(iter(spec.submodule_search_locations)))
