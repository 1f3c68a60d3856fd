"""The exact tier: normalized key → L1 (in-process TTL-LRU) → L2 (Redis or SQLite).

Fail-open everywhere: a store error or timeout is a miss (or a dropped write), counted in the
metrics, and a circuit breaker stops calling a failing store for a back-off period.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from .bloom import KeyFilter
from .breaker import CircuitBreaker
from .entry import CacheEntry, CorruptEntry, decode_entry, encode_entry
from .metrics import Metrics
from .policy import TtlPolicy
from .request import CacheRequest, exact_key
from .stores.base import L2Store
from .stores.memory import TTLLRU
from .versions import KB, MIN_WATERMARK, VersionView, tag_meta

__all__ = ["ExactHit", "ExactTier"]

log = logging.getLogger(__name__)
TIER = "exact"


@dataclass(slots=True)
class ExactHit:
    entry: CacheEntry
    key: str
    level: str  # "l1" or "l2"


class ExactTier:
    """Exact-match cache of one namespace over an optional shared L2 store."""

    def __init__(
        self,
        store: L2Store | None,
        *,
        namespace: str = "default",
        policy: TtlPolicy | None = None,
        l1_max_items: int = 10_000,
        l1_max_bytes: int = 64 * 2**20,
        bloom: bool = True,
        bloom_capacity: int = 1_000_000,
        refresh_s: float = 0.5,
        cache_version: str = "1",
        volatile_context: bool = False,
        max_value_bytes: int = 4 * 2**20,
        metrics: Metrics | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.policy = policy or TtlPolicy()
        self.l1: TTLLRU[CacheEntry] = TTLLRU(l1_max_items, l1_max_bytes)
        self.bloom = KeyFilter(bloom_capacity) if bloom and store is not None else None
        self.versions = VersionView()
        self.refresh_s = refresh_s
        self.cache_version = cache_version
        self.volatile_context = volatile_context
        self.max_value_bytes = max_value_bytes
        self.metrics = metrics or Metrics()
        self.breaker = breaker or CircuitBreaker()
        self._next_refresh = 0.0
        self._subscribed = store is None or not store.has_pubsub

    def key(self, request: CacheRequest) -> str:
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )
        return exact_key(request, cache_version=self.cache_version, volatile=self.volatile_context)

    # lookup --------------------------------------------------------------------------------
    def get(self, request: CacheRequest) -> ExactHit | None:
        key = self.key(request)
        reachable = self.refresh_if_due()
        hit = self._from_l1(key)
        if hit is not None or not self._should_read_l2(key, reachable):
            return hit
        try:
            record = self.store.get(key)  # type: ignore[union-attr]
        except Exception as exc:
            self._failed("read", exc)
            return None
        self.breaker.success()
        if record is None:
            self._miss()
            return None
        return self._from_l2(key, record)

    async def aget(self, request: CacheRequest) -> ExactHit | None:
        key = self.key(request)
        reachable = self.refresh_if_due()
        hit = self._from_l1(key)
        if hit is not None or not self._should_read_l2(key, reachable):
            return hit
        try:
            record = await self.store.aget(key)  # type: ignore[union-attr]
        except Exception as exc:
            self._failed("read", exc)
            return None
        self.breaker.success()
        if record is None:
            self._miss()
            return None
        return self._from_l2(key, record)

    def fetch(self, key: str) -> CacheEntry | None:
        """The current entry stored under ``key`` (L1, then L2), or ``None``; for tiers that
        hold references to exact entries.  Not counted as an exact-tier lookup."""
        entry = self.l1.get(key)
        if entry is not None and self.versions.stale_reason(entry) is None:
            return entry
        if self.store is None or not key.startswith(f"tricache:{self.namespace}:x:"):
            return None
        if not self.breaker.allow():
            return None
        try:
            record = self.store.get(key)
        except Exception as exc:
            self._failed("fetch", exc)
            return None
        self.breaker.success()
        if record is None:
            return None
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry:
            self.metrics.incr(TIER, "corrupt")
            self._delete(key)
            return None
        if self._stale_reason(entry) is not None:
            self.metrics.incr(TIER, "stale")
            self._delete(key)
            return None
        self.l1.set(key, entry, self._l1_ttl(entry), size=len(record.value))
        return entry

    def delete(self, key: str) -> None:
        """Remove one entry from L1 and L2."""
        self.l1.pop(key)
        self._delete(key)

    def _from_l1(self, key: str) -> ExactHit | None:
        entry = self.l1.get(key)
        if entry is None:
            return None
        if self.versions.stale_reason(entry) is not None:
            self.l1.pop(key)
            return None  # L2 holds the same stale entry: it is counted and deleted there
        entry.hits += 1
        self.metrics.incr(TIER, "hits_l1")
        return ExactHit(entry, key, "l1")

    def _should_read_l2(self, key: str, reachable: bool = True) -> bool:
        """True when L2 must be asked; otherwise the lookup is a miss, counted here.
        ``reachable=False``: the store just failed this lookup's poll, and one lookup costs
        one timeout at most."""
        if self.store is None or not reachable:
            skipped = None
        elif self._surely_never_written(key):
            skipped = "bloom_skips"  # a round trip saved
        elif not self.breaker.allow():
            skipped = "breaker_skips"
        else:
            return True
        if skipped:
            self.metrics.incr(TIER, skipped)
        self._miss()
        return False

    def _surely_never_written(self, key: str) -> bool:
        bloom = self.bloom
        if bloom is None or bloom.might_contain(key):
            return False
        if bloom.sync_due():  # another process may have written it since the last sync
            try:
                bloom.sync(self.store, self.namespace)  # type: ignore[arg-type]
            except Exception as exc:
                self._failed("refresh", exc)
                return True
            return not bloom.might_contain(key)
        return True

    def _from_l2(self, key: str, record: Any) -> ExactHit | None:
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry as exc:
            log.warning("tricache: corrupt value at %s deleted (%s)", key, exc)
            self.metrics.incr(TIER, "corrupt")
            self._delete(key)
            self._miss()
            return None
        reason = self._stale_reason(entry)
        if reason is not None:
            self.metrics.incr(TIER, f"stale_{reason}")
            self.metrics.incr(TIER, "stale")
            self._delete(key)
            self._miss()
            return None
        self.l1.set(key, entry, self._l1_ttl(entry), size=len(record.value))
        entry.hits += 1
        self.metrics.incr(TIER, "hits_l2")
        return ExactHit(entry, key, "l2")

    def _stale_reason(self, entry: CacheEntry) -> str | None:
        """Like ``VersionView.stale_reason``, first learning the versions of tags this process
        has not tracked yet; an entry whose tag versions cannot be learned is not served."""
        tags = tuple(entry.tag_versions)
        if tags and not self.versions.knows(tags):
            self._refresh_tags(tags)
            if not self.versions.knows(tags):
                return "unknown_tag"
        return self.versions.stale_reason(entry)

    def _miss(self) -> None:
        self.metrics.incr(TIER, "misses")

    # write ---------------------------------------------------------------------------------
    def put(
        self,
        request: CacheRequest,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
        tokens: int = 0,
        model: str = "",
    ) -> CacheEntry | None:
        """Store an answer; ``None`` when it was not stored (too large, or dropped)."""
        prepared = self._prepare(request, text, payload, category, negative, tokens, model)
        if prepared is None:
            return None
        key, entry, data, ttl = prepared
        if self._may_write():
            try:
                entry.watermark = self.store.set(key, data, ttl)  # type: ignore[union-attr]
                self.breaker.success()
            except Exception as exc:
                self._failed("write", exc)
        return self._finish_put(key, entry, data)

    async def aput(
        self,
        request: CacheRequest,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
        tokens: int = 0,
        model: str = "",
    ) -> CacheEntry | None:
        prepared = self._prepare(request, text, payload, category, negative, tokens, model)
        if prepared is None:
            return None
        key, entry, data, ttl = prepared
        if self._may_write():
            try:
                entry.watermark = await self.store.aset(key, data, ttl)  # type: ignore[union-attr]
                self.breaker.success()
            except Exception as exc:
                self._failed("write", exc)
        return self._finish_put(key, entry, data)

    def _may_write(self) -> bool:
        """True when L2 may be written; a write the open breaker refuses is dropped, counted."""
        if self.store is None:
            return False
        if self.breaker.allow():
            return True
        self.metrics.incr(TIER, "dropped_writes")
        return False

    def _prepare(
        self,
        request: CacheRequest,
        text: str,
        payload: Any,
        category: str | None,
        negative: bool,
        tokens: int = 0,
        model: str = "",
    ) -> tuple[str, CacheEntry, bytes, float] | None:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        key = self.key(request)
        category = category or request.category
        if request.tags and not self.versions.knows(request.tags):
            self._refresh_tags(request.tags)
        kb, tag_versions = self.versions.stamp(request.tags)
        entry = CacheEntry(
            text, payload, category, kb, tag_versions, negative, tokens=tokens, model=model
        )
        try:
            data = encode_entry(entry)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"payload must be plain data (MessagePack-able): {exc}") from None
        if len(data) > self.max_value_bytes:
            self.metrics.incr(TIER, "too_large")
            return None
        entry.watermark = time.time()
        return key, entry, data, self.policy.ttl(category, negative=negative)

    def _finish_put(self, key: str, entry: CacheEntry, data: bytes) -> CacheEntry:
        if self.bloom is not None:
            self.bloom.add(key)
        self.l1.set(key, entry, self._l1_ttl(entry), size=len(data))
        self.metrics.incr(TIER, "writes")
        return entry

    def _l1_ttl(self, entry: CacheEntry) -> float:
        return min(self.policy.l1, self.policy.base_ttl(entry.category, negative=entry.negative))

    # versions, invalidation, eviction ------------------------------------------------------
    def refresh_if_due(self) -> bool:
        """Poll shared versions and the Bloom write log, at most once per ``refresh_s``;
        ``False`` when that poll just failed."""
        now = time.monotonic()
        if now < self._next_refresh or self.store is None:
            return True
        self._next_refresh = now + self.refresh_s
        if not self.breaker.allow():
            return True
        try:
            if not self._subscribed:
                self.store.subscribe(self.namespace, self._on_event)
                self._subscribed = True
            self.versions.refresh(self.store, self.namespace)
            if self.bloom is not None and not self.bloom.ready:
                self.bloom.sync(self.store, self.namespace)  # starts the background load
        except Exception as exc:
            self._failed("refresh", exc)
            return False
        self.breaker.success()
        return True

    def _refresh_tags(self, tags: tuple[str, ...]) -> None:
        if self.store is None or not self.breaker.allow():
            return
        try:
            self.versions.refresh(self.store, self.namespace, tags)
        except Exception as exc:
            self._failed("refresh", exc)
        else:
            self.breaker.success()

    def invalidate(self, tag: str) -> int:
        """Make every entry written under ``tag`` unreachable, in every process."""
        return self._bump(tag_meta(tag))

    def bump_kb_version(self) -> int:
        """New knowledge-base version: every existing entry of the namespace becomes stale."""
        return self._bump(KB)

    def set_min_watermark(self, watermark: float) -> None:
        """Entries written before ``watermark`` (store clock, epoch seconds) become stale."""
        if self.store is not None:
            self.store.write_meta(self.namespace, MIN_WATERMARK, watermark)
            self._publish(MIN_WATERMARK, watermark)
        self._apply(MIN_WATERMARK, watermark)

    def _bump(self, name: str) -> int:
        """Raises when the store is unreachable: an invalidation must not be lost silently."""
        if self.store is None:
            version = int(self.versions.get(name)) + 1
        else:
            version = self.store.bump_meta(self.namespace, name)
            self._publish(name, version)
        self._apply(name, version)
        return version

    def _publish(self, name: str, value: float) -> None:
        try:
            self.store.publish(self.namespace, msgpack.packb([name, value]))  # type: ignore[union-attr]
        except Exception as exc:  # other processes still learn it by polling
            log.warning("tricache: invalidation event not published: %s", exc)

    def _on_event(self, message: bytes) -> None:
        try:
            name, value = msgpack.unpackb(message)
            self._apply(str(name), float(value))
        except Exception:
            self.metrics.incr(TIER, "bad_events")

    def _apply(self, name: str, value: float) -> None:
        self.versions.observe(name, value)
        dropped = self.l1.remove_if(lambda e: self.versions.stale_reason(e) is not None)
        if dropped:
            self.metrics.incr(TIER, "l1_invalidated", dropped)

    def evict(self) -> dict[str, int]:
        """Delete every stale or corrupt entry of the namespace from L2 (active eviction)."""
        counts = {"scanned": 0, "stale": 0, "corrupt": 0}
        if self.store is None:
            return counts
        self.versions.refresh(self.store, self.namespace)
        doomed = []
        for key, record in self.store.scan(self.namespace):
            counts["scanned"] += 1
            try:
                entry = decode_entry(record.value, record.watermark)
            except CorruptEntry:
                counts["corrupt"] += 1
                doomed.append(key)
                continue
            if self._stale_reason(entry) is not None:
                counts["stale"] += 1
                doomed.append(key)
        self.store.delete(doomed)
        self.l1.remove_if(lambda e: self.versions.stale_reason(e) is not None)
        return counts

    def clear(self) -> None:
        """Drop every entry of the namespace (L1 and L2); versions are kept."""
        self.l1.clear()
        if self.store is not None:
            self.store.clear(self.namespace)

    # failures ------------------------------------------------------------------------------
    def _failed(self, what: str, exc: Exception) -> None:
        self.breaker.failure()
        self.metrics.incr(TIER, f"{what}_errors")
        if what == "write":
            self.metrics.incr(TIER, "dropped_writes")
        log.warning("tricache: %s store %s failed: %s", self.store_name, what, exc)
        if what == "read":
            self._miss()

    def _delete(self, key: str) -> None:
        if self.store is None or not self.breaker.allow():
            return
        try:
            self.store.delete([key])
        except Exception as exc:
            self._failed("delete", exc)

    @property
    def store_name(self) -> str:
        return self.store.name if self.store is not None else "none"

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
