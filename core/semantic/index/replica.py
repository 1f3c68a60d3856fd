"""The semantic tier's vector index in every process: a replica of the points in the store.

The shared store (SQLite embedded, Redis otherwise) is the source of truth: it holds every
point of a namespace (its vector as float16, its payload) and a log of the ids that changed
(``PointLog``).  Each process keeps a replica in a ``MatrixIndex`` (int8 rows and a sketch
searched with numpy, exactly, with no index to build: see ``matrix``).  A write goes to the
store, then to the replica; a background thread reads the log every ``sync_s`` seconds and
applies what other processes changed, deletions included.  A point another process wrote is
found here one sync later: until then it costs an LLM call, never a wrong answer (a point only
names an exact entry, which the exact tier checks on every hit).

Each replica lives in a slot directory of its own (a lock file says whose), kept across
restarts with the log cursor it reached: a restarted worker loads it and catches up from the
cursor instead of rebuilding.  A cursor the log cannot vouch for (the log was cleared,
trimmed past it, lost with a Redis restart) rebuilds the replica from the store, and so does
a slot of another format (the Qdrant shards of earlier versions) or whose files do not agree
with their metadata: a slot is rebuilt, never misread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import secrets
import shutil
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import numpy as np

from ...runtime.forks import on_fork
from ...runtime.home import private_dir, private_file
from ...stores.base import PointLog, batched
from ..points import MAX_STORED_QUESTION
from .matrix import MatrixIndex
from .vectors import Candidate, DiskFull

__all__ = ["CorruptPoint", "ReplicatedIndex", "decode_point", "encode_point"]

log = logging.getLogger(__name__)

_FORMAT = 1  # of a stored point
_SLOT_FORMAT = 2  # of a slot's state and replica (1: a qdrant-edge shard)
_BATCH = 1000  # points per rebuild step
# per replica directory (one store, one namespace): the replicas of this process
_PEERS: dict[str, weakref.WeakSet[ReplicatedIndex]] = {}
_MAX_DOOMED = 10_000  # deletions waiting for the store (the oldest are dropped past this)
_MAX_POINT_BYTES = 64 * 1024  # a vector, a question of at most 4,096 characters, its tags


class _Closing(Exception):
    """The replica is being closed: a rebuild under way stops."""


class CorruptPoint(ValueError):
    """A stored point that does not decode (garbage, another format, a hostile value)."""


def encode_point(vector: np.ndarray, payload: Mapping[str, Any]) -> bytes:
    """MessagePack of the vector (float16) and its payload (plain values only)."""
    data = np.asarray(vector, dtype="<f2").tobytes()
    return msgpack.packb([_FORMAT, data, dict(payload)], use_bin_type=True)


def decode_point(data: bytes, dim: int, namespace: str) -> tuple[np.ndarray, dict[str, Any]]:
    """The vector and payload of a stored point of ``namespace``; ``CorruptPoint`` otherwise
    (too big, undecodable, a vector of the wrong size or not finite, a payload with other
    than plain text, numbers, flags and lists of text, or of another namespace)."""
    if len(data) > _MAX_POINT_BYTES:
        raise CorruptPoint(f"{len(data)} bytes: more than a point holds")
    try:
        fields = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CorruptPoint(f"undecodable point: {exc}") from None
    if not (isinstance(fields, list) and len(fields) == 3 and fields[0] == _FORMAT):
        raise CorruptPoint("unknown point format")
    _, raw, payload = fields
    if not isinstance(raw, bytes) or len(raw) != 2 * dim or not isinstance(payload, dict):
        raise CorruptPoint("vector or payload of the wrong shape")
    vector = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    if not np.isfinite(vector).all() or not vector.any():
        raise CorruptPoint("vector not finite")
    if not all(_plain(value) for value in payload.values()):
        raise CorruptPoint("a payload value that is not plain text, a number or a flag")
    for key in ("scope", "question", "ref", "namespace"):
        if not isinstance(payload.get(key), str):
            raise CorruptPoint(f"payload field {key!r} missing or not text")
    expires = payload.get("expires_at")
    if not isinstance(expires, float | int) or isinstance(expires, bool) or math.isnan(expires):
        raise CorruptPoint("payload field 'expires_at' is not a time")
    if payload["namespace"] != namespace:
        raise CorruptPoint("a point of another namespace")
    if len(payload["question"]) > MAX_STORED_QUESTION:
        raise CorruptPoint("a question longer than any the tier writes")
    return vector, payload


_Point = tuple[str, np.ndarray, dict[str, Any]]


def _engine(path: Path, dim: int) -> MatrixIndex:
    """The replica's engine: exhaustive and exact, with nothing to build (qdrant-edge, used
    before, held the GIL for seconds while it built an HNSW graph).  About 1 KiB of memory a
    point at 512 dimensions, a lookup of ~1-2 ms at 100k points (benchmarks/results/replica.md);
    past a few hundred thousand points, use a shared index (the Redis query engine, Qdrant)."""
    return MatrixIndex(path, dim)


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


class ReplicatedIndex:
    """A ``VectorIndex`` whose points live in ``store`` and are searched in a local replica.

    ``store=None`` keeps the points in this process only (a cache without a shared store)."""

    name = "replica"  # what a hit's ``level``, the stats and the metrics call this index

    def __init__(
        self,
        store: PointLog | None,
        namespace: str,
        dim: int,
        base: str | Path,
        *,
        sync_s: float = 0.1,
        flush_s: float = 10.0,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.dim = dim
        self.sync_s = sync_s
        self.flush_s = flush_s
        self._slot = _Slot.acquire(Path(base))
        self._lock = threading.RLock()  # one applier at a time: sync, rebuild, close
        self.cursor = self._slot.cursor() if store is not None else ""
        self._local = self._open_local()
        self._saved_cursor = self.cursor
        self._flushed_at = time.monotonic()
        self.synced_at: float | None = None  # monotonic time of the last complete sync
        self.rebuilds = 0
        self.sync_errors = 0
        self.corrupt_points = 0
        self._warned_at = float("-inf")
        self._doomed: deque[str] = deque()  # deletions the store has not had
        self._hidden: set[str] = set()  # of those, the ones not yet deleted here either
        self._retired: list[MatrixIndex] = []
        self._stop = threading.Event()
        self._closed = False
        self._pid = os.getpid()  # (a forked child opens replicas of its own)
        self._peers = _PEERS.setdefault(str(Path(base)), weakref.WeakSet())
        self._peers.add(self)  # the replicas of this store and namespace in this process
        if store is not None:
            try:
                self.sync()
            except Exception as exc:  # the store is down: the replica serves what it has
                log.warning("tricache: vector replica not caught up (%s); retrying", exc)
            self._thread = threading.Thread(
                target=_sync_forever,
                args=(weakref.ref(self), self._stop, sync_s),
                name="tricache-replica",
                daemon=True,
            )
            self._thread.start()
        on_fork(self._after_fork)

    @property
    def path(self) -> Path:
        """The directory of the replica in use (inside this process's slot)."""
        return self._local.path

    # the VectorIndex interface -------------------------------------------------------------
    def upsert(self, point_id: str, vector: np.ndarray, payload: Mapping[str, Any]) -> None:
        """Write the point to the store (raises when it cannot), then to the replica."""
        data = encode_point(vector, payload)
        stored, _ = decode_point(data, self.dim, self.namespace)  # what every process will see
        self._hidden.discard(point_id)  # written again (its request answered anew): it stays
        if self.store is not None:
            ttl = float(payload["expires_at"]) - time.time()
            self.store.put_point(self.namespace, point_id, data, max(ttl, 0.001))
        self._local.upsert(point_id, stored, payload)

    def search(
        self, vector: np.ndarray, must: Mapping[str, str], limit: int, threshold: float
    ) -> list[Candidate]:
        found = self._local.search(vector, must, limit, threshold)
        return [c for c in found if c.id not in self._hidden] if self._hidden else found

    def find(self, must: Mapping[str, str], limit: int) -> list[Candidate]:
        found = self._local.find(must, limit + min(len(self._hidden), 64))
        return [c for c in found if c.id not in self._hidden][:limit] if self._hidden else found

    def delete(self, point_ids: Sequence[str]) -> None:
        """From the store (so from every process by its next sync; raises when it cannot),
        then from here and from the other replicas of this process at once (a rejected
        match is not served by another cache of the app meanwhile)."""
        if self.store is not None and point_ids:
            self.store.delete_points(self.namespace, point_ids)
        mine = [r for r in list(self._peers) if r._pid == os.getpid() and not r._closed]
        for replica in {self, *mine} if self.store is not None else {self}:
            replica._local.delete(point_ids)

    def discard(self, point_ids: Sequence[str]) -> None:
        """Out of searches at once; deleted here and from the store by the next sync.  For the
        request path, which meets points whose answers are gone: it waits neither on the
        store nor on a batch the sync thread is writing into the replica."""
        if self.store is None or len(self._hidden) >= _MAX_DOOMED:
            self._local.delete(point_ids)
            return
        self._hidden.update(point_ids)
        self._doomed.extend(point_ids)

    def _still_doomed(self, point_ids: Iterable[str]) -> list[str]:
        """Of discarded ids, those not written again since (once each)."""
        return [i for i in dict.fromkeys(point_ids) if i in self._hidden]

    def delete_where(self, must: Mapping[str, str]) -> None:
        """Only the whole namespace (``{"namespace": ...}``): a point is deleted by its id."""
        if dict(must) != {"namespace": self.namespace}:
            raise ValueError(f"a replicated index deletes by id or whole namespace, not {must}")
        if self.store is not None:
            self.store.clear_points(self.namespace)
        self._local.delete_where(must)

    def delete_expired(self, now: float) -> None:
        """Locally: the store expires its own copies (Redis TTLs, SQLite's sweep)."""
        self._local.delete_expired(now)

    def count(self) -> int:
        return self._local.count()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                if self.store is not None and self._doomed:
                    self.store.delete_points(self.namespace, self._still_doomed(self._doomed))
                self._persist()
            self._local.close()
            self._close_retired()
            self._slot.release()

    # following the store -------------------------------------------------------------------
    def sync(self) -> int:
        """Apply every change logged since the cursor (rebuilding when the log cannot vouch
        for them); returns how many points changed.  Raises when the store fails."""
        assert self.store is not None
        changed = 0
        with self._lock:
            if self._closed:
                return 0
            self._close_retired()
            if waiting := len(self._doomed):  # before the log: it must not bring them back
                doomed = self._still_doomed(islice(self._doomed, waiting))
                self.store.delete_points(self.namespace, doomed)
                self._local.delete(doomed)
                self._hidden.difference_update(doomed)
                for _ in range(waiting):  # (those discarded meanwhile wait for the next sync)
                    self._doomed.popleft()
            while True:
                changes = self.store.points_since(self.namespace, self.cursor)
                if not changes.complete:
                    changed += self._rebuild()
                    continue
                self._apply(changes.points)
                changed += len(changes.points)
                self.cursor = changes.cursor
                if not changes.points:
                    break
            self.synced_at = time.monotonic()
            if self.cursor != self._saved_cursor and time.monotonic() - self._flushed_at > (
                self.flush_s
            ):
                self._persist()
        return changed

    def lag_s(self) -> float | None:
        """Seconds since the replica last caught up with the store (``None``: never)."""
        if self.store is None:
            return 0.0
        return None if self.synced_at is None else round(time.monotonic() - self.synced_at, 3)

    def stats(self) -> dict[str, Any]:
        return {
            "points": self.count(),
            "lag_s": self.lag_s(),
            "rebuilds": self.rebuilds,
            "sync_errors": self.sync_errors,
            "corrupt_points": self.corrupt_points,
            "disk_bytes": _size(self._slot.path),
            "slot": self._slot.path.name,
        }

    def _rebuild(self) -> int:
        """A new replica from the store, built beside the one in use (searches go on there)
        and swapped in whole."""
        assert self.store is not None
        self.rebuilds += 1
        head = self.store.point_head(self.namespace)  # before the scan: nothing falls between
        fresh = _engine(self._slot.new_shard(), self.dim)
        count = 0
        try:
            for batch in batched(self.store.scan_points(self.namespace), _BATCH):
                if self._stop.is_set():  # closing: a shutdown never waits for a whole rebuild
                    raise _Closing
                points = []
                for point_id, data in batch:
                    if not self._is_point_id(point_id):
                        continue
                    decoded = self._decoded(point_id, data)
                    if decoded is not None:
                        points.append((point_id, *decoded))
                count += self._upsert(fresh, points)
        except BaseException:  # the store failed mid-scan: the next sync starts again
            fresh.close()
            shutil.rmtree(fresh.path, ignore_errors=True)
            raise
        fresh.delete(self._still_doomed(self._doomed))  # discarded, not yet in the store
        self._retired.append(self._local)  # closed at the next sync, once searches on it end
        self._local, self.cursor = fresh, head
        self._persist()
        log.info("tricache: vector replica rebuilt from the store: %d points", count)
        return count

    def _close_retired(self) -> None:
        while self._retired:
            old = self._retired.pop()
            with contextlib.suppress(Exception):
                old.close()
            shutil.rmtree(old.path, ignore_errors=True)

    def _apply(self, points: Iterable[tuple[str, bytes | None]]) -> None:
        upserts, deletes = [], []
        for point_id, data in points:
            if not self._is_point_id(point_id):
                continue
            decoded = None if data is None else self._decoded(point_id, data)
            if decoded is None:
                deletes.append(point_id)
            else:
                upserts.append((point_id, *decoded))
        if deletes:
            self._local.delete(deletes)
        self._upsert(self._local, upserts)

    def _upsert(self, index: MatrixIndex, points: list[_Point]) -> int:
        """Upsert a batch; if the engine refuses it, one point at a time, skipping (and
        counting) the points it refuses: one bad point must not stall the log."""
        if not points:
            return 0
        try:
            index.upsert_many(points)
            return len(points)
        except DiskFull:
            raise
        except Exception:
            done = 0
            for point in points:
                try:
                    index.upsert_many([point])
                    done += 1
                except DiskFull:
                    raise
                except Exception as exc:
                    self._skipped(point[0], exc)
            return done

    def _is_point_id(self, point_id: str) -> bool:
        """Whether ``point_id`` is one the tier makes (a UUID's text); any other id, which the
        engine would refuse and so stop the log's reader at, is skipped and counted."""
        try:
            if str(uuid.UUID(point_id)) == point_id:
                return True
        except (TypeError, ValueError):
            pass
        self._skipped(point_id, CorruptPoint("not a point id"))
        return False

    def _decoded(self, point_id: str, data: bytes) -> tuple[np.ndarray, dict[str, Any]] | None:
        try:
            return decode_point(data, self.dim, self.namespace)
        except CorruptPoint as exc:
            self._skipped(point_id, exc)
            return None

    def _skipped(self, point_id: str, exc: Exception) -> None:
        """Count a stored point that cannot be indexed; warn about it at most once a minute."""
        self.corrupt_points += 1
        now = time.monotonic()
        loud = now - self._warned_at > 60  # one warning a minute; all counted
        if loud:
            self._warned_at = now
        log.log(
            logging.WARNING if loud else logging.DEBUG,
            "tricache: stored vector point %r skipped: %s (%d so far)",
            point_id[:36], exc, self.corrupt_points,
        )  # fmt: skip

    def _persist(self) -> None:
        """Flush the replica, then record the cursor it reached (never ahead of the files)."""
        self._local.flush()
        self._slot.save(self.cursor, self._local.path.name)
        self._saved_cursor = self.cursor
        self._flushed_at = time.monotonic()

    def _open_local(self) -> MatrixIndex:
        """The slot's replica as it was left; a new, empty one when there is none, it cannot
        be loaded (a crash mid-write, files of another format), or there is no store to catch
        up from."""
        shard = self._slot.shard()
        if shard is not None and self.store is not None and self.cursor:
            try:
                return _engine(shard, self.dim)
            except DiskFull:
                raise
            except Exception as exc:
                log.warning("tricache: vector replica %s unreadable (%s); rebuilding", shard, exc)
                shutil.rmtree(shard, ignore_errors=True)
        self.cursor = ""
        return _engine(self._slot.new_shard(), self.dim)

    def _after_fork(self) -> None:
        """A forked child never uses this replica (the cache opens one of its own); closing
        its copy of the slot's descriptor leaves the parent's lock held, and frees the slot
        once the parent is gone even while the child runs."""
        self._slot.release()


def _sync_forever(ref: weakref.ref[ReplicatedIndex], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        index = ref()
        if index is None:
            return
        try:
            index.sync()
        except Exception as exc:  # the store is down or slow: try again next time
            index.sync_errors += 1
            log.debug("tricache: vector replica sync failed: %s", exc)
        del index


class _Slot:
    """A directory held by one replica at a time (an exclusive ``flock`` on its lock file,
    released by the kernel when the process ends, however it ends)."""

    def __init__(self, path: Path, lock: BinaryIO) -> None:
        self.path = path
        self._lock = lock  # closed (the lock with it) on release, or when collected

    @classmethod
    def acquire(cls, base: Path) -> _Slot:
        private_dir(base)
        for n in range(10_000):
            path = private_dir(base / f"slot-{n}")
            lock = open(private_file(path / "lock"), "rb")  # noqa: SIM115  (held while in use)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                continue
            return cls(path, lock)
        raise RuntimeError(f"no free replica slot under {base}")

    def _state(self) -> dict[str, Any]:
        """The state the slot's last save left: empty when missing, damaged, or of another
        format (a slot of an earlier version is then rebuilt, its shard removed)."""
        try:
            state = msgpack.unpackb((self.path / "state").read_bytes(), raw=False)
        except (OSError, ValueError, msgpack.UnpackException):
            return {}
        if not isinstance(state, dict) or state.get("format") != _SLOT_FORMAT:
            return {}
        return state

    def cursor(self) -> str:
        cursor = self._state().get("cursor")
        return cursor if isinstance(cursor, str) else ""

    def shard(self) -> Path | None:
        """The replica recorded with the cursor (others in the slot are leftovers: removed)."""
        name = self._state().get("shard")
        current = self.path / name if isinstance(name, str) and name.startswith("shard-") else None
        for leftover in self.path.glob("shard-*"):
            if leftover != current:
                shutil.rmtree(leftover, ignore_errors=True)
        return current if current is not None and current.is_dir() else None

    def new_shard(self) -> Path:
        return self.path / f"shard-{secrets.token_hex(4)}"

    def save(self, cursor: str, shard: str) -> None:
        scratch = self.path / "state.new"
        scratch.unlink(missing_ok=True)
        state = {"format": _SLOT_FORMAT, "cursor": cursor, "shard": shard}
        private_file(scratch).write_bytes(msgpack.packb(state))
        os.replace(scratch, self.path / "state")  # whole or not at all, even on a crash

    def release(self) -> None:
        self._lock.close()  # the lock goes with the last descriptor of this open file


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_blocks * 512  # sparse files
    return total
