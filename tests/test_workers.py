"""The semantic tier in every worker: processes share it through the store, no vector server.

Four workers (spawned, and forked from a parent that used the cache) on the embedded defaults
and on Redis each index their own questions and find every other worker's by a paraphrase,
within the stated lag, with no answer from another tenant and none after an invalidation.
Then the ways the shared state can be broken: a worker killed mid-write, a log lost, trimmed
or replaced by a Redis restart, a hostile point, a deletion made elsewhere.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import redis

from tricache import Cache, Semantic
from tricache.semantic.index.replica import ReplicatedIndex, encode_point
from tricache.stores.redis import RedisStore
from tricache.stores.sqlite import SQLiteStore

from conftest import RedisServer
from procs import (
    TOPICS,
    share_semantically,
    share_with_inherited_cache,
    topic_answer,
    write_until_killed,
)

spawn = multiprocessing.get_context("spawn")
fork = multiprocessing.get_context("fork")
WORKERS = 4
LAG_S = 5.0  # the test's bound: one sync (0.1 s) plus a loaded machine's delays


def _check(reports: list[dict[str, Any]]) -> None:
    assert sorted(r["worker"] for r in reports) == list(range(WORKERS))
    for report in reports:
        assert report["missing"] == [], report
        assert report["max_lag_s"] <= LAG_S, report
        assert report["wrong"] == [] and report["not_semantic"] == [], report
        assert report["foreign"] == [], report  # another tenant's answer: never
        assert report["stale"] == [], report  # invalidated by worker 0: gone everywhere


def _run_workers(context: Any, target: Any, first: Any) -> list[dict[str, Any]]:
    """Run ``target(first, i, WORKERS, barrier, results)`` in WORKERS processes of ``context``;
    their reports, once every one exited cleanly."""
    barrier, results = context.Barrier(WORKERS), context.Queue()
    workers = [
        context.Process(target=target, args=(first, i, WORKERS, barrier, results))
        for i in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=240) for _ in workers]
    finally:
        for worker in workers:
            worker.join(60)
    assert [w.exitcode for w in workers] == [0] * WORKERS
    return reports


def test_four_spawned_workers_share_the_semantic_tier(options: dict[str, Any]) -> None:
    _check(_run_workers(spawn, share_semantically, options))


def test_four_workers_forked_after_use_share_the_semantic_tier(options: dict[str, Any]) -> None:
    with Cache(warm=True, **options) as parent:  # gunicorn --preload: used, then forked
        assert parent.update(parent.request("How do I rename a project?"), "in settings")
        assert parent.lookup(parent.request("How can I rename a project?")) is not None
        _check(_run_workers(fork, share_with_inherited_cache, parent))
        # the parent, which made its replica before the fork, sees the children's entries
        deadline = time.monotonic() + LAG_S
        while parent.lookup(parent.request(f"How can I {TOPICS[0]}?", tenant="acme")) is None:
            assert time.monotonic() < deadline, "the parent's replica never caught up"
            time.sleep(0.05)


def _points_in_store(options: dict[str, Any]) -> int:
    store: Any = (
        RedisStore(options["redis_url"]) if "redis_url" in options else SQLiteStore(options["path"])
    )
    try:
        return sum(1 for _ in store.scan_points(options["namespace"]))
    finally:
        store.close()


def test_a_worker_killed_mid_write_corrupts_nothing(options: dict[str, Any]) -> None:
    ready = spawn.Queue()
    child = spawn.Process(target=write_until_killed, args=(options, ready))
    child.start()
    assert ready.get(timeout=120) == "ready"
    deadline = time.monotonic() + 120  # a loaded machine writes slowly: kill it once it has
    while _points_in_store(options) <= 10:  # written some, while it writes more
        assert time.monotonic() < deadline, "the writer stored no points"
        time.sleep(0.2)
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join(30)
    if "path" in options:
        with sqlite3.connect(options["path"]) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    stored = _points_in_store(options)
    assert stored > 10
    # a new worker takes the dead one's slot (its lock died with it) and catches up
    with Cache(warm=True, **options) as cache:
        replica = cache.stats()["store"]["vector_replica"]
        assert replica["slot"] == "slot-0"
        assert replica["points"] == stored
        hit = cache.lookup(cache.request("Where's office number 3 located?"))
        assert hit is not None and hit.text == "floor 3"


def test_a_restarted_worker_resumes_from_its_slot_without_rebuilding(
    options: dict[str, Any],
) -> None:
    first = Cache(warm=True, **options)
    for topic in TOPICS[:6]:
        assert first.update(first.request(f"How do I {topic}?"), f"about {topic}")
    with Cache(warm=True, **options) as other:  # another worker, in the next slot
        first.close()  # the first worker stops; the other one goes on writing and deleting
        assert other.update(other.request(f"How do I {TOPICS[6]}?"), f"about {TOPICS[6]}")
        hit = other.lookup(other.request(f"How can I {TOPICS[0]}?"))
        assert hit is not None and hit.tier == "semantic"
        other.feedback(hit.entry_id, correct=False)  # gone from the store at once
        with Cache(warm=True, **options) as again:  # the first worker, restarted
            replica = again.stats()["store"]["vector_replica"]
            assert replica["slot"] == "slot-0"
            assert replica["rebuilds"] == 0, replica  # loaded, then caught up by the log
            assert replica["points"] == 6 + 1 - 1
            hit = again.lookup(again.request(f"How can I {TOPICS[6]}?"))
            assert hit is not None and hit.text == f"about {TOPICS[6]}"
            assert again.lookup(again.request(f"How can I {TOPICS[0]}?")) is None  # rejected


def test_a_wrong_hit_reported_in_one_process_is_gone_from_the_others(
    options: dict[str, Any],
) -> None:
    with Cache(warm=True, **options) as a, Cache(warm=True, **options) as b:
        assert a.update(a.request("How do I reset my password?"), "use the link")
        paraphrase = "How can I reset my password?"
        deadline = time.monotonic() + LAG_S
        while b.lookup(b.request(paraphrase)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        hit_in_a = a.lookup(a.request(paraphrase))
        assert hit_in_a is not None
        a.feedback(hit_in_a.entry_id, correct=False)
        deadline = time.monotonic() + LAG_S
        while b.lookup(b.request(paraphrase)) is not None:
            assert time.monotonic() < deadline, "the other replica kept a rejected match"
            time.sleep(0.05)
        assert b.lookup(b.request("How do I reset my password?")) is not None  # its own: kept


def test_clear_in_one_process_empties_every_replica(options: dict[str, Any]) -> None:
    with Cache(warm=True, **options) as a, Cache(warm=True, **options) as b:
        assert a.update(a.request("How do I reset my password?"), "use the link")
        _wait_points(b, 1)
        a.clear()
        _wait_points(b, 0)
        assert b.lookup(b.request("How can I reset my password?")) is None


def _wait_points(cache: Cache, count: int) -> None:
    deadline = time.monotonic() + LAG_S
    while cache.stats()["store"]["vector_replica"]["points"] != count:
        assert time.monotonic() < deadline, cache.stats()["store"]["vector_replica"]
        time.sleep(0.05)


# The log, attacked (Redis) ---------------------------------------------------------------------
def _replica(store: Any, namespace: str, tmp_path: Path, name: str) -> ReplicatedIndex:
    return ReplicatedIndex(store, namespace, 4, tmp_path / name, sync_s=3600)


def _point(n: int, namespace: str, question: str = "q") -> tuple[str, np.ndarray, dict[str, Any]]:
    point_id = f"00000000-0000-0000-0000-{n:012d}"
    payload = {
        "scope": "s",
        "namespace": namespace,
        "question": question,
        "ref": f"tricache:{namespace}:x:{n:040d}",
        "expires_at": time.time() + 3600,
    }
    return point_id, np.array([1.0, n + 1.0, 0.5, 0.25], np.float32), payload


@pytest.fixture
def private_store(private_redis: RedisServer) -> Any:
    store = RedisStore(private_redis.url, timeout=0.5)
    yield store
    store.close()


def test_a_lost_point_log_rebuilds_and_keeps_deletions(
    private_store: RedisStore, private_redis: RedisServer, tmp_path: Path
) -> None:
    writer = _replica(private_store, "ns", tmp_path, "w")
    reader = _replica(private_store, "ns", tmp_path, "r")
    for n in range(5):
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    assert reader.count() == 5
    writer.delete([_point(0, "ns")[0]])
    writer.sync()  # the deletion reaches the store
    redis.Redis(port=private_redis.port).delete("tricache:{ns}:plog")  # evicted, say
    writer.upsert(*_point(9, "ns"))  # the log starts again after the reader's cursor
    reader.sync()
    assert reader.rebuilds == 2  # the first sync, then the lost log
    assert reader.count() == 5  # 1..4 and 9: the deleted point did not come back
    writer.close()
    reader.close()


def test_a_trimmed_point_log_rebuilds(private_redis: RedisServer, tmp_path: Path) -> None:
    store = RedisStore(private_redis.url, timeout=0.5, point_log_length=10)
    reader = _replica(store, "ns", tmp_path, "r")
    writer = _replica(store, "ns", tmp_path, "w")
    for n in range(300):  # far past the cap: entries after the reader's cursor are trimmed
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    assert reader.rebuilds == 2 and reader.count() == 300
    writer.close()
    reader.close()
    store.close()


def test_redis_restarted_empty_empties_the_replicas(
    private_store: RedisStore, private_redis: RedisServer, tmp_path: Path
) -> None:
    reader = _replica(private_store, "ns", tmp_path, "r")
    for n in range(3):
        reader.upsert(*_point(n, "ns"))
    reader.sync()  # its own writes, read back from the log
    private_redis.stop()
    with pytest.raises(redis.ConnectionError):
        reader.sync()
    assert reader.count() == 3  # searched meanwhile: every hit is still checked by the exact tier
    private_redis.start()
    reader.sync()
    assert reader.count() == 0
    reader.close()


def test_hostile_points_are_skipped(
    private_store: RedisStore, private_redis: RedisServer, tmp_path: Path
) -> None:
    reader = _replica(private_store, "ns", tmp_path, "r")
    raw = redis.Redis(port=private_redis.port)
    good_id, vector, payload = _point(1, "ns")
    hostile = {
        "00000000-0000-0000-0000-000000000002": b"\x93\x01not msgpack at all",
        "00000000-0000-0000-0000-000000000003": msgpack.packb([1, b"\x00" * 3, {}]),
        "00000000-0000-0000-0000-000000000004": encode_point(vector, {**payload, "namespace": "x"}),
        "00000000-0000-0000-0000-000000000005": encode_point(vector, {**payload, "question": 7}),
        "00000000-0000-0000-0000-000000000006": encode_point(np.full(4, np.inf), payload),
        "00000000-0000-0000-0000-000000000007": b"\x80" * 10_000,
        "00000000-0000-0000-0000-000000000008": encode_point(vector, {**payload, "tags": [b"x"]}),
        "00000000-0000-0000-0000-000000000009": encode_point(
            vector, {**payload, "question": "q" * 1_000_000}
        ),
        "00000000-0000-0000-0000-000000000010": encode_point(
            vector, {**payload, "watermark": float("nan")}
        ),
    }
    for point_id, data in hostile.items():
        raw.set(f"tricache:{{ns}}:p:{point_id}", data)
        raw.xadd("tricache:{ns}:plog", {"i": point_id})
    reader.upsert(good_id, vector, payload)
    reader.sync()
    assert reader.count() == 1
    assert reader.corrupt_points == len(hostile)
    reader.close()
    fresh = _replica(private_store, "ns", tmp_path, "again")  # a rebuild meets them too
    assert fresh.count() == 1
    fresh.close()


# The log, attacked (SQLite) --------------------------------------------------------------------
def test_sqlite_forgets_old_deletions_and_makes_late_readers_rebuild(tmp_path: Path) -> None:
    now = [1000.0]
    store = SQLiteStore(tmp_path / "l2.sqlite3", clock=lambda: now[0], sweep_every=3600)
    reader = _replica(store, "ns", tmp_path, "r")
    writer = _replica(store, "ns", tmp_path, "w")
    for n in range(3):
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    writer.delete([_point(0, "ns")[0]])
    writer.sync()
    now[0] += 2 * 24 * 3600  # the tombstone is swept before the reader comes back
    store.sweep()
    reader.sync()
    assert reader.rebuilds == 2
    assert reader.count() == 0  # (the others expired in the store meanwhile too)
    writer.close()
    reader.close()
    store.close()


def test_a_replica_never_builds_an_hnsw_graph_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qdrant-edge holds the GIL while it builds one (seconds to a minute): every thread of the
    app would stop.  Past the engine's usual trigger (5,000 new points), no build starts."""
    from tricache.semantic.index.vectors import EdgeIndex

    builds: list[EdgeIndex] = []
    monkeypatch.setattr(EdgeIndex, "_start_optimize", builds.append)
    store = SQLiteStore(tmp_path / "l2.sqlite3")
    replica = _replica(store, "ns", tmp_path, "r")
    rng = np.random.default_rng(0)
    for n in range(6000):
        point_id, _, payload = _point(n, "ns")
        replica.upsert(point_id, rng.standard_normal(4).astype(np.float32), payload)
    assert replica.count() == 6000
    assert builds == []
    replica.close()
    store.close()


