"""Embedded L2: one SQLite file (WAL) shared by the processes of one machine."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .base import Record, VersionState, WrittenKeys

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
CREATE TABLE IF NOT EXISTS epochs (
    namespace TEXT PRIMARY KEY, epoch TEXT NOT NULL, seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (  -- one row per changed name: its value and last change
    namespace TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS versions_by_seq ON versions(namespace, seq);
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

    # versions: read and changed inside one transaction each ----------------------------------
    def poll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        with self._lock:
            if not self._has_epoch(namespace):  # the first use of the namespace
                with self._transaction("IMMEDIATE"):
                    self._epoch(namespace)
            with self._transaction("DEFERRED"):  # a snapshot: the epoch and its values agree
                return self._read(namespace, epoch, after, names)

    def _read(self, namespace: str, epoch: str, after: int, names: Sequence[str]) -> VersionState:
        current, seq = self._epoch(namespace)
        after = after if epoch == current else 0
        values = dict(
            self._db.execute(
                "SELECT name, value FROM versions WHERE namespace = ? AND seq > ?",
                (namespace, after),
            ).fetchall()
        )
        values.update(self._values(namespace, [n for n in names if n not in values]))
        return VersionState(current, self._clock(), seq, seq, values)

    async def apoll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        return await asyncio.to_thread(self.poll, namespace, epoch, after, names)

    def bump(self, namespace: str, name: str) -> VersionState:
        return self._change(namespace, name, None)

    def set_floor(self, namespace: str, value: float | None) -> VersionState:
        return self._change(namespace, "min_wm", self._clock() if value is None else value)

    def _change(self, namespace: str, name: str, value: float | None) -> VersionState:
        with self._lock, self._transaction("IMMEDIATE"):
            epoch, seq = self._epoch(namespace)
            seq += 1
            old = self._values(namespace, [name]).get(name, 0.0)
            value = old + 1 if value is None else max(old, value)  # the floor never goes down
            self._db.execute("UPDATE epochs SET seq = ? WHERE namespace = ?", (seq, namespace))
            self._db.execute(
                "INSERT OR REPLACE INTO versions (namespace, name, value, seq) VALUES (?, ?, ?, ?)",
                (namespace, name, value, seq),
            )
        return VersionState(epoch, self._clock(), seq, seq, {name: value})

    def new_epoch(self, namespace: str, replacing: str | None) -> str:
        with self._lock, self._transaction("IMMEDIATE"):
            current, _ = self._epoch(namespace)
            if replacing is None or current == replacing:
                current = self._start_epoch(namespace)
        return current

    def eviction_policy(self) -> str | None:
        return None  # nothing is evicted from the file but expired entries

    def _has_epoch(self, namespace: str) -> bool:
        query = "SELECT 1 FROM epochs WHERE namespace = ?"
        return self._db.execute(query, (namespace,)).fetchone() is not None

    def _epoch(self, namespace: str) -> tuple[str, int]:
        row = self._db.execute(
            "SELECT epoch, seq FROM epochs WHERE namespace = ?", (namespace,)
        ).fetchone()
        return (str(row[0]), int(row[1])) if row else (self._start_epoch(namespace), 0)

    def _start_epoch(self, namespace: str) -> str:
        epoch = secrets.token_hex(8)
        self._db.execute("DELETE FROM versions WHERE namespace = ?", (namespace,))
        self._db.execute(
            "INSERT OR REPLACE INTO epochs (namespace, epoch, seq) VALUES (?, ?, 0)",
            (namespace, epoch),
        )
        return epoch

    def _values(self, namespace: str, names: Sequence[str]) -> dict[str, float]:
        if not names:
            return {}
        rows = self._db.execute(
            f"SELECT name, value FROM versions WHERE namespace = ?"
            f" AND name IN ({','.join('?' * len(names))})",
            (namespace, *names),
        ).fetchall()
        return {name: dict(rows).get(name, 0.0) for name in names}

    @contextmanager
    def _transaction(self, mode: str) -> Iterator[None]:
        """``IMMEDIATE`` to change (two processes never both start an epoch), ``DEFERRED`` to
        read a consistent snapshot."""
        self._db.execute(f"BEGIN {mode}")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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
