"""The exact tier on both L2 stores (real SQLite, real Redis): hits, isolation, staleness."""

from __future__ import annotations

import asyncio
import os
import time

import msgpack
import pytest
import redis

from tricache import Cache, Exact, TtlPolicy
from tricache.key.entry import SCHEMA_VERSION, CacheEntry, encode_entry

from conftest import CacheFactory


def test_miss_then_hit_from_l1_then_from_l2_in_another_instance(make_cache: CacheFactory) -> None:
    a, b = make_cache(), make_cache()
    req = a.request("How do I reset my password?", system="helpdesk", llm_key="m1")
    assert a.lookup(req) is None
    assert a.update(req, "Use 'Forgot password'.", {"usage": {"tokens": 12}})
    hit = a.lookup(req)
    assert hit is not None and hit.level == "l1" and hit.payload == {"usage": {"tokens": 12}}
    same = b.request("how do I  reset my password", system="helpdesk", llm_key="m1")
    hit = b.lookup(same)
    assert hit is not None and hit.level == "l2" and hit.text == "Use 'Forgot password'."
    assert b.lookup(same).level == "l1"  # type: ignore[union-attr]


def test_tenants_and_namespaces_never_see_each_other(make_cache: CacheFactory) -> None:
    a = make_cache(tenant="alice")
    b = make_cache(tenant="bob")
    other_ns = make_cache(namespace=a.namespace + "x", tenant="alice")
    a.update(a.request("how do i upgrade my plan?"), "alice: Pro")
    assert b.lookup(b.request("how do i upgrade my plan?")) is None
    assert other_ns.lookup(other_ns.request("how do i upgrade my plan?")) is None
    # the same process and L1, a per-call tenant
    assert a.lookup(a.request("how do i upgrade my plan?", tenant="bob")) is None
    assert a.lookup(a.request("how do i upgrade my plan?")).text == "alice: Pro"  # type: ignore[union-attr]


def test_kb_version_bump_makes_every_entry_stale(make_cache: CacheFactory) -> None:
    a, b = make_cache(), make_cache()
    reqs = [a.request(f"question {i}") for i in range(3)]
    for r in reqs:
        a.update(r, "old answer")
    a.bump_kb_version()
    assert all(a.lookup(r) is None for r in reqs)
    assert all(b.lookup(r) is None for r in reqs)  # b learns it from the store
    assert a.stats()["exact"]["stale_kb_version"] == 3
    assert a.exact.store.get(reqs[0] and a.exact.key(reqs[0])) is None  # deleted lazily
    a.update(reqs[0], "new answer")
    # b's Bloom filter learns other processes' writes in the background: until then a miss
    deadline = time.monotonic() + 5
    while (hit := b.lookup(reqs[0])) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hit is not None and hit.text == "new answer"


def test_tag_invalidation_hits_only_tagged_entries(make_cache: CacheFactory) -> None:
    cache = make_cache()
    tagged = cache.request("price of the Pro plan?", tags=["pricing"])
    other = cache.request("how to reset password?", tags=["accounts"])
    plain = cache.request("hello")
    for r in (tagged, other, plain):
        cache.update(r, "answer")
    assert cache.invalidate("pricing") == 1
    assert cache.lookup(tagged) is None
    assert cache.lookup(other) is not None and cache.lookup(plain) is not None
    cache.update(tagged, "new price")  # written under the new tag version
    assert cache.lookup(tagged).text == "new price"  # type: ignore[union-attr]


def test_a_process_that_never_saw_a_tag_still_honours_its_invalidation(
    make_cache: CacheFactory,
) -> None:
    writer = make_cache()
    req = writer.request("what does the handbook say?", tags=["handbook"])
    writer.update(req, "page 12")
    writer.invalidate("handbook")
    # started after the invalidation; never tracked the tag
    newcomer = make_cache(exact=Exact(bloom=False))
    assert newcomer.lookup(req) is None
    assert newcomer.stats()["exact"]["stale_tag"] == 1


def test_min_watermark_drops_older_entries(make_cache: CacheFactory) -> None:
    cache = make_cache()
    old = cache.request("old question")
    cache.update(old, "old")
    time.sleep(0.01)
    cache.set_min_watermark()
    time.sleep(0.01)
    new = cache.request("new question")
    cache.update(new, "new")
    assert cache.lookup(old) is None
    assert cache.lookup(new) is not None
    assert cache.stats()["exact"]["stale_watermark"] == 1


def test_watermark_comes_from_the_store_clock(
    make_cache: CacheFactory, backend: str, redis_client: redis.Redis
) -> None:
    cache = make_cache()
    req = cache.request("q")
    cache.update(req, "a")
    record = cache.exact.store.get(cache.exact.key(req))
    assert record is not None
    if backend == "redis":
        seconds, micros = redis_client.time()
        assert 0 <= seconds + micros / 1e6 - record.watermark < 5
    else:
        assert 0 <= time.time() - record.watermark < 5


@pytest.mark.parametrize(
    "garbage",
    [
        os.urandom(64),
        b"",
        msgpack.packb([SCHEMA_VERSION + 7, "future", None, None, 0, {}, False, 0, 0, ""]),
        encode_entry(CacheEntry("cut short " * 20))[:-5],
    ],
)
def test_corrupt_values_are_a_miss_deleted_and_counted(
    make_cache: CacheFactory, backend: str, redis_client: redis.Redis, garbage: bytes
) -> None:
    writer, reader = make_cache(), make_cache(exact=Exact(bloom=False))
    req = writer.request("what is corrupt?")
    key = writer.exact.key(req)
    if backend == "redis":
        redis_client.set(key, garbage)  # raw: not even a watermark header
    else:
        writer.exact.store.set(key, garbage, 60)
    assert reader.lookup(req) is None
    assert reader.stats()["exact"]["corrupt"] == 1
    assert reader.exact.store.get(key) is None