def test_a_discard_on_the_request_path_waits_on_neither_the_store_nor_a_write(
    private_store: RedisStore, tmp_path: Path
) -> None:
    import threading

    replica = _replica(private_store, "ns", tmp_path, "r")
    point_id, vector, payload = _point(1, "ns")
    replica.upsert(point_id, vector, payload)
    with replica._local._write_lock:  # the sync thread writing a batch into the replica
        done = threading.Thread(target=replica.discard, args=([point_id],))
        done.start()
        done.join(10)
        assert not done.is_alive()  # it did not wait for the batch
        assert replica.search(vector, {"scope": "s"}, 5, 0.5) == []  # gone from searches
    assert sum(1 for _ in private_store.scan_points("ns")) == 1  # the store: at the next sync
    replica.sync()
    assert sum(1 for _ in private_store.scan_points("ns")) == 0
    assert replica.count() == 0
    replica.close()


def test_a_point_written_again_after_a_discard_stays(
    private_store: RedisStore, tmp_path: Path
) -> None:
    """A stale hit discards its point; the app then asks the LLM and writes the same request
    again (the same point id): the new point must not go with the old one."""
    replica = _replica(private_store, "ns", tmp_path, "r")
    point_id, vector, payload = _point(1, "ns")
    replica.upsert(point_id, vector, payload)
    replica.discard([point_id])
    replica.upsert(point_id, vector, payload)
    replica.sync()
    assert [c.id for c in replica.search(vector, {"scope": "s"}, 5, 0.5)] == [point_id]
    assert sum(1 for _ in private_store.scan_points("ns")) == 1
    replica.close()


