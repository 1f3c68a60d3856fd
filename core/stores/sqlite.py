"""Embedded L2: one SQLite file (WAL) shared by the processes of one machine."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .base import Record, WrittenKeys

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- grows on every write: the write log's cursor
    key TEXT NOT NULL UNIQUE,
    value BLOB NOT NULL,
    watermark REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_expiry ON entries(expires_at);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, expires_at REAL NOT NULL);
"""


class SQLiteStore:
    """L2 on a local SQLite file: an expiry column, a periodic sweep, no pub/sub.

    Without pub/sub, other processes learn of invalidations by polling the meta table (the
    exact tier does this every ``version_refresh_s``).
    """

    name = "sqlite"
    has_pubsub = False

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 0.25,
        sweep_every: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._sweep_every = sweep_every
        self._next_sweep = 0.0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=timeout, check_same_thread=False, isolation_level=None
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    # entries -------------------------------------------------------------------------------
    def get(self, key: str) -> Record | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, watermark FROM entries WHERE key = ? AND expires_at > ?",
                (key, self._clock()),
            ).fetchone()
        return Record(bytes(row[0]), row[1]) if row else None

    def set(self, key: str, value: bytes, ttl: float) -> float:
        now = self._clock()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO entries (key, value, watermark, expires_at)"
                " VALUES (?, ?, ?, ?)",
                (key, value, now, now + ttl),
            )
            if now >= self._next_sweep:
                self._next_sweep = now + self._sweep_every
                self._db.execute("DELETE FROM entries WHERE expires_at <= ?", (now,))
        return now

    def delete(self, keys: Sequence[str]) -> None:
        with self._lock:
            self._db.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in keys])

    async def aget(self, key: str) -> Record | None:
        return await asyncio.to_thread(self.get, key)

    async def aset(self, key: str, value: bytes, ttl: float) -> float:
        return await asyncio.to_thread(self.set, key, value, ttl)

    async def adelete(self, keys: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete, keys)

    # meta ----------------------------------------------------------------------------------
    def read_meta(self, namespace: str, names: Sequence[str]) -> dict[str, float]:
        if not names:
            return {}
        full = [f"{namespace}:{n}" for n in names]
        with self._lock:
            rows = self._db.execute(
                f"SELECT name, value FROM meta WHERE name IN ({','.join('?' * len(full))})",
                full,
            ).fetchall()
        found = dict(rows)
        return {n: found.get(f, 0.0) for n, f in zip(names, full, strict=True)}

    def bump_meta(self, namespace: str, name: str) -> int:
        with self._lock:
            row = self._db.execute(
                "INSERT INTO meta (name, value) VALUES (?, 1)"
                " ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value",
                (f"{namespace}:{name}",),
            ).fetchone()
        return int(row[0])

    def write_meta(self, namespace: str, name: str, value: float) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                (f"{namespace}:{name}", value),
            )

    # bulk ----------------------------------------------------------------------------------
    def keys(self, namespace: str) -> Iterator[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key FROM entries WHERE key >= ? AND key < ?", _prefix_range(namespace)
            ).fetchall()
        return (key for (key,) in rows)

    def scan(self, namespace: str) -> Iterator[tuple[str, Record]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, value, watermark FROM entries WHERE key >= ? AND key < ?"
                " AND expires_at > ?",
                (*_prefix_range(namespace), self._clock()),
            ).fetchall()
        for key, value, watermark in rows:
            yield key, Record(bytes(value), watermark)

    def written_since(self, namespace: str, cursor: str) -> WrittenKeys:
        low, high = _prefix_range(namespace)
        with self._lock:
            rows = self._db.execute(
                "SELECT id, key FROM entries WHERE id > ? AND key >= ? AND key < ? ORDER BY id",
                (int(cursor or 0), low, high),
            ).fetchall()
            if not rows:  # move the cursor past other namespaces' writes too
                last = self._db.execute("SELECT max(id) FROM entries").fetchone()[0]
                return WrittenKeys([], str(max(int(cursor or 0), last or 0)), True)
        return WrittenKeys([k for _, k in rows], str(rows[-1][0]), True)

    def clear(self, namespace: str) -> int:
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM entries WHERE key >= ? AND key < ?", _prefix_range(namespace)
            )
        return cur.rowcount

    # locks (request coalescing across processes) -------------------------------------------
    def try_lock(self, name: str, ttl: float) -> bool:
        now = self._clock()
        with self._lock:
            self._db.execute("DELETE FROM locks WHERE name = ? AND expires_at <= ?", (name, now))
            cur = self._db.execute(
                "INSERT OR IGNORE INTO locks (name, expires_at) VALUES (?, ?)", (name, now + ttl)
            )
        return cur.rowcount == 1

    def unlock(self, name: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM locks WHERE name = ?", (name,))

    def is_locked(self, name: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM locks WHERE name = ? AND expires_at > ?", (name, self._clock())
            ).fetchone()
        return row is not None

    # no pub/sub ----------------------------------------------------------------------------
    def publish(self, namespace: str, message: bytes) -> None:
        return None

    def subscribe(self, namespace: str, callback: Callable[[bytes], None]) -> None:
        return None

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _prefix_range(namespace: str) -> tuple[str, str]:
    prefix = f"tricache:{namespace}:"
    return prefix, prefix[:-1] + chr(ord(":") + 1)
