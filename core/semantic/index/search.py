"""The semantic tier's vector index in the Redis query engine, shared by every process.

A server with the query engine (Redis 8, Redis Stack, or RediSearch loaded into Valkey) holds
one index per namespace and embedder (``tricache:{ns}:vidx:<space>``) over hashes beside the
exact entries, ``tricache:{ns}:v:<space>:<point id>``.  A hash holds the vector (``v``: float16
by default), the two fields a search reads back (``q``: the question, ``r``: the exact key of
the answer), the filters as TAGs (``s`` scope, ``f`` form, ``n`` namespace: each a digest of
the payload's value, so no value needs escaping), ``e`` (``expires_at``, NUMERIC) and ``m``, a
MessagePack map of the rest of the payload.  Each hash expires with its entry (PEXPIRE).

A point found is only a pointer: the exact tier decides versions, tags and TTL when it resolves
``r``, so a point that is late (still there after its entry went, or not yet visible) is a miss,
never a wrong answer.  A lost index (the server restarted empty, someone dropped it) makes
searches miss; the next write makes it again, with ``SKIPINITIALSCAN``: the engine's own scan
of the hashes left indexes them all at once and holds the server (40,000 points: exact reads
past the store's timeout for seconds).  The process that made it re-indexes them instead, a
few at a time from a background thread (each batch an ``HSET`` of a field of the point's own,
sized to hold the server a few ms, with a pause after it): paraphrases come back over seconds
while the exact tier's reads keep their budget.  A marker key (``tricache:{ns}:vreindex:<space>``:
a generation and a ``SCAN`` cursor) says one is pending and where it stands, and a lock key with
a TTL lets one process at a time do it; a process that exits midway leaves the marker, and the
next to open the index (or one already waiting on the lock) goes on from its cursor.  Until
then, a point not indexed again is a miss, never a wrong answer.  Points written meanwhile are
indexed as they are written.

Redis Cluster: a namespace's hashes share one hash tag, so they live in one slot, on one shard;
every query-engine command is sent to the node that owns that slot, whose index holds them all.
That needs no cluster coordinator (RediSearch loaded as a module has none: each shard indexes
its own keys).  A namespace is then served by one shard: namespaces spread over the cluster,
one namespace's points do not.  A slot moved to another node finds no index there: the next
write (``recheck_s``) makes it, and that process re-indexes the hashes that moved with the slot.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgpack
import numpy as np
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from ...runtime.forks import hold_across_fork, on_fork
from ...stores.redis import vector_prefix, vector_spaces
from ..points import MAX_STORED_QUESTION
from .vectors import Candidate

__all__ = ["RedisSearchIndex", "has_query_engine", "query_engine_at"]

log = logging.getLogger(__name__)

# Payload fields a query may filter on, and their TAG attributes.
TAGS = {"scope": "s", "form": "f", "namespace": "n"}
# The vector index (benchmarks/results/search_index.md, one scope, USE-m vectors): HNSW, since
# FLAT scans every point of the scope (0.8 ms at 10k, 19 ms at 100k; HNSW 1.3 and 0.8 ms): below
# ~10k FLAT is faster by half a millisecond, which does not pay for re-indexing at a crossover.
# M: the engine's default.  EF_CONSTRUCTION: the beam of an insert, which runs in the server's
# main thread (~0.7 ms a point at 100k): 100, not the default 200 (1.2x faster to write, the same
# recall).  EF_RUNTIME: the beam of a search: 64 found every exact nearest point at 100k, the
# default 10 missed 0.9 % of them (0.5 ms faster).  float16 vectors: 3.9 KB a point on the
# server at 100k, float32 5.9 KB, at the same speed and recall.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_RUNTIME = 64
_DTYPES = {"float16": "<f2", "float32": "<f4"}
_MAX_EXTRA = 64  # more results asked for while discarded points may still be found
_MAX_DOOMED = 10_000  # discarded points waiting for the background deletion
_BATCH = 500  # keys per UNLINK, ids per bulk query
_WRITES = 50  # points per MULTI (the server indexes them, ~0.5 ms each, while it runs EXEC)
_BULK_TIMEOUT_S = 10.0
# Re-indexing the hashes left when the index was made again: a batch (one script) is sized to
# hold the server about this long (the engine indexes a point in ~0.5 ms), and is followed by a
# pause as long as it took, at least _REINDEX_PAUSE_S (at most half the server's time).
_REINDEX_BATCH_S = 0.004
_REINDEX_PAUSE_S = 0.002
_REINDEX_MAX_BATCH = 64
_REINDEX_LOCK_S = 10.0  # one process at a time; another takes over this long after it died
# KEYS: the marker, the lock, the points; ARGV: the lock's token, the marker as the batch
# found it, the marker after it ("": done), the lock's TTL (ms).  Each point's own ``e`` field
# written back (the engine indexes the hash again; its TTL stays; a point gone is skipped).
_REINDEX = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return -2 end
local n = 0
for i = 3, #KEYS do
  local e = redis.call('HGET', KEYS[i], 'e')
  if e then redis.call('HSET', KEYS[i], 'e', e); n = n + 1 end
end
if ARGV[3] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[3]) end
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return n
"""
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class _SearchIndexLife:
    """The index in the server: made (and made again when dropped), points reindexed in the
    background, deletions sent by a worker, fork safety."""

    name = "redis-search"

    def __init__(
        self,
        *,
        namespace: str,
        dim: int,
        url: str | None = None,
        client: Any = None,
        cluster: bool = False,
        space: str = "",
        timeout: float = 0.25,
        bulk_timeout: float = _BULK_TIMEOUT_S,
        dtype: str = "float16",
        algorithm: str = "hnsw",
        m: int = HNSW_M,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        ef_runtime: int = HNSW_EF_RUNTIME,
        recheck_s: float = 1.0,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("give url= or client=")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, not {dtype!r}")
        if algorithm not in ("hnsw", "flat"):
            raise ValueError(f"algorithm must be 'hnsw' or 'flat', not {algorithm!r}")
        self.namespace = namespace
        self.dim = dim
        self.timeout = timeout
        slug = "".join(c if c.isalnum() or c in "_.-" else "_" for c in space)
        self.slug = slug
        self.index = f"tricache:{{{namespace}}}:vidx" + (f":{slug}" if slug else "")
        self.prefix = vector_prefix(namespace, slug)
        # a re-index pending (its generation and SCAN cursor), and who does it
        self._pending = f"tricache:{{{namespace}}}:vreindex" + (f":{slug}" if slug else "")
        self._pending_lock = self._pending + ":lock"
        self._skip_scan = True  # made with SKIPINITIALSCAN (False: an engine without it)
        self._namespace_tag = _tag(namespace)
        self._owned = client is None
        if client is None:
            assert url is not None
            self._fast = _connect(url, cluster, timeout)
            self._bulk = _connect(url, cluster, max(timeout, bulk_timeout))
        else:
            self._fast = self._bulk = client
        self._cluster = isinstance(self._fast, RedisCluster)
        self._algorithm = algorithm
        self._hnsw = (m, ef_construction, ef_runtime)
        self._dtype = dtype  # what this index was made with (learned when another made it)
        self._recheck_s = recheck_s
        self._checked_until = float("-inf")
        self._learned = False
        self._lock = threading.Lock()  # the discard queue (never held across a call)
        hold_across_fork(self, "_lock")
        self._doomed: deque[str] = deque()
        # discarded points, left out of results: waiting (inf), or deleted at (monotonic) and
        # kept out a while longer (a search answered before the deletion may still name them)
        self._hidden: dict[str, float] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._reindexer: threading.Thread | None = None
        self._reindex_asked = False  # a marker set since the re-index began its pass (_lock)
        self.discard_errors = 0
        self.reindexed = 0  # points this process indexed again (after the index was made again)
        self.reindex_errors = 0
        self.hostile_points = 0  # results skipped: a question the tier could not have written
        on_fork(self._after_fork)
        self.ensure()

    def count(self) -> int:
        try:
            reply = self._ft(self._bulk, "FT.SEARCH", self.index, "*", "LIMIT", 0, 0, "DIALECT", 2)
        except redis.ResponseError as exc:
            if _missing(exc):
                return 0
            raise
        return int(reply["total_results"] if isinstance(reply, dict) else reply[0])

    def info(self) -> dict[str, Any]:
        """``FT.INFO`` of the index, as a flat dict of text keys."""
        return _pairs(self._ft(self._bulk, "FT.INFO", self.index))

    def close(self) -> None:
        """Send the deletions still waiting (one try), stop the thread, close the clients."""
        self._stop.set()
        self._wake.set()
        for worker in (self._worker, self._reindexer):
            if worker is not None and worker is not threading.current_thread():
                worker.join(self.timeout + 1)
        with contextlib.suppress(Exception):
            self._flush_discards(self._fast)  # (within ``timeout``: a close never hangs)
        if self._owned:
            for client in {id(c): c for c in (self._fast, self._bulk)}.values():
                with contextlib.suppress(Exception):
                    client.close()

    def ensure(self, *, force: bool = False, client: Any = None) -> None:
        """Make the index when it is missing (checked at most every ``recheck_s``, or at
        once after a search found it gone); learn how it was made when another process did.
        ``client``: whose timeout the check runs under (the bulk one by default)."""
        now = time.monotonic()
        if not force and now < self._checked_until:
            return
        names = {_text(n) for n in self._ft(client or self._bulk, "FT._LIST")}
        if self.index not in names:
            self._create()
        elif not self._learned:
            self._learn()
        if not self._learned:  # where a worker on the replica finds these points to forget
            self._bulk.sadd(vector_spaces(self.namespace), self.slug)
            if self._skip_scan and self._bulk.exists(self._pending):  # one left midway
                self._start_reindex()
        self._learned = True
        self._checked_until = now + self._recheck_s

    def _create(self) -> None:
        m, ef_construction, ef_runtime = self._hnsw
        params: list[Any] = ["TYPE", self._dtype.upper(), "DIM", self.dim]
        params += ["DISTANCE_METRIC", "COSINE"]
        if self._algorithm == "hnsw":
            params += ["M", m, "EF_CONSTRUCTION", ef_construction, "EF_RUNTIME", ef_runtime]
        schema = [
            *(x for attr in TAGS.values() for x in (attr, "TAG")),
            "e", "NUMERIC",
            "v", "VECTOR", self._algorithm.upper(), len(params), *params,
        ]  # fmt: skip
        skip = ["SKIPINITIALSCAN"] if self._skip_scan else []
        try:
            self._ft(
                self._bulk, "FT.CREATE", self.index, "ON", "HASH", "PREFIX", 1, self.prefix,
                *skip, "STOPWORDS", 0, "SCHEMA", *schema,
            )  # fmt: skip
        except redis.ResponseError as exc:
            text = str(exc).lower()
            if "already exists" in text:  # another process made it first (and re-indexes)
                self._learn()
                return
            if self._dtype == "float16" and "float16" in text:
                # an engine without float16 (older RediSearch): float32, twice the memory
                log.warning("tricache: %s: %s; using float32 vectors", self.index, exc)
                self._dtype = "float32"
                self._create()
                return
            if not self._skip_scan:
                raise
            # an engine without SKIPINITIALSCAN: it indexes the hashes left by itself
            self._skip_scan = False
            try:
                self._create()
            except Exception:
                self._skip_scan = True  # not that: the error is the engine's answer
                raise
            log.info("tricache: %s: made without SKIPINITIALSCAN (%s)", self.index, exc)
            return
        log.info("tricache: vector index %s made (%s %s)", self.index, self._algorithm, self._dtype)
        if self._skip_scan:  # the points already there, if any: indexed again a few at a time
            self._bulk.set(self._pending, f"{secrets.token_hex(8)}:0")
            self._start_reindex()

    def _learn(self) -> None:
        """Take the vector type and algorithm of the index as it exists (another version or
        setting may have made it); refuse one of another dimension."""
        for attribute in self.info().get("attributes", []):
            fields = _pairs(attribute)
            if fields.get("identifier") != "v":
                continue
            dim = int(fields.get("dim", self.dim))
            if dim != self.dim:
                raise ValueError(
                    f"{self.index} holds {dim}-dimension vectors, not {self.dim}: another "
                    "embedder's (give each its own space=)"
                )
            dtype = str(fields.get("data_type", "")).lower()
            self._dtype = dtype if dtype in _DTYPES else self._dtype
            algorithm = str(fields.get("algorithm", "")).lower()
            self._algorithm = algorithm if algorithm in ("hnsw", "flat") else self._algorithm

    def _drop(self) -> None:
        """Every point of the namespace (the index's documents, then any hash it did not
        hold), and a new empty index."""
        try:
            self._ft(self._bulk, "FT.DROPINDEX", self.index, "DD")
        except redis.ResponseError as exc:
            if not _missing(exc):
                raise
        node = self._node_client(self._bulk)
        pattern = _glob_escape(self.prefix) + "*"
        keys = (_text(k) for k in node.scan_iter(match=pattern, count=1000))
        for batch in _chunks(keys, _BATCH):
            self._unlink(self._bulk, batch)
        self._create()
        self._checked_until = time.monotonic() + self._recheck_s

    def _ft(self, client: Any, *args: Any) -> Any:
        """A query-engine command, sent (on a cluster) to the node owning the namespace's
        slot: the one whose index holds its points."""
        if self._cluster:
            node = client.get_node_from_key(self.prefix)
            return client.execute_command(*args, target_nodes=node)
        return client.execute_command(*args)

    def _node_client(self, client: Any) -> Any:
        if self._cluster:
            return client.get_redis_connection(client.get_node_from_key(self.prefix))
        return client

    def _unlink(self, client: Any, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), _BATCH):  # one slot: one command per batch
            client.unlink(*keys[start : start + _BATCH])

    # the points left when the index was made again: indexed again off the request path ----
    def _start_reindex(self) -> None:
        """The re-index runs: a thread is started, or the running one is told to make one
        pass more (it may have found nothing pending just before this marker was set)."""
        with self._lock:
            self._reindex_asked = True
        self._start("_reindexer", "reindex", _reindex_forever, weakref.ref(self), self._stop)

    def _reindex_done(self) -> bool:
        """The re-index thread's last word: True when it may end (it is then no longer the
        running one, so the next marker starts another); False when a marker was set during
        its pass."""
        with self._lock:
            if self._reindex_asked:
                self._reindex_asked = False
                return False
            self._reindexer = None
            return True

    def _reindex(self, token: str, stop: threading.Event) -> bool:
        """Index again the points the marker says are pending, a batch at a time, while this
        process holds the lock; True when none are pending (done, here or elsewhere), False
        when another process holds the lock or this one lost it (the caller waits, then
        tries again)."""
        client, lock_ms = self._bulk, int(_REINDEX_LOCK_S * 1000)
        if not client.set(self._pending_lock, token, nx=True, px=lock_ms):
            return not client.exists(self._pending)
        try:
            node = self._node_client(client)
            pattern = _glob_escape(self.prefix) + "*"
            size, started = 4, time.monotonic()
            raw = client.get(self._pending)
            while raw is not None and not stop.is_set():
                state = _text(raw)
                generation, _, cursor = state.partition(":")
                after, keys = node.scan(int(cursor or 0), match=pattern, count=1000)
                done = f"{generation}:{after}" if int(after) else ""
                keys = [_text(k) for k in keys]
                first = 0
                while True:  # the page in batches; the marker moves on with the last one
                    batch = keys[first : first + size]
                    first += len(batch)
                    last = first >= len(keys)
                    began = time.perf_counter()
                    n = client.eval(
                        _REINDEX, 2 + len(batch), self._pending, self._pending_lock, *batch,
                        token, state, done if last else state, lock_ms,
                    )  # fmt: skip
                    took = time.perf_counter() - began
                    if n == -1:  # the lock expired (this process stalled): another may have it
                        return False
                    if n == -2:  # made again meanwhile (from cursor 0), or finished elsewhere
                        break
                    self.reindexed += n
                    if took > _REINDEX_BATCH_S:  # a point more while under, half past it
                        size = max(size // 2, 1)
                    elif took < _REINDEX_BATCH_S / 2:
                        size = min(size + 1, _REINDEX_MAX_BATCH)
                    if stop.wait(max(took, _REINDEX_PAUSE_S)) or last:
                        break
                raw = client.get(self._pending)
            if raw is None:
                log.info("tricache: %s: %d points indexed again in %.1f s", self.index,
                         self.reindexed, time.monotonic() - started)  # fmt: skip
            return raw is None
        finally:
            with contextlib.suppress(Exception):
                client.eval(_UNLOCK, 1, self._pending_lock, token)

    def _start_worker(self) -> None:
        self._start("_worker", "discards", _discard_forever, weakref.ref(self), self._wake,
                    self._stop)  # fmt: skip

    def _start(self, attr: str, job: str, target: Any, *args: Any) -> None:
        """A daemon thread on ``target(*args)`` in ``self.<attr>``, unless one runs there (or
        the index is closing); the lock is taken only to start one."""
        if self._stop.is_set():
            return
        with self._lock:  # (a thread that ends says so under it: ``_reindex_done``)
            thread = getattr(self, attr)
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(target=target, args=args, daemon=True,
                                      name=f"tricache-vector-{job}")  # fmt: skip
            setattr(self, attr, thread)
            thread.start()

    def _flush_discards(self, client: Any = None) -> None:
        """Delete the discarded points still waiting (raises when the server fails: they
        wait for the next try)."""
        with self._lock:
            waiting = len(self._doomed)
            ids = [i for i in dict.fromkeys(list(self._doomed)[:waiting])
                   if self._hidden.get(i) == math.inf]  # fmt: skip
        if ids:
            self._unlink(client or self._bulk, [self.prefix + i for i in ids])
        now = time.monotonic()
        with self._lock:
            for _ in range(waiting):
                self._doomed.popleft()
            for point_id in ids:
                if point_id in self._hidden:  # (not written again meanwhile)
                    self._hidden[point_id] = now
            grace = now - self.timeout - 1.0
            for point_id in [i for i, at in self._hidden.items() if at < grace]:
                del self._hidden[point_id]

    def _after_fork(self) -> None:
        """A forked child starts with no queue and no thread (the parent deletes its own)."""
        self._lock = threading.Lock()
        self._doomed, self._hidden = deque(), {}
        self._wake, self._stop, self._worker = threading.Event(), threading.Event(), None
        self._reindexer = None  # (the parent goes on with its re-index)

    def _blob(self, vector: np.ndarray) -> bytes:
        array = np.asarray(vector, dtype=np.float32).reshape(-1)
        if array.shape != (self.dim,):
            raise ValueError(f"a vector of {array.size} dimensions, not {self.dim}")
        if not np.isfinite(array).all() or not array.any():
            raise ValueError("a vector that is zero or not finite")
        return array.astype(_DTYPES[self._dtype]).tobytes()

    def _fields(
        self, vector: np.ndarray, payload: Mapping[str, Any]
    ) -> tuple[int, list[str | bytes | float]]:
        """The hash of a point (its TTL in ms, and its fields)."""
        if payload.get("namespace", self.namespace) != self.namespace:
            raise ValueError(f"a point of namespace {payload['namespace']!r} in {self.index}")
        question, ref = payload.get("question"), payload.get("ref")
        if not isinstance(question, str) or not isinstance(ref, str):
            raise ValueError("a point needs its question and ref as text")
        expires = payload.get("expires_at")
        if not isinstance(expires, int | float) or isinstance(expires, bool):
            raise ValueError("a point needs its expires_at (seconds since the epoch)")
        if not math.isfinite(expires):
            raise ValueError("expires_at is not finite")
        rest = {k: v for k, v in payload.items() if k not in ("question", "ref", "answer")}
        fields: list[str | bytes | float] = [
            "v", self._blob(vector),
            "q", question.encode("utf-8", "surrogatepass"),
            "r", ref,
            "e", repr(float(expires)),
            "a", str(payload.get("answer", "")),
            "m", msgpack.packb(rest, use_bin_type=True, unicode_errors="surrogatepass"),
            "n", self._namespace_tag,
        ]  # fmt: skip
        for field, attr in TAGS.items():
            if field != "namespace" and field in payload:
                fields += [attr, _tag(str(payload[field]))]
        ttl = max(1, math.ceil((float(expires) - time.time()) * 1000))
        return ttl, fields

    def _filter(self, must: Mapping[str, str]) -> str:
        terms = []
        for field, value in must.items():
            attr = TAGS.get(field)
            if attr is None:
                raise ValueError(f"{field!r} is not a field the index filters on ({set(TAGS)})")
            terms.append(f"@{attr}:{{{_tag(str(value))}}}")
        return " ".join(terms) or "*"


class _SearchIndexPoints(_SearchIndexLife):
    """What the index offers (``VectorIndex``): points as hashes beside the entries, upserted,
    deleted and searched (KNN within the scope's TAG)."""

    def upsert(self, point_id: str, vector: np.ndarray, payload: Mapping[str, Any]) -> None:
        self.upsert_many([(point_id, vector, payload)])

    def upsert_many(self, points: Sequence[tuple[str, np.ndarray, Mapping[str, Any]]]) -> None:
        """Write points (a round trip per ``_WRITES``); the index is made first if it is gone.
        One point is written within ``timeout``, more (a bulk load) within ``bulk_timeout``."""
        encoded = [(self.prefix + i, *self._fields(v, p)) for i, v, p in points]
        client = self._fast if len(encoded) == 1 else self._bulk
        self.ensure(client=client)  # (one answer's write: within ``timeout``)
        with self._lock:
            for point_id, _, _ in points:  # written again: it stays
                self._hidden.pop(point_id, None)
        for start in range(0, len(encoded), _WRITES):
            # HSET and PEXPIRE in one MULTI: a point never lives without its TTL (one slot:
            # allowed on a cluster too)
            pipe = client.pipeline(transaction=True)
            for key, ttl, fields in encoded[start : start + _WRITES]:
                pipe.execute_command("HSET", key, *fields)
                pipe.pexpire(key, ttl)
            pipe.execute()

    def search(
        self, vector: np.ndarray, must: Mapping[str, str], limit: int, threshold: float
    ) -> list[Candidate]:
        k = limit + min(len(self._hidden), _MAX_EXTRA)
        ef = f" EF_RUNTIME {max(self._hnsw[2], k)}" if self._algorithm == "hnsw" else ""
        query = f"({self._filter(must)})=>[KNN {k} @v $vec{ef} AS d]"
        blob = self._blob(vector)
        reply = self._query(query, "PARAMS", 2, "vec", blob, "RETURN", 4, "q", "r", "a", "d", k)
        found = []
        for point_id, fields in reply:
            distance = _float(fields.get("d"))
            candidate = self._candidate(point_id, fields, 1.0 - distance)
            if candidate is not None and candidate.score >= threshold:
                found.append(candidate)
        found.sort(key=lambda c: -c.score)
        return found[:limit]

    def find(self, must: Mapping[str, str], limit: int) -> list[Candidate]:
        k = limit + min(len(self._hidden), _MAX_EXTRA)
        reply = self._query(self._filter(must), "RETURN", 3, "q", "r", "a", k)
        found = (self._candidate(point_id, fields, 1.0) for point_id, fields in reply)
        return [c for c in found if c is not None][:limit]

    def delete(self, point_ids: Sequence[str]) -> None:
        self._unlink(self._fast, [self.prefix + i for i in point_ids])

    def discard(self, point_ids: Sequence[str]) -> None:
        """Out of this process's results at once; deleted from the server by a background
        thread (a server that is slow or away never holds up the request path).  Past
        ``_MAX_DOOMED`` waiting, the rest stay (a found point whose entry is gone is a miss)."""
        with self._lock:
            fresh = [i for i in dict.fromkeys(point_ids) if i not in self._hidden]
            fresh = fresh[: max(0, _MAX_DOOMED - len(self._hidden))]
            self._hidden.update(dict.fromkeys(fresh, math.inf))
            self._doomed.extend(fresh)
        if fresh:
            self._start_worker()
            self._wake.set()

    def delete_where(self, must: Mapping[str, str]) -> None:
        """``{"namespace": ...}`` (this index's): every point goes and the index is made anew;
        otherwise the points matching ``must`` are found and deleted, a batch at a time."""
        if dict(must) == {"namespace": self.namespace}:
            self._drop()
            return
        self._delete_matching(self._filter(must))

    def delete_expired(self, now: float) -> None:
        """The server expires the hashes by itself; this deletes what outlived ``now``'s
        ``expires_at`` all the same (a hash written with a clock ahead of this one)."""
        self._delete_matching(f"@e:[-inf ({now!r}]")

    def _delete_matching(self, query: str) -> None:
        for _ in range(10_000):  # a bound: each round deletes what it found
            try:
                reply = self._ft(
                    self._bulk, "FT.SEARCH", self.index, query, "NOCONTENT",
                    "LIMIT", 0, _BATCH, "DIALECT", 2,
                )  # fmt: skip
            except redis.ResponseError as exc:
                if _missing(exc):
                    return
                raise
            keys = [key for key, _ in _documents(reply)]
            if not keys:
                return
            self._unlink(self._bulk, keys)

    def _query(self, query: str, *args: Any) -> list[tuple[str, dict[str, Any]]]:
        """``FT.SEARCH`` on the request path: the last of ``args`` is the result limit."""
        *rest, limit = args
        try:
            reply = self._ft(
                self._fast, "FT.SEARCH", self.index, query, *rest, "LIMIT", 0, limit,
                "TIMEOUT", max(1, int(self.timeout * 1000)), "DIALECT", 2,
            )  # fmt: skip
        except redis.ResponseError as exc:
            if _missing(exc):  # the server restarted empty, or someone dropped it: a miss
                self._checked_until = float("-inf")  # the next write makes it again
                return []
            raise
        prefix = len(self.prefix)
        return [(key[prefix:], fields) for key, fields in _documents(reply)]

    def _candidate(self, point_id: str, fields: dict[str, Any], score: float) -> Candidate | None:
        """A result as a candidate; ``None`` for one discarded here, or whose fields are gone
        (its hash expired or was evicted while the engine answered)."""
        question, ref = fields.get("q"), fields.get("r")
        if question is None or ref is None or point_id in self._hidden or math.isnan(score):
            return None
        try:  # a question the tier could not have written (too long, not UTF-8): skipped
            text = _text(question, "surrogatepass")  # (as it was written)
        except UnicodeDecodeError:
            text = None
        if text is None or len(text) > MAX_STORED_QUESTION:
            self.hostile_points += 1
            return None
        payload = {"question": text, "ref": _text(ref)}
        if answer := _text(fields.get("a") or b""):
            payload["answer"] = answer
        return Candidate(point_id, score, payload)


class RedisSearchIndex(_SearchIndexPoints):
    """A ``VectorIndex`` in the Redis query engine: one index of ``namespace``'s points.

    ``url`` (``redis://``, ``rediss://``; ``cluster=True`` for Redis Cluster) or ``client`` (a
    ``redis.Redis`` or ``RedisCluster``, used as it is: its own timeouts apply).  ``space``
    names the vector space (the embedder): indexes of different embedders never mix.
    ``timeout`` bounds each call of the request path (searches, writes); the index and bulk
    deletions get ``bulk_timeout``.  Store errors are raised (the tier's callers count them);
    a missing index is a miss, not an error.
    """


def _discard_forever(
    ref: weakref.ref[RedisSearchIndex], wake: threading.Event, stop: threading.Event
) -> None:
    backoff = 0.1
    while not stop.is_set():
        wake.wait(1.0)
        wake.clear()
        index = ref()
        if index is None:
            return
        try:
            if index._hidden:
                index._flush_discards()
            backoff = 0.1
        except Exception as exc:  # the server is away or slow: the next round tries again
            index.discard_errors += 1
            log.debug("tricache: vector discards not sent: %s", exc)
            backoff = min(backoff * 2, 5.0)
            stop.wait(backoff)
            wake.set()
        del index


def _reindex_forever(ref: weakref.ref[RedisSearchIndex], stop: threading.Event) -> None:
    """Until no re-index is pending: do it when this process gets the lock, else wait for the
    holder to finish (or to die: its lock expires, and this process goes on)."""
    token = secrets.token_hex(8)
    while not stop.is_set():
        index = ref()
        if index is None:
            return
        try:
            if index._reindex(token, stop):
                if index._reindex_done():
                    return
                continue  # a marker was set during the pass: one pass more, at once
        except Exception as exc:  # the server is away or slow: tried again later
            index.reindex_errors += 1
            log.debug("tricache: %s: re-index paused: %s", index.index, exc)
        del index
        stop.wait(_REINDEX_LOCK_S / 2)


def has_query_engine(client: Any) -> bool:
    """Whether the server behind ``client`` answers the query engine's commands: a module
    named ``search`` (RediSearch, Redis 8's, valkey-search) in ``MODULE LIST``, or, where that
    command is refused (managed services), an answer to ``FT._LIST``.  Connection errors are
    raised (unknown, not "no")."""
    cluster = isinstance(client, RedisCluster)
    where = {"target_nodes": client.get_default_node()} if cluster else {}
    try:
        modules = client.execute_command("MODULE", "LIST", **where)
        if isinstance(modules, dict) and "name" not in _pairs(modules):  # one reply per node
            modules = next(iter(modules.values()), [])
        names = {_text(_pairs(m).get("name", "")).lower() for m in modules}
        if names & {"search", "ft", "searchlight"}:
            return True
    except redis.ResponseError:
        pass
    try:
        client.execute_command("FT._LIST", **where)
    except redis.ResponseError:
        return False
    return True


def query_engine_at(url: str, *, cluster: bool = False, timeout: float = 2.0) -> bool:
    """``has_query_engine`` of the server at ``url``, on a connection of its own (closed)."""
    client = _connect(url, cluster, timeout)
    try:
        return has_query_engine(client)
    finally:
        client.close()


def _connect(url: str, cluster: bool, timeout: float) -> Any:
    """A client whose calls give up after ``timeout``; a connection found dead (the server
    restarted) is replaced once at once, a timeout is not retried."""
    options: dict[str, Any] = dict(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        protocol=2,
    )
    if cluster:
        return RedisCluster.from_url(url, **options)
    return redis.Redis.from_url(url, health_check_interval=0, **options)


def _documents(reply: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(key, fields)`` of each result of ``FT.SEARCH``, from a RESP2 or a RESP3 reply."""
    if isinstance(reply, dict):
        out = []
        for result in _pairs(reply).get("results", []):
            result = _pairs(result)
            attributes = _pairs(result.get("extra_attributes") or {})
            out.append((_text(result["id"]), attributes))
        return out
    body = list(reply[1:])
    docs = []
    i = 0
    while i < len(body):
        key = _text(body[i])
        if i + 1 < len(body) and (isinstance(body[i + 1], list) or body[i + 1] is None):
            docs.append((key, _pairs(body[i + 1] or [])))
            i += 2
        else:  # NOCONTENT: keys only
            docs.append((key, {}))
            i += 1
    return docs


def _pairs(raw: Any) -> dict[str, Any]:
    """A RESP2 flat list of names and values, or a RESP3 map, as a dict of text keys."""
    if isinstance(raw, dict):
        return {_text(k): v for k, v in raw.items()}
    if isinstance(raw, list | tuple):
        return {_text(k): _value(v) for k, v in zip(raw[::2], raw[1::2], strict=False)}
    return {}


def _value(raw: Any) -> Any:
    return _text(raw) if isinstance(raw, bytes) and raw.isascii() else raw


def _text(raw: Any, errors: str = "replace") -> str:
    return raw.decode("utf-8", errors) if isinstance(raw, bytes) else str(raw)


def _float(raw: Any) -> float:
    try:
        return float(_text(raw))
    except (TypeError, ValueError):
        return math.nan


def _tag(value: str) -> str:
    """The TAG of a payload value: its digest in hex (no character of it needs escaping)."""
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _missing(exc: redis.ResponseError) -> bool:
    text = str(exc).lower()
    return "no such index" in text or "unknown index" in text


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _chunks(items: Iterator[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