def test_a_hung_redis_stalls_no_lookup_and_the_replica_recovers(
    private_redis: RedisServer,
) -> None:
    """Redis stopped (SIGSTOP) under a cache with the semantic tier: its lookups are answered
    (misses or hits checked against the exact tier, never an exception), nothing waits on the
    replica's sync thread, and once Redis runs again a new entry reaches the replica."""
    options = {"redis_url": private_redis.url, "namespace": "hung"}
    with Cache(warm=True, **options) as reader, Cache(warm=True, **options) as writer:
        assert writer.update(writer.request("How do I reset my password?"), "use the link")
        deadline = time.monotonic() + LAG_S
        while reader.lookup(reader.request("How can I reset my password?")) is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert private_redis.process is not None
        os.kill(private_redis.process.pid, signal.SIGSTOP)
        try:
            import threading

            answered: list[object] = []
            asking = threading.Thread(
                target=lambda: answered.extend(
                    reader.lookup(reader.request(f"How can I {topic}?")) for topic in TOPICS
                )
            )
            asking.start()
            asking.join(60)  # each lookup spends at most one store timeout (50 ms)
            assert not asking.is_alive() and len(answered) == len(TOPICS)
        finally:
            os.kill(private_redis.process.pid, signal.SIGCONT)
        assert writer.update(writer.request(f"How do I {TOPICS[5]}?"), "in settings")
        deadline = time.monotonic() + 30  # the sync thread's call in flight may time out first
        while (hit := reader.lookup(reader.request(f"How can I {TOPICS[5]}?"))) is None:
            assert time.monotonic() < deadline, reader.stats()["store"]["vector_replica"]
            time.sleep(0.05)
        assert hit.text == "in settings"