def test_ttls_follow_the_category_with_jitter(
    make_cache: CacheFactory, backend: str, redis_client: redis.Redis
) -> None:
    policy = TtlPolicy(default=1000, categories={"realtime": 100}, jitter=0.2)
    cache = make_cache(exact=Exact(ttl=policy))
    for category, base in [("realtime", 100), (None, 1000)]:
        req = cache.request(f"q {category}", category=category)
        cache.update(req, "a")
        key = cache.exact.key(req)
        if backend == "redis":
            ttl = redis_client.pttl(key) / 1000
        else:
            row = cache.exact.store._db.execute(  # type: ignore[union-attr]
                "SELECT expires_at - watermark FROM entries WHERE key = ?", (key,)
            ).fetchone()
            ttl = row[0]
        assert base * 0.99 <= ttl <= base * 1.2 + 0.01


def test_expired_entries_are_gone(make_cache: CacheFactory) -> None:
    policy = TtlPolicy(default=1.0, jitter=0, l1=1.0)
    cache = make_cache(exact=Exact(ttl=policy))
    req = cache.request("short lived")
    cache.update(req, "a")
    assert cache.lookup(req) is not None
    time.sleep(1.3)
    assert cache.lookup(req) is None


def test_negative_entries_are_trusted_misses(make_cache: CacheFactory) -> None:
    cache = make_cache()
    req = cache.request("something with no cacheable answer")
    assert cache.update(req, "", negative=True)
    assert cache.lookup(req) is None
    assert cache.stats()["exact"]["negative_hits"] == 1
    assert cache.update(req, "a real answer")
    assert cache.lookup(req).text == "a real answer"  # type: ignore[union-attr]


def test_evict_removes_stale_and_corrupt_entries(make_cache: CacheFactory) -> None:
    cache = make_cache()
    keep = cache.request("keep me")
    cache.update(keep, "kept")
    for i in range(4):
        cache.update(cache.request(f"doomed {i}", tags=["old-docs"]), "x")
    cache.exact.store.set(f"tricache:{cache.namespace}:x:{'ab' * 20}", b"\x00garbage", 60)
    cache.invalidate("old-docs")
    counts = cache.evict()
    assert counts == {"scanned": 6, "stale": 4, "corrupt": 1}
    assert sorted(cache.exact.store.keys(cache.namespace)) == [cache.exact.key(keep)]


def test_too_large_values_are_not_stored(make_cache: CacheFactory) -> None:
    cache = make_cache()
    cache.exact.max_value_bytes = 1000
    req = cache.request("q")
    assert not cache.update(req, "x" * 2000)
    assert cache.lookup(req) is None
    assert cache.stats()["exact"]["too_large"] == 1


def test_huge_and_empty_prompts_work(make_cache: CacheFactory) -> None:
    cache = make_cache()
    huge = cache.request("lorem ipsum " * 90_000)  # ~1 MB
    empty = cache.request("")
    cache.update(huge, "huge answer")
    cache.update(empty, "empty answer")
    assert cache.lookup(huge).text == "huge answer"  # type: ignore[union-attr]
    assert cache.lookup(empty).text == "empty answer"  # type: ignore[union-attr]
    assert cache.lookup(cache.request("lorem ipsum " * 89_999)) is None


def test_bad_arguments_raise_clear_errors(make_cache: CacheFactory) -> None:
    cache = make_cache()
    with pytest.raises(TypeError):
        cache.lookup("a plain string")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cache.request(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace"):
        cache.lookup(Cache(store=False, namespace="elsewhere").request("q"))
    with pytest.raises(TypeError):
        cache.update(cache.request("q"), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="plain data"):
        cache.update(cache.request("q"), "a", payload=object())


def test_async_lookup_and_update(make_cache: CacheFactory) -> None:
    a, b = make_cache(), make_cache()

    async def scenario(question: str) -> None:
        req = a.request(question)
        assert await a.alookup(req) is None
        assert await a.aupdate(req, "async answer", {"k": [1, 2]})
        # b's Bloom filter learns other processes' writes in the background: until then a miss
        deadline = time.monotonic() + 5
        while (hit := await b.alookup(req)) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert hit is not None and hit.text == "async answer" and hit.level == "l2"
        hits = await asyncio.gather(*(b.alookup(req) for _ in range(20)))
        assert all(h is not None and h.payload == {"k": [1, 2]} for h in hits)

    asyncio.run(scenario("async question"))
    asyncio.run(scenario("another one"))  # a second event loop: clients are per loop


def test_l1_only_cache_needs_no_store() -> None:
    cache = Cache(store=False)
    req = cache.request("q", tags=["t"])
    cache.update(req, "a")
    assert cache.lookup(req).text == "a"  # type: ignore[union-attr]
    cache.invalidate("t")
    assert cache.lookup(req) is None
    assert cache.stats()["store"]["l2"] == "none"


def test_embedded_default_lives_under_tricache_home(tmp_path: object) -> None:
    with Cache() as cache:
        cache.update(cache.request("q"), "a")
        path = cache.exact.store.path  # type: ignore[union-attr]
    assert str(path).startswith(os.environ["TRICACHE_HOME"])
    with Cache() as again:  # survives a restart
        assert again.lookup(again.request("q")).text == "a"  # type: ignore[union-attr]
