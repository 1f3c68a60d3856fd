"""The exact tier: normalized key → L1 (in-process TTL-LRU) → L2 (Redis or SQLite).

Fail-open everywhere: a store error or timeout is a miss (or a dropped write), counted in the
metrics, and a circuit breaker stops calling a failing store for a back-off period.

Freshness (``versions``): an answer is written under the versions its request *began* with; an
invalidation that lands while the LLM runs makes it unfit to store.  Nothing is served while
this process cannot verify its versions with the store.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import msgpack

from ..key.entry import CacheEntry, CorruptEntry, decode_entry, encode_entry
from ..key.request import CacheRequest, exact_key
from ..ops.breaker import CircuitBreaker
from ..ops.metrics import Metrics
from ..runtime.forks import on_fork
from ..stores.base import DamagedState, L2Store, VersionState
from ..stores.memory import TTLLRU
from .bloom import KeyFilter
from .policy import TtlPolicy
from .upkeep import Upkeep
from .versions import KB, MIN_WATERMARK, Stamp, VersionView, tag_meta

__all__ = ["ExactHit", "ExactTier", "StoreUnavailable"]

log = logging.getLogger(__name__)
TIER = "exact"


class StoreUnavailable(Exception):
    """The store could not say whether an entry is current (down, slow, or unverified)."""


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
        self.versions = VersionView(max_lag=max(2.0, 4 * refresh_s), local=store is None)
        self.refresh_s = refresh_s
        self.cache_version = cache_version
        self.volatile_context = volatile_context
        self.max_value_bytes = max_value_bytes
        self.metrics = metrics or Metrics()
        self.breaker = breaker or CircuitBreaker()
        self._next_refresh = 0.0
        self._subscribed = store is None or not store.has_pubsub
        self._id = next(_tier_ids)  # names this tier's misses in the caller's context
        self._upkeep = Upkeep(self, refresh_s, "tricache-upkeep")
        self._wanted: set[str] = set()  # names a lookup could not judge: the next poll reads them
        self._poll_wanted = False
        self._wanted_lock = threading.Lock()
        self._warned_at = -_WARN_EVERY_S
        on_fork(self._after_fork)
        self._place = (_location(store), namespace)
        _SIBLINGS.setdefault(self._place, weakref.WeakSet()).add(self)
        self._policy_checked = store is None

    def key(self, request: CacheRequest) -> str:
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )
        return exact_key(request, cache_version=self.cache_version, volatile=self.volatile_context)

    # lookup --------------------------------------------------------------------------------
    # A lookup makes at most one store call before its L2 read, and only when it must: the
    # versions are unverified (first use, store trouble) or the request has tags this process
    # has not read.  Everything else the store is asked (polls, the Bloom filter's catch-up,
    # what an entry from L2 needs) is the upkeep thread's job.
    def get(self, request: CacheRequest) -> ExactHit | None:
        key, tags = self.key(request), request.tags
        done, hit = self._without_l2(key, tags, self._ready(tags))
        if done:
            return hit
        try:
            record = self.store.get(key)  # type: ignore[union-attr]
        except Exception as exc:
            self._failed("read", exc)
            return self._settled(key, tags, None)
        return self._settled(key, tags, self._read(key, record))

    async def aget(self, request: CacheRequest) -> ExactHit | None:
        key, tags = self.key(request), request.tags
        done, hit = self._without_l2(key, tags, await self._aready(tags))
        if done:
            return hit
        try:
            record = await self.store.aget(key)  # type: ignore[union-attr]
        except Exception as exc:
            self._failed("read", exc)
            return self._settled(key, tags, None)
        return self._settled(key, tags, self._read(key, record))

    def _ready(self, tags: tuple[str, ...]) -> bool:
        """Make the view fit for a request with ``tags`` (one poll, when needed and the
        breaker allows); ``False`` when that call failed: the lookup has spent its budget."""
        names = self._missing(tags)
        return names is None or self._poll(names)

    async def _aready(self, tags: tuple[str, ...]) -> bool:
        names = self._missing(tags)
        return names is None or await self._apoll(names)

    def _missing(self, tags: tuple[str, ...]) -> list[str] | None:
        """The names a poll must read before this request (``[]``: just the changes), or
        ``None`` when no store call is needed or allowed now."""
        if self.store is None:
            return None
        self._upkeep.start()
        names = [tag_meta(t) for t in self.versions.unknown(tags)]
        if (not names and self.versions.verified()) or not self.breaker.allow():
            return None
        return names

    def _without_l2(
        self, key: str, tags: tuple[str, ...], reachable: bool
    ) -> tuple[bool, ExactHit | None]:
        """(True, result) when the lookup is decided before L2: a hit in L1, or a miss (the
        Bloom filter, the breaker, an unreachable store, or versions it cannot vouch for)."""
        if not self.versions.verified():
            self.metrics.incr(TIER, "unverified_skips")
            self._miss()
            _remember((self._id, key), _UNFIT)
            return True, None
        hit = self._from_l1(key)
        if hit is not None or not self._should_read_l2(key, reachable):
            return True, self._settled(key, tags, hit)
        return False, None

    def _settled(self, key: str, tags: tuple[str, ...], hit: ExactHit | None) -> ExactHit | None:
        """A miss remembers the versions it began under, for the answer the caller will write."""
        if hit is None:
            _remember((self._id, key), self._stamp(tags) or _UNFIT)
        return hit

    def _stamp(self, tags: tuple[str, ...]) -> Stamp | None:
        """The versions a request with ``tags`` begins under; ``None`` when this view cannot
        vouch for them (unverified, or a tag not read): its answer will not be stored."""
        if self.store is not None and (self.versions.unknown(tags) or not self.versions.verified()):
            return None
        return self.versions.stamp(tags)

    def _read(self, key: str, record: Any) -> ExactHit | None:
        self.breaker.success()
        if record is None:
            self._miss()
            return None
        return self._from_l2(key, record)

    def current(self, request: CacheRequest) -> CacheEntry | None:
        """The entry stored for ``request`` now, its versions verified first (one poll when
        needed), or ``None`` when it is gone or the store cannot tell: for background work."""
        self.start_lookup()
        if not self._ready(request.tags):
            return None
        try:
            return self.fetch(self.key(request))
        except StoreUnavailable:
            return None

    def fetch(self, key: str) -> CacheEntry | None:
        """The current entry stored under ``key`` (L1, then L2), or ``None`` when it is known
        to be gone (expired, stale, corrupt); ``StoreUnavailable`` when that cannot be known
        now.  For tiers that hold references to exact entries; not counted as a lookup."""
        if not self.versions.verified():
            raise StoreUnavailable("versions not verified with the store")
        if _trouble.get():
            raise StoreUnavailable("the store already failed this lookup")  # one timeout at most
        entry = self.l1.get(key)
        if entry is not None:
            if self._judge(entry) is None:
                return entry
            self.l1.pop(key)
        if self.store is None or not key.startswith(f"tricache:{self.namespace}:x:"):
            return None
        if not self.breaker.allow():
            raise StoreUnavailable("circuit breaker open")
        try:
            record = self.store.get(key)
        except Exception as exc:
            self._failed("fetch", exc)
            raise StoreUnavailable(str(exc)) from None
        self.breaker.success()
        if record is None:
            return None
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry:
            self.metrics.incr(TIER, "corrupt")
            self._delete(key)
            return None
        if self._judge(entry, written=record.watermark) is not None:
            self.metrics.incr(TIER, "stale")
            self._delete(key)
            return None
        self.l1.set(key, entry, self._l1_ttl(entry), size=len(record.value))
        return entry

    def delete(self, key: str) -> None:
        """Remove one entry from L1 and L2."""
        self.l1.pop(key)
        self._delete(key)

    def start_lookup(self) -> None:
        """A lookup begins (in this thread or task): it may spend one store timeout."""
        _trouble.set(False)

    def began(self, request: CacheRequest) -> Stamp | None:
        """The versions the last miss of ``request`` in this thread or task began under."""
        return _began.get().get((self._id, self.key(request)))

    def settle(self, request: CacheRequest) -> None:
        """The miss of ``request`` was answered another way (semantic tier, FAQ): no write
        will follow it."""
        _recall((self._id, self.key(request)))

    def _from_l1(self, key: str) -> ExactHit | None:
        entry = self.l1.get(key)
        if entry is None:
            return None
        try:
            reason = self._judge(entry)
        except StoreUnavailable:
            return None
        if reason is not None:
            self.l1.pop(key)
            return None  # L2 holds the same stale entry (or a newer one)
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
        if bloom.sync_due():  # another process may have written it: catch up, off this path
            self._upkeep.wake()
        return True  # a key written elsewhere since the last catch-up costs one LLM call

    def _from_l2(self, key: str, record: Any) -> ExactHit | None:
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry as exc:
            self._warn("corrupt value at %s deleted (%s)", key, exc)
            self.metrics.incr(TIER, "corrupt")
            self._delete(key)
            self._miss()
            return None
        try:
            reason = self._judge(entry, written=record.watermark)
        except StoreUnavailable:  # cannot tell: a miss, and the entry stays
            self._miss()
            return None
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

    def _judge(self, entry: CacheEntry, *, written: float | None = None) -> str | None:
        """Why ``entry`` is stale, or ``None``; ``StoreUnavailable`` when this view cannot tell
        yet (the upkeep thread is asked to learn what is missing).  ``written``: the store's
        clock when an entry read from L2 was written.  An entry of another epoch is stale when
        this view has verified its own epoch since that write (epochs only move forward in
        the store); otherwise it may be newer than the view."""
        reason = self.versions.stale_reason(entry)
        newer_maybe = written is None or written >= self.versions.verified_clock - _CLOCK_MARGIN_S
        if reason == "epoch" and written is not None and newer_maybe:
            self._learn_soon([])
            raise StoreUnavailable("an entry of an epoch this view has not seen")
        if reason == "unknown_tag":
            self._learn_soon([tag_meta(t) for t in self.versions.unknown(list(entry.tag_versions))])
            raise StoreUnavailable("tag versions not read yet")
        return reason

    def _learn_soon(self, names: list[str]) -> None:
        """Have the upkeep thread read ``names`` (and the changes) now."""
        with self._wanted_lock:
            self._wanted.update(names)
            self._poll_wanted = True
        self._upkeep.wake()

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
        stamp: Stamp | None = None,
    ) -> CacheEntry | None:
        """Store an answer; ``None`` when it was not stored (too large, stale, or dropped).
        ``stamp``: the versions its request began under (by default those its lookup's miss
        recorded, else the current ones)."""
        if stamp is None and self._missing(request.tags) is not None:
            self._ready(request.tags)  # an update with no lookup before it: read the versions
        prepared = self._prepare(request, text, payload, category, negative, tokens, model, stamp)
        if prepared is None:
            return None
        key, entry, data, ttl, stamp = prepared
        if self._may_write():
            try:
                written = self.store.set(key, data, ttl)  # type: ignore[union-attr]
                self.breaker.success()
            except Exception as exc:
                self._failed("write", exc)
            else:
                if not self._still_current(key, entry, stamp, written, self._poll()):
                    return None
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
        stamp: Stamp | None = None,
    ) -> CacheEntry | None:
        if stamp is None and self._missing(request.tags) is not None:
            await self._aready(request.tags)
        prepared = self._prepare(request, text, payload, category, negative, tokens, model, stamp)
        if prepared is None:
            return None
        key, entry, data, ttl, stamp = prepared
        if self._may_write():
            try:
                written = await self.store.aset(key, data, ttl)  # type: ignore[union-attr]
                self.breaker.success()
            except Exception as exc:
                self._failed("write", exc)
            else:
                if not self._still_current(key, entry, stamp, written, await self._apoll()):
                    return None
        return self._finish_put(key, entry, data)

    def _still_current(
        self, key: str, entry: CacheEntry, stamp: Stamp, written: float, polled: bool
    ) -> bool:
        """After a write the versions are read again, and an answer whose versions moved while
        it was computed or written is deleted.  (When that read fails the entry stays: every
        process that knows newer versions treats it as stale.)"""
        entry.watermark = min(written, entry.started or written)
        if not polled or self.versions.current(stamp):
            return True
        self.metrics.incr(TIER, "stale_writes")
        self._delete(key)
        return False

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
        tokens: int,
        model: str,
        stamp: Stamp | None,
    ) -> tuple[str, CacheEntry, bytes, float, Stamp] | None:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        key = self.key(request)
        category = category or request.category
        # the versions its lookup began under; an update with no lookup: the current ones
        stamp = stamp or _recall((self._id, key)) or self._stamp(request.tags) or _UNFIT
        if stamp is _UNFIT:  # its versions could not be read when it began
            self.metrics.incr(TIER, "unverified_writes")
            return None
        if set(stamp.tags) != set(request.tags) or not self.versions.current(stamp):
            self.metrics.incr(TIER, "stale_writes")  # the versions moved during the call
            return None
        entry = CacheEntry(
            text, payload, category, stamp.epoch, stamp.kb, dict(stamp.tags), negative,
            tokens=tokens, model=model, started=stamp.started,
        )  # fmt: skip
        try:
            data = encode_entry(entry)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"payload must be plain data (MessagePack-able): {exc}") from None
        if len(data) > self.max_value_bytes:
            self.metrics.incr(TIER, "too_large")
            return None
        entry.watermark = stamp.started
        return key, entry, data, self.policy.ttl(category, negative=negative), stamp

    def _finish_put(self, key: str, entry: CacheEntry, data: bytes) -> CacheEntry:
        if self.bloom is not None:
            self.bloom.add(key)
        self.l1.set(key, entry, self._l1_ttl(entry), size=len(data))
        self.metrics.incr(TIER, "writes")
        return entry

    def _l1_ttl(self, entry: CacheEntry) -> float:
        return min(self.policy.l1, self.policy.base_ttl(entry.category, negative=entry.negative))

    # versions, invalidation, eviction ------------------------------------------------------
    def upkeep(self) -> None:
        """What the upkeep thread does, every ``refresh_s`` or when woken: poll the versions
        (plus names a lookup could not judge), catch the Bloom filter up, and once check
        Redis's eviction policy.  Each step behind the breaker."""
        if self.store is None or not self.breaker.allow():
            return
        with self._wanted_lock:
            names, self._wanted = sorted(self._wanted), set()
            wanted, self._poll_wanted = self._poll_wanted, False
        if wanted or names or time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self.refresh_s
            if not self._poll(names):
                return
        bloom = self.bloom
        if bloom is not None and bloom.ready and bloom.sync_due() and self.breaker.allow():
            try:
                bloom.sync(self.store, self.namespace)
            except Exception as exc:
                self._failed("refresh", exc)
        if not self._policy_checked and self.breaker.allow():
            self._policy_checked = True
            try:
                _warn_if_evicting(self.store.eviction_policy())
            except Exception as exc:
                log.debug("tricache: eviction policy unknown (%s)", exc)

    def _poll(self, names: list[str] | None = None) -> bool:
        """Bring the versions up to date (plus ``names``); ``False`` when the store failed."""
        if self.store is None:
            return True
        try:
            self._subscribe()
            for _ in range(_POLLS_PER_REFRESH):
                asked, (epoch, after) = (time.time(), time.monotonic()), self.versions.position()
                try:
                    state = self.store.poll(self.namespace, epoch, after, names or ())
                except DamagedState as exc:
                    self._restart_epoch(exc.epoch, str(exc))
                    continue
                if self._take(state, asked, after):
                    break
                names = None
            self._after_poll()
        except Exception as exc:
            self._failed("refresh", exc)
            return False
        self.breaker.success()
        return True

    async def _apoll(self, names: list[str] | None = None) -> bool:
        if self.store is None:
            return True
        try:
            self._subscribe()
            for _ in range(_POLLS_PER_REFRESH):
                asked, (epoch, after) = (time.time(), time.monotonic()), self.versions.position()
                try:
                    state = await self.store.apoll(self.namespace, epoch, after, names or ())
                except DamagedState as exc:
                    self._restart_epoch(exc.epoch, str(exc))
                    continue
                if self._take(state, asked, after):
                    break
                names = None
            self._after_poll()
        except Exception as exc:
            self._failed("refresh", exc)
            return False
        self.breaker.success()
        return True

    def _after_fork(self) -> None:
        self._wanted_lock = threading.Lock()
        self._subscribed = self.store is None or not self.store.has_pubsub  # no listener here

    def _subscribe(self) -> None:
        if not self._subscribed:
            assert self.store is not None
            # The listener thread holds its callback: a bound method would keep this tier (and
            # its upkeep thread, polling) alive after a cache dropped without close().  When
            # the tier is collected, the listener ends.  (Not ``close``: from the collector it
            # could run an idle event loop, with whatever that loop still had to do.)
            tier = weakref.ref(self)
            self.store.subscribe(self.namespace, lambda message: _deliver(tier, message))
            weakref.finalize(self, self.store.unsubscribe).atexit = False
            self._subscribed = True

    def _take(self, state: VersionState, asked: tuple[float, float], after: int) -> bool:
        """Apply one poll's answer; ``True`` when the view is now up to date."""
        if self.versions.went_back(state, after) or self.versions.retired(state.epoch):
            self._restart_epoch(state.epoch, "fewer changes than seen (an older snapshot?)")
            return False
        self._learn(state, asked)
        return state.upto >= state.seq

    def _restart_epoch(self, epoch: str, why: str) -> None:
        """The store's state cannot be trusted: every entry of ``epoch`` becomes stale."""
        log.warning("tricache: %s version state: %s; starting a new epoch", self.store_name, why)
        self.metrics.incr(TIER, "epochs_restarted")
        self.store.new_epoch(self.namespace, epoch)  # type: ignore[union-attr]

    def _learn(self, state: VersionState, asked: tuple[float, float] | None = None) -> None:
        before = (self.versions.epoch, self.versions.kb, self.versions.min_watermark)
        if self.versions.apply(state, asked=asked) and before[0]:
            self.metrics.incr(TIER, "new_epochs")
        if (self.versions.epoch, self.versions.kb, self.versions.min_watermark) != before:
            self._sweep_l1()

    def _after_poll(self) -> None:
        if self.bloom is not None and not self.bloom.ready:
            self.bloom.sync(self.store, self.namespace)  # type: ignore[arg-type]  # starts the load
        if not self._policy_checked:
            self._upkeep.wake()  # checks the eviction policy, off the request path

    def _sweep_l1(self) -> None:
        fresh = (None, "unknown_tag")  # an unknown tag is read when the entry is next asked for
        dropped = self.l1.remove_if(lambda e: self.versions.stale_reason(e) not in fresh)
        if dropped:
            self.metrics.incr(TIER, "l1_invalidated", dropped)

    def invalidate(self, tag: str) -> int:
        """Make every entry written under ``tag`` unreachable, in every process."""
        return int(self._change(tag_meta(tag), None))

    def bump_kb_version(self) -> int:
        """New knowledge-base version: every existing entry of the namespace becomes stale."""
        return int(self._change(KB, None))

    def set_min_watermark(self, watermark: float | None = None) -> float:
        """Entries whose requests began before ``watermark`` become stale; the time is on the
        store's clock (``None``: the store's clock now).  The floor never goes down: a lower
        value leaves it where it is.  Returns the floor now in force."""
        if watermark is not None and not math.isfinite(watermark):
            raise ValueError(f"watermark must be a finite time, got {watermark!r}")
        return self._change(MIN_WATERMARK, watermark)

    def _change(self, name: str, value: float | None) -> float:
        """Raises ``StoreUnavailable`` when the store is unreachable: an invalidation must not
        be lost silently."""
        if self.store is None:
            state = VersionState(self.versions.epoch, time.time(), 0, 0,
                                 {name: self.versions.next_local(name, value)})  # fmt: skip
            self._learn(state)
            return state.values[name]
        try:
            for _ in range(2):
                epoch, seen = self.versions.position()
                state = self._send_change(name, value)
                if not (state.epoch == epoch and state.seq <= seen):
                    break
                # the store counts fewer changes than this process saw: it lost some (an older
                # snapshot, then this change): nothing of this epoch can be trusted
                self._restart_epoch(epoch, "fewer changes than seen (an older snapshot?)")
        except DamagedState as exc:
            self._restart_epoch(exc.epoch, str(exc))
            state = self._send_change(name, value)
        except Exception as exc:
            raise StoreUnavailable(f"{self.store_name} did not take the change: {exc}") from exc
        for tier in self._siblings():  # other caches of this process learn it now, not at a poll
            tier._learn(state)
        self._publish([state.epoch, name, state.values[name]])
        return state.values[name]

    def _send_change(self, name: str, value: float | None) -> VersionState:
        if name == MIN_WATERMARK:
            return self.store.set_floor(self.namespace, value)  # type: ignore[union-attr]
        return self.store.bump(self.namespace, name)  # type: ignore[union-attr]

    def _siblings(self) -> list[ExactTier]:
        """The tiers of this process over the same store and namespace, this one included."""
        return list(_SIBLINGS.get(self._place, ()))

    def _publish(self, event: list[Any]) -> None:
        try:
            self.store.publish(self.namespace, msgpack.packb(event))  # type: ignore[union-attr]
        except Exception as exc:  # other processes still learn it by polling
            log.warning("tricache: invalidation event not published: %s", exc)

    def _on_event(self, message: bytes) -> None:
        try:
            epoch, name, value = msgpack.unpackb(message)
            known = self.versions.observe(str(epoch), str(name), float(value))
        except Exception:
            self.metrics.incr(TIER, "bad_events")
            return
        if not known:  # another epoch (or a new one): ask the store now
            self._learn_soon([])
        elif name in (KB, MIN_WATERMARK):
            self._sweep_l1()

    def evict(self) -> dict[str, int]:
        """Delete every stale or corrupt entry of the namespace from L2 (active eviction)."""
        counts = {"scanned": 0, "stale": 0, "corrupt": 0}
        if self.store is None:
            return counts
        if not self._poll():
            raise StoreUnavailable(f"{self.store_name} did not answer")
        doomed = []
        for key, record in self.store.scan(self.namespace):
            counts["scanned"] += 1
            try:
                entry = decode_entry(record.value, record.watermark)
            except CorruptEntry:
                counts["corrupt"] += 1
                doomed.append(key)
                continue
            if self._evictable(entry, record.watermark):
                counts["stale"] += 1
                doomed.append(key)
        self.store.delete(doomed)
        self._sweep_l1()
        return counts

    def _evictable(self, entry: CacheEntry, written: float) -> bool:
        """Stale for sure (an admin task: it reads what this view lacks, then judges)."""
        for _ in range(2):
            try:
                return self._judge(entry, written=written) is not None
            except StoreUnavailable:
                self._poll([tag_meta(t) for t in entry.tag_versions])
        return False  # cannot tell: the entry stays

    def clear(self) -> None:
        """Drop every entry of the namespace, in L2 and in every process's L1: a new epoch
        makes whatever survives (in L1s, in a store that missed the deletes) stale."""
        self.l1.clear()
        if self.store is None:
            return
        try:
            epoch = self.store.new_epoch(self.namespace, None)
        except Exception as exc:
            raise StoreUnavailable(f"{self.store_name} did not take the change: {exc}") from exc
        for tier in self._siblings():
            tier.l1.clear()
            tier._poll()
        self._publish([epoch, "", 0])
        self.store.clear(self.namespace)

    # failures ------------------------------------------------------------------------------
    def _failed(self, what: str, exc: Exception) -> None:
        _trouble.set(True)
        self.breaker.failure()
        self.metrics.incr(TIER, f"{what}_errors")
        if what == "write":
            self.metrics.incr(TIER, "dropped_writes")
        self._warn("%s store %s failed: %s", self.store_name, what, exc)
        if what == "read":
            self._miss()

    def _warn(self, message: str, *args: object) -> None:
        """A warning at most every 10 s (an outage, or a store full of garbage, is one line
        now and then, not one a lookup); the others at debug level."""
        now = time.monotonic()
        loud = now - self._warned_at >= _WARN_EVERY_S
        if loud:
            self._warned_at = now
        log.log(logging.WARNING if loud else logging.DEBUG, "tricache: " + message, *args)

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
        self._upkeep.stop()
        if self.store is not None:
            self.store.close()


