"""Audit records of requests, semantic decisions and feedback, in SQLite, off the hot path.

``request`` (one row per lookup: which tier served it, or that the model is asked) and
``record`` (the semantic tier's decision, linked to its request's row) only put the row on a
queue; a daemon thread writes batches.  Rows are plain columns plus JSON, so they can be read
with any SQLite client or ``AuditLog.recent`` / ``AuditLog.requests``.

Retention: rows older than ``keep_days`` go, and the oldest go while the rows take more than
``keep_mb`` (``TRICACHE_AUDIT_KEEP_DAYS``, default 30; ``TRICACHE_AUDIT_KEEP_MB``, default
100); the writer prunes when it starts and then every minute or 1,000 rows.

The file is private to the user (0600).  A question is recorded by a hash keyed with the
installation's secret (``TRICACHE_HOME/secret``): the hashes of one installation compare
across its processes, but a guessed question cannot be confirmed from the log alone.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import closing
from contextvars import ContextVar
from dataclasses import asdict, dataclass, is_dataclass
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runtime.exit import on_exit
from ..runtime.forks import hold_across_fork
from ..runtime.home import installation_secret, private_sqlite

if TYPE_CHECKING:
    from ..hit import Hit
    from ..key.asked import Asked

__all__ = ["AuditLog", "Retention"]


@dataclass(frozen=True, slots=True)
class _Link:
    """A request row's reference to the decision queued as number ``seq`` (its rowid once
    written)."""

    seq: int


_Item = tuple[str, tuple[Any, ...], int]  # SQL, its parameters, the row's number (0: none)
_Queue = queue.Queue[_Item | None]

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
CREATE TABLE IF NOT EXISTS requests (
    ts REAL NOT NULL, namespace TEXT, query_hash TEXT, question TEXT, tier TEXT NOT NULL,
    outcome TEXT, level TEXT, entry_id TEXT, matched TEXT, answer TEXT, score REAL,
    tags TEXT, decision INTEGER, verdict TEXT, acted TEXT
);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts);
CREATE INDEX IF NOT EXISTS decisions_ts ON decisions (ts);
"""

_TEXT = 2000  # characters of a question or an answer a request row keeps
_PRUNE_EVERY_S, _PRUNE_EVERY_ROWS = 60.0, 1000
_DAYS, _MB = 30.0, 100.0  # the retention by default
_TABLES = ("requests", "decisions", "feedback")

# the lookup under way in this context: where the decision the semantic tier records for it
# is noted (``AuditLog.watching``), so that its request row links to it
_LOOKUP: ContextVar[_Seen | None] = ContextVar("tricache_audit_lookup", default=None)


class _Seen:
    """What the semantic tier decided during one lookup (``AuditLog.watching``)."""

    __slots__ = ("decision", "outcome")

    def __init__(self) -> None:
        self.decision = 0  # the decision's number in its log's queue (0: none)
        self.outcome = ""  # served, refused, below, miss or skipped


@dataclass(frozen=True, slots=True)
class Retention:
    """What the log keeps: rows for ``days``, in ``mb`` megabytes at most."""

    days: float = _DAYS
    mb: float = _MB

    @classmethod
    def from_env(cls, days: float | None = None, mb: float | None = None) -> Retention:
        """``days`` and ``mb`` where given, else ``TRICACHE_AUDIT_KEEP_DAYS`` and
        ``TRICACHE_AUDIT_KEEP_MB``, else the defaults (30 days, 100 MB)."""
        return cls(_setting("TRICACHE_AUDIT_KEEP_DAYS", days, _DAYS),
                   _setting("TRICACHE_AUDIT_KEEP_MB", mb, _MB))  # fmt: skip


def _setting(name: str, given: float | None, default: float) -> float:
    if given is None:
        raw = os.environ.get(name, "").strip()
        try:
            given = float(raw) if raw else default
        except ValueError:
            raise ValueError(f"{name} must be a number, not {raw!r}") from None
    if not given > 0:
        raise ValueError(f"{name} (audit retention) must be more than 0, not {given}")
    return float(given)


_SQLITE_HEADER = b"SQLite format 3\x00"


