"""Vector indexes for the semantic tier: Qdrant embedded in-process, or a Qdrant server.

Both keep one payload schema and answer the same filtered top-k query, so the semantic tier has
one code path.  Payload fields (all set by the semantic tier): ``scope`` (one digest of
namespace, tenant, LLM and context: what every search filters on), ``namespace``, ``tenant``,
``llm_key``, ``ctx``, ``question`` (its canonical form), ``form`` (``forms.form_key``: form
variants share it), ``lang``, ``category``, ``tags``, ``kb_version``, ``watermark``,
``expires_at``, ``verified`` and ``ref`` (the exact-tier key of the stored response).
``scope`` carries a tenant-style keyword index, ``form`` a keyword index (found without a
vector), ``namespace`` and ``expires_at`` plain indexes (bulk deletes).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from ...runtime.forks import hold_across_fork, inherited
from ...runtime.home import private_tree

__all__ = [
    "Candidate",
    "DiskFull",
    "EdgeIndex",
    "IndexLocked",
    "QdrantServerIndex",
    "VectorIndex",
]

log = logging.getLogger(__name__)

# What a search returns of each candidate's payload: all the decision needs.
SEARCH_FIELDS = ("question", "ref", "answer")  # (answer: a digest of the entry's answer)
# Payload fields with a keyword index: the scope every query filters on, the namespace (bulk
# deletes) and the question's form key (form variants are found by it, no vector needed)
# HNSW beam width at search time.  A cache looks for near-duplicates (cosine >= ~0.9), which a
# narrow beam finds as well as a wide one; 64 halves the search time of the default at 100k.
HNSW_EF = 64


class DiskFull(OSError):
    """Too little free space beside the embedded index to write it safely."""


class FreeSpace:
    """Refuses writes (``DiskFull``) while free space under ``path`` is below ``min_free``: a
    statvfs call at most once a second while there is room, at every write while there is
    not (an index written on a full disk can be left unreadable)."""

    def __init__(self, path: Path, min_free: int) -> None:
        self.path, self.min_free = path, min_free
        self.full = False
        self._checked_at = float("-inf")

    def check(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < 1.0 and not self.full:
            return
        self._checked_at = now
        free = shutil.disk_usage(self.path).free
        self.full = free < self.min_free
        if self.full:
            raise DiskFull(
                f"{free // 2**20} MiB free under {self.path} (needs {self.min_free // 2**20} "
                "MiB): the embedded vector index is not written"
            )


class IndexLocked(RuntimeError):
    """The embedded index is open in another process (only one process may open it)."""


@dataclass(slots=True)
class Candidate:
    id: str
    score: float
    payload: dict[str, Any]


class VectorIndex(Protocol):
    name: str

    def upsert(self, point_id: str, vector: np.ndarray, payload: Mapping[str, Any]) -> None: ...
    def search(
        self, vector: np.ndarray, must: Mapping[str, str], limit: int, threshold: float
    ) -> list[Candidate]: ...
    def find(self, must: Mapping[str, str], limit: int) -> list[Candidate]:
        """Points whose payload matches ``must``, without a vector (score 1.0)."""
        ...

    def delete(self, point_ids: Sequence[str]) -> None: ...
    def discard(self, point_ids: Sequence[str]) -> None:
        """``delete`` for the request path: never waits on a store (it may finish later)."""
        ...

    def delete_where(self, must: Mapping[str, str]) -> None: ...
    def delete_expired(self, now: float) -> None: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


# Embedded: qdrant-edge-py ------------------------------------------------------------------
class _SharedShard:
    """One open EdgeShard per directory and process, shared by every cache that uses it."""

    _open: ClassVar[dict[Path, tuple[Any, int]]] = {}
    _lock = threading.Lock()

    @classmethod
    def acquire(cls, path: Path, dim: int) -> Any:
        from qdrant_edge import (
            Distance,
            EdgeConfig,
            EdgeShard,
            EdgeVectorParams,
            KeywordIndexParams,
            PayloadSchemaType,
            UpdateOperation,
            VectorStorageDatatype,
        )

        path = path.resolve()
        with cls._lock:
            if path in cls._open:
                shard, users = cls._open[path]
                cls._open[path] = (shard, users + 1)
                return shard
            # float16: half the memory, and the very values the shared store keeps
            vectors = EdgeVectorParams(
                size=dim, distance=Distance.Cosine, datatype=VectorStorageDatatype.Float16
            )
            config = EdgeConfig(vectors=vectors)
            try:
                if not (path / "edge_config.json").exists() and not (path / "wal").exists():
                    # made aside and moved into place in one rename: a process that dies while
                    # making it (a script's exit during the background warm-up) leaves no half
                    scratch = path.with_name(f".{path.name}.creating-{os.getpid()}")
                    shutil.rmtree(scratch, ignore_errors=True)
                    shard = EdgeShard.create(str(scratch), config)
                    indexes: list[tuple[str, Any]] = [
                        ("scope", KeywordIndexParams(is_tenant=True)),
                        ("namespace", PayloadSchemaType.Keyword),
                        ("expires_at", PayloadSchemaType.Float),
                        ("form", PayloadSchemaType.Keyword),
                    ]
                    for field, schema in indexes:
                        shard.update(UpdateOperation.create_field_index(field, schema))
                    shard.flush()
                    shard.close()
                    os.chmod(scratch, 0o700)  # the engine makes it 0755: ours, private
                    try:
                        os.rename(scratch, path)  # replaces an empty directory
                    except OSError:  # another process made it first
                        shutil.rmtree(scratch, ignore_errors=True)
                    private_tree(path)
                shard = EdgeShard.load(str(path))
                if "form" not in shard.info().payload_schema:  # made by an older version
                    shard.update(
                        UpdateOperation.create_field_index("form", PayloadSchemaType.Keyword)
                    )
            except Exception as exc:
                if "WAL" in str(exc) or "WouldBlock" in str(exc) or "lock" in str(exc).lower():
                    raise IndexLocked(str(exc)) from exc
                raise
            cls._open[path] = (shard, 1)
            return shard

    @classmethod
    def after_fork(cls) -> None:
        """A child never touches the shards its parent opened (both writing one directory
        corrupts it): they are kept, unused and unclosed, and a child opening the same
        directory finds it locked by the parent (the tier is then off, said once)."""
        inherited(*(shard for shard, _ in cls._open.values()))
        cls._open = {}
        cls._lock = threading.Lock()

    @classmethod
    def release(cls, path: Path) -> None:
        path = path.resolve()
        with cls._lock:
            if path not in cls._open:  # opened by the parent of this forked child: left alone
                return
            shard, users = cls._open[path]
            if users > 1:
                cls._open[path] = (shard, users - 1)
                return
            del cls._open[path]
        shard.flush()
        shard.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SharedShard.after_fork)
# No fork in the middle of opening a shard: a child would inherit the engine's descriptor of a
# shard being made, whose lock then outlives the parent's close and refuses the parent's own
# load of it ("Can't init WAL: WouldBlock", the semantic tier off until its retry).
hold_across_fork(_SharedShard, "_lock")


class EdgeIndex:
    """Qdrant's in-process engine (``qdrant-edge-py``), persisted under ``path``.

    New points are searched exhaustively until the shard is optimized into an HNSW segment;
    ``optimize_every`` new points start that optimization in a background thread, off the
    request path.  Only one process can open a directory: a second one gets ``IndexLocked``.
    """

    name = "qdrant-edge"
    OPTIMIZE_EVERY = 5000

    def __init__(
        self,
        path: str | Path,
        dim: int,
        *,
        optimize_every: int = OPTIMIZE_EVERY,
        min_free_bytes: int = 64 * 2**20,
    ) -> None:
        self.path = Path(path)
        self.dim = dim
        self.path.mkdir(parents=True, exist_ok=True)
        # The engine writes through memory maps: on a full disk a write is a SIGBUS that kills
        # the process, not an error.  So it is not written below ``min_free_bytes`` free.
        self._room = FreeSpace(self.path, min_free_bytes)
        self._check_room()
        self._shard = _SharedShard.acquire(self.path, dim)
        # dropped without ``close`` (a cache never closed): the shard is released all the same
        self._release = weakref.finalize(self, _SharedShard.release, self.path)
        self._release.atexit = False
        self._write_lock = threading.Lock()
        hold_across_fork(self, "_write_lock")  # a child is never copied mid-write
        self._optimize_every = optimize_every
        self._since_optimize = 0
        self._optimizing = threading.Event()

    def upsert(self, point_id: str, vector: np.ndarray, payload: Mapping[str, Any]) -> None:
        self.upsert_many([(point_id, vector, payload)])

    def upsert_many(self, points: Sequence[tuple[str, np.ndarray, Mapping[str, Any]]]) -> None:
        from qdrant_edge import Point, UpdateOperation

        batch = [Point(i, v.astype(np.float32).tolist(), dict(p)) for i, v, p in points]
        self._check_room()
        with self._write_lock:
            self._shard.update(UpdateOperation.upsert_points(batch))
            self._since_optimize += len(batch)
            due = self._since_optimize >= self._optimize_every
        if due and not self._optimizing.is_set():
            self._start_optimize()

    def _check_room(self) -> None:
        self._room.check()

    def search(
        self, vector: np.ndarray, must: Mapping[str, str], limit: int, threshold: float
    ) -> list[Candidate]:
        from qdrant_edge import Query, QueryRequest, SearchParams

        request = QueryRequest(
            limit=limit,
            query=Query.Nearest(vector.astype(np.float32).tolist()),
            filter=_edge_filter(must),
            with_payload=list(SEARCH_FIELDS),
            score_threshold=threshold,
            params=SearchParams(hnsw_ef=HNSW_EF),
        )
        return [
            Candidate(str(p.id), p.score, dict(p.payload or {})) for p in self._shard.query(request)
        ]

    def find(self, must: Mapping[str, str], limit: int) -> list[Candidate]:
        from qdrant_edge import ScrollRequest

        request = ScrollRequest(
            limit=limit, filter=_edge_filter(must), with_payload=list(SEARCH_FIELDS)
        )
        records, _ = self._shard.scroll(request)
        return [Candidate(str(r.id), 1.0, dict(r.payload or {})) for r in records]

    def delete(self, point_ids: Sequence[str]) -> None:
        from qdrant_edge import UpdateOperation

        if point_ids:
            with self._write_lock:
                self._shard.update(UpdateOperation.delete_points(list(point_ids)))

    discard = delete  # in-process: nothing to wait on

    def delete_where(self, must: Mapping[str, str]) -> None:
        from qdrant_edge import UpdateOperation

        with self._write_lock:
            self._shard.update(UpdateOperation.delete_points_by_filter(_edge_filter(must)))

    def delete_expired(self, now: float) -> None:
        from qdrant_edge import FieldCondition, Filter, RangeFloat, UpdateOperation

        expired = Filter(must=[FieldCondition("expires_at", range=RangeFloat(lt=now))])
        with self._write_lock:
            self._shard.update(UpdateOperation.delete_points_by_filter(expired))

    def count(self) -> int:
        from qdrant_edge import CountRequest

        return int(self._shard.count(CountRequest(exact=True)))

    def flush(self) -> None:
        """Write what the engine holds in memory to its files."""
        with self._write_lock:
            self._shard.flush()

    def optimize(self) -> None:
        """Build the HNSW index now (blocking); searches keep being answered meanwhile."""
        self._optimizing.set()
        try:
            with self._write_lock:
                self._since_optimize = 0
            self._shard.optimize()
        finally:
            self._optimizing.clear()

    def _start_optimize(self) -> None:
        def run() -> None:
            try:
                self.optimize()
            except Exception as exc:
                log.warning("tricache: vector index optimization failed: %s", exc)

        threading.Thread(target=run, name="tricache-optimize", daemon=True).start()

    def close(self) -> None:
        self._release()  # once: a second close, or the collector after it, does nothing


def _edge_filter(must: Mapping[str, str]) -> Any:
    from qdrant_edge import FieldCondition, Filter, MatchValue

    return Filter(must=[FieldCondition(k, match=MatchValue(v)) for k, v in must.items()])


# Server or cluster: qdrant-client ----------------------------------------------------------
class QdrantServerIndex:
    """A collection on a Qdrant server or cluster, through ``qdrant-client``.

    ``client`` may be any ``QdrantClient`` (a URL, a cluster, or the client's local mode)."""

    name = "qdrant"

    def __init__(
        self,
        *,
        url: str | None = None,
        client: Any = None,
        collection: str = "tricache",
        dim: int,
        timeout: float = 2.0,
        api_key: str | None = None,
    ) -> None:
        from qdrant_client import QdrantClient, models

        self._models = models
        self.client = client or QdrantClient(
            url=url, api_key=api_key, timeout=int(max(timeout, 1)), check_compatibility=False
        )
        self.collection = collection
        self.dim = dim
        if not self.client.collection_exists(collection):
            self.client.create_collection(
                collection,
                vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
            )
            self.client.create_payload_index(
                collection,
                "scope",
                models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            )
            self.client.create_payload_index(
                collection, "namespace", models.PayloadSchemaType.KEYWORD
            )
            self.client.create_payload_index(
                collection, "expires_at", models.PayloadSchemaType.FLOAT
            )
            self.client.create_payload_index(collection, "form", models.PayloadSchemaType.KEYWORD)

    def upsert(self, point_id: str, vector: np.ndarray, payload: Mapping[str, Any]) -> None:
        point = self._models.PointStruct(
            id=point_id, vector=vector.astype(np.float32).tolist(), payload=dict(payload)
        )
        self.client.upsert(self.collection, [point], wait=True)

    def search(
        self, vector: np.ndarray, must: Mapping[str, str], limit: int, threshold: float
    ) -> list[Candidate]:
        response = self.client.query_points(
            self.collection,
            query=vector.astype(np.float32).tolist(),
            query_filter=self._filter(must),
            limit=limit,
            score_threshold=threshold,
            with_payload=list(SEARCH_FIELDS),
            search_params=self._models.SearchParams(hnsw_ef=HNSW_EF),
        )
        return [Candidate(str(p.id), p.score, dict(p.payload or {})) for p in response.points]

    def find(self, must: Mapping[str, str], limit: int) -> list[Candidate]:
        records, _ = self.client.scroll(
            self.collection,
            scroll_filter=self._filter(must),
            limit=limit,
            with_payload=list(SEARCH_FIELDS),
        )
        return [Candidate(str(r.id), 1.0, dict(r.payload or {})) for r in records]

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self.client.delete(self.collection, list(point_ids))

    discard = delete  # the server is the index: one call, bounded by the client's timeout

    def delete_where(self, must: Mapping[str, str]) -> None:
        self.client.delete(self.collection, self._models.FilterSelector(filter=self._filter(must)))

    def delete_expired(self, now: float) -> None:
        models = self._models
        expired = models.Filter(
            must=[models.FieldCondition(key="expires_at", range=models.Range(lt=now))]
        )
        self.client.delete(self.collection, models.FilterSelector(filter=expired))

    def count(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def _filter(self, must: Mapping[str, str]) -> Any:
        models = self._models
        return models.Filter(
            must=[
                models.FieldCondition(key=k, match=models.MatchValue(value=v))
                for k, v in must.items()
            ]
        )

    def close(self) -> None:
        self.client.close()
