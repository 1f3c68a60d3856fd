"""Read-only word tables as memory-mapped tries, shared by every process on the machine.

The guards read large word lists (jieba's dictionary: 349,046 words; the English lists).  As
Python dicts and sets they cost each worker ~120 MiB; as marisa tries, ~3 MiB of file pages
that the OS shares between processes.  A table is built once from its source files into the
data directory, under a name that digests those files and its own bytes (checked before it is
mapped), and every process memory-maps it.  Where the directory cannot be written, the process
builds the table in memory (still a trie).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .home import data_dir, private_dir

__all__ = ["record_table", "word_table"]

log = logging.getLogger(__name__)

_LAYOUT = "1"  # bump when what a builder writes changes


def word_table(name: str, sources: Iterable[Path], words: Callable[[], Iterable[str]]) -> Any:
    """A set of words (``word in table``) built by ``words()`` from ``sources``."""
    import marisa_trie

    return _mapped(name, sources, lambda: marisa_trie.Trie(words()), marisa_trie.Trie)


def record_table(
    name: str,
    sources: Iterable[Path],
    fmt: str,
    records: Callable[[], Iterable[tuple[str, tuple[int, ...]]]],
) -> Any:
    """A mapping of words to fixed records (``struct`` format ``fmt``): ``table.get(word)`` is
    a list of one tuple, or ``None``.  Give each word once."""
    import marisa_trie

    def build() -> Any:
        return marisa_trie.RecordTrie(fmt, records())

    return _mapped(name, sources, build, lambda: marisa_trie.RecordTrie(fmt))


def _mapped(
    name: str, sources: Iterable[Path], build: Callable[[], Any], empty: Callable[[], Any]
) -> Any:
    """The table mapped from its file, built and saved first when there is none."""
    try:
        folder = private_dir(data_dir() / "tables")
        stem = f"{name}-{_digest(sources)}"
    except OSError as exc:  # a source gone or the data directory refused: a private copy
        log.debug("tricache: table %s built in memory: %s", name, exc)
        return build()
    for path in folder.glob(f"{stem}-*.marisa"):
        table = _map(path, empty)
        if table is not None:
            return table
    built = build()
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{stem}-")
        os.close(fd)
        try:
            built.save(tmp)
            path = folder / f"{stem}-{_content(Path(tmp))}.marisa"
            os.replace(tmp, path)  # atomic: a reader maps a whole table or none
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        log.debug("tricache: table %s not saved (%s); this process keeps its copy", name, exc)
        return built
    return _map(path, empty) or built  # mapped: its pages are the ones other processes share


def _map(path: Path, empty: Callable[[], Any]) -> Any:
    """The table in ``path``, or ``None`` (and the file removed) when its bytes are not the
    ones its name records: a damaged table could answer wrong words without an error."""
    try:
        if path.stem.rpartition("-")[2] == _content(path):
            table = empty()
            table.mmap(str(path))
            return table
    except (OSError, RuntimeError) as exc:
        log.warning("tricache: word table %s unreadable (%s)", path, exc)
    else:
        log.warning("tricache: word table %s damaged; building it again", path)
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def _content(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _digest(sources: Iterable[Path]) -> str:
    """The sources' paths, sizes and times, and this module's layout: a new dictionary (a
    jieba upgrade) or a new build rule makes a new file."""
    import marisa_trie

    hasher = hashlib.sha256(f"{_LAYOUT} {getattr(marisa_trie, '__version__', '')}".encode())
    for source in sources:
        stat = source.stat()
        hasher.update(f"\0{source.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return hasher.hexdigest()[:16]