def _deliver(ref: weakref.ref[ExactTier], message: bytes) -> None:
    tier = ref()
    if tier is not None:
        tier._on_event(message)


_UNFIT = Stamp("", 0, 0.0)  # never current: the answer of its request is not stored
# Redis Cluster nodes' clocks may differ a little; misjudging within it loses an entry (a newer
# one taken for stale is deleted), never serves a stale one.
_CLOCK_MARGIN_S = 0.05
_WARN_EVERY_S = 10.0
_POLLS_PER_REFRESH = 4  # a poll returns up to 5,000 changes; a view far behind asks again


def _warn_if_evicting(policy: str | None) -> None:
    """Redis evicting keys that have no TTL can drop the version state: no stale answer
    follows (a new epoch starts), but every cached entry of the namespace is lost with it."""
    if policy and policy.startswith("allkeys"):
        log.warning(
            "tricache: Redis maxmemory-policy is %s: evicting the version state empties the "
            "cache (safely). Use volatile-lru, volatile-ttl or noeviction (docs/security.md).",
            policy,
        )


def _remember(key: tuple[int, str], stamp: Stamp) -> None:
    """Record, in the caller's context (its thread or task), the versions a miss began under:
    the answer that context computes for ``key`` (a tier's id, an exact key) is written with
    them."""
    began = {k: v for k, v in _began.get().items() if k != key}
    began[key] = stamp
    if len(began) > _BEGAN_KEPT:
        began = dict(list(began.items())[-_BEGAN_KEPT:])
    _began.set(began)  # a new dict: other contexts keep theirs


def _recall(key: tuple[int, str]) -> Stamp | None:
    began = _began.get()
    if key not in began:
        return None
    _began.set({k: v for k, v in began.items() if k != key})
    return began[key]


_began: ContextVar[Mapping[tuple[int, str], Stamp]] = ContextVar(
    "tricache_began", default=MappingProxyType({})
)
_tier_ids = itertools.count()
# set when a store call failed in this thread or task since its lookup began: the rest of the
# lookup (the semantic tier's references) asks the store nothing more
_trouble: ContextVar[bool] = ContextVar("tricache_store_trouble", default=False)
_SIBLINGS: dict[tuple[str, str], weakref.WeakSet[ExactTier]] = {}


def _location(store: L2Store | None) -> str:
    """What identifies a store across the caches of one process."""
    if store is None:
        return f"none:{next(_tier_ids)}"  # no store: nothing shared (a unique place)
    where = getattr(store, "url", None) or getattr(store, "path", None)
    return f"{store.name}:{where}" if where is not None else f"{store.name}:{id(store)}"


_BEGAN_KEPT = 256  # misses remembered per context (a batch of prompts misses together)
