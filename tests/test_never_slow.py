"""Never slow, never stuck: the promises of docs/operations.md ("Never slow", "Warm-up"),
attacked — a cold process, a fork after use, a hung store, and the event loop watched by
blockbuster (any blocking call on it raises)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tricache import Cache, Exact, Semantic

from conftest import REDIS_URL, RedisServer, SearchServer
from procs import use_inherited_cache

fork = multiprocessing.get_context("fork")


def _wait(predicate: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


# warm-up ------------------------------------------------------------------------------------
def test_a_cold_cache_answers_at_once_and_warms_up_in_the_background(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TRICACHE_WARM")  # the default: warm up in the background
    cache = Cache(path=tmp_path / "cold.sqlite3")
    first = cache.request("How do I reset my password?")
    assert cache.lookup(first) is None  # answered now: the semantic tier is not open yet
    assert cache.update(first, "Settings > Security.")  # the exact tier stores at once
    assert cache.lookup(first).tier == "exact"  # type: ignore[union-attr]
    _wait(lambda: cache.tiers.semantic is not None)
    # the answer written while warming was indexed once the tier opened
    _wait(lambda: cache.lookup(cache.request("How can I reset my password?")) is not None)
    hit = cache.lookup(cache.request("How can I reset my password?"))
    assert hit is not None and hit.tier == "semantic"
    assert cache.stats()["semantic"]["warming_skips"] >= 1
    cache.close()


def test_warm_true_blocks_until_the_tiers_are_open(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TRICACHE_WARM")
    cache = Cache(path=tmp_path / "warm.sqlite3", warm=True)
    assert cache.tiers.semantic is not None
    cache.close()


EXIT_SCRIPT = """
import atexit, threading

def no_warm_up_left():  # registered first, so it runs after tricache's own exit hook
    from tricache.runtime import exit
    print("warm-up in native code" if exit._native_steps else "no warm-up", flush=True)

atexit.register(no_warm_up_left)

from tricache import Cache

cache = Cache(path="{path}")  # warms up in the background
cache.update(cache.request("How do I reset my password?"), "Settings > Security.")
print(cache.lookup(cache.request("How do I reset my password?")).tier, flush=True)
"""  # and the script ends at once, mid-warm-up


def _run_cold(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run as a script, its cache warming up in the background (the default)."""
    script = tmp_path / "script.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"}
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip  (a hung exit fails here)