# the Redis query engine: one shared index, no replica ------------------------------------------
def test_four_workers_share_one_query_engine_index(
    search_server: Any, namespace: str, tmp_path: Path
) -> None:
    """On a Redis with the query engine the semantic tier searches the server's index: four
    spawned workers find each other's questions with no replica of their own (no vector
    directory made), no other tenant's answer, nothing after an invalidation."""
    vectors = tmp_path / "vectors"
    options = {"namespace": namespace, "redis_url": search_server.url,
               "semantic": Semantic(vector_path=str(vectors))}  # fmt: skip
    _check(_run_workers(spawn, share_semantically, options))
    with Cache(warm=True, **options) as cache:  # type: ignore[arg-type]
        assert type(cache.semantic.index).__name__ == "RedisSearchIndex"  # type: ignore[union-attr]
        cache.clear()
    assert not list(vectors.rglob("*shard*")) and not list(vectors.rglob("*.mmap"))


def test_workers_forked_after_use_share_one_query_engine_index(
    search_server: Any, namespace: str
) -> None:
    options = {"namespace": namespace, "redis_url": search_server.url}
    with Cache(warm=True, **options) as parent:  # type: ignore[arg-type]
        assert parent.update(parent.request("How do I rename a project?"), "in settings")
        assert parent.lookup(parent.request("How can I rename a project?")) is not None
        _check(_run_workers(fork, share_with_inherited_cache, parent))
        deadline = time.monotonic() + LAG_S  # (the parent's versions learn of the invalidation)
        while (
            hit := parent.lookup(parent.request(f"How can I {TOPICS[0]}?", tenant="acme"))
        ) is None:
            assert time.monotonic() < deadline, "the parent never found a child's write"
            time.sleep(0.1)
        assert hit.tier == "semantic" and hit.text == topic_answer(TOPICS[0])
        assert parent.lookup(parent.request(f"How can I {TOPICS[1]}?", tenant="acme")) is None
        parent.clear()
