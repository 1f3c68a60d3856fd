"""The small pieces: request validation, entry codec, TTL-LRU, circuit breaker, TTL policy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from tricache import Cache, CacheEntry, CacheRequest, Exact, Faq, Learn, Redis, Semantic, TtlPolicy
from tricache.key.entry import SCHEMA_VERSION, CorruptEntry, decode_entry, encode_entry
from tricache.key.request import exact_key
from tricache.ops.breaker import CircuitBreaker
from tricache.stores.memory import TTLLRU


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# request -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"query": None},
        {"query": b"bytes"},
        {"query": 42},
        {"query": "q", "system": None},
        {"query": "q", "tenant": 7},
        {"query": "q", "history": "not turns"},
        {"query": "q", "history": 5},
        {"query": "q", "history": [("user",)]},
        {"query": "q", "history": [("user", None)]},
        {"query": "q", "tags": "a-string"},
        {"query": "q", "tags": [1]},
        {"query": "q", "category": 3},
    ],
)
def test_wrong_types_are_a_clear_type_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError, match="CacheRequest"):
        CacheRequest(**kwargs)  # type: ignore[arg-type]


def test_cache_request_takes_no_history_as_none(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "c.sqlite3", semantic=False, faq=False) as cache:
        assert cache.request("q", history=None).history == ()  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="history must be a sequence of turns, got int"):
            cache.request("q", history=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("namespace", ["", "has space", "a:b", "x" * 65, None])
def test_bad_namespace_is_a_value_error(namespace: object) -> None:
    with pytest.raises(ValueError, match="namespace"):
        CacheRequest("q", namespace=namespace)  # type: ignore[arg-type]


def test_odd_unicode_gives_distinct_keys_without_raising() -> None:
    odd = ["\ud800", "\udfff", "a\ud800b", "a\udbffb", "\x07bell", "\U0010ffff", ""]
    keys = {exact_key(CacheRequest(q)) for q in odd}
    assert len(keys) == len(odd)
    # control characters are form, not meaning
    assert exact_key(CacheRequest("a\x00b\x1b")) != exact_key(CacheRequest("a b"))  # kept as typed


def test_tags_are_sorted_and_deduplicated() -> None:
    assert CacheRequest("q", tags=["b", "a", "b"]).tags == ("a", "b")


# entry codec --------------------------------------------------------------------------------
def test_entry_round_trips_plain_data() -> None:
    payload = {
        "generations": [{"text": "hi", "info": None}],
        "raw": b"\x00\xff",
        "n": 1.5,
        "logit_bias": {50256: -100, -1: 0.5},  # integer keys, as LLM settings hold them
    }
    fields = dict(category="knowledge", epoch="e1", kb_version=3, tag_versions={"docs": 2},
                  hits=4, tokens=52, model="m")  # fmt: skip
    entry = CacheEntry("hi \ud800", payload, started=120.0, **fields)  # type: ignore[arg-type]
    back = decode_entry(encode_entry(entry), 123.5)
    # as old as its request: the earlier of its start and the store's write time
    assert back == CacheEntry("hi \ud800", payload, watermark=120.0, started=120.0, **fields)  # type: ignore[arg-type]
    assert decode_entry(encode_entry(CacheEntry("t")), 99.0).watermark == 99.0


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        b"random bytes that are not msgpack \xff\xfe",
        msgpack.packb([SCHEMA_VERSION + 1, "t", None, None, "e", 0, {}, False, 0, 0, "", 0.0]),
        msgpack.packb([SCHEMA_VERSION, 5, None, None, "e", 0, {}, False, 0, 0, "", 0.0]),
        msgpack.packb([SCHEMA_VERSION, "t", None, None, "e", 0, {"tag": "x"}, False, 0, 0, "", 0]),
        msgpack.packb([SCHEMA_VERSION, "t", None, None, 7, 0, {}, False, 0, 0, "", 0.0]),
        msgpack.packb([SCHEMA_VERSION, "t", None, None, "e", 0, {}, False, 0, 0, "", "x"]),
        msgpack.packb([SCHEMA_VERSION - 1, "t", None, None, 0, {}, False, 0, 0, ""]),
        msgpack.packb({"not": "a list"}),
        encode_entry(CacheEntry("truncated " * 10))[:-3],
    ],
)
def test_malformed_values_raise_corrupt_entry(data: bytes) -> None:
    with pytest.raises(CorruptEntry):
        decode_entry(data, 0.0)


def test_objects_are_not_plain_data() -> None:
    with pytest.raises(TypeError):
        encode_entry(CacheEntry("t", payload=object()))


# TTL-LRU ------------------------------------------------------------------------------------
def test_ttllru_expires_items() -> None:
    clock = Clock()
    lru: TTLLRU[str] = TTLLRU(clock=clock)
    lru.set("a", "A", ttl=10)
    clock.now += 9.9
    assert lru.get("a") == "A"
    clock.now += 0.2
    assert lru.get("a") is None and len(lru) == 0


def test_ttllru_evicts_least_recently_used_by_count_and_bytes() -> None:
    lru: TTLLRU[int] = TTLLRU(max_items=3, max_bytes=100)
    for i, k in enumerate("abc"):
        lru.set(k, i, ttl=60, size=10)
    lru.get("a")  # a is now the most recent
    lru.set("d", 3, ttl=60, size=10)
    assert lru.get("b") is None and lru.get("a") == 0
    lru.set("big", 4, ttl=60, size=85)  # needs 85 of 100 bytes: evicts until it fits
    assert lru.bytes <= 100 and lru.get("big") == 4 and len(lru) == 2
    lru.set("huge", 5, ttl=60, size=101)  # larger than the whole cache: not kept
    assert lru.get("huge") is None


def test_ttllru_is_consistent_under_threads() -> None:
    lru: TTLLRU[int] = TTLLRU(max_items=50, max_bytes=10_000)

    def work(offset: int) -> None:
        for i in range(2000):
            lru.set(f"k{(i + offset) % 120}", i, ttl=60, size=7)
            lru.get(f"k{(i * 7) % 120}")
            if i % 50 == 0:
                lru.remove_if(lambda v: v % 3 == 0)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lru) <= 50
    assert lru.bytes == 7 * len(lru)


# breaker ------------------------------------------------------------------------------------
def test_breaker_opens_backs_off_and_closes() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=3, backoff=1.0, max_backoff=4.0, clock=clock)
    for _ in range(2):
        breaker.failure()
    assert breaker.allow()
    breaker.failure()
    assert not breaker.allow() and breaker.opened == 1
    clock.now += 1.01
    assert breaker.allow()  # one trial call
    breaker.failure()  # the trial failed: open again, for twice as long
    assert not breaker.allow()
    clock.now += 1.5
    assert not breaker.allow()
    clock.now += 0.6
    assert breaker.allow()
    breaker.success()
    breaker.failure()
    assert breaker.allow()  # the count restarted after the success


def test_breaker_lets_one_trial_through_at_a_time() -> None:
    """After the back-off one caller probes the store; the other threads keep skipping it
    until that trial reports (16 threads each paid a store timeout at every window)."""
    clock = Clock()
    breaker = CircuitBreaker(failures=3, backoff=1.0, clock=clock)
    for _ in range(3):
        breaker.failure()
    clock.now += 1.01
    assert breaker.allow()  # the trial
    assert not breaker.allow() and not breaker.allow()  # the others, meanwhile
    breaker.success()
    assert breaker.allow() and breaker.allow()  # closed
    for _ in range(3):
        breaker.failure()
    clock.now += 2.01
    assert breaker.allow()
    clock.now += 1.1  # a trial that never reported: another one after trial_s (1 s)
    assert breaker.allow() and not breaker.allow()


def test_breaker_counts_an_outage_once_however_many_threads_saw_it() -> None:
    """16 calls in flight when the store stopped answering: the first failures open the
    breaker, the rest change nothing (each doubled the back-off, 1 s became 30 s at once)."""
    clock = Clock()
    breaker = CircuitBreaker(failures=3, backoff=1.0, max_backoff=30.0, clock=clock)
    for _ in range(16):
        breaker.failure()
    assert breaker.opened == 1 and not breaker.allow()
    clock.now += 1.01
    assert breaker.allow()  # after the first back-off, not the longest


# TTL policy ---------------------------------------------------------------------------------
def test_ttl_jitter_stays_within_twenty_percent_and_spreads() -> None:
    policy = TtlPolicy(default=100, jitter=0.2)
    ttls = [policy.ttl(None) for _ in range(2000)]
    assert all(100 <= t <= 120 for t in ttls)
    assert max(ttls) - min(ttls) > 15  # they really spread


def test_ttl_per_category_and_negative() -> None:
    policy = TtlPolicy(default=3600, categories={"chitchat": 600, "realtime": 60}, jitter=0)
    assert policy.ttl("chitchat") == 600
    assert policy.ttl("realtime") == 60
    assert policy.ttl("unknown-category") == 3600
    assert policy.ttl("chitchat", negative=True) == policy.negative
    with pytest.raises(ValueError):
        TtlPolicy(jitter=2)


def test_a_served_payload_is_the_callers_own_copy(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as cache:
        request = cache.request("What is the refund policy?")
        cache.update(request, "30 days.", {"tool_calls": [{"args": {"n": 1}}], "bias": {50256: -1}})
        first = cache.lookup(request)
        assert first is not None
        first.payload["tool_calls"][0]["args"]["n"] = 2
        second = cache.lookup(request)
        assert second is not None and second.payload["tool_calls"][0]["args"]["n"] == 1
        assert second.payload["bias"] == {50256: -1}  # integer keys round-trip
        cache.exact.l1.clear()  # from L2 too
        third = cache.lookup(request)
        assert third is not None and third.payload["bias"] == {50256: -1}


def test_a_partial_catch_up_does_not_verify_a_view() -> None:
    from tricache.exact.versions import VersionView
    from tricache.stores.base import VersionState

    view = VersionView()
    asked = (time.time(), time.monotonic())
    view.apply(VersionState("e1", time.time(), seq=20_000, upto=5_000, values={}), asked=asked)
    assert not view.verified() and view.seq == 5_000
    view.apply(VersionState("e1", time.time(), seq=20_000, upto=20_000, values={}), asked=asked)
    assert view.verified()


def test_a_view_is_verified_by_the_monotonic_clock_not_the_wall_clock() -> None:
    from tricache.exact.versions import VersionView
    from tricache.stores.base import VersionState

    view = VersionView(max_lag=2.0)
    wall_an_hour_ahead = time.time() + 3600  # the wall clock stepped during the poll
    state = VersionState("e1", time.time(), 0, 0, {})
    view.apply(state, asked=(wall_an_hour_ahead, time.monotonic() - 5))  # sent 5 s ago
    assert not view.verified()


def test_epochs_only_move_forward_in_a_view() -> None:
    from tricache.exact.versions import VersionView
    from tricache.stores.base import VersionState

    view = VersionView()
    now = (time.time(), time.monotonic())
    view.apply(VersionState("e1", time.time(), 1, 1, {"tag:a": 3}), asked=now)
    assert view.apply(VersionState("e2", time.time(), 0, 0, {}), asked=now) is True
    assert view.apply(VersionState("e1", time.time(), 1, 1, {"tag:a": 3}), asked=now) is False
    assert view.epoch == "e2" and view.retired("e1") and view.tag("a") == 0


def test_settings_objects_and_the_old_keywords() -> None:
    import warnings

    from tricache import Exact, Faq, Qdrant, Redis, Semantic

    cache = Cache(
        store=False, exact=Exact(bloom=False, l1_max_items=7), semantic=Semantic(threshold=0.95),
        faq=Faq(threshold=0.9), warm=False,
    )  # fmt: skip
    assert cache.exact.bloom is None and cache.exact.l1.max_items == 7
    assert cache.settings.semantic is not None and cache.settings.semantic.threshold == 0.95
    assert cache.settings.faq is not None and cache.settings.faq.threshold == 0.9
    off = Cache(store=False, semantic=False, faq=False, warm=False)
    assert off.settings.semantic is None and off.settings.faq is None

    def old_keywords(**kw: object) -> tuple[Cache, list[str]]:
        """A cache made with keywords of earlier releases, and the warnings that call gave."""
        with warnings.catch_warnings(record=True) as caught:  # one release of the old keywords
            warnings.simplefilter("always")
            made = Cache(warm=False, **kw)  # type: ignore[arg-type]
        mine = [w for w in caught if w.filename == __file__]  # (not a warm-up thread's)
        assert [w.category for w in mine] == [DeprecationWarning], [str(w) for w in mine]
        return made, [str(w.message) for w in mine]

    old, said = old_keywords(l2=False, bloom=False, threshold=0.95, faq_threshold=0.9)
    assert "Exact(...)" in said[0] and "Semantic(...)" in said[0]
    assert old.exact.bloom is None and old.settings.semantic.threshold == 0.95  # type: ignore[union-attr]
    assert old.settings.faq.threshold == 0.9  # type: ignore[union-attr]
    assert old.settings.l2 is False and "store=False" in said[0]
    # the store's keywords: the Redis (not connected here: nothing listens on port 1)
    url = "redis://127.0.0.1:1/0"
    on_redis, said = old_keywords(
        redis_url=url, cluster=True, timeout=0.2, semantic=False, faq=False
    )
    assert on_redis.settings.store == Redis(url, cluster=True, timeout=0.2)
    assert "store=Redis(url, cluster=...)" in said[0] and "store=Redis(url, timeout=...)" in said[0]
    store = on_redis.exact.store
    assert store is not None and store.cluster is True and store.timeout == 0.2  # type: ignore[attr-defined]
    on_redis.close()
    # ... and Qdrant (with warm=False the tier is opened later, off this call)
    on_qdrant, said = old_keywords(store=False, qdrant_url="http://127.0.0.1:1", faq=False)
    assert on_qdrant.settings.semantic is not None
    assert on_qdrant.settings.semantic.index == Qdrant("http://127.0.0.1:1")
    assert "Semantic(index=Qdrant(url))" in said[0]
    with pytest.raises(TypeError, match="thresold"):
        Cache(store=False, thresold=0.9)
    with pytest.raises(TypeError, match="Semantic"):
        Cache(store=False, semantic={"threshold": 0.9})  # type: ignore[arg-type]


def test_where_the_store_and_the_index_are_is_said_once() -> None:
    from tricache import Qdrant, Redis

    url = "redis://127.0.0.1:1/0"
    with pytest.raises(TypeError, match="redis_url"):
        Cache(store=Redis(url), redis_url=url, semantic=False, faq=False)
    with pytest.raises(TypeError):
        Redis("")
    with pytest.raises(TypeError):
        Qdrant()


@pytest.mark.parametrize(
    ("make", "error", "names"),
    [
        (lambda: Semantic(threshold=1.5), ValueError, "Semantic(threshold=1.5)"),
        (lambda: Semantic(threshold=0), ValueError, "threshold"),
        (lambda: Semantic(threshold="0.9"), TypeError, "threshold"),
        (lambda: Semantic(threshold=float("nan")), ValueError, "threshold"),
        (lambda: Semantic(top_k=0), ValueError, "top_k"),
        (lambda: Semantic(top_k=2.5), TypeError, "top_k"),
        (lambda: Semantic(guards="numbers"), TypeError, "guards"),
        (lambda: Semantic(reranker=3), TypeError, "reranker"),
        (lambda: Semantic(audit="yes"), TypeError, "audit"),
        (lambda: Semantic(learn=0.01), TypeError, "learn"),
        (lambda: Faq(threshold=2), ValueError, "Faq(threshold=2)"),
        (lambda: Faq(learn=True), TypeError, "learn"),
        (lambda: Exact(refresh_s=-1), ValueError, "refresh_s"),
        (lambda: Exact(l1_max_items=-5), ValueError, "l1_max_items"),
        (lambda: Exact(bloom=None), TypeError, "bloom"),
        (lambda: Exact(cache_version=""), TypeError, "cache_version"),
        (lambda: Exact(ttl=60), TypeError, "ttl"),
        (lambda: Redis("redis://x", timeout=0), ValueError, "timeout"),
        (lambda: Redis("redis://x", timeout=float("inf")), ValueError, "timeout"),
        (lambda: Redis("http://x"), ValueError, "redis://"),
        (lambda: Learn(error_bound=0), ValueError, "error_bound"),
        (lambda: Learn(explore=0.9), ValueError, "explore"),
    ],
)
def test_every_setting_is_checked_when_built_and_the_error_names_it(
    make: Callable[[], object], error: type[Exception], names: str
) -> None:
    """httpx's ``Timeout`` is the model: a wrong setting fails where it is written, not in a
    background warm-up that then runs again at every lookup (issue #32: ``Semantic(threshold=
    1.5)`` built, and the semantic tier never opened)."""
    with pytest.raises(error) as raised:
        make()
    assert names in str(raised.value)


def test_a_cache_with_a_bad_setting_fails_when_made() -> None:
    with pytest.raises(ValueError, match="threshold"):
        Cache(semantic=Semantic(threshold=1.5), store=False)
