"""Chinese words and their parts of speech: jieba's tagger over a compact dictionary.

jieba keeps its dictionary as two Python dicts (word → frequency with every prefix, word →
tag): ~93 MiB in each process.  Here the same entries live in one memory-mapped trie
(``runtime/tables.py``), and jieba's own algorithms (the DAG of dictionary words, the route of
highest frequency, its tagging HMM for unknown words) run over it unchanged: same words, same
tags.  Importing ``jieba.posseg`` builds the tag dict for jieba's default tagger; when that
tagger still reads jieba's own dictionary, its dict is swapped for the same view, so an app's
own ``jieba.posseg.cut`` answers as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...runtime.tables import record_table

__all__ = ["tagger"]

_PREFIX_ONLY = 255  # the tag index of an entry that is only the prefix of a word


class _Entries:
    """jieba's dictionary as one trie: word → (frequency, tag index)."""

    def __init__(self, table: Any, tags: tuple[str, ...], total: int, words: int) -> None:
        self.table = table
        self.tags = tags  # tag names by index
        self.total = total  # the sum of the frequencies, as jieba counts it
        self.words = words  # distinct words (the rest are prefixes)

    def record(self, word: str) -> tuple[int, int] | None:
        if word.startswith(_META):
            return None
        found = self.table.get(word)
        return found[0] if found else None


class _View:
    """A read-only dict over the trie, with the words jieba adds at run time on top (its
    ``add_word``): what jieba's code calls of the dicts it keeps."""

    def __init__(self, entries: _Entries) -> None:
        self._entries = entries
        self._added: dict[str, Any] = {}

    def get(self, word: str, default: Any = None) -> Any:
        if word in self._added:
            return self._added[word]
        record = self._entries.record(word)
        return default if record is None else self._value(record, default)

    def _value(self, record: tuple[int, int], default: Any) -> Any:
        raise NotImplementedError

    def __getitem__(self, word: str) -> Any:
        value = self.get(word, _ABSENT)
        if value is _ABSENT:
            raise KeyError(word)
        return value

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self.get(word, _ABSENT) is not _ABSENT

    def __setitem__(self, word: str, value: Any) -> None:
        self._added[word] = value

    def update(self, other: dict[str, Any]) -> None:
        self._added.update(other)


_ABSENT = object()


class _Frequencies(_View):
    """jieba's ``Tokenizer.FREQ``: every word and every prefix of one (frequency 0)."""

    def _value(self, record: tuple[int, int], default: Any) -> Any:
        return record[0]


class _Tags(_View):
    """jieba.posseg's ``word_tag_tab``: word → tag, for dictionary words only."""

    def _value(self, record: tuple[int, int], default: Any) -> Any:
        return default if record[1] == _PREFIX_ONLY else self._entries.tags[record[1]]


@lru_cache(maxsize=1)
def tagger() -> Any:
    """jieba's part-of-speech tagger over the compact dictionary (``.lcut(text, HMM=...)``
    gives ``pair(word, flag)``), loaded once per process."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    entries = _entries(jieba)
    tokenizer = jieba.Tokenizer()
    tokenizer.FREQ = _Frequencies(entries)
    tokenizer.total = entries.total
    tokenizer.initialized = True
    default = jieba.posseg.dt
    if (
        default.tokenizer.dictionary == jieba.DEFAULT_DICT
        and type(default.word_tag_tab) is dict
        and len(default.word_tag_tab) == entries.words
    ):  # jieba's default tagger, as its import left it: the same entries, 40 MiB less
        default.word_tag_tab = _Tags(entries)
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
    tags = {key[len(_META) + 3 :]: table[key][0][0] for key in table.keys(_META + "tag")}
    names = [""] * len(tags)
    for tag, index in tags.items():
        names[index] = tag
    return _Entries(table, tuple(names), table[_META + "total"][0][0], table[_META + "words"][0][0])


_META = "@@"  # keys of the table's own facts (jieba never looks up text with an "@")
