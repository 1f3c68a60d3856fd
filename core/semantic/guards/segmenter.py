"""Chinese words and their parts of speech: jieba's tagger over a compact dictionary.

jieba keeps its dictionary as two Python dicts (word → frequency with every prefix, word →
tag): ~93 MiB in each process.  Here the same entries live in one trie of ~2.3 MiB
(``runtime/tables.py``), and jieba's own algorithms (the DAG of dictionary words, the route of
highest frequency, its tagging HMM for unknown words) run over it unchanged: same words, same
tags.  Importing ``jieba.posseg`` builds the tag dict of jieba's default tagger; when tricache
is the one importing it (so no code has changed that dict yet), the dict is swapped for a
dict over the same table, and an app's own ``jieba.posseg`` answers as before.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, MutableMapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...runtime.tables import RecordTable, record_table

__all__ = ["tagger"]

_PREFIX_ONLY = 255  # the tag index of an entry that is only the prefix of a word


class _Entries:
    """jieba's dictionary as one table: word → (frequency, tag index)."""

    def __init__(self, table: RecordTable, tags: tuple[str, ...], total: int, words: int) -> None:
        self.table = table
        self.tags = tags  # tag names by index
        self.total = total  # the sum of the frequencies, as jieba counts it
        self.words = words  # distinct words (the rest are prefixes)

    def record(self, word: object) -> tuple[int, ...] | None:
        if isinstance(word, str) and word.startswith(_META):
            return None
        return self.table.get(word)

    def tag(self, word: object) -> str | None:
        record = self.record(word)
        return None if record is None or record[1] == _PREFIX_ONLY else self.tags[record[1]]

    def __iter__(self) -> Iterator[str]:
        """The dictionary's words (not their prefixes)."""
        return (w for w in self.table.keys("") if self.tag(w) is not None)


class _Frequencies:
    """jieba's ``Tokenizer.FREQ`` for tricache's own tokenizer: every word and every prefix of
    one (frequency 0), and what jieba adds at run time on top."""

    def __init__(self, entries: _Entries) -> None:
        self._entries = entries
        self._added: dict[str, int] = {}

    def get(self, word: str, default: Any = None) -> Any:
        if word in self._added:
            return self._added[word]
        record = self._entries.record(word)
        return default if record is None else record[0]

    def __getitem__(self, word: str) -> int:
        value = self.get(word)
        if value is None:
            raise KeyError(word)
        return int(value)

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self.get(word) is not None

    def __setitem__(self, word: str, freq: int) -> None:
        self._added[word] = freq


class _Tags(MutableMapping[str, str]):
    """jieba.posseg's ``word_tag_tab`` (word → tag, dictionary words only) as a dict over the
    table: what jieba and an app's own code may do with it (``add_word``, ``del``,
    ``len``, iteration) behaves as on jieba's dict."""

    def __init__(self, entries: _Entries) -> None:
        self._entries = entries
        self._added: dict[str, str] = {}
        self._deleted: set[str] = set()  # dictionary words deleted at run time

    def get(self, word: object, default: Any = None) -> Any:  # jieba's hot path: no raise
        if word in self._added:
            return self._added[word]  # type: ignore[index]
        if word in self._deleted:
            return default
        tag = self._entries.tag(word)
        return default if tag is None else tag

    def __getitem__(self, word: str) -> str:
        tag = self.get(word, _ABSENT)
        if tag is _ABSENT:
            raise KeyError(word)
        return tag  # type: ignore[no-any-return]

    def __setitem__(self, word: str, tag: str) -> None:
        self._added[word] = tag
        self._deleted.discard(word)

    def __delitem__(self, word: str) -> None:
        if self.get(word, _ABSENT) is _ABSENT:
            raise KeyError(word)  # as a dict's
        self._added.pop(word, None)
        if self._entries.tag(word) is not None:
            self._deleted.add(word)

    def __iter__(self) -> Iterator[str]:
        yield from self._added
        yield from (w for w in self._entries if w not in self._added and w not in self._deleted)

    def __len__(self) -> int:
        new = sum(self._entries.tag(w) is None for w in self._added)
        return self._entries.words - len(self._deleted) + new


_ABSENT = object()


@lru_cache(maxsize=1)
def tagger() -> Any:
    """jieba's part-of-speech tagger over the compact dictionary (``.lcut(text, HMM=...)``
    gives ``pair(word, flag)``), loaded once per process."""
    imported_here = "jieba.posseg" not in sys.modules  # (else the app's may hold its changes)
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    entries = _entries(jieba)
    tokenizer = jieba.Tokenizer()
    tokenizer.FREQ = _Frequencies(entries)
    tokenizer.total = entries.total
    tokenizer.initialized = True
    default = jieba.posseg.dt
    if imported_here and default.tokenizer.dictionary == jieba.DEFAULT_DICT:
        default.word_tag_tab = _Tags(entries)  # the same entries as its import read: 40 MiB less
    return _pos_tokenizer(jieba.posseg.POSTokenizer, tokenizer, _Tags(entries))


def _pos_tokenizer(base: Any, tokenizer: Any, tags: _Tags) -> Any:
    """A ``jieba.posseg.POSTokenizer`` over ``tokenizer`` and ``tags`` (its own constructor
    would read the dictionary file into a dict)."""
    instance = base.__new__(base)
    instance.tokenizer = tokenizer
    instance.word_tag_tab = tags
    return instance


def _entries(jieba: Any) -> _Entries:
    source = Path(jieba.__file__).with_name("dict.txt")

    def records() -> Iterator[tuple[str, tuple[int, int]]]:
        with source.open("rb") as f:  # jieba's own reading: every word and its prefixes
            frequencies, total = jieba.Tokenizer.gen_pfdict(f)
        tags: dict[str, int] = {}
        words: dict[str, tuple[int, int]] = {}
        with source.open(encoding="utf-8") as f:
            for line in f:  # as jieba.posseg reads tags: the last line of a word wins
                word, _, tag = line.strip().split(" ")
                words[word] = (frequencies[word], tags.setdefault(tag, len(tags)))
        for prefix, freq in frequencies.items():
            yield prefix, words.get(prefix, (freq, _PREFIX_ONLY))
        yield _META + "total", (total, 0)
        yield _META + "words", (len(words), 0)
        for tag, index in tags.items():
            yield _META + "tag" + tag, (index, 0)

    table = record_table("jieba", [source], "<IB", records)
    facts = {key[len(_META) :]: table.get(key) for key in table.keys(_META)}
    if any(v is None for v in facts.values()) or not {"total", "words"} <= facts.keys():
        raise RuntimeError("tricache: jieba's word table lacks its facts")
    tags = {k[3:]: v[0] for k, v in facts.items() if k.startswith("tag") and v is not None}
    names = [""] * len(tags)
    for tag, index in tags.items():
        names[index] = tag
    total, words = facts["total"], facts["words"]
    assert total is not None and words is not None
    return _Entries(table, tuple(names), total[0], words[0])


_META = "@@"  # keys of the table's own facts (jieba never looks up text with an "@")
