"""Write the word tables the package ships (``runtime/prebuilt/``): ``python -m
tricache.runtime.prebuild``.  Run it when a source (jieba's dictionary, the English lists) or
a table's builder changes; ``tests/test_word_tables.py`` says when the shipped ones no longer
match the installed sources."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from . import tables

__all__ = ["prebuild"]


def prebuild(folder: Path = tables.PREBUILT) -> list[Path]:
    """Build every table the guards read, in a private home, and write each to ``folder``
    under its prebuilt name (older files of the same tables removed)."""
    import os

    with tempfile.TemporaryDirectory() as home:
        os.environ["TRICACHE_HOME"] = home  # build afresh, not from this machine's copies
        saved, tables.PREBUILT = tables.PREBUILT, Path(home) / "none"
        try:
            _read_every_table()
        finally:
            tables.PREBUILT = saved
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, (sources, trie) in sorted(tables.served().items()):
            for old in folder.glob(f"{name}-*.marisa"):
                old.unlink()
            stem = tables.prebuilt_stem(name, sources)
            data = trie.tobytes()
            path = folder / f"{stem}-{tables._content(stem, data)}.marisa"
            path.write_bytes(data)
            written.append(path)
    return written


def _read_every_table() -> None:
    from ..key import words
    from ..semantic.guards.segmenter import tagger

    words.is_english_word("house")  # the English lists
    words.is_lower_case_word("windows")
    tagger()  # jieba's dictionary


if __name__ == "__main__":
    for path in prebuild():
        print(f"{path.stat().st_size:>10,}  {path}", file=sys.stdout)