def _refuse_foreign(path: Path) -> None:
    """A ``ValueError`` for a file at ``path`` that is not empty and not SQLite: it is not
    an audit log, and nothing (its mode included) may be changed."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"cannot read the audit log {path}: {exc}") from None
    if head and head != _SQLITE_HEADER:
        raise ValueError(f"{path} is not an audit log (not an SQLite database)")


class AuditLog:
    """Requests, decisions and feedback in ``path`` (SQLite); bounded queue, never blocks a
    lookup.

    ``secret`` keys the question hashes (by default the installation's secret);
    ``keep_days`` and ``keep_mb``: the retention (``Retention.from_env``)."""

    def __init__(
        self,
        path: str | Path,
        max_queue: int = 10_000,
        *,
        secret: bytes | None = None,
        questions: bool = True,
        keep_days: float | None = None,
        keep_mb: float | None = None,
    ) -> None:
        self.path = Path(path)
        self.questions = questions  # False: the questions are not kept, only keyed hashes
        self.retention = Retention.from_env(keep_days, keep_mb)
        _refuse_foreign(self.path)  # before anything changes it
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_sqlite(self.path)
        self._secret = secret if secret is not None else _secret()
        with closing(sqlite3.connect(self.path)) as db, db:
            if not db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # a new file: pruning shrinks it
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
        self._numbers = itertools.count(1)  # the decisions' numbers, for their request rows
        self.dropped = 0
        self._busy = threading.Lock()  # held while the writer is inside SQLite
        self._dropped = threading.Event()  # set when the log is collected unclosed
        hold_across_fork(self, "_busy")
        self._writer = threading.Thread(
            target=_write_forever,
            args=(self.path, self._queue, self._busy, self._dropped, self.retention),
            name="tricache-audit",
            daemon=True,
        )  # it holds no reference to the log: a log dropped without ``close`` stops it too
        self._writer.start()
        weakref.finalize(self, _stop_writer, self._queue, self._dropped).atexit = False
        on_exit(self._at_exit)  # a script that ends without close() keeps its last records

    @property
    def keep_days(self) -> float:
        return self.retention.days

    @property
    def keep_mb(self) -> float:
        return self.retention.mb

    @contextlib.contextmanager
    def watching(self) -> Iterator[_Seen]:
        """Around one lookup: the decision the semantic tier records meanwhile (in this
        thread, or in a thread this context was copied to) is noted, for its request row."""
        seen = _Seen()
        token = _LOOKUP.set(seen)
        try:
            yield seen
        finally:
            with contextlib.suppress(ValueError):  # (a generator closed in another context)
                _LOOKUP.reset(token)

    def request(
        self,
        namespace: str,
        question: str,
        tier: str,
        *,
        query: str = "",
        level: str = "",
        entry_id: str = "",
        matched: str | None = None,
        answer: str | None = None,
        score: float | None = None,
        tags: Sequence[str] = (),
        skipped: str | None = None,
        seen: _Seen | None = None,
    ) -> None:
        """One request: ``tier`` served it ("exact", "semantic", "faq"), or "llm" (a miss:
        the model is asked); ``seen``: what ``watching`` noted of it."""
        keep = self.questions
        outcome = "served" if tier != "llm" else (skipped and "skipped") or (
            seen.outcome if seen is not None and seen.outcome else "miss")  # fmt: skip
        self._put(
            "INSERT INTO requests (ts, namespace, query_hash, question, tier, outcome, level,"
            " entry_id, matched, answer, score, tags, decision)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time.time(),
                namespace,
                self.query_hash(query) if query else None,
                question[:_TEXT] if keep else None,
                tier,
                outcome,
                level,
                entry_id,
                matched[:_TEXT] if keep and matched is not None else None,
                answer[:_TEXT] if keep and answer is not None else None,
                score,
                json.dumps(list(tags), ensure_ascii=False) if tags else None,
                _Link(seen.decision) if seen is not None and seen.decision else None,
            ),
        )

    def looked_up(self, asked: Asked, hit: Hit | None, seen: _Seen | None = None) -> None:
        """The request row of a lookup of ``asked`` that found ``hit`` (``None``: the model
        is asked; its answer is stored under ``asked.key``)."""
        request = asked.request
        if hit is None:
            self.request(request.namespace, asked.question, "llm", query=request.query,
                         entry_id=asked.key, tags=request.tags, seen=seen)  # fmt: skip
            return
        self.request(request.namespace, asked.question, hit.tier, query=request.query,
                     level=hit.level, entry_id=hit.entry_id, matched=hit.matched_question,
                     answer=hit.text, score=hit.score, tags=request.tags, seen=seen)  # fmt: skip

    def record(self, decision: Any) -> None:
        row = (
            asdict(decision)
            if is_dataclass(decision) and not isinstance(decision, type)
            else dict(decision)
        )
        candidates = list(row.get("candidates", []))
        if not self.questions:
            candidates = [{k: v for k, v in c.items() if k != "question"} for c in candidates]
        number = next(self._numbers)
        if (seen := _LOOKUP.get()) is not None:
            seen.decision, seen.outcome = number, _outcome(row)
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
            number,
        )

    def judge(self, rowid: int, verdict: str, table: str = "decisions") -> None:
        """A person's verdict on a decision, or on a request (``tricache review``): "same"
        or "different"."""
        if verdict not in ("same", "different"):
            raise ValueError("verdict must be 'same' or 'different'")
        if table not in ("decisions", "requests"):
            raise ValueError("table must be 'decisions' or 'requests'")
        self.flush()
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute(f"UPDATE {table} SET verdict = ? WHERE rowid = ?", (verdict, rowid))

    def acted(self, rowid: int, what: str) -> None:
        """What a person did about request ``rowid`` ("deleted", "invalidated a, b")."""
        self.flush()
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("UPDATE requests SET acted = ? WHERE rowid = ?", (what, rowid))

    def request_row(self, rowid: int) -> dict[str, Any] | None:
        """One request by its row id, fields decoded."""
        self.flush()
        with closing(sqlite3.connect(self.path)) as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT rowid, * FROM requests WHERE rowid = ?", (rowid,)).fetchone()
        return _decoded(dict(row)) if row is not None else None

    def requests(
        self,
        *,
        limit: int = 100,
        before: int | None = None,
        after: int | None = None,
        namespace: str = "",
        tier: str = "",
        outcome: str = "",
        verdict: str = "",
        since: float | None = None,
        until: float | None = None,
    ) -> list[dict[str, Any]]:
        """A page of requests, newest first: ``limit`` rows with a rowid under ``before`` (or
        the oldest ones over ``after``), matching the filters (``verdict``: "same",
        "different", "none", "acted" or "any").  Keyset pagination: the query reads from the
        rowid on, never the rows before it."""
        where: list[str] = ["1"]
        args: list[Any] = []
        for column, value in (("namespace", namespace), ("tier", tier), ("outcome", outcome)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        if verdict in ("same", "different"):
            where.append("verdict = ?")
            args.append(verdict)
        elif verdict == "none":
            where.append("verdict IS NULL AND acted IS NULL")
        elif verdict == "acted":
            where.append("acted IS NOT NULL")
        elif verdict == "any":
            where.append("(verdict IS NOT NULL OR acted IS NOT NULL)")
        bounds: tuple[tuple[str, float | None], ...] = (
            ("ts >= ?", since),
            ("ts <= ?", until),
            ("rowid < ?", before),
            ("rowid > ?", after),
        )
        for condition, bound in bounds:
            if bound is not None:
                where.append(condition)
                args.append(bound)
        order = "ASC" if after is not None and before is None else "DESC"
        sql = (f"SELECT rowid, * FROM requests WHERE {' AND '.join(where)}"
               f" ORDER BY rowid {order} LIMIT ?")  # fmt: skip
        self.flush()
        with closing(sqlite3.connect(self.path)) as db:
            db.row_factory = sqlite3.Row
            rows = [_decoded(dict(r)) for r in db.execute(sql, (*args, limit))]
        return rows if order == "DESC" else rows[::-1]

    def decisions(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The decisions of these row ids, by rowid."""
        wanted = [int(r) for r in rowids][:1000]
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        with closing(sqlite3.connect(self.path)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(f"SELECT rowid, * FROM decisions WHERE rowid IN ({marks})", wanted)
            return {int(r["rowid"]): _decoded(dict(r)) for r in rows}

    def kept(self) -> dict[str, Any]:
        """What the log keeps now: the retention, its size in MB, its rows, the oldest row's
        time (``None``: none)."""
        self.flush()
        with closing(sqlite3.connect(self.path)) as db:
            rows = db.execute("SELECT count(*), min(ts) FROM requests").fetchone()
            used = _used_bytes(db)
        return {"days": self.keep_days, "mb": self.keep_mb, "used_mb": used / 2**20,
                "requests": rows[0], "oldest": rows[1]}  # fmt: skip

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

    def _put(self, sql: str, row: tuple[Any, ...], number: int = 0) -> None:
        try:
            self._queue.put_nowait((sql, row, number))
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

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, prune if due, and stop the writer (waiting ``timeout`` at
        most: the log is whole when it returns)."""
        self.flush(timeout)
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        if self._writer is not threading.current_thread():
            self._writer.join(timeout)

    def _at_exit(self) -> None:
        """The interpreter exits: write what is queued (a few milliseconds), then stop."""
        self.close(timeout=2.0)


def _outcome(row: dict[str, Any]) -> str:
    """What a decision came to: served, skipped, refused (a candidate at the threshold or
    above, refused), below (none that near) or miss (none at all)."""
    if row.get("hit"):
        return "served"
    if row.get("skipped"):
        return "skipped"
    if row.get("rejected"):
        return "refused"
    return "below" if row.get("candidates") else "miss"


def _write_forever(
    path: Path,
    items: _Queue,
    busy: threading.Lock,
    dropped: threading.Event,
    retention: Retention,
) -> None:
    """Write what is queued, in batches, until a ``None`` says the log is closed (or it was
    dropped and all is written); prune as ``retention`` says."""
    db = sqlite3.connect(path)
    written: dict[int, int] = {}  # a decision's number -> its rowid, for its request row
    pruned_at, since_pruned = 0.0, _PRUNE_EVERY_ROWS  # (pruned when it starts)
    while True:
        if since_pruned >= _PRUNE_EVERY_ROWS or time.monotonic() - pruned_at > _PRUNE_EVERY_S:
            try:
                with busy:
                    _prune(db, retention)
            except sqlite3.Error as exc:
                log.warning("tricache: audit pruning failed: %s", exc)
            pruned_at, since_pruned = time.monotonic(), 0
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
                        _write(db, entry, written)
        except (sqlite3.Error, ValueError) as exc:  # (the writer goes on: a lost batch)
            log.warning("tricache: audit write failed: %s", exc)
        since_pruned += len(batch)
        for _ in batch:
            items.task_done()
        if None in batch:
            if since_pruned >= _PRUNE_EVERY_ROWS:  # (what the last rows added, pruned too)
                with contextlib.suppress(sqlite3.Error), busy:
                    _prune(db, retention)
            db.close()
            return


def _write(db: sqlite3.Connection, item: _Item, written: dict[int, int]) -> None:
    sql, params, number = item
    params = tuple(written.pop(p.seq, None) if isinstance(p, _Link) else _text(p) for p in params)
    cursor = db.execute(sql, params)
    if number:
        written[number] = int(cursor.lastrowid or 0)
        while len(written) > 10_000:  # decisions no request row asked for
            del written[next(iter(written))]


def _text(value: Any) -> Any:
    """``value``, a text SQLite can hold: a lone surrogate (a prompt may carry one) becomes
    U+FFFD; it would otherwise fail the write and stop the writer thread."""
    if not isinstance(value, str) or value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _used_bytes(db: sqlite3.Connection) -> int:
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * db.execute("PRAGMA page_size").fetchone()[0])


def _prune(db: sqlite3.Connection, retention: Retention) -> None:
    """Rows older than the retention's days go; then the oldest, while the rows take more
    than its megabytes (down to nine tenths of them); the freed pages are given back."""
    with db:
        cutoff = time.time() - retention.days * 86400
        for table in _TABLES:
            db.execute(f"DELETE FROM {table} WHERE ts < ?", (cutoff,))
    limit = retention.mb * 2**20
    for _ in range(50):
        used = _used_bytes(db)
        if used <= limit:
            break
        share = min(0.5, 1 - 0.9 * limit / used)  # of each table's rows, oldest first
        with db:
            for table in _TABLES:
                count = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table}"
                           " ORDER BY rowid LIMIT ?)", (max(1, int(count * share)),))  # fmt: skip
    db.execute("PRAGMA incremental_vacuum")


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its JSON columns read (a damaged one left as text), every rule named by
    its id (rows an earlier version wrote name some by their old names)."""
    from .guards.checks import current_name  # (the guards load with the tier, not here)

    for name in ("guards", "top", "rejected", "candidates", "tags"):
        if isinstance(row.get(name), str):
            with contextlib.suppress(ValueError):
                row[name] = json.loads(row[name])
    if isinstance(guards := row.get("guards"), list):
        row["guards"] = [current_name(g) if isinstance(g, str) else g for g in guards]
    if isinstance(rejected := row.get("rejected"), dict):
        row["rejected"] = {k: current_name(v) if isinstance(v, str) else v
                           for k, v in rejected.items()}  # fmt: skip
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
