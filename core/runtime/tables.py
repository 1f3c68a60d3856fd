"""Read-only word tables as compact tries, built once per machine.

The guards read large word lists (jieba's dictionary: 349,046 words; the English lists).  As
Python dicts and sets they cost each worker ~120 MiB; as marisa tries, ~3 MiB.  A table is
built once from its source files into the data directory, under a name that digests those
files, and every later process reads it from there (~10 ms instead of ~1 s).  The file's name
also carries a digest of the table's name and bytes, checked on every read: a damaged table,
or another table's file put in its place, is built again rather than read (a flipped byte
could otherwise answer wrong words without an error).  A table is read into the process's
memory, not mapped: a file changed in place under a mapping kills the process (SIGBUS).
Where the directory cannot be written (read-only, full), the process keeps what it built.

The package ships the tables prebuilt (``runtime/prebuilt/``, made by ``python -m
tricache.runtime.prebuild``), named by a digest of their sources' bytes: where the installed
sources are the same files, the first process on a machine copies them instead of building
(4 s less); where they differ (another jieba), it builds as before.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .home import data_dir, private_dir

__all__ = ["RecordTable", "WordTable", "record_table", "served", "word_list", "word_table"]

log = logging.getLogger(__name__)

_LAYOUT = "2"  # bump when what a builder writes changes
_STALE_TEMP_S = 600  # a temporary file this old was left by a process that died saving it
PREBUILT = Path(__file__).with_name("prebuilt")  # the tables the package ships
_served: dict[str, tuple[tuple[Path, ...], Any]] = {}  # name → (sources, trie): for prebuild
_built: list[str] = []  # the tables this process had to build (neither stored nor shipped)


class WordTable:
    """A set of words: ``word in table`` (``False`` for anything that is no encodable
    string)."""

    def __init__(self, trie: Any) -> None:
        self._trie = trie

    def __contains__(self, word: object) -> bool:
        try:
            return isinstance(word, str) and word in self._trie
        except UnicodeEncodeError:  # a lone surrogate is no word of any list
            return False


class RecordTable:
    """Words mapped to fixed records: ``table.get(word)`` is the record, or ``None``."""

    def __init__(self, trie: Any) -> None:
        self._trie = trie

    def get(self, word: object) -> tuple[int, ...] | None:
        try:
            found = self._trie.get(word) if isinstance(word, str) else None
        except UnicodeEncodeError:
            return None
        return found[0] if found else None

    def keys(self, prefix: str) -> Iterator[str]:
        return iter(self._trie.keys(prefix))


@functools.cache
def word_list(path: Path) -> tuple[str, ...]:
    """The words or phrases of a UTF-8 text file shipped with the package (the guards' word
    lists, ``semantic/guards/words/*.txt``): one a line, stripped, in file order; blank lines
    and lines starting with ``#`` left out.  Read once per process."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return tuple(s for s in (line.strip() for line in lines) if s and not s.startswith("#"))


def word_table(name: str, sources: Iterable[Path], words: Callable[[], Iterable[str]]) -> WordTable:
    """A set of words built by ``words()`` from ``sources``."""
    import marisa_trie

    trie = _stored(name, sources, lambda: marisa_trie.Trie(words()), marisa_trie.Trie)
    return WordTable(trie)


def record_table(
    name: str,
    sources: Iterable[Path],
    fmt: str,
    records: Callable[[], Iterable[tuple[str, tuple[int, ...]]]],
) -> RecordTable:
    """Words mapped to records of ``struct`` format ``fmt``, built by ``records()`` from
    ``sources`` (each word given once)."""
    import marisa_trie

    def build() -> Any:
        return marisa_trie.RecordTrie(fmt, records())

    return RecordTable(_stored(name, sources, build, lambda: marisa_trie.RecordTrie(fmt)))


def _stored(
    name: str, sources: Iterable[Path], build: Callable[[], Any], empty: Callable[[], Any]
) -> Any:
    """The trie read from its file; else copied from the package's prebuilt one, or built;
    then saved for the next process."""
    sources = tuple(sources)
    trie = _local(name, sources, build, empty)
    _served[name] = (sources, trie)
    return trie


def served() -> dict[str, tuple[tuple[Path, ...], Any]]:
    """The tables this process has read so far: name → (sources, trie)."""
    return dict(_served)


def _local(
    name: str, sources: tuple[Path, ...], build: Callable[[], Any], empty: Callable[[], Any]
) -> Any:
    try:
        folder = private_dir(data_dir() / "tables")
        stem = f"{name}-{_digest(sources)}"
    except OSError as exc:  # a source gone or the data directory refused: a private copy
        log.debug("tricache: table %s built in memory: %s", name, exc)
        return _prebuilt(name, sources, empty) or _build(name, build)
    for path in folder.glob(f"{stem}-*.marisa"):
        trie = _read(path, stem, empty)
        if trie is not None:
            return trie
    _sweep(folder)
    trie = _prebuilt(name, sources, empty) or _build(name, build)
    try:
        data = trie.tobytes()
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{stem}-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, folder / f"{stem}-{_content(stem, data)}.marisa")  # atomic
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except (OSError, RuntimeError) as exc:  # a full or read-only disk: this process's copy
        log.debug("tricache: table %s not saved (%s)", name, exc)
    return trie


def _build(name: str, build: Callable[[], Any]) -> Any:
    _built.append(name)
    return build()


def prebuilt_stem(name: str, sources: Iterable[Path]) -> str:
    """A prebuilt table's name: the table's, and a digest of its sources' names and bytes
    (not where they are), this module's layout and marisa-trie's version."""
    import marisa_trie

    hasher = hashlib.sha256(f"{_LAYOUT} {getattr(marisa_trie, '__version__', '')}".encode())
    for source in sources:
        hasher.update(f"\0{source.name}\0".encode())
        hasher.update(source.read_bytes())
    return f"{name}-{hasher.hexdigest()[:16]}"


def _prebuilt(name: str, sources: tuple[Path, ...], empty: Callable[[], Any]) -> Any:
    """The package's prebuilt trie for exactly these sources, or ``None``."""
    try:
        stem = prebuilt_stem(name, sources)
        for path in PREBUILT.glob(f"{stem}-*.marisa"):
            data = path.read_bytes()
            if path.stem.rpartition("-")[2] == _content(stem, data):
                return empty().frombytes(data)
            log.warning("tricache: prebuilt table %s damaged; building it", path)
    except (OSError, RuntimeError) as exc:
        log.debug("tricache: prebuilt table %s unreadable (%s)", name, exc)
    return None


def _read(path: Path, stem: str, empty: Callable[[], Any]) -> Any:
    """The trie in ``path``, or ``None`` (and the file removed) when its bytes are not the
    ones its name records for this table."""
    try:
        data = path.read_bytes()
        if path.stem.rpartition("-")[2] == _content(stem, data):
            return empty().frombytes(data)
    except (OSError, RuntimeError) as exc:
        log.warning("tricache: word table %s unreadable (%s)", path, exc)
    else:
        log.warning("tricache: word table %s damaged; building it again", path)
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def _sweep(folder: Path) -> None:
    """Remove temporary files that processes killed while saving a table left behind."""
    cutoff = time.time() - _STALE_TEMP_S
    for path in folder.glob(".*-*"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()


def _content(stem: str, data: bytes) -> str:
    """A digest of the table's name and bytes: another table's file fails it too."""
    return hashlib.sha256(stem.encode() + b"\0" + data).hexdigest()[:16]


def _digest(sources: Iterable[Path]) -> str:
    """The sources' paths, sizes and times, and this module's layout: a new dictionary (a
    jieba upgrade) or a new build rule makes a new file."""
    import marisa_trie

    hasher = hashlib.sha256(f"{_LAYOUT} {getattr(marisa_trie, '__version__', '')}".encode())
    for source in sources:
        stat = source.stat()
        hasher.update(f"\0{source.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return hasher.hexdigest()[:16]
