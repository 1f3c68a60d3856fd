"""Red team of the semantic tier in every worker (issue #17): the store's change log and points
written by someone else, caches made and dropped, and processes that share one store.

Each test is one way found to break a promise of docs/deployment.md or
docs/security.md; real Redis servers, SQLite files and processes, no mocked store.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from tricache import Cache
from tricache.semantic.index.replica import ReplicatedIndex, encode_point
from tricache.stores.redis import RedisStore
from tricache.stores.sqlite import SQLiteStore

from conftest import REDIS_URL, RedisServer

spawn = multiprocessing.get_context("spawn")


@pytest.fixture
def options(
    backend: str, namespace: str, tmp_path: Path, redis_client: redis.Redis
) -> dict[str, Any]:
    if backend == "redis":
        return {"namespace": namespace, "redis_url": REDIS_URL}
    return {"namespace": namespace, "path": str(tmp_path / "shared.sqlite3")}


def _replica(store: Any, namespace: str, tmp_path: Path, name: str) -> ReplicatedIndex:
    return ReplicatedIndex(store, namespace, 4, tmp_path / name, sync_s=3600)


def _point(n: int, namespace: str) -> tuple[str, np.ndarray, dict[str, Any]]:
    point_id = f"00000000-0000-0000-0000-{n:012d}"
    payload = {
        "scope": "s",
        "namespace": namespace,
        "question": f"q{n}",
        "ref": f"tricache:{namespace}:x:{n:040d}",
        "expires_at": time.time() + 3600,
    }
    return point_id, np.array([1.0, n + 1.0, 0.5, 0.25], np.float32), payload


# One hostile log entry or point id stopped every replica for good ---------------------------
HOSTILE_LOG_ENTRIES: list[dict[str, bytes]] = [
    {"x": b"no i field"},
    {"i": b"abc"},  # too short
    {"i": b"\xff\xfe" * 18},  # 36 bytes, not UTF-8
    {"i": b"0" * 100},  # too long
    {"i": b"z" * 36},  # the length of a UUID, not one
]


@pytest.mark.parametrize("fields", HOSTILE_LOG_ENTRIES, ids=lambda f: repr(f)[:20])
def test_a_hostile_log_entry_does_not_stop_the_replicas(
    private_redis: RedisServer, tmp_path: Path, fields: dict[str, bytes]
) -> None:
    """Before: ``points_since`` raised (KeyError, UnicodeDecodeError) or the engine refused the
    id (ValueError) on every sync, so no later write or deletion ever reached any replica —
    a match rejected by feedback kept being served by every other process."""
    store = RedisStore(private_redis.url, timeout=0.5)
    writer = _replica(store, "ns", tmp_path, "w")
    reader = _replica(store, "ns", tmp_path, "r")
    for n in range(2):
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    assert reader.count() == 2
    redis.Redis(port=private_redis.port).xadd("tricache:{ns}:plog", fields)  # type: ignore[arg-type]
    writer.upsert(*_point(5, "ns"))
    writer.delete([_point(0, "ns")[0]])  # a wrong match reported in the writer's process
    reader.sync()
    assert reader.count() == 2  # 1 and 5: the deletion and the new point both arrived
    assert reader.corrupt_points == 1
    writer.close()
    reader.close()
    store.close()


def test_a_point_key_that_names_no_point_id_does_not_stop_a_rebuild(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """A key ``tricache:{ns}:p:<not a UUID>`` holding a well-formed point: the rebuild scan
    handed its name to the engine, which raised, so the replica could never be rebuilt."""
    store = RedisStore(private_redis.url, timeout=0.5)
    writer = _replica(store, "ns", tmp_path, "w")
    writer.upsert(*_point(1, "ns"))
    _, vector, payload = _point(2, "ns")
    raw = redis.Redis(port=private_redis.port)
    raw.set("tricache:{ns}:p:" + "z" * 36, encode_point(vector, payload))
    fresh = _replica(store, "ns", tmp_path, "fresh")  # rebuilds from the store at start
    assert fresh.rebuilds == 1 and fresh.count() == 1
    assert fresh.corrupt_points == 1
    for replica in (writer, fresh):
        replica.close()
    store.close()


def test_a_hostile_sqlite_row_does_not_stop_the_replicas(tmp_path: Path) -> None:
    path = tmp_path / "l2.sqlite3"
    store = SQLiteStore(path, sweep_every=3600)
    writer = _replica(store, "ns", tmp_path, "w")
    reader = _replica(store, "ns", tmp_path, "r")
    for n in range(2):
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    _, vector, payload = _point(3, "ns")
    with sqlite3.connect(path) as db:  # another program writes the shared file
        db.execute(
            "INSERT INTO points (namespace, id, data, expires_at) VALUES (?, ?, ?, ?)",
            ("ns", "not-a-uuid", encode_point(vector, payload), time.time() + 3600),
        )
        db.execute(
            "INSERT INTO points (namespace, id, data, expires_at) VALUES (?, ?, NULL, ?)",
            ("ns", "x" * 36, time.time() + 3600),
        )
    writer.upsert(*_point(5, "ns"))
    writer.delete([_point(0, "ns")[0]])
    reader.sync()
    assert reader.count() == 2 and reader.corrupt_points == 2
    fresh = _replica(store, "ns", tmp_path, "fresh")
    assert fresh.count() == 2
    for replica in (writer, reader, fresh):
        replica.close()
    store.close()


# Caches made and dropped without close() kept their replica and audit log for good ----------
def _tricache_threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def test_caches_dropped_without_close_leak_no_replica_nor_audit_writer(tmp_path: Path) -> None:
    """Before: each dropped cache left its replica's Qdrant shards open (about 27 MiB and three
    descriptors each, for good) and its audit writer thread with a SQLite connection."""
    from tricache.semantic.index.vectors import _SharedShard

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    path = tmp_path / "l2.sqlite3"
    shards, audits = len(_SharedShard._open), _tricache_threads("tricache-audit")
    before = None
    for n in range(8):  # a namespace each: every cache makes a replica of its own
        cache = Cache(namespace=f"dropped{n}", path=path, warm=True)
        assert cache.update(cache.request(f"How do I rename project {n}?"), "in settings")
        del cache
        gc.collect()
        if n == 1:
            before = fds()
    deadline = time.monotonic() + 30
    # (a replica whose sync thread is mid-sync when collected goes once that sync ends)
    while len(_SharedShard._open) > shards or _tricache_threads("tricache-audit") > audits:
        assert time.monotonic() < deadline, "shards or audit writers of dropped caches remain"
        gc.collect()
        time.sleep(0.1)
    assert before is not None
    while fds() > before + 4:  # six more caches: no descriptors kept
        assert time.monotonic() < deadline, f"{fds() - before} descriptors more"
        gc.collect()
        time.sleep(0.1)


def test_redis_caches_dropped_without_close_leave_no_thread_polling(namespace: str) -> None:
    """Before: the event listener held the exact tier's bound callback, so every dropped
    Redis cache kept its listener and its upkeep thread (a version poll every 0.5 s) for good."""
    upkeeps, listeners = _tricache_threads("tricache-upkeep"), _tricache_threads("tricache-events")
    for n in range(4):
        cache = Cache(namespace=f"{namespace}{n}", redis_url=REDIS_URL, semantic=False, faq=False)
        assert cache.update(cache.request(f"How do I rename project {n}?"), "in settings")
        assert cache.lookup(cache.request(f"How do I rename project {n}?")) is not None
        assert _tricache_threads("tricache-events") > listeners  # subscribed: what is tested
        del cache
        gc.collect()
    deadline = time.monotonic() + 30
    while (
        _tricache_threads("tricache-upkeep") > upkeeps
        or _tricache_threads("tricache-events") > listeners
    ):
        assert time.monotonic() < deadline, "threads of dropped caches still run"
        gc.collect()
        time.sleep(0.1)


# Two processes through LangChain: every served answer is the model's ----------------------
RAG_LAYOUTS = ["context-in-system", "rag-prompt"]


def _rag_writer(options: dict[str, Any], layout: str, done: Any) -> None:
    """A worker that answers the first questions of the look-alike pairs and of the
    other-facts triples (through a LangChain RAG chain over an oracle), then reports."""
    from test_pipelines import EIFFEL, LOOK_ALIKES, OTHER_FACTS, REWRITTEN, Rag

    with Cache(warm=True, **options) as core:
        rag = Rag.make(layout, core)
        for first, _ in LOOK_ALIKES:
            rag.ask(first, EIFFEL)
        for question, context, _ in OTHER_FACTS:
            rag.ask(question, context)
        for question in REWRITTEN:
            rag.ask(question, EIFFEL)
        done.put("written")


@pytest.mark.parametrize("layout", RAG_LAYOUTS)
def test_a_rag_chain_in_another_process_gets_only_the_models_answers(
    options: dict[str, Any], layout: str
) -> None:
    """One worker answers; another asks look-alikes, the same questions over other facts and
    harmless rewrites once its replica holds the first worker's points: each answer the
    second worker gets (cache or model) must be what the oracle says to its own prompt."""
    from test_pipelines import EIFFEL, LOOK_ALIKES, OTHER_FACTS, REWRITTEN, Rag, harmless_rewrites

    done = spawn.Queue()
    child = spawn.Process(target=_rag_writer, args=(options, layout, done))
    child.start()
    try:
        assert done.get(timeout=240) == "written"
    finally:
        child.join(60)
    assert child.exitcode == 0
    with Cache(warm=True, **options) as core:
        _wait_points(core, lambda n: n > 0)
        rag = Rag.make(layout, core)
        served = 0
        for question in REWRITTEN:  # the other worker's answers reach this one
            served += sum(rag.ask(v, EIFFEL) for v in [question, *harmless_rewrites(question)])
        assert served > 0
        for _, twin in LOOK_ALIKES:
            rag.ask(twin, EIFFEL)  # asserts the model's answer (a hit must be the right one)
        for question, _, other in OTHER_FACTS:
            rag.ask(question, other)


def _wait_points(cache: Cache, ready: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready(cache.stats()["store"]["vector_replica"]["points"]):
        assert time.monotonic() < deadline, cache.stats()["store"]["vector_replica"]
        time.sleep(0.05)


# A worker asked to stop waited for a whole rebuild -------------------------------------------
def test_closing_a_replica_does_not_wait_for_a_rebuild_under_way(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """Before: ``close()`` waited for the sync thread's rebuild to end: about 10 s at 20k points
    here, minutes at 100k, for every worker stopped (a deploy, an autoscaler) while its log
    was lost.  Now the rebuild stops at its next batch."""
    dim, count = 512, 10_000
    raw = redis.Redis(port=private_redis.port)
    rng = np.random.default_rng(0)
    pipe = raw.pipeline(transaction=False)
    for n in range(count):
        point_id, _, payload = _point(n, "ns")
        vector = rng.standard_normal(dim).astype(np.float32)
        pipe.set(f"tricache:{{ns}}:p:{point_id}", encode_point(vector, payload))
    pipe.xadd("tricache:{ns}:plog", {"i": _point(0, "ns")[0]})
    pipe.execute()
    store = RedisStore(private_redis.url, timeout=0.5)
    began = time.monotonic()
    full = ReplicatedIndex(store, "ns", dim, tmp_path / "full", sync_s=3600)
    rebuild_s = time.monotonic() - began
    assert full.count() == count
    full.close()
    replica = ReplicatedIndex(store, "ns", dim, tmp_path / "r", sync_s=0.05)
    raw.delete("tricache:{ns}:plog")  # lost: the sync thread rebuilds from the store
    raw.xadd("tricache:{ns}:plog", {"i": _point(1, "ns")[0]})
    deadline = time.monotonic() + 60
    while replica.rebuilds < 2:
        assert time.monotonic() < deadline, "the lost log started no rebuild"
        time.sleep(0.01)
    began = time.monotonic()
    replica.close()
    assert time.monotonic() - began < rebuild_s / 2, (time.monotonic() - began, rebuild_s)
    again = ReplicatedIndex(store, "ns", dim, tmp_path / "r", sync_s=3600)  # the slot is sound
    assert again.count() == count
    again.close()
    store.close()


# A replica that rebuilt while the log was missing trusts the next log it sees ----------------
def test_a_log_lost_twice_after_a_rebuild_without_one_keeps_no_deleted_point(
    private_store: RedisStore, private_redis: RedisServer, tmp_path: Path
) -> None:
    """A replica rebuilt while the point log was missing (evicted) holds cursor "0-0"; a log
    made again later is taken as continuing it whenever nothing was trimmed from it.  So if
    the log that carried a deletion is lost too (evicted under ``allkeys-*``, or during a
    minutes-long rebuild) and another write makes a third one, the deleted point (a match
    rejected by feedback, whose answer is still current) stays in that replica."""
    raw = redis.Redis(port=private_redis.port)
    writer = _replica(private_store, "ns", tmp_path, "w")
    for n in range(2):
        writer.upsert(*_point(n, "ns"))
    raw.delete("tricache:{ns}:plog")  # evicted
    reader = _replica(private_store, "ns", tmp_path, "r")  # rebuilds: both points, no log
    assert reader.count() == 2
    writer.delete([_point(0, "ns")[0]])  # a wrong match reported: logged in a new log
    raw.delete("tricache:{ns}:plog")  # evicted again before the reader read it
    writer.upsert(*_point(5, "ns"))  # a third log, which begins after the reader's cursor
    reader.sync()
    assert reader.count() == 2  # 1 and 5, not the deleted 0
    writer.close()
    reader.close()


@pytest.fixture
def private_store(private_redis: RedisServer) -> Any:
    store = RedisStore(private_redis.url, timeout=0.5)
    yield store
    store.close()
