"""Audit records of semantic decisions and feedback, in SQLite, written off the hot path.

``record`` only puts the decision on a queue; a daemon thread writes batches.  Rows are plain
columns plus JSON, so they can be read with any SQLite client or ``AuditLog.recent``.

The file is private to the user (0600).  A question is recorded by a hash keyed with the
installation's secret (``TRICACHE_HOME/secret``): the hashes of one installation compare
across its processes, but a guessed question cannot be confirmed from the log alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import sqlite3
import threading
import time
import weakref
from contextlib import closing
from dataclasses import asdict, is_dataclass
from hashlib import blake2b
from pathlib import Path
from typing import Any

from ..runtime.exit import on_exit
from ..runtime.forks import hold_across_fork
from ..runtime.home import installation_secret, private_sqlite

__all__ = ["AuditLog"]

_Queue = queue.Queue[tuple[str, tuple[Any, ...]] | None]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    ts REAL NOT NULL, query_hash TEXT NOT NULL, hit TEXT, score REAL, skipped TEXT,
    guards TEXT, top TEXT, rejected TEXT, served_by TEXT, threshold REAL,
    namespace TEXT, pool TEXT, question TEXT, candidates TEXT, verdict TEXT
);
CREATE TABLE IF NOT EXISTS feedback (
    ts REAL NOT NULL, entry_id TEXT NOT NULL, correct INTEGER NOT NULL,
    cached_question TEXT, question TEXT, score REAL
);
"""


class AuditLog:
    """Decisions and feedback in ``path`` (SQLite); bounded queue, never blocks a lookup.

    ``secret`` keys the question hashes (by default the installation's secret)."""

    def __init__(
        self,
        path: str | Path,
        max_queue: int = 10_000,
        *,
        secret: bytes | None = None,
        questions: bool = True,
    ) -> None:
        self.path = Path(path)
        self.questions = questions  # False: the questions are not kept, only keyed hashes
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_sqlite(self.path)
        self._secret = secret if secret is not None else _secret()
        with closing(sqlite3.connect(self.path)) as db, db:
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(decisions)")}
            added = (
                ("served_by", "TEXT"),
                ("threshold", "REAL"),
                ("namespace", "TEXT"),
                ("pool", "TEXT"),
                ("question", "TEXT"),
                ("candidates", "TEXT"),
                ("verdict", "TEXT"),
            )
            for column, kind in added:
                if column not in columns:  # a log made by an older version
                    db.execute(f"ALTER TABLE decisions ADD COLUMN {column} {kind}")
        self._queue: _Queue = queue.Queue(max_queue)
        self.dropped = 0
        self._busy = threading.Lock()  # held while the writer is inside SQLite
        self._dropped = threading.Event()  # set when the log is collected unclosed
        hold_across_fork(self, "_busy")
        self._writer = threading.Thread(
            target=_write_forever,
            args=(self.path, self._queue, self._busy, self._dropped),
            name="tricache-audit",
            daemon=True,
        )  # it holds no reference to the log: a log dropped without ``close`` stops it too
        self._writer.start()
        weakref.finalize(self, _stop_writer, self._queue, self._dropped).atexit = False
        on_exit(self._at_exit)  # a script that ends without close() keeps its last records

    def record(self, decision: Any) -> None:
        row = (
            asdict(decision)
            if is_dataclass(decision) and not isinstance(decision, type)
            else dict(decision)
        )
        candidates = list(row.get("candidates", []))
        if not self.questions:
            candidates = [{k: v for k, v in c.items() if k != "question"} for c in candidates]
        self._put(
            "INSERT INTO decisions (ts, query_hash, hit, score, skipped, guards, top, rejected,"
            " served_by, threshold, namespace, pool, question, candidates)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time.time(),
                self.query_hash(row["query_hash"]),
                row.get("hit"),
                row.get("score"),
                row.get("skipped"),
                json.dumps(row.get("guards", [])),
                json.dumps(row.get("top", [])),
                json.dumps(row.get("rejected", {})),
                row.get("by"),
                row.get("threshold"),
                row.get("namespace", ""),
                row.get("pool", ""),
                row.get("question", "") if self.questions else None,
                json.dumps(candidates, ensure_ascii=False),
            ),
        )

    def judge(self, rowid: int, verdict: str) -> None:
        """A person's verdict on a decision (``tricache review``): "same" or "different"."""
        if verdict not in ("same", "different"):
            raise ValueError("verdict must be 'same' or 'different'")
        self.flush()
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("UPDATE decisions SET verdict = ? WHERE rowid = ?", (verdict, rowid))

    def decision(self, rowid: int) -> dict[str, Any] | None:
        """One decision by its row id, fields decoded."""
        self.flush()
        with closing(sqlite3.connect(self.path)) as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT rowid, * FROM decisions WHERE rowid = ?", (rowid,)).fetchone()
        return _decoded(dict(row)) if row is not None else None

    def query_hash(self, value: str) -> str:
        """What the log stores for a decision's ``query_hash`` ``value``: keyed BLAKE2b."""
        key = self._secret
        return blake2b(value.encode("utf-8", "surrogatepass"), key=key, digest_size=16).hexdigest()

    def feedback(
        self,
        entry_id: str,
        correct: bool,
        cached_question: str | None,
        question: str | None,
        score: float | None,
    ) -> None:
        self._put(
            "INSERT INTO feedback VALUES (?, ?, ?, ?, ?, ?)",
            (time.time(), entry_id, int(correct), cached_question, question, score),
        )

    def _put(self, sql: str, row: tuple[Any, ...]) -> None:
        try:
            self._queue.put_nowait((sql, row))
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything recorded so far is written."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def recent(self, limit: int = 20, table: str = "decisions") -> list[dict[str, Any]]:
        """The newest rows, their JSON fields decoded (``rowid`` included)."""
        if table not in ("decisions", "feedback"):
            raise ValueError("table must be 'decisions' or 'feedback'")
        self.flush()
        with closing(sqlite3.connect(self.path)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(f"SELECT rowid, * FROM {table} ORDER BY ts DESC LIMIT ?", (limit,))
            return [_decoded(dict(r)) for r in rows]

    def close(self) -> None:
        self.flush()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)

    def _at_exit(self) -> None:
        """The interpreter exits: write what is queued (a few milliseconds), then stop."""
        self.flush(timeout=2.0)
        self.close()


