"""The exact tier: normalized key → L1 (in-process TTL-LRU) → L2 (Redis or SQLite).

Reads and writes live here; the rest of the tier has a module each: ``link.py`` (the store
behind its breaker: fail-open, one timeout per lookup), ``sync.py`` (the versions, kept in step
with the store, and the changes), ``misses.py`` (the versions each miss began under),
``bloom.py``, ``policy.py`` (TTLs), ``upkeep.py`` (the background thread).

Fail-open everywhere: a store error or timeout is a miss (or a dropped write), counted in the
metrics, and a circuit breaker stops calling a failing store for a back-off period.

Freshness (``versions``): an answer is written under the versions its request *began* with; an
invalidation that lands while the LLM runs makes it unfit to store.  Nothing is served while
this process cannot verify its versions with the store.

Each read and write is written once, as a step function (``runtime/steps.py``): ``get_steps``
and ``put_steps``, which ``Cache`` drives with blocking or awaited store calls.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..key.asked import Asked
from ..key.entry import MAX_ASKED, CacheEntry, CorruptEntry, decode_entry, encode_entry
from ..key.request import CacheRequest, entry_prefix, exact_key
from ..ops.breaker import CircuitBreaker
from ..ops.metrics import Metrics
from ..runtime.forks import on_fork
from ..runtime.steps import Call, Steps, run
from ..settings import Exact
from ..stores.base import L2Store, Record
from ..stores.memory import TTLLRU
from .bloom import KeyFilter
from .link import TIER, StoreLink, StoreUnavailable, refused
from .misses import UNFIT, MissLedger
from .policy import TtlPolicy
from .sync import VersionSync
from .upkeep import Upkeep
from .versions import KB, MIN_WATERMARK, Stamp, VersionView, tag_meta

__all__ = ["ExactHit", "ExactTier", "StoreUnavailable"]

T = TypeVar("T")


@dataclass(slots=True)
class ExactHit:
    entry: CacheEntry
    key: str
    level: str  # "l1" or "l2"


class _ExactParts:
    """The tier's parts (L1, the L2 link and its breaker, the versions, the miss ledger, the
    Bloom filter) and what every path asks of them: the key, the versions now, whether an
    entry is still current."""

    max_value_bytes = 4 * 2**20  # a larger answer is not stored
    bloom_capacity = 1_000_000

    def __init__(
        self,
        store: L2Store | None,
        settings: Exact,
        *,
        namespace: str = "default",
        volatile_context: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self.namespace = namespace
        self.policy: TtlPolicy = settings.ttl or TtlPolicy()
        self.refresh_s = settings.refresh_s
        self.cache_version = settings.cache_version
        self.volatile_context = volatile_context
        self.metrics = metrics or Metrics()
        self.link = StoreLink(store, CircuitBreaker(), self.metrics)
        self.l1: TTLLRU[CacheEntry] = TTLLRU(settings.l1_max_items, settings.l1_max_bytes)
        with_bloom = bool(settings.bloom and store)
        self.bloom = KeyFilter(self.bloom_capacity, metrics=self.metrics) if with_bloom else None
        self.versions = VersionView(max_lag=max(2.0, 4 * self.refresh_s), local=store is None)
        self._upkeep = Upkeep(self, self.refresh_s, "tricache-upkeep")
        self.sync = VersionSync(
            self.link, namespace, self.versions, l1=self.l1, bloom=self.bloom, upkeep=self._upkeep
        )
        self.misses = MissLedger()
        self._next_refresh = 0.0
        self._served: dict[str, None] = {}  # keys L1 served, until the store is told (``touch``)
        self._served_told = 0.0
        on_fork(self.sync.after_fork)

    @property
    def store(self) -> L2Store | None:
        return self.link.store

    @property
    def breaker(self) -> CircuitBreaker:
        return self.link.breaker

    @breaker.setter
    def breaker(self, breaker: CircuitBreaker) -> None:
        self.link.breaker = breaker

    @property
    def store_name(self) -> str:
        return self.link.name

    def key(self, request: CacheRequest) -> str:
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )
        return exact_key(request, cache_version=self.cache_version, volatile=self.volatile_context)

    def _stamp(self, tags: tuple[str, ...]) -> Stamp | None:
        """The versions a request with ``tags`` begins under; ``None`` when this view cannot
        vouch for them (unverified, or a tag not read): its answer will not be stored."""
        if self.store is not None and (self.versions.unknown(tags) or not self.versions.verified()):
            return None
        return self.versions.stamp(tags)

    def _with_later_tags(self, stamp: Stamp, tags: tuple[str, ...]) -> Stamp:
        """``stamp`` with the versions of the tags its request gained after it began (an
        ``entry_options`` block around the write only), when nothing has changed in the
        namespace since: their versions now are those it began under.  Otherwise ``stamp``
        as it is (its answer is not stored)."""
        later = tuple(t for t in tags if t not in stamp.tags)
        if not later or stamp.seq < 0:
            return stamp
        now = self._stamp(later)
        if now is None or (now.epoch, now.seq, now.heard) != (stamp.epoch, stamp.seq, stamp.heard):
            return stamp
        return dataclasses.replace(stamp, tags={**stamp.tags, **now.tags})

    def _judge(self, entry: CacheEntry, *, written: float | None = None) -> str | None:
        """Why ``entry`` is stale, or ``None``; ``StoreUnavailable`` when this view cannot tell
        yet (the upkeep thread is asked to learn what is missing).  ``written``: the store's
        clock when an entry read from L2 was written.  An entry of another epoch is stale when
        this view has verified its own epoch since that write (epochs only move forward in
        the store); otherwise it may be newer than the view."""
        reason = self.versions.stale_reason(entry)
        newer_maybe = written is None or written >= self.versions.verified_clock - _CLOCK_MARGIN_S
        if reason == "epoch" and written is not None and newer_maybe:
            self.sync.learn_soon([])
            raise StoreUnavailable("an entry of an epoch this view has not seen")
        if reason == "unknown_tag":
            unknown = self.versions.unknown(list(entry.tag_versions))
            self.sync.learn_soon([tag_meta(t) for t in unknown])
            raise StoreUnavailable("tag versions not read yet")
        return reason

    def _miss(self) -> None:
        self.metrics.incr(TIER, "misses")

    def close(self) -> None:
        self._upkeep.stop(wait=1.0)  # a poll or catch-up under way ends before the store
        if self.bloom is not None:
            self.bloom.close()
        if self.store is not None:
            if self.breaker.allow():
                self._tell_served(now=True)
            self.store.close()

    def _l1_ttl(self, entry: CacheEntry, written: float | None = None) -> float:
        """How long L1 keeps ``entry``: its lifetime (capped by the L1 policy), less its age
        when it was read from L2 (``written``: the store's clock when it was written), so
        that no L1 keeps it past the store's expiry."""
        lifetime = entry.ttl or self.policy.base_ttl(entry.category, negative=entry.negative)
        if written is not None:
            lifetime -= max(0.0, self.versions.store_now() - written)
        return min(self.policy.l1, lifetime)

    def _keep(self, key: str, entry: CacheEntry, record: Record) -> None:
        """Keep ``entry``, read from L2 as ``record``, in L1 for what is left of its life."""
        ttl = self._l1_ttl(entry, record.watermark)
        if ttl > 0:
            self.l1.set(key, entry, ttl, size=len(record.value))

    def _stale(self, entry: CacheEntry, written: float) -> bool:
        """Whether ``entry`` (written at ``written``) is stale, for an admin verb: what this
        view lacks is read first; ``StoreUnavailable`` when it still cannot tell."""
        for _ in range(_ADMIN_POLLS):
            try:
                return self._judge(entry, written=written) is not None
            except StoreUnavailable:
                self.sync.poll([tag_meta(t) for t in entry.tag_versions])
        raise StoreUnavailable(f"{self.store_name} did not say whether the entry is current")

    def _tell_served(self, *, now: bool = False) -> None:
        """Tell the store which entries L1 served (``touch``: a bounded SQLite file's used_at,
        Redis's LRU clock), at most every ``_TELL_SERVED_S``: the hottest entries are not
        evicted as unused.  The upkeep thread's work (and ``close``'s)."""
        touch = getattr(self.store, "touch", None)
        if touch is None or not (now or time.monotonic() >= self._served_told + _TELL_SERVED_S):
            return
        self._served_told = time.monotonic()
        served, self._served = self._served, {}
        try:
            touch(list(served))
        except Exception as exc:
            self.link.failed("touch", exc)

    def _verify_now(self) -> None:
        """The versions read from the store before an admin verb, whatever this process did
        before (a fresh one has looked nothing up); tried again on a busy server."""
        if not any(self.sync.poll() for _ in range(_ADMIN_POLLS)):
            raise StoreUnavailable(f"{self.store_name} did not answer")

    def _admin_call(self, what: str, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the store for an admin verb: tried again on a busy server (each
        try within the store's timeout); ``StoreUnavailable`` when it never answered."""
        for attempt in range(_ADMIN_POLLS):
            try:
                result = call(*args)
            except Exception as exc:
                if attempt + 1 == _ADMIN_POLLS:
                    raise StoreUnavailable(f"{self.store_name} {what} failed: {exc}") from exc
                continue
            self.breaker.success()
            return result
        raise AssertionError("unreachable")  # (_ADMIN_POLLS >= 1)

    def upkeep(self) -> None:
        """What the upkeep thread does, every ``refresh_s`` or when woken: poll the versions
        (plus names a lookup could not judge), catch the Bloom filter up, and once check
        Redis's eviction policy.  Each step behind the breaker."""
        if self.store is None or not self.breaker.allow():
            return
        wanted, names = self.sync.take_wanted()
        if wanted or names or time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self.refresh_s
            if not self.sync.poll(names):
                return
        bloom = self.bloom
        if bloom is not None and bloom.ready and bloom.sync_due() and self.breaker.allow():
            try:
                bloom.sync(self.store, self.namespace)
            except Exception as exc:
                self.link.failed("refresh", exc)
        self.sync.check_policy()
        self._tell_served()


class _ExactReads(_ExactParts):
    """Lookups: L1, then the Bloom filter, then L2, each entry judged against the versions.
    A lookup makes at most one store call before its L2 read, and only when it must: the
    versions are unverified (first use, store trouble) or the request has tags this process
    has not read.  Everything else the store is asked (polls, the Bloom filter's catch-up,
    what an entry from L2 needs) is the upkeep thread's job."""

    def get_steps(self, asked: Asked) -> Steps[ExactHit | None]:
        """A lookup begins: L1, then (when the versions, the Bloom filter and the breaker let
        it) L2.  A miss records the versions it began under (``misses``)."""
        key, tags = asked.key, asked.tags
        self.link.begin_lookup()
        names = self.sync.missing(tags)  # None: no store call needed (or allowed) first
        reachable = names is None or (yield from self.sync.poll_steps(names))
        if not self.versions.verified():
            self.metrics.incr(TIER, "unverified_skips")
            self._miss()
            self.misses.record(key, UNFIT)
            return None
        hit = self._from_l1(key, tags)
        store = self.link.store
        if hit is not None or store is None or not self._should_read_l2(key, reachable):
            return self._settled(key, tags, hit)
        deletes = self.versions.deletes  # (a delete learned during the read: not kept in L1)
        try:
            record = yield Call(store.get, store.aget, key)
        except Exception as exc:
            self.link.failed("read", exc)
            return self._settled(key, tags, None)
        self.breaker.success()
        if record is None:
            self._miss()
            return self._settled(key, tags, None)
        keep = self.versions.deletes == deletes
        return self._settled(key, tags, self._from_l2(key, record, tags, keep=keep))

    def _settled(self, key: str, tags: tuple[str, ...], hit: ExactHit | None) -> ExactHit | None:
        """A miss remembers the versions it began under, for the answer the caller will write."""
        if hit is None:
            self.misses.record(key, self._stamp(tags) or UNFIT)
        return hit

    def current(self, key: str, tags: tuple[str, ...]) -> CacheEntry | None:
        """The entry stored under ``key`` (written with ``tags``) now, its versions verified
        first (one poll when needed); ``None`` when it is gone, ``StoreUnavailable`` when the
        store cannot tell now.  For background work."""
        self.link.begin_lookup()
        if not run(self.sync.ready_steps(tags)):
            raise StoreUnavailable("versions not verified with the store")
        return self.fetch(key)

    def fetch(self, key: str) -> CacheEntry | None:
        """The current entry stored under ``key`` (L1, then L2), or ``None`` when it is known
        to be gone (expired, stale, corrupt); ``StoreUnavailable`` when that cannot be known
        now.  For tiers that hold references to exact entries; not counted as a lookup."""
        if not self.versions.verified():
            raise StoreUnavailable("versions not verified with the store")
        if self.link.spent():
            raise StoreUnavailable("the store already failed this lookup")  # one timeout at most
        entry = self.l1.get(key)
        if entry is not None:
            if self._judge(entry) is None:
                self._note_served(key)
                return entry
            self.l1.pop(key)
        if self.store is None or not key.startswith(entry_prefix(self.namespace)):
            return None
        if not self.breaker.allow():
            raise StoreUnavailable("circuit breaker open")
        try:
            record = self.store.get(key)
        except Exception as exc:
            self.link.failed("fetch", exc)
            raise StoreUnavailable(str(exc)) from None
        self.breaker.success()
        if record is None:
            return None
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry:
            self.metrics.incr(TIER, "corrupt")
            self.link.delete(key)
            return None
        if self._judge(entry, written=record.watermark) is not None:
            self.metrics.incr(TIER, "stale")
            self.link.delete(key)
            return None
        self._keep(key, entry, record)
        return entry

    def read(self, key: str) -> CacheEntry | None:
        """The current entry stored under ``key``, for an admin verb (``Cache.entry``, the
        review page): unlike ``fetch`` it works in a process that has looked nothing up, for
        it reads the versions first (and those of the entry's tags).  ``None`` when the entry
        is gone, stale or corrupt; ``StoreUnavailable`` when the store does not answer."""
        if self.store is None:
            entry = self.l1.get(key)
            return entry if entry is not None and self._judge(entry) is None else None
        if not key.startswith(entry_prefix(self.namespace)):
            return None
        self._verify_now()
        record = self._admin_call("read", self.store.get, key)
        if record is None:
            return None
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry:
            return None
        return None if self._stale(entry, record.watermark) else entry

    def _from_l1(self, key: str, tags: tuple[str, ...] = ()) -> ExactHit | None:
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
        if not self._declares(entry, tags):
            return None
        entry.hits += 1
        self.metrics.incr(TIER, "hits_l1")
        self._note_served(key)
        return ExactHit(entry, key, "l1")

    def _note_served(self, key: str) -> None:
        """An L1 hit, remembered for the store's recency (its LRU never sees it otherwise)."""
        if len(self._served) < _SERVED_MAX:
            self._served[key] = None

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

    def expect(self, key: str) -> None:
        """Another process may have just written ``key`` (a coalescing turn it led ended):
        the next lookup asks L2 for it, not the Bloom filter, which learns what others wrote
        only at its next catch-up."""
        if self.bloom is not None:
            self.bloom.add(key)

    def _surely_never_written(self, key: str) -> bool:
        bloom = self.bloom
        if bloom is None or bloom.might_contain(key):
            return False
        if bloom.sync_due():  # another process may have written it: catch up, off this path
            self._upkeep.wake()
        return True  # a key written elsewhere since the last catch-up costs one LLM call

    def _from_l2(
        self, key: str, record: Any, tags: tuple[str, ...] = (), *, keep: bool = True
    ) -> ExactHit | None:
        """The entry read from L2 for ``key``, judged; kept in L1 unless ``keep`` is false (a
        delete was learned while it was read: the emptied L1 must not get it back)."""
        try:
            entry = decode_entry(record.value, record.watermark)
        except CorruptEntry as exc:
            self.link.warn("corrupt value at %s deleted (%s)", key, exc)
            self.metrics.incr(TIER, "corrupt")
            self.link.delete(key)
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
            self.link.delete(key)
            self._miss()
            return None
        if keep:
            self._keep(key, entry, record)
        if not self._declares(entry, tags):
            self._miss()
            return None
        entry.hits += 1
        self.metrics.incr(TIER, "hits_l2")
        return ExactHit(entry, key, "l2")

    def _declares(self, entry: CacheEntry, tags: tuple[str, ...]) -> bool:
        """Whether ``entry`` was written under every tag of the request asking for it: a
        request that declares a dependency is never served an answer that did not declare it
        (one cached before the app tagged its calls: ``invalidate(tag)`` cannot reach it).
        The request's own answer, written under its tags, replaces it."""
        if not tags or all(tag in entry.tag_versions for tag in tags):
            return True
        self.metrics.incr(TIER, "undeclared_tags")
        return False


class _ExactWrites(_ExactParts):
    """Writes: an answer stored under the versions its miss began with (the miss ledger)."""

    def began(self, key: str) -> Stamp | None:
        """The versions the last miss of ``key`` in this thread or task began under."""
        return self.misses.peek(key)

    def settle(self, key: str) -> None:
        """The miss of ``key`` was answered another way (semantic tier, FAQ): no write will
        follow it."""
        self.misses.take(key)

    def put_steps(
        self,
        asked: Asked,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
        tokens: int = 0,
        model: str = "",
        stamp: Stamp | None = None,
        shared: bool = True,
        ttl: float | None = None,
    ) -> Steps[CacheEntry | None]:
        """Store an answer: the entry, or ``None`` when it is not stored (too large, or its
        versions moved while it was computed).  An L2 write that fails, or that the open
        breaker refuses, still leaves the entry in L1 (counted: ``dropped_writes``).
        ``stamp``: the versions its request began under (by default those its lookup's miss
        recorded, else the current ones).  ``shared=False``: only this request may get it (no
        semantic or FAQ match resolves to it)."""
        if self.sync.missing(asked.tags) is not None:  # an update with no lookup before it,
            yield from self.sync.ready_steps(asked.tags)  # or with tags its lookup had not
        prepared = self._prepare(
            asked, text, payload, category, negative, tokens, model, stamp, shared, ttl
        )
        if prepared is None:
            return None
        entry, data, ttl, stamp = prepared
        key, store = asked.key, self.store
        if store is not None and self._may_write():
            try:
                written = yield Call(store.set, store.aset, key, data, ttl)
                self.breaker.success()
            except Exception as exc:
                if refused(exc):  # the store is fine: this entry is not kept anywhere
                    self.breaker.success()
                    self.metrics.incr(TIER, "refused_writes")
                    self.link.warn("%s refused an entry: %s", self.store_name, exc)
                    return None
                self.link.failed("write", exc)
            else:
                polled = yield from self.sync.poll_steps()
                if not self._still_current(key, entry, stamp, written, polled):
                    return None
        if self.bloom is not None:
            self.bloom.add(key)
        self.l1.set(key, entry, self._l1_ttl(entry), size=len(data))
        self.metrics.incr(TIER, "writes")
        return entry

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
        self.link.delete(key)
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
        asked: Asked,
        text: str,
        payload: Any,
        category: str | None,
        negative: bool,
        tokens: int,
        model: str,
        stamp: Stamp | None,
        shared: bool,
        ttl: float | None = None,
    ) -> tuple[CacheEntry, bytes, float, Stamp] | None:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        tags = asked.tags
        category = category or asked.request.category
        # the versions its lookup began under; an update with no lookup: the current ones
        stamp = stamp or self.misses.take(asked.key) or self._stamp(tags) or UNFIT
        if stamp is UNFIT:  # its versions could not be read when it began
            self.metrics.incr(TIER, "unverified_writes")
            return None
        stamp = self._with_later_tags(stamp, tags)
        if set(stamp.tags) != set(tags) or not self.versions.current(stamp):
            self.metrics.incr(TIER, "stale_writes")  # the versions moved during the call
            return None
        entry = CacheEntry(
            text, payload, category, stamp.epoch, stamp.kb, dict(stamp.tags), negative,
            tokens=tokens, model=model, started=stamp.started, shared=shared,
            asked=asked.question[:MAX_ASKED], ttl=ttl or 0.0,
        )  # fmt: skip
        try:
            data = encode_entry(entry)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"payload must be plain data (MessagePack-able): {exc}") from None
        if len(data) > self.max_value_bytes:
            self.metrics.incr(TIER, "too_large")
            return None
        entry.watermark = stamp.started
        lifetime = ttl if ttl is not None else self.policy.ttl(category, negative=negative)
        return entry, data, lifetime, stamp


class _ExactUpkeep(_ExactParts):
    """Off the request path: the background upkeep, invalidation, eviction, deletes and the
    admin verbs' store calls."""

    def invalidate(self, tag: str) -> int:
        """Make every entry written under ``tag`` unreachable, in every process."""
        return int(self.sync.change(tag_meta(tag), None))

    def bump_kb_version(self) -> int:
        """New knowledge-base version: every existing entry of the namespace becomes stale."""
        return int(self.sync.change(KB, None))

    def set_min_watermark(self, watermark: float | None = None) -> float:
        """Entries whose requests began before ``watermark`` become stale; the time is on the
        store's clock (``None``: the store's clock now).  The floor never goes down: a lower
        value leaves it where it is.  Returns the floor now in force."""
        if watermark is not None and not math.isfinite(watermark):
            raise ValueError(f"watermark must be a finite time, got {watermark!r}")
        return self.sync.change(MIN_WATERMARK, watermark)

    def entries(self) -> Generator[tuple[str, CacheEntry], None, None]:
        """Every current entry of the namespace in L2 (or L1 without a store), key and entry:
        what ``Cache.entries`` lists.  Stale and corrupt ones are skipped (``evict`` deletes
        them)."""
        if self.store is None:
            for key, entry in self.l1.items():
                if self._judge(entry) is None:
                    yield key, entry
            return
        self._verify_now()
        for key, record in self.store.scan(self.namespace):
            try:
                entry = decode_entry(record.value, record.watermark)
            except CorruptEntry:
                continue
            if not self._evictable(entry, record.watermark):
                yield key, entry

    def evict(self) -> dict[str, int]:
        """Delete every stale or corrupt entry of the namespace from L2 (active eviction)."""
        counts = {"scanned": 0, "stale": 0, "corrupt": 0}
        if self.store is None:
            return counts
        self._verify_now()
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
        self.sync.sweep_l1()
        return counts

    def _evictable(self, entry: CacheEntry, written: float) -> bool:
        """Stale for sure (an admin task: it reads what this view lacks, then judges)."""
        try:
            return self._stale(entry, written)
        except StoreUnavailable:
            return False  # cannot tell: the entry stays

    def clear(self) -> None:
        """Drop every entry of the namespace, in L2 and in every process's L1."""
        self.l1.clear()
        if self.store is None:
            return
        self.sync.new_epoch()
        self.store.clear(self.namespace)

    def delete(self, key: str) -> None:
        """Remove one entry from L1 and L2, for an admin verb (``Cache.delete``, feedback):
        ``StoreUnavailable`` when the store did not take it."""
        self.l1.pop(key)
        if self.store is not None:
            self._admin_call("delete", self.store.delete, [key])
        self.sync.deleted([key])  # every cache of this process now, the others at a poll


class ExactTier(_ExactReads, _ExactWrites, _ExactUpkeep):
    """Exact-match cache of one namespace over an optional shared L2 store."""


# Redis Cluster nodes' clocks may differ a little; misjudging within it loses an entry (a newer
# one taken for stale is deleted), never serves a stale one.
_CLOCK_MARGIN_S = 0.05


_SERVED_MAX = 10_000  # L1 hits remembered between two ``touch`` calls (beyond: not told)
_TELL_SERVED_S = 1.0  # how often the store is told of L1 hits

_ADMIN_POLLS = 5  # an admin verb's tries at a poll (each within the store's short timeout)