def test_a_script_that_ends_during_the_warm_up_exits_cleanly(tmp_path: Path) -> None:
    """CPython stops daemon threads where they stand when it finalizes: a warm-up still in
    native code then (spaCy's BLAS) aborted a README example after it had printed its answer.
    The exit now waits for a native step under way (a step in Python code is simply stopped),
    and the warm-up begins no other."""
    result = _run_cold(tmp_path, EXIT_SCRIPT.format(path=tmp_path / "c.sqlite3"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["exact", "no warm-up"], result.stdout
    assert "tricache" not in result.stderr, result.stderr  # (no "warm-up failed" at exit)


FORK_EXIT_SCRIPT = """
import os, sys
from tricache import Cache

cache = Cache(path="{path}")  # warms up in the background
request = cache.request("How do I reset my password?")
cache.update(request, "Settings > Security.")
pid = os.fork()  # mid-warm-up: the child has no warm-up thread, and warms up on its own
hit = cache.lookup(request)
say = lambda line: os.write(1, (line + "\\n").encode())  # one write: the two never interleave
say(("child " if pid == 0 else "parent ") + (hit.tier if hit else "miss"))
if pid:
    _, status = os.waitpid(pid, 0)
    say(f"child exit {{os.waitstatus_to_exitcode(status)}}")
"""  # both processes end at once, each with its own exit


def test_a_child_forked_during_the_warm_up_and_its_parent_both_exit_cleanly(
    tmp_path: Path,
) -> None:
    result = _run_cold(tmp_path, FORK_EXIT_SCRIPT.format(path=tmp_path / "c.sqlite3"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert sorted(lines) == ["child exact", "child exit 0", "parent exact"], result.stdout
    assert "Fatal" not in result.stderr, result.stderr


def test_long_prompts_are_bounded_misses_for_the_faq_and_the_semantic_tier(
    tmp_path: Path,
) -> None:
    from tricache.faq.store import FaqEntry

    cache = Cache(path=tmp_path / "big.sqlite3")
    cache.add_faq([FaqEntry("How do I reset my password?", "Settings > Security.")])
    long_question = "How do I reset my " + "very " * 600 + "old password?"  # 3 kB
    huge = "How do I reset my password? " + "x" * 1_000_000 + "?"  # 1 MB
    for prompt in (long_question, huge):
        assert cache.lookup(cache.request(prompt)) is None
    stats = cache.stats()
    assert "faq" not in stats  # the FAQ never embedded them (no search, no latency sample)
    assert sum(v for k, v in stats["semantic"].items() if k.startswith("skipped_")) == 2
    cache.close()


# fork -----------------------------------------------------------------------------------------
def test_a_fork_while_a_shard_is_being_made_leaves_the_parent_able_to_open_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gunicorn --preload forks while the warm-up opens the vector index.  A child forked
    between the engine's making of a shard and its load inherited the engine's descriptor, whose
    lock then refused the parent's load ("Can't init WAL: WouldBlock": the tier off for 30 s)."""
    import qdrant_edge

    from tricache.semantic.index.vectors import EdgeIndex

    made, real = threading.Event(), qdrant_edge.EdgeShard

    class SlowToClose:  # the engine's shard, with time to fork between its making and its load
        @staticmethod
        def create(path: str, config: Any) -> Any:
            shard = real.create(path, config)
            made.set()
            time.sleep(1.0)
            return shard

        load = staticmethod(real.load)

    monkeypatch.setattr(qdrant_edge, "EdgeShard", SlowToClose)
    opened: list[Any] = []
    opener = threading.Thread(target=lambda: opened.append(_open_or_error(EdgeIndex, tmp_path)))
    opener.start()
    assert made.wait(60)
    pid = os.fork()
    if pid == 0:  # the child holds what it inherited while the parent goes on
        time.sleep(3)
        os._exit(0)
    opener.join(60)
    os.waitpid(pid, 0)
    assert len(opened) == 1 and isinstance(opened[0], EdgeIndex), opened
    opened[0].close()


def _open_or_error(index: Any, path: Path) -> Any:
    try:
        return index(path / "shard", 4)
    except Exception as exc:
        return exc


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_children_forked_after_use_never_corrupt_the_parent(tmp_path: Path, backend: str) -> None:
    """gunicorn --preload: the parent used the cache, then forks workers that use it too."""
    options: dict[str, Any] = {"path": str(tmp_path / "shared.sqlite3")}
    if backend == "redis":
        options = {"redis_url": REDIS_URL, "namespace": f"fork{os.getpid()}{time.time_ns()}",
                   "semantic": Semantic(vector_path=str(tmp_path / "vectors"))}  # fmt: skip
    parent = Cache(**options)
    for i in range(20):
        request = parent.request(f"How do I configure feature {i}?")
        assert parent.lookup(request) is None
        parent.update(request, f"Feature {i}: Settings > Features.")
    points = parent.semantic.index.count()  # type: ignore[union-attr]
    results = fork.Queue()
    children = [
        fork.Process(target=use_inherited_cache, args=(parent, n, results)) for n in range(3)
    ]
    for child in children:
        child.start()
    reports = [results.get(timeout=120) for _ in children]
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert all(r["errors"] == [] for r in reports), reports
    assert all(r["exact_hits"] == 20 for r in reports)  # the parent's answers, read anew
    # the parent goes on, its index intact (the children's own points, if they wrote any before
    # exiting, reach it through the store)
    index = parent.semantic.index  # type: ignore[union-attr]
    assert index.count() >= points
    hit = parent.lookup(parent.request("How can I configure feature 3?"))
    assert hit is not None and hit.tier == "semantic"
    # what the children wrote reached the shared store (the parent's Bloom filter learns it
    # in the background)
    _wait(lambda: parent.lookup(parent.request("written by child 1")) is not None)
    index.sync()
    points = index.count()
    parent.close()
    with Cache(**options) as again:  # reopened from disk: every point is there, readable
        # (and the children's answers stored during their own warm-ups, from the journal)
        assert again.semantic.index.count() >= points  # type: ignore[union-attr]


# a hung store, an event loop that must never block --------------------------------------------
@pytest.fixture
def paused_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    if server.process is not None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


HUNG_EXIT_SCRIPT = """
from tricache import Cache, Semantic

cache = Cache(redis_url="{url}", semantic=Semantic(vector_path="{vectors}"))  # a hung Redis
request = cache.request("How do I reset my password?")
print(cache.lookup(request), cache.update(request, "Settings > Security."), flush=True)
"""  # and ends: the exit waits for the warm-up's step, which waits on the store's timeouts


def test_a_script_ends_during_a_warm_up_against_a_hung_redis(
    paused_redis: RedisServer, tmp_path: Path
) -> None:
    """docs/operations.md: an exit waits for the warm-up step under way.  Against a Redis that hangs
    (SIGSTOP), that step's store calls time out: the exit comes, and cleanly."""
    assert paused_redis.process is not None
    os.kill(paused_redis.process.pid, signal.SIGSTOP)
    code = HUNG_EXIT_SCRIPT.format(url=paused_redis.url, vectors=tmp_path / "v")
    result = _run_cold(tmp_path, code)  # (the runner's timeout fails a hung exit)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["None", "False"], result.stdout  # a miss, a dropped write
    assert "Fatal" not in result.stderr, result.stderr


def test_lookups_under_a_hung_redis_each_spend_one_timeout_at_most(
    paused_redis: RedisServer,
) -> None:
    cache = Cache(
        redis_url=paused_redis.url,
        namespace="hung",
        semantic=False,
        faq=False,
        exact=Exact(bloom=False),
    )
    for i in range(20):
        request = cache.request(f"question {i}")
        cache.lookup(request)
        cache.update(request, f"answer {i}")
    assert paused_redis.process is not None
    os.kill(paused_redis.process.pid, signal.SIGSTOP)
    cache.exact.l1.clear()  # every lookup needs the store now
    failures: list[int] = []

    def worker(n: int) -> None:
        for i in range(20):
            before = _store_failures(cache)
            cache.lookup(cache.request(f"question {(i + n) % 25}"))
            failures.append(_store_failures(cache) - before)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads)
    os.kill(paused_redis.process.pid, signal.SIGCONT)
    # failures counted across 16 threads (and the upkeep thread) at once: no lookup can have
    # made more than one store call, so the total is at most the number of lookups (+ polls)
    assert sum(failures) <= len(failures) + 10
    assert cache.exact.breaker.opened >= 1  # the breaker took over: most lookups skipped


def _all_errors(cache: Cache) -> int:
    return sum(
        v for tier in cache.stats().values() if isinstance(tier, dict)
        for k, v in tier.items() if k.endswith("_errors") and isinstance(v, int)
    )  # fmt: skip


def _store_failures(cache: Cache) -> int:
    stats = cache.stats()["exact"]
    return sum(v for k, v in stats.items() if k.endswith("_errors"))


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_the_async_path_never_blocks_the_event_loop(tmp_path: Path, backend: str) -> None:
    """blockbuster raises on any blocking call (socket, file, sqlite3, time.sleep …) made on
    the event loop: the async lookup and update paths, warm, must make none."""
    from blockbuster import blockbuster_ctx

    options: dict[str, Any] = {"path": tmp_path / "loop.sqlite3"}
    if backend == "redis":
        options = {"redis_url": REDIS_URL, "namespace": f"loop{time.time_ns()}"}
    cache = Cache(**options, faq=False)

    async def traffic(round: str) -> None:
        """Misses, writes, tags never seen, look-alikes, hits and an invalidation."""
        for i in range(30):
            question = f"How do I export the {round} report {i % 10}?"
            request = cache.request(question, tags=[f"{round}:{i % 3}"])
            if await cache.alookup(request) is None:
                await cache.aupdate(request, f"Reports > Export {i}")
            await cache.alookup(cache.request(question.replace("How do I", "How can I")))
        await asyncio.to_thread(cache.invalidate, f"{round}:0")  # a sync call: off the loop

    asyncio.run(traffic("warm-up"))  # everything opened once

    async def sync_call_on_the_loop() -> None:
        cache.update(cache.request("a sync call"), "x")  # what an app must not do

    # A blocking call raises BlockingError inside the cache, which fails open: it would show
    # as a store error (and a log line), so the counters tell whether any happened.
    with blockbuster_ctx(scanned_modules=["tricache"]):
        before = _all_errors(cache)
        asyncio.run(traffic("watched"))
        assert _all_errors(cache) == before  # not one blocking call on the loop
        asyncio.run(sync_call_on_the_loop())
        assert _all_errors(cache) > before  # and the detector was on
    cache.close()


def test_the_bloom_filter_takes_adds_and_reads_while_it_catches_up(tmp_path: Path) -> None:
    """rbloom hashes with a Python function, so a thread can run in the middle of a catch-up:
    adds and reads from request threads must neither fail nor wait for the store."""
    import sqlite3

    from tricache.exact.bloom import KeyFilter
    from tricache.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "bloom.sqlite3")
    db = sqlite3.connect(tmp_path / "bloom.sqlite3")
    db.executemany(
        "INSERT INTO entries (key, value, watermark, expires_at) VALUES (?, ?, 0, 9e18)",
        ((f"tricache:default:x:{i:040x}", b"x") for i in range(30_000)),
    )
    db.commit()
    db.close()
    bloom = KeyFilter(capacity=100_000)
    bloom.load(store, "default")
    store.set("tricache:default:x:" + "f" * 40, b"x", 60)
    errors: list[BaseException] = []
    stop = threading.Event()

    def request_thread(n: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                bloom.add(f"tricache:default:x:{n:08x}{i:032x}")
                bloom.might_contain(f"tricache:default:x:{i:040x}")
            except BaseException as exc:
                errors.append(exc)
            i += 1

    threads = [threading.Thread(target=request_thread, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(5):
        bloom.load(store, "default")  # a full catch-up, again and again
        bloom.sync(store, "default")
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert bloom.might_contain("tricache:default:x:" + "f" * 40)
    store.close()


def test_a_hung_query_engine_costs_one_store_timeout_a_lookup(tmp_path: Path) -> None:
    """The index on the store's own server gets the store's timeout (it had at least 0.25 s),
    and a lookup whose store read failed, or whose breaker is open, does not search it: one
    timeout per lookup, with 8 threads (issue #32: 250 ms a lookup, ~1 s with 8 threads)."""
    server = SearchServer(tmp_path)
    server.start()
    cache = Cache(
        redis_url=server.url,
        namespace="hung",
        faq=False,
        exact=Exact(bloom=False),
        semantic=Semantic(index="redis-search"),
    )
    try:
        assert cache.semantic is not None and cache.semantic.index_on_store
        assert cache.semantic.index.timeout == cache.store.timeout == 0.05  # type: ignore[union-attr]
        for i in range(10):
            request = cache.request(f"How do I export report number {i} to CSV?")
            cache.lookup(request)
            cache.update(request, f"Reports > {i} > Export.")
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)
        cache.exact.l1.clear()  # every lookup needs the store
        before = _all_errors(cache)  # every failed store call: the read's, the search's, a poll's
        lookups: list[int] = []

        def worker(n: int) -> None:
            for i in range(10):
                cache.lookup(
                    cache.request(f"How can I export report number {(i + n) % 10} to CSV?")
                )
                lookups.append(1)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads)
        os.kill(server.process.pid, signal.SIGCONT)
        # at most one failed store call a lookup (the read, or the search when no read was
        # made), plus the upkeep thread's polls
        assert _all_errors(cache) - before <= len(lookups) + 10
        assert cache.stats()["semantic"].get("skipped_store_down", 0) >= len(lookups) // 2
    finally:
        if server.process is not None:
            os.kill(server.process.pid, signal.SIGCONT)
        cache.close()
        server.stop()