def _write_forever(
    path: Path, items: _Queue, busy: threading.Lock, dropped: threading.Event
) -> None:
    """Write what is queued, in batches, until a ``None`` says the log is closed (or it was
    dropped and all is written)."""
    db = sqlite3.connect(path)
    while True:
        try:
            item = items.get(timeout=1.0)
        except queue.Empty:
            if dropped.is_set():
                db.close()
                return
            continue
        batch = [item]
        while not items.empty() and len(batch) < 500:
            batch.append(items.get_nowait())
        try:
            with busy, db:
                for entry in batch:
                    if entry is not None:
                        db.execute(*entry)
        except sqlite3.Error as exc:
            log.warning("tricache: audit write failed: %s", exc)
        for _ in batch:
            items.task_done()
        if None in batch:
            db.close()
            return


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its JSON columns read (a damaged one left as text)."""
    for name in ("guards", "top", "rejected", "candidates"):
        if isinstance(row.get(name), str):
            with contextlib.suppress(ValueError):
                row[name] = json.loads(row[name])
    return row


def _stop_writer(items: _Queue, dropped: threading.Event) -> None:
    dropped.set()
    with contextlib.suppress(queue.Full):
        items.put_nowait(None)


def _secret() -> bytes:
    """The installation's secret; a per-process one (hashes that compare within this process
    only) when it cannot be read or created."""
    try:
        return installation_secret()
    except OSError as exc:
        log.warning("tricache: audit hashes keyed per process: no installation secret (%s)", exc)
        return secrets.token_bytes(32)
