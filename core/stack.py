"""The request path: the tiers in lookup order, write-back, and the fail-open guarantee.

Today the stack holds the exact tier; the semantic tier and the FAQ fallback slot in after it.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .entry import CacheEntry
from .exact import ExactTier
from .home import data_dir
from .metrics import Metrics
from .policy import TtlPolicy
from .request import CacheRequest, Turn
from .stores.base import L2Store

__all__ = ["Cache", "Hit"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Hit:
    """A cached answer and where it came from."""

    text: str
    payload: Any
    tier: str  # "exact"
    level: str  # where inside the tier: "l1", "l2"
    key: str
    entry: CacheEntry
    score: float | None = None


class Cache:
    """TriCache's core, independent of LangChain and LlamaIndex.

    ``Cache()`` runs embedded: L1 in memory, L2 in SQLite under ``$TRICACHE_HOME`` (or the
    per-user cache directory).  ``Cache(redis_url=...)`` shares L2 through Redis (``cluster=True``
    for Redis Cluster).  No method raises because a store is down or slow; wrong argument types
    raise ``TypeError``/``ValueError``.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        path: str | Path | None = None,
        store: L2Store | None = None,
        l2: bool = True,
        namespace: str = "default",
        tenant: str = "default",
        cluster: bool = False,
        timeout: float = 0.05,
        ttl: TtlPolicy | None = None,
        bloom: bool = True,
        cache_version: str = "1",
        history_turns: int = 3,
        l1_max_items: int = 10_000,
        l1_max_bytes: int = 64 * 2**20,
        refresh_s: float = 0.5,
        metrics: Metrics | None = None,
    ) -> None:
        if store is None and l2:
            store = _open_store(redis_url, path, cluster=cluster, timeout=timeout)
        self.namespace = namespace
        self.tenant = tenant
        self.metrics = metrics or Metrics()
        self.exact = ExactTier(
            store if l2 else None,
            namespace=namespace,
            policy=ttl,
            l1_max_items=l1_max_items,
            l1_max_bytes=l1_max_bytes,
            bloom=bloom,
            refresh_s=refresh_s,
            cache_version=cache_version,
            history_turns=history_turns,
            metrics=self.metrics,
        )
        # Validate the defaults now rather than on the first lookup.
        CacheRequest("", namespace=namespace, tenant=tenant)

    def request(
        self,
        query: str,
        *,
        system: str = "",
        history: Iterable[Turn | tuple[str, str]] = (),
        tenant: str | None = None,
        llm_key: str = "",
        category: str | None = None,
        tags: Sequence[str] = (),
    ) -> CacheRequest:
        """Build a request in this cache's namespace (and default tenant)."""
        return CacheRequest(
            query,
            system=system,
            history=tuple(history),  # type: ignore[arg-type]  # validated by CacheRequest
            namespace=self.namespace,
            tenant=self.tenant if tenant is None else tenant,
            llm_key=llm_key,
            category=category,
            tags=tuple(tags),
        )

    # lookup --------------------------------------------------------------------------------
    def lookup(self, request: CacheRequest) -> Hit | None:
        """The cached answer for ``request``, or ``None``.  Never raises for store trouble."""
        self._check(request)
        start = time.perf_counter()
        try:
            found = self.exact.get(request)
        except Exception as exc:  # a bug in a tier must not break the app
            self._error("lookup", exc)
            return None
        finally:
            self.metrics.observe("exact", time.perf_counter() - start)
        return self._hit(found)

    async def alookup(self, request: CacheRequest) -> Hit | None:
        self._check(request)
        start = time.perf_counter()
        try:
            found = await self.exact.aget(request)
        except Exception as exc:
            self._error("lookup", exc)
            return None
        finally:
            self.metrics.observe("exact", time.perf_counter() - start)
        return self._hit(found)

    def _hit(self, found: Any) -> Hit | None:
        if found is None:
            return None
        entry = found.entry
        if entry.negative:  # "known to have no cacheable answer": a miss the caller can trust
            self.metrics.incr("exact", "negative_hits")
            return None
        return Hit(entry.text, entry.payload, "exact", found.level, found.key, entry)

    # write ---------------------------------------------------------------------------------
    def update(
        self,
        request: CacheRequest,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
    ) -> bool:
        """Store an answer; ``False`` when it was not stored.  Never raises for store trouble."""
        self._check(request)
        try:
            stored = self.exact.put(request, text, payload, category=category, negative=negative)
        except TypeError:
            raise
        except Exception as exc:
            self._error("update", exc)
            return False
        return stored is not None

    async def aupdate(
        self,
        request: CacheRequest,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
    ) -> bool:
        self._check(request)
        try:
            stored = await self.exact.aput(
                request, text, payload, category=category, negative=negative
            )
        except TypeError:
            raise
        except Exception as exc:
            self._error("update", exc)
            return False
        return stored is not None

    # versions and maintenance --------------------------------------------------------------
    def invalidate(self, tag: str) -> int:
        """Entries written under ``tag`` become unreachable everywhere; returns its new version.

        Raises when the shared store cannot be reached: a lost invalidation would leave stale
        answers in other processes, so the caller must know.
        """
        if not isinstance(tag, str) or not tag:
            raise TypeError("tag must be a non-empty str")
        return self.exact.invalidate(tag)

    def bump_kb_version(self) -> int:
        """The knowledge base changed: every existing entry of the namespace becomes stale."""
        return self.exact.bump_kb_version()

    def set_min_watermark(self, watermark: float | None = None) -> float:
        """Entries written before ``watermark`` (default: now) become stale."""
        watermark = time.time() if watermark is None else float(watermark)
        self.exact.set_min_watermark(watermark)
        return watermark

    def evict(self) -> dict[str, int]:
        """Delete stale and corrupt entries from the shared store; returns the counts."""
        return self.exact.evict()

    def clear(self) -> None:
        self.exact.clear()

    def stats(self) -> dict[str, Any]:
        """Counters and latency percentiles per tier, as a plain dict."""
        snapshot = self.metrics.snapshot()
        snapshot["store"] = {
            "l2": self.exact.store_name,
            "l1_items": len(self.exact.l1),
            "l1_bytes": self.exact.l1.bytes,
            "breaker_open": self.exact.breaker.is_open,
        }
        return snapshot

    def close(self) -> None:
        self.exact.close()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # helpers -------------------------------------------------------------------------------
    def _check(self, request: CacheRequest) -> None:
        if not isinstance(request, CacheRequest):
            raise TypeError(f"expected CacheRequest, got {type(request).__name__}")
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )

    def _error(self, what: str, exc: Exception) -> None:
        self.metrics.incr("cache", f"{what}_errors")
        log.exception("tricache: %s failed; answering without the cache", what, exc_info=exc)


def _open_store(
    redis_url: str | None, path: str | Path | None, *, cluster: bool, timeout: float
) -> L2Store | None:
    """The configured L2 store, or ``None`` (L1 only) when it cannot be opened."""
    if redis_url:
        from .stores.redis import RedisStore  # redis is an optional dependency

        return RedisStore(redis_url, timeout=timeout, cluster=cluster)
    from .stores.sqlite import SQLiteStore

    file = Path(path) if path else data_dir() / "exact.sqlite3"
    try:
        return SQLiteStore(file)
    except (OSError, sqlite3.Error) as exc:
        log.error("tricache: L2 store unavailable (%s: %s); running on L1 only", file, exc)
        return None
