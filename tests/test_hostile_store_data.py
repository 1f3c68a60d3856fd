"""What a hand or a bug may leave in the shared Redis: a key of another type where an entry
belongs, a record of the write log that names no key, a shared counter that is no whole number.
Each is skipped as the documented hostile value is (docs/security.md: a miss, the key deleted, a
counter incremented), never read as a store failure: the rest goes on being served and counted.
Each test has a private redis-server; commands run as a user runs them, in a fresh process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import redis

from tricache import Cache, Exact

from conftest import RedisServer

NAMESPACE = "hostile"

# a key of each other type, where a MessagePack string belongs
OTHER_TYPES: dict[str, Callable[[redis.Redis, str], object]] = {
    "hash": lambda client, key: client.hset(key, "a", "b"),
    "list": lambda client, key: client.rpush(key, "a"),
    "zset": lambda client, key: client.zadd(key, {"a": 1}),
}


def tricache(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tricache", *args], capture_output=True, text=True, timeout=120)


def open_cache(server: RedisServer, **options: object) -> Cache:
    options.setdefault("exact", Exact(bloom=False))  # every lookup reads L2
    return Cache(redis_url=server.url, namespace=NAMESPACE, semantic=False, faq=False, **options)  # type: ignore[arg-type]


def replace(client: redis.Redis, key: str, kind: str) -> None:
    client.delete(key)
    OTHER_TYPES[kind](client, key)


@pytest.mark.parametrize("kind", sorted(OTHER_TYPES))
def test_an_entry_key_of_another_type_is_a_corrupt_value(
    private_redis: RedisServer, kind: str
) -> None:
    client = redis.Redis.from_url(private_redis.url)
    with open_cache(private_redis) as writer:
        good = writer.request("How do I export a report?")
        bad = writer.request("Which plans have SSO?")
        writer.update(good, "From the menu.")
        writer.update(bad, "Business.")
        key = writer.exact.key(bad)
    with open_cache(private_redis) as reader:
        for _ in range(10):  # more than the breaker's three failures in a row
            replace(client, key, kind)
            assert reader.lookup(bad) is None
            assert not client.exists(key)
        replace(client, key, kind)
        assert asyncio.run(reader.alookup(bad)) is None
        assert not client.exists(key)
        hit = reader.lookup(good)
        assert hit is not None and hit.text == "From the menu."
        stats = reader.stats()
    assert stats["exact"]["corrupt"] == 11
    assert "read_errors" not in stats["exact"]
    assert not stats["store"]["breaker_open"]


def test_entries_and_evict_pass_over_an_entry_key_of_another_type(
    private_redis: RedisServer,
) -> None:
    client = redis.Redis.from_url(private_redis.url)
    with open_cache(private_redis) as cache:
        for i in range(3):
            cache.update(cache.request(f"How do I export report {i}?"), f"R{i}")
        key = cache.exact.key(cache.request("How do I export report 0?"))
        replace(client, key, "hash")
        assert sorted(e.answer for e in cache.entries()) == ["R1", "R2"]
    where = ["--redis-url", private_redis.url, "--namespace", NAMESPACE]
    listed = tricache("entries", "list", "--json", *where)
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(line)["answer"] for line in listed.stdout.splitlines()) == ["R1", "R2"]
    evicted = tricache("evict", *where)
    assert evicted.returncode == 0, evicted.stderr
    assert json.loads(evicted.stdout) == {"scanned": 3, "stale": 0, "corrupt": 1}
    assert not client.exists(key)


WRITER = """
from tricache import Cache
with Cache(redis_url={url!r}, namespace={namespace!r}, semantic=False, faq=False) as cache:
    for i in range(5):
        cache.update(cache.request(f"How do I export report {{i}}?"), f"R{{i}}")
"""


def wait_for(done: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_write_log_record_that_names_no_key_is_skipped(private_redis: RedisServer) -> None:
    client = redis.Redis.from_url(private_redis.url)
    with open_cache(private_redis, exact=Exact()) as reader:  # with its Bloom filter
        reader.update(reader.request("warm"), "w")
        assert wait_for(lambda: reader.exact.bloom is not None and reader.exact.bloom.ready)
        log = f"tricache:{NAMESPACE}:wlog"
        client.xadd(log, {b"\xff": b"\x00"})  # no key
        client.xadd(log, {"k": b"\xff\xfe"})  # a key that is not UTF-8
        code = WRITER.format(url=private_redis.url, namespace=NAMESPACE)
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)  # another process
        asked = [reader.request(f"How do I export report {i}?") for i in range(5)]
        assert wait_for(lambda: all(reader.lookup(r) is not None for r in asked))
        with open_cache(private_redis, exact=Exact()) as late:  # its first load reads the log
            late.lookup(late.request("warm"))
            assert wait_for(lambda: late.exact.bloom is not None and late.exact.bloom.ready)
        stats = reader.stats()["exact"]
    assert stats["wlog_skipped"] == 2
    assert "refresh_errors" not in stats


# what a hand may write among the counters every process adds to (``tricache:{ns}:stats:<n>``)
HOSTILE_STATS: dict[str, Callable[[redis.Redis, str], object]] = {
    "NaN": lambda client, key: client.hset(key, "exact.misses", "NaN"),
    "1.5": lambda client, key: client.hset(key, "exact.misses", "1.5"),
    "x": lambda client, key: client.hset(key, "made_up.counter", "x"),
    "a bucket of another type": lambda client, key: client.rpush(_bucket_before(key), "x"),
}


def _bucket_before(key: str) -> str:
    head, _, bucket = key.rpartition(":")
    return f"{head}:{int(bucket) - 1}"


@pytest.mark.parametrize("hostile", sorted(HOSTILE_STATS))
def test_a_shared_counter_that_is_no_whole_number_is_left_out(
    private_redis: RedisServer, hostile: str
) -> None:
    with open_cache(private_redis) as cache:
        for i in range(3):
            asked = cache.request(f"How do I export report {i}?")
            cache.lookup(asked)
            cache.update(asked, "a")
            cache.lookup(asked)
    client = redis.Redis.from_url(private_redis.url, decode_responses=True)
    [key] = client.keys(f"tricache:{{{NAMESPACE}}}:stats:*")
    HOSTILE_STATS[hostile](client, key)
    where = ["--redis-url", private_redis.url, "--namespace", NAMESPACE]
    figures = tricache("stats", "--json", *where)
    assert figures.returncode == 0, figures.stderr
    assert json.loads(figures.stdout.splitlines()[-1])["lookups"] == 6
    table = tricache("stats", *where)
    assert table.returncode == 0, table.stderr
    exposition = tricache("metrics", "--once", *where)
    assert exposition.returncode == 0, exposition.stderr
    assert 'tricache_events_total{event="lookups",tier="requests"} 6.0' in exposition.stdout
