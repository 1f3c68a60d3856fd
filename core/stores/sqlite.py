"""Embedded L2: one SQLite file (WAL) shared by the processes of one machine."""

from __future__ import annotations

import errno
import logging
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

from ..key.request import is_entry_key
from ..runtime.forks import hold_across_fork, inherited, on_fork
from ..runtime.home import private_sqlite
from .base import (
    STATS_BUCKET_S,
    STATS_KEPT_S,
    AsyncInThreads,
    LabelBatch,
    PointChanges,
    Record,
    VersionState,
    WrittenKeys,
    point_id_for,
)

__all__ = ["SQLiteStore", "open_read_only", "transaction"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- grows on every write: the write log's cursor
    key TEXT NOT NULL UNIQUE,
    value BLOB NOT NULL,
    watermark REAL NOT NULL,
    expires_at REAL NOT NULL,
    size INTEGER NOT NULL DEFAULT 0,  -- len(value): what max_bytes counts
    used_at REAL NOT NULL DEFAULT 0  -- last written or read (reads land within a second)
);
CREATE INDEX IF NOT EXISTS entries_expiry ON entries(expires_at);
CREATE INDEX IF NOT EXISTS entries_lru ON entries(used_at, size);
CREATE TABLE IF NOT EXISTS epochs (
    namespace TEXT PRIMARY KEY, epoch TEXT NOT NULL, seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (  -- one row per changed name: its value and last change
    namespace TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS versions_by_seq ON versions(namespace, seq);
CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS points (  -- the semantic tier's vector points, and their change log
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- grows on every change: the log's cursor
    namespace TEXT NOT NULL,
    id TEXT NOT NULL,
    data BLOB,  -- NULL: deleted (kept until expires_at, so readers learn of it)
    expires_at REAL NOT NULL,
    UNIQUE (namespace, id)
);
CREATE INDEX IF NOT EXISTS points_by_seq ON points(namespace, seq);
CREATE INDEX IF NOT EXISTS points_expiry ON points(expires_at);
CREATE TABLE IF NOT EXISTS point_logs (  -- a new log id on clear; changes below floor are gone
    namespace TEXT PRIMARY KEY, log TEXT NOT NULL, floor INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS labels (  -- what the semantic tier learns from, oldest first
    seq INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL, data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS labels_by_seq ON labels(namespace, seq);
CREATE TABLE IF NOT EXISTS label_logs (namespace TEXT PRIMARY KEY, log TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journal (  -- writes a process left for the next one to finish
    seq INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL, data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_by_seq ON journal(namespace, seq);
CREATE TABLE IF NOT EXISTS stats (  -- every process's counters, added up per 5 minutes
    namespace TEXT NOT NULL, bucket INTEGER NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (namespace, bucket, name)
);
"""


class _SQLiteFile(AsyncInThreads):
    """The file and its connections: one writer, one reader (WAL: reads never wait behind a
    writer), the expiry sweeper, fork safety."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 0.1,
        sweep_every: float = 60.0,
        sweep_batch: int = 1000,
        clock: Callable[[], float] = time.time,
        label_log_length: int = 100_000,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.evicted = 0  # entries this process's writes and sweeps evicted for the bound
        self._touched: dict[str, float] = {}  # key → last read, until ``touch`` writes it
        self.label_log_length = label_log_length
        self._label_writes: dict[str, int] = {}  # label writes per namespace (when to trim)
        if not read_only:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            private_sqlite(self.path)
        self._clock = clock
        self._timeout = timeout
        self.sweep_batch = sweep_batch
        self._lock = threading.Lock()  # the writer connection
        self._db = self._connect()
        if read_only:
            self._db.execute("SELECT key, value, watermark FROM entries LIMIT 0")  # is it ours?
        else:
            _set_up(self._db, timeout)
        self._read_lock = threading.Lock()
        self._reader = self._connect()
        self._reader.execute("PRAGMA query_only=1")
        self._sweep_every = sweep_every
        self._start_sweeper()
        on_fork(self._after_fork)
        hold_across_fork(self, "_lock", "_read_lock")

    def _start_sweeper(self) -> None:
        self._stop, self._nudge = threading.Event(), threading.Event()
        self._sweeper: threading.Thread | None = None
        if self.read_only:  # (nothing to sweep: it writes)
            return
        self._sweeper = threading.Thread(
            target=_sweep_forever,
            args=(weakref.ref(self), self._stop, self._nudge, self._sweep_every),
            name="tricache-sqlite-sweep",
            daemon=True,
        )
        self._sweeper.start()

    def _after_fork(self) -> None:
        """SQLite connections must not cross a fork: the child opens its own (the parent's
        stay open and unused) and starts its own sweeper."""
        inherited(self._db, self._reader)
        self._lock, self._read_lock = threading.Lock(), threading.Lock()
        self._db, self._reader = self._connect(), self._connect()
        self._reader.execute("PRAGMA query_only=1")
        self._start_sweeper()

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            db = open_read_only(self.path, self._timeout)
        else:
            db = sqlite3.connect(
                self.path, timeout=self._timeout, check_same_thread=False, isolation_level=None
            )
        db.execute("PRAGMA recursive_triggers = ON")  # a REPLACE's delete is tallied too
        return db

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """The writer connection, or ``sqlite3.OperationalError`` when this process's other
        writers hold it longer than the write budget."""
        if not self._lock.acquire(timeout=self._timeout):
            raise sqlite3.OperationalError("database is locked (by this process's writers)")
        try:
            yield self._db
        finally:
            self._lock.release()

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[Any]:
        """Rows of one read on the reader connection (fetched whole: no read stays open)."""
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()


class _SQLiteEntries(_SQLiteFile):
    """Entries (``EntryStore``): reads, writes under the size bound, the LRU's recency, the
    expiry sweep, the write log."""

    def get(self, key: str) -> Record | None:
        now = self._clock()
        rows = self._query(
            "SELECT value, watermark FROM entries WHERE key = ? AND expires_at > ?", (key, now)
        )
        if not rows:
            return None
        if len(self._touched) < _TOUCHED_MAX and not self.read_only:
            self._touched[key] = now
        return Record(bytes(rows[0][0]), rows[0][1])

    def set(self, key: str, value: bytes, ttl: float) -> float:
        """Write an entry; in a bounded file, the same transaction evicts beyond the bound."""
        now = self._clock()
        insert = (
            "INSERT OR REPLACE INTO entries (key, value, watermark, expires_at, size, used_at)"
            " VALUES (?, ?, ?, ?, ?, ?)"
        )
        row = (key, value, now, now + ttl, len(value), now)
        if self.max_entries is None and self.max_bytes is None:
            with self._writing() as db:
                db.execute(insert, row)
            return now
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            db.execute(insert, row)
            tally = db.execute("SELECT entries, bytes FROM tally").fetchone() or _recount(db)
            over = _over(tally, self.max_entries, self.max_bytes)
            evicted = 0
            if over != (0, 0):  # this process's reads count before the victims are chosen
                self._write_uses(db, _USES_PER_WRITE)
                evicted = _evict(db, *_with_room(over, self.max_entries, self.max_bytes),
                                 _EVICT_PER_WRITE, now)  # fmt: skip
        self.evicted += evicted
        return now

    def touch(self, keys: Sequence[str]) -> None:
        """``keys`` were just served from a level in front of the store (L1): write them, and
        the reads remembered since the last time, as used now, in short transactions.  The
        exact tier's background thread calls it (every second at most), never a request.
        A store opened read-only remembers nothing and writes nothing."""
        if self.read_only:
            self._touched.clear()
            return
        now = self._clock()
        for key in keys:
            if len(self._touched) < _TOUCHED_MAX:
                self._touched[key] = now
        for _ in range(len(self._touched) // _USES_PER_WRITE + 1):  # short transactions
            if not self._touched:
                break
            with self._writing() as db, transaction(db, "IMMEDIATE"):
                self._write_uses(db, _USES_PER_WRITE)

    def _write_uses(self, db: sqlite3.Connection, limit: int) -> None:
        """Write at most ``limit`` remembered uses (inside a write transaction); the rest stay
        remembered."""
        touched, now = self._touched, self._clock()
        keys = list(islice(touched, limit))  # (one step for the GIL: no read changes it meanwhile)
        uses = [(touched.pop(key, now), key) for key in keys]
        db.executemany("UPDATE entries SET used_at = max(used_at, ?) WHERE key = ?", uses)

    def sweep(self) -> int:
        """Write the remembered reads, delete at most ``sweep_batch`` expired entries (and
        expired locks), then evict at most ``sweep_batch`` least recently used ones beyond the
        bound (left over when the bound was lowered); how many entries.  Called by the sweeper
        thread; short write transactions."""
        now = self._clock()
        self.touch(())
        with self._writing() as db:
            cur = db.execute(
                "DELETE FROM entries WHERE id IN"
                " (SELECT id FROM entries WHERE expires_at <= ? LIMIT ?)",
                (now, self.sweep_batch),
            )
            db.execute("DELETE FROM locks WHERE expires_at <= ?", (now,))
            db.execute(
                "DELETE FROM stats WHERE bucket < ?", ((now - STATS_KEPT_S) // STATS_BUCKET_S,)
            )
            _sweep_points(db, now, self.sweep_batch)
        expired = cur.rowcount
        if self.max_entries is None and self.max_bytes is None:
            return expired
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            tally = _recount(db)  # (and corrects the tally, should a file's writer miscount)
            evicted = _evict(db, *_over(tally, self.max_entries, self.max_bytes),
                             self.sweep_batch, now)  # fmt: skip
        self.evicted += evicted
        return expired + evicted

    def size(self) -> tuple[int, int]:
        """Entries in the file and the bytes of their values (every namespace)."""
        rows = self._query("SELECT count(*), coalesce(sum(size), 0) FROM entries")
        return int(rows[0][0]), int(rows[0][1])

    def delete(self, keys: Sequence[str]) -> None:
        with self._writing() as db:
            db.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in keys])

    # bulk: on a connection of their own, so a long read holds up neither reads nor writes ----
    def keys(self, namespace: str) -> Iterator[str]:
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT key FROM entries WHERE key >= ? AND key < ?", _prefix_range(namespace)
            ).fetchall()
        return (key for (key,) in rows)

    def scan(self, namespace: str) -> Iterator[tuple[str, Record]]:
        """The namespace's live entries, one row at a time (a caller that wants one holds one,
        not the file), on a connection of its own, closed when the scan ends or is closed."""
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT key, value, watermark FROM entries WHERE key >= ? AND key < ?"
                " AND expires_at > ?",
                (*_prefix_range(namespace), self._clock()),
            )
            for key, value, watermark in rows:
                yield key, Record(bytes(value), watermark)

    def written_since(self, namespace: str, cursor: str) -> WrittenKeys:
        low, high = _prefix_range(namespace)
        with self._read_lock, transaction(self._reader, "DEFERRED"):
            rows = self._reader.execute(
                "SELECT id, key FROM entries WHERE id > ? AND key >= ? AND key < ? ORDER BY id"
                f" LIMIT {_LOG_BATCH}",
                (int(cursor or 0), low, high),
            ).fetchall()
            if not rows:  # move the cursor past other namespaces' writes too
                last = self._reader.execute("SELECT max(id) FROM entries").fetchone()[0]
                return WrittenKeys([], str(max(int(cursor or 0), last or 0)), True)
        return WrittenKeys([k for _, k in rows], str(rows[-1][0]), True)

    def clear(self, namespace: str) -> int:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            cur = db.execute(
                "DELETE FROM entries WHERE key >= ? AND key < ?", _prefix_range(namespace)
            )
            db.execute("DELETE FROM labels WHERE namespace = ?", (namespace,))
            db.execute("DELETE FROM label_logs WHERE namespace = ?", (namespace,))
            db.execute("DELETE FROM journal WHERE namespace = ?", (namespace,))
        return cur.rowcount

    def close(self) -> None:
        self._stop.set()
        self._nudge.set()
        if self._sweeper is not None and self._sweeper is not threading.current_thread():
            self._sweeper.join(timeout=1.0)
        try:
            if not self.read_only:
                self.touch(())  # the last reads, within the write budget
        except sqlite3.Error as exc:
            log.debug("tricache: sqlite uses not written at close: %s", exc)
        with self._lock, self._read_lock:
            self._db.close()
            self._reader.close()


class _SQLiteVersions(_SQLiteFile):
    """The version state (``VersionStore``): read and changed inside one transaction each."""

    def poll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        with self._read_lock, transaction(self._reader, "DEFERRED"):  # a snapshot
            state = self._read(self._reader, namespace, epoch, after, names)
        if state is not None:
            return state
        if self.read_only:  # a namespace never used: no versions, nothing to judge by
            return VersionState(_UNUSED_EPOCH, self._clock(), 0, 0, {})
        with self._writing() as db, transaction(db, "IMMEDIATE"):  # the namespace's first use
            self._epoch(db, namespace)
            state = self._read(db, namespace, epoch, after, names)
        assert state is not None
        return state

    def _read(
        self,
        db: sqlite3.Connection,
        namespace: str,
        epoch: str,
        after: int,
        names: Sequence[str],
    ) -> VersionState | None:
        """The state of ``namespace`` (``None`` before its first epoch); inside a transaction,
        so the epoch and its values agree."""
        row = _epoch_row(db, namespace)
        if row is None:
            return None
        current, seq = row
        after = after if epoch == current else 0
        values = dict(
            db.execute(
                "SELECT name, value FROM versions WHERE namespace = ? AND seq > ?",
                (namespace, after),
            ).fetchall()
        )
        values.update(_values(db, namespace, [n for n in names if n not in values]))
        return VersionState(current, self._clock(), seq, seq, values)

    def bump(self, namespace: str, name: str) -> VersionState:
        return self._change(namespace, name, None)

    def set_floor(self, namespace: str, value: float | None) -> VersionState:
        return self._change(namespace, "min_wm", self._clock() if value is None else value)

    def _change(self, namespace: str, name: str, value: float | None) -> VersionState:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            epoch, seq = self._epoch(db, namespace)
            seq += 1
            old = _values(db, namespace, [name]).get(name, 0.0)
            value = old + 1 if value is None else max(old, value)  # the floor never goes down
            db.execute("UPDATE epochs SET seq = ? WHERE namespace = ?", (seq, namespace))
            db.execute(
                "INSERT OR REPLACE INTO versions (namespace, name, value, seq) VALUES (?, ?, ?, ?)",
                (namespace, name, value, seq),
            )
        return VersionState(epoch, self._clock(), seq, seq, {name: value})

    def new_epoch(self, namespace: str, replacing: str | None) -> str:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            current, _ = self._epoch(db, namespace)
            if replacing is None or current == replacing:
                current = _start_epoch(db, namespace)
        return current

    def eviction_policy(self) -> str | None:
        return None  # nothing is evicted from the file but expired entries

    def _epoch(self, db: sqlite3.Connection, namespace: str) -> tuple[str, int]:
        """The current epoch and seq, starting the first one (in a write transaction)."""
        return _epoch_row(db, namespace) or (_start_epoch(db, namespace), 0)


class _SQLiteLogs(_SQLiteFile):
    """What the processes share besides entries: counters (``StatsLog``), unfinished writes
    (``WriteJournal``), labels (``LabelLog``) and the semantic tier's points (``PointLog``)."""

    def add_stats(self, namespace: str, bucket: int, counts: dict[str, int]) -> None:
        with self._writing() as db:
            db.executemany(
                "INSERT INTO stats (namespace, bucket, name, value) VALUES (?, ?, ?, ?) ON CONFLICT"
                " (namespace, bucket, name) DO UPDATE SET value = value + excluded.value",
                [(namespace, bucket, name, int(n)) for name, n in counts.items() if n],
            )

    def read_stats(self, namespace: str, since: int) -> dict[str, int]:
        with self._read_lock, transaction(self._reader, "DEFERRED"):
            rows = self._reader.execute(
                "SELECT name, sum(value) FROM stats WHERE namespace = ? AND bucket >= ?"
                " GROUP BY name",
                (namespace, since),
            ).fetchall()
        return {name: int(total) for name, total in rows}

    def journal(self, namespace: str, records: Sequence[bytes]) -> int:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            db.executemany(
                "INSERT INTO journal (namespace, data) VALUES (?, ?)",
                [(namespace, data) for data in records],
            )
            cur = db.execute(  # the namespace's newest _JOURNAL_LENGTH stay
                "DELETE FROM journal WHERE namespace = ? AND seq <= (SELECT seq FROM journal"
                " WHERE namespace = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (namespace, namespace, _JOURNAL_LENGTH),
            )
        return max(0, cur.rowcount)

    def take_journal(self, namespace: str, limit: int) -> list[bytes]:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            rows = db.execute(
                "SELECT seq, data FROM journal WHERE namespace = ? ORDER BY seq LIMIT ?",
                (namespace, limit),
            ).fetchall()
            if rows:
                db.execute(
                    "DELETE FROM journal WHERE namespace = ? AND seq <= ?", (namespace, rows[-1][0])
                )
        return [bytes(data) for _, data in rows]

    def add_labels(self, namespace: str, labels: Sequence[bytes]) -> None:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            db.execute(
                "INSERT OR IGNORE INTO label_logs (namespace, log) VALUES (?, ?)",
                (namespace, secrets.token_hex(8)),
            )
            db.executemany(
                "INSERT INTO labels (namespace, data) VALUES (?, ?)",
                [(namespace, data) for data in labels],
            )
            # now and then (every 100th write of this namespace, counted per process): its
            # newest label_log_length stay; other namespaces' writes move nothing here
            self._label_writes[namespace] = self._label_writes.get(namespace, 0) + 1
            if self._label_writes[namespace] % 100 == 1:
                db.execute(
                    "DELETE FROM labels WHERE namespace = ? AND seq <= (SELECT seq FROM labels"
                    " WHERE namespace = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                    (namespace, namespace, self.label_log_length),
                )

    def labels_since(self, namespace: str, cursor: str) -> LabelBatch:
        log_id, _, after = cursor.partition("/")
        with self._read_lock, transaction(self._reader, "DEFERRED"):
            row = self._reader.execute(
                "SELECT log FROM label_logs WHERE namespace = ?", (namespace,)
            ).fetchone()
            current = row[0] if row else ""
            start = int(after or 0) if current == log_id else 0
            rows = self._reader.execute(
                "SELECT seq, data FROM labels WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?",
                (namespace, start, _LABELS),
            ).fetchall()
        last = rows[-1][0] if rows else start
        labels = [bytes(data) for _, data in rows]
        return LabelBatch(labels, f"{current}/{last}", current != log_id, len(rows) >= _LABELS)

    def put_point(self, namespace: str, point_id: str, data: bytes, ttl: float) -> None:
        self._change_points(namespace, [(point_id, data, self._clock() + ttl)])

    def delete_points(self, namespace: str, point_ids: Sequence[str]) -> None:
        until = self._clock() + TOMBSTONE_S
        self._change_points(namespace, [(point_id, None, until) for point_id in point_ids])

    def _change_points(
        self, namespace: str, rows: Sequence[tuple[str, bytes | None, float]]
    ) -> None:
        if not rows:
            return
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            db.execute(
                "INSERT OR IGNORE INTO point_logs (namespace, log, floor) VALUES (?, ?, 0)",
                (namespace, secrets.token_hex(8)),
            )
            db.executemany(  # REPLACE gives the row a new seq: the change is logged
                "INSERT OR REPLACE INTO points (namespace, id, data, expires_at)"
                " VALUES (?, ?, ?, ?)",
                [(namespace, *row) for row in rows],
            )

    def clear_points(self, namespace: str) -> None:
        with self._writing() as db, transaction(db, "IMMEDIATE"):
            db.execute("DELETE FROM points WHERE namespace = ?", (namespace,))
            db.execute(
                "INSERT OR REPLACE INTO point_logs (namespace, log, floor) VALUES (?, ?, 0)",
                (namespace, secrets.token_hex(8)),
            )

    def point_head(self, namespace: str) -> str:
        with self._writing() as db:  # the log exists from here on: its id will not change
            db.execute(
                "INSERT OR IGNORE INTO point_logs (namespace, log, floor) VALUES (?, ?, 0)",
                (namespace, secrets.token_hex(8)),
            )
        with self._read_lock, transaction(self._reader, "DEFERRED"):
            log_id, floor = _point_log(self._reader, namespace)
            (last,) = self._reader.execute(
                "SELECT max(seq) FROM points WHERE namespace = ?", (namespace,)
            ).fetchone()
        return f"{log_id}:{max(floor, last or 0)}"

    def scan_points(self, namespace: str) -> Iterator[tuple[str, bytes]]:
        """Every live point, read in batches (a rebuild of 100k points held them all at once:
        a peak of ~300 MiB) on a connection of its own, closed when the scan ends."""
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT id, data FROM points WHERE namespace = ? AND data IS NOT NULL"
                " AND expires_at > ?",
                (namespace, self._clock()),
            )
            while batch := rows.fetchmany(1000):
                yield from ((point_id, bytes(data)) for point_id, data in batch)

    def points_since(self, namespace: str, cursor: str) -> PointChanges:
        cursor_log, _, after = cursor.partition(":")
        with self._read_lock, transaction(self._reader, "DEFERRED"):
            log_id, floor = _point_log(self._reader, namespace)
            if cursor_log != log_id or not after.isdigit() or int(after) < floor:
                return PointChanges([], cursor, False)
            rows = self._reader.execute(
                "SELECT seq, id, data FROM points WHERE namespace = ? AND seq > ?"
                f" ORDER BY seq LIMIT {_LOG_BATCH}",
                (namespace, int(after)),
            ).fetchall()
        if not rows:
            return PointChanges([], cursor, True)
        changed = [(point_id, None if data is None else bytes(data)) for _, point_id, data in rows]
        return PointChanges(changed, f"{log_id}:{rows[-1][0]}", True)


class _SQLiteCoordination(_SQLiteFile):
    """Locks (``LockStore``) in a table; no pub/sub (``Bus``): processes poll the versions."""

    def try_lock(self, name: str, ttl: float) -> bool:
        now = self._clock()
        with self._writing() as db:
            db.execute("DELETE FROM locks WHERE name = ? AND expires_at <= ?", (name, now))
            cur = db.execute(
                "INSERT OR IGNORE INTO locks (name, expires_at) VALUES (?, ?)", (name, now + ttl)
            )
        return cur.rowcount == 1

    def unlock(self, name: str) -> None:
        with self._writing() as db:
            db.execute("DELETE FROM locks WHERE name = ?", (name,))

    def is_locked(self, name: str) -> bool:
        rows = self._query(
            "SELECT 1 FROM locks WHERE name = ? AND expires_at > ?", (name, self._clock())
        )
        return bool(rows)

    def publish(self, namespace: str, message: bytes) -> None:
        return None

    def subscribe(self, namespace: str, callback: Callable[[bytes], None]) -> None:
        return None

    def unsubscribe(self) -> None:
        return None


class SQLiteStore(_SQLiteEntries, _SQLiteVersions, _SQLiteLogs, _SQLiteCoordination):
    """L2 on a local SQLite file: an expiry column, a background sweep, no pub/sub.

    Reads (``get``, ``poll``, ``written_since``, ``is_locked``) have their own connection and
    lock: in WAL mode they never wait behind a writer, in this process or another.  Writes
    share one connection; a write waits at most ``timeout`` for this process's other writers,
    then at most ``timeout`` for SQLite's lock, and raises: the caller drops and counts it.
    Expired rows are deleted by a daemon thread every ``sweep_every`` seconds, at most
    ``sweep_batch`` rows per transaction.

    ``max_entries`` and ``max_bytes`` (of stored values) bound the file, every namespace in
    it together: a write that takes the file past them evicts the least recently used entries
    in its own transaction (the ``tally`` table, kept by triggers, counts them at no cost), so
    the bound holds after every write of every process, however many write at once and
    however soon they exit.  An evicted entry's semantic point goes with it (a deletion in the
    point log: every replica drops it).  Reads are remembered in memory and written by
    ``touch`` (the exact tier calls it every second with what L1 served) or the next sweep.

    Without pub/sub, other processes learn of invalidations by polling the version tables
    (the exact tier does this every ``refresh_s``).

    ``read_only=True`` (what a command that only reads opens: ``tricache entries list``,
    ``stats``) opens an existing file with SQLite's ``mode=ro``: no folder or file is made,
    nothing migrated, no permission changed, no sweeper started; ``FileNotFoundError`` when
    there is no file, and every write raises ``sqlite3.OperationalError``.

    It is also a ``PointLog``: the ``points`` table holds the semantic tier's vectors, its
    ``seq`` column is the log (a deletion leaves a row without data for ``TOMBSTONE_S``); and
    a ``LabelLog``: the ``labels`` table, capped at ``label_log_length`` per namespace.
    """

    name = "sqlite"
    has_pubsub = False


def open_read_only(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    """A connection to the existing SQLite file ``path`` that cannot write it (``mode=ro``):
    no folder or file is created, nothing changed, no permission touched.  (In WAL mode SQLite
    may leave its ``-wal`` and ``-shm`` beside the file, with the file's own mode, as any
    reader does; the next writer takes them over.)  ``FileNotFoundError`` when it is absent."""
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    return sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=ro",
        uri=True,
        timeout=timeout,
        check_same_thread=False,
        isolation_level=None,
    )


_UNUSED_EPOCH = "unused"  # what a read-only store says of a namespace never written


def _migrate(db: sqlite3.Connection) -> None:
    """Add the columns a file written by an older version lacks (its entries count as used
    long ago and as size 0 until rewritten)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
    for column in ("size INTEGER", "used_at REAL"):
        if columns and column.split()[0] not in columns:
            try:
                db.execute(f"ALTER TABLE entries ADD COLUMN {column} NOT NULL DEFAULT 0")
            except sqlite3.OperationalError as exc:  # another process added it meanwhile
                if "duplicate column" not in str(exc):
                    raise


def _over(
    tally: tuple[int, int], max_entries: int | None, max_bytes: int | None
) -> tuple[int, int]:
    """How many entries and bytes the file holds beyond the bound (``tally``: what it holds)."""
    entries, size = tally
    over_entries = max(0, entries - max_entries) if max_entries is not None else 0
    return over_entries, max(0, size - max_bytes) if max_bytes is not None else 0


def _with_room(
    over: tuple[int, int], max_entries: int | None, max_bytes: int | None
) -> tuple[int, int]:
    """What a write evicts when over the bound: the excess, and a thousandth of a large bound
    more, so the next writes find room (the cost of an eviction spread over them)."""
    entries, size = over
    if entries and max_entries is not None:
        entries += max_entries // _ROOM
    if size and max_bytes is not None:
        size += max_bytes // _ROOM
    return entries, size


def _recount(db: sqlite3.Connection) -> tuple[int, int]:
    """The entries and bytes the file holds, counted (a scan), written to the tally too."""
    count, total = db.execute("SELECT count(*), coalesce(sum(size), 0) FROM entries").fetchone()
    db.execute(
        "INSERT OR REPLACE INTO tally (one, entries, bytes) VALUES (0, ?, ?)", (count, total)
    )
    return int(count), int(total)


def _evict(
    db: sqlite3.Connection, over_entries: int, over_bytes: int, batch: int, now: float
) -> int:
    """Delete the least recently used entries, at most ``batch``, until ``over_entries`` and
    ``over_bytes`` are freed, and their semantic points (inside a write transaction)."""
    if not over_entries and not over_bytes:
        return 0
    victims: list[tuple[int, str]] = []
    freed = 0
    for row_id, key, size in db.execute(
        "SELECT id, key, size FROM entries ORDER BY used_at, id LIMIT ?", (batch,)
    ):
        if len(victims) >= over_entries and freed >= over_bytes:
            break
        victims.append((row_id, key))
        freed += size
    db.executemany("DELETE FROM entries WHERE id = ?", [(i,) for i, _ in victims])
    _drop_points(db, [key for _, key in victims], now)
    return len(victims)


def _drop_points(db: sqlite3.Connection, keys: Sequence[str], now: float) -> None:
    """Delete the semantic points of the entries ``keys`` where there are any: a deletion
    logged (a row without data, a new seq) that every replica applies."""
    doomed = []
    for key in keys:
        namespace = _namespace_of(key)
        if namespace is not None:
            doomed.append((now + TOMBSTONE_S, namespace, point_id_for(key)))
    db.executemany(
        "INSERT OR REPLACE INTO points (namespace, id, data, expires_at) SELECT namespace, id,"
        " NULL, ? FROM points WHERE namespace = ? AND id = ? AND data IS NOT NULL",
        doomed,
    )


def _namespace_of(key: str) -> str | None:
    """The namespace of an exact-tier key (``tricache:<namespace>:x:<digest>``), or ``None``."""
    head = key.rpartition(":x:")[0]
    namespace = head.removeprefix("tricache:")
    return namespace if head != namespace and is_entry_key(key, namespace) else None


def _count_entries(db: sqlite3.Connection) -> None:
    """The ``tally`` row and the triggers that keep it (made and recounted in one transaction
    at every open: a file of an earlier version, whose writers did not count, is right from
    here on)."""
    with transaction(db, "IMMEDIATE"):
        for statement in _TALLY.split(";\n"):
            db.execute(statement)
        _recount(db)


def _set_up(db: sqlite3.Connection, timeout: float) -> None:
    """WAL, the schema and its migrations.  Opening waits longer than a request would
    (``_OPEN_TIMEOUT_S``): workers that start together make the file and its schema at once,
    and one that gave up would run on L1 only for good.  A journal-mode change does not wait
    for a lock in SQLite: it is tried again until then."""
    deadline = time.monotonic() + max(timeout, _OPEN_TIMEOUT_S)
    db.execute(f"PRAGMA busy_timeout = {int(max(timeout, _OPEN_TIMEOUT_S) * 1000)}")
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    db.execute("PRAGMA synchronous=NORMAL")
    _migrate(db)
    db.executescript(_SCHEMA)
    _count_entries(db)
    db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")


def _sweep_forever(
    store_ref: weakref.ref[SQLiteStore],
    stop: threading.Event,
    nudge: threading.Event,
    every: float,
) -> None:
    """Every ``every`` seconds (or when nudged), delete expired entries and evict beyond the
    bound one batch at a time, pausing between batches so other writers get the lock.  Ends
    when the store is closed or garbage."""
    while True:
        nudge.wait(every)
        nudge.clear()
        if stop.is_set():
            return
        while not stop.is_set():
            store = store_ref()
            if store is None:
                return
            try:
                full = store.sweep() >= store.sweep_batch
            except sqlite3.Error as exc:  # locked, closed or damaged: try again next time
                log.debug("tricache: sqlite sweep skipped: %s", exc)
                full = False
            del store
            if not full or stop.wait(_SWEEP_PAUSE_S):
                break


_SWEEP_PAUSE_S = 0.005
_OPEN_TIMEOUT_S = 2.0  # how long opening the file may wait for another process's lock
_TOUCHED_MAX = 100_000  # reads remembered between writes of them (beyond: not counted)
_USES_PER_WRITE = 1000  # remembered reads written in one transaction (an evicting write's first)
_EVICT_PER_WRITE = 200  # entries one write evicts at most (a lowered bound: the sweep goes on)
_ROOM = 1000  # an evicting write frees a thousandth of the bound more than it must
# The entries and bytes of the file, kept by triggers in every writer's transaction (a
# REPLACE's delete fires its trigger where ``recursive_triggers`` is on, as ``_connect`` sets).
_TALLY = """CREATE TABLE IF NOT EXISTS tally (
    one INTEGER PRIMARY KEY CHECK (one = 0), entries INTEGER NOT NULL, bytes INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    UPDATE tally SET entries = entries + 1, bytes = bytes + NEW.size; END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE tally SET entries = entries - 1, bytes = bytes - OLD.size; END;
CREATE TRIGGER IF NOT EXISTS entries_resized AFTER UPDATE OF size ON entries BEGIN
    UPDATE tally SET bytes = bytes + NEW.size - OLD.size; END"""
TOMBSTONE_S = 24 * 3600.0  # how long a deleted point is remembered (a reader away longer rebuilds)


_LABELS = 5000  # labels per read
_JOURNAL_LENGTH = 100_000  # drafts waiting to be indexed, per namespace (~0.5 KB each)


def _point_log(db: sqlite3.Connection, namespace: str) -> tuple[str, int]:
    row = db.execute(
        "SELECT log, floor FROM point_logs WHERE namespace = ?", (namespace,)
    ).fetchone()
    return (str(row[0]), int(row[1])) if row else ("none", 0)


def _sweep_points(db: sqlite3.Connection, now: float, batch: int) -> None:
    """Delete expired points and tombstones; a log whose tombstones go raises its floor, so a
    reader that had not seen them rebuilds rather than keep a deleted point."""
    db.execute(
        "UPDATE point_logs SET floor = max(floor, (SELECT coalesce(max(seq), 0) FROM points"
        " WHERE points.namespace = point_logs.namespace AND data IS NULL AND expires_at <= ?))",
        (now,),
    )
    db.execute(
        "DELETE FROM points WHERE seq IN (SELECT seq FROM points WHERE expires_at <= ? LIMIT ?)",
        (now, batch),
    )


def _epoch_row(db: sqlite3.Connection, namespace: str) -> tuple[str, int] | None:
    row = db.execute("SELECT epoch, seq FROM epochs WHERE namespace = ?", (namespace,)).fetchone()
    return (str(row[0]), int(row[1])) if row else None


def _start_epoch(db: sqlite3.Connection, namespace: str) -> str:
    epoch = secrets.token_hex(8)
    db.execute("DELETE FROM versions WHERE namespace = ?", (namespace,))
    db.execute(
        "INSERT OR REPLACE INTO epochs (namespace, epoch, seq) VALUES (?, ?, 0)",
        (namespace, epoch),
    )
    return epoch


def _values(db: sqlite3.Connection, namespace: str, names: Sequence[str]) -> dict[str, float]:
    if not names:
        return {}
    rows = db.execute(
        f"SELECT name, value FROM versions WHERE namespace = ?"
        f" AND name IN ({','.join('?' * len(names))})",
        (namespace, *names),
    ).fetchall()
    return {name: dict(rows).get(name, 0.0) for name in names}


@contextmanager
def transaction(db: sqlite3.Connection, mode: str) -> Iterator[None]:
    """One transaction on ``db``, rolled back when the block raises: ``IMMEDIATE`` to change
    (two processes never both start an epoch), ``DEFERRED`` to read a consistent snapshot."""
    db.execute(f"BEGIN {mode}")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


_LOG_BATCH = 2000  # keys per write-log read: a catch-up in small steps, the GIL shared


def _prefix_range(namespace: str) -> tuple[str, str]:
    prefix = f"tricache:{namespace}:"
    return prefix, prefix[:-1] + chr(ord(":") + 1)
