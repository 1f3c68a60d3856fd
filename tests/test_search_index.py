"""The semantic tier's index in the Redis query engine, against a real private server.

Each test starts its own valkey-server with RediSearch loaded (``SearchServer``): round trips,
scope isolation, expiry, hostile payloads, a paused server, a restart that lost everything, an
index dropped by someone, eviction, a three-node Redis Cluster, and the real semantic tier on it.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from redis.cluster import RedisCluster

from tricache.key.asked import ask
from tricache.key.entry import CacheEntry
from tricache.key.request import CacheRequest
from tricache.semantic.embed import get_embedder
from tricache.semantic.index.search import (
    RedisSearchIndex,
    has_query_engine,
    query_engine_at,
)
from tricache.semantic.tier import SemanticTier

from conftest import REDIS_URL, SearchServer, free_port, wait_for_redis

DIM = 64
NS = "ns1"
MakeIndex = Callable[..., RedisSearchIndex]


@pytest.fixture
def make_index(search_server: SearchServer) -> Iterator[MakeIndex]:
    made: list[RedisSearchIndex] = []

    def factory(**kw: Any) -> RedisSearchIndex:
        kw.setdefault("url", search_server.url)
        kw.setdefault("namespace", NS)
        kw.setdefault("dim", DIM)
        index = RedisSearchIndex(**kw)
        made.append(index)
        return index

    yield factory
    for index in made:
        index.close()


def unit(rng: np.random.Generator, count: int = 1, dim: int = DIM) -> np.ndarray:
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def payload(scope: str, question: str, *, ttl: float = 600, **kw: Any) -> dict[str, Any]:
    return {
        "scope": scope,
        "namespace": kw.pop("namespace", NS),
        "question": question,
        "form": kw.pop("form", question.lower()),
        "ref": kw.pop("ref", f"tricache:{NS}:x:{question}"),
        "expires_at": time.time() + ttl,
        "tags": ["a"],
        "verified": False,
        **kw,
    }


def new_id() -> str:
    return str(uuid.uuid4())


def until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# round trips ---------------------------------------------------------------------------------
def test_round_trips(make_index: MakeIndex) -> None:
    index = make_index()
    rng = np.random.default_rng(1)
    vectors = unit(rng, 3)
    ids = [new_id() for _ in range(3)]
    for i, (point_id, vector) in enumerate(zip(ids, vectors, strict=True)):
        index.upsert(point_id, vector, payload("scope-a", f"question {i}", form=f"form {i}"))
    assert index.count() == 3

    found = index.search(vectors[1], {"scope": "scope-a"}, 5, 0.9)
    assert [c.id for c in found] == [ids[1]]
    assert found[0].score == pytest.approx(1.0, abs=2e-3)  # float16 vectors
    assert found[0].payload == {"question": "question 1", "ref": f"tricache:{NS}:x:question 1"}
    everything = index.search(vectors[1], {"scope": "scope-a"}, 5, -1.0)
    assert len(everything) == 3 and everything[0].id == ids[1]
    assert [c.score for c in everything] == sorted((c.score for c in everything), reverse=True)
    assert len(index.search(vectors[1], {"scope": "scope-a"}, 2, -1.0)) == 2  # the limit

    by_form = index.find({"scope": "scope-a", "form": "form 2"}, 5)
    assert [(c.id, c.score, c.payload["question"]) for c in by_form] == [
        (ids[2], 1.0, "question 2")
    ]
    assert index.find({"scope": "scope-a", "form": "form 9"}, 5) == []

    index.upsert(ids[2], vectors[0], payload("scope-a", "rewritten", form="form 2"))  # replaced
    assert index.count() == 3
    assert {c.id for c in index.search(vectors[0], {"scope": "scope-a"}, 5, 0.9)} == {
        ids[0], ids[2]
    }  # fmt: skip

    index.delete([ids[0]])
    assert index.count() == 2
    assert [c.id for c in index.search(vectors[0], {"scope": "scope-a"}, 5, 0.9)] == [ids[2]]

    index.delete_expired(time.time())  # nothing expired yet
    assert index.count() == 2
    index.delete_expired(time.time() + 3600)
    assert index.count() == 0

    index.upsert(ids[0], vectors[0], payload("scope-a", "again"))
    index.delete_where({"namespace": NS})
    assert index.count() == 0
    index.upsert(ids[1], vectors[1], payload("scope-a", "after the clear"))  # the index is there
    assert [c.id for c in index.search(vectors[1], {"scope": "scope-a"}, 5, 0.9)] == [ids[1]]


def test_every_point_has_the_ttl_of_its_entry(
    make_index: MakeIndex, search_server: SearchServer
) -> None:
    index = make_index()
    point_id = new_id()
    index.upsert(point_id, unit(np.random.default_rng(2))[0], payload("s", "q", ttl=120))
    ttl_ms = redis.Redis(port=search_server.port).pttl(index.prefix + point_id)
    assert 110_000 < ttl_ms <= 120_000


def test_an_expired_point_is_not_found(make_index: MakeIndex) -> None:
    index = make_index()
    rng = np.random.default_rng(3)
    short, kept = unit(rng, 2)
    short_id, kept_id = new_id(), new_id()
    index.upsert(short_id, short, payload("s", "short-lived", ttl=0.3))
    index.upsert(kept_id, kept, payload("s", "kept"))
    assert [c.id for c in index.search(short, {"scope": "s"}, 5, 0.9)] == [short_id]
    time.sleep(0.5)
    assert index.search(short, {"scope": "s"}, 5, 0.9) == []
    assert index.find({"scope": "s", "form": "short-lived"}, 5) == []
    assert until(lambda: index.count() == 1)
    assert [c.id for c in index.search(kept, {"scope": "s"}, 5, 0.9)] == [kept_id]


# isolation and hostile values ----------------------------------------------------------------
def test_scopes_and_namespaces_never_see_each_other(make_index: MakeIndex) -> None:
    alice, bob = make_index(), make_index()  # two processes of one namespace
    other = make_index(namespace="ns2")
    vector = unit(np.random.default_rng(4))[0]
    alice_id, bob_id, other_id = new_id(), new_id(), new_id()
    alice.upsert(alice_id, vector, payload("tenant-alice", "What is my plan?"))
    bob.upsert(bob_id, vector, payload("tenant-bob", "What is my plan?"))
    other.upsert(other_id, vector, payload("tenant-alice", "What is my plan?", namespace="ns2"))
    for index in (alice, bob):  # each process sees every point of its namespace ...
        assert [c.id for c in index.search(vector, {"scope": "tenant-alice"}, 5, 0.5)] == [alice_id]
        assert [c.id for c in index.search(vector, {"scope": "tenant-bob"}, 5, 0.5)] == [bob_id]
        form = {"form": "what is my plan?"}
        assert [c.id for c in index.find({"scope": "tenant-bob", **form}, 5)] == [bob_id]
    assert index.search(vector, {"scope": "tenant-carol"}, 5, 0.0) == []
    # ... and none of another namespace's, with the same scope
    assert [c.id for c in other.search(vector, {"scope": "tenant-alice"}, 5, 0.5)] == [other_id]
    alice.delete_where({"namespace": NS})
    assert alice.count() == 0 and other.count() == 1
    with pytest.raises(ValueError):  # a point of another namespace is refused
        alice.upsert(new_id(), vector, payload("s", "q", namespace="ns2"))
    with pytest.raises(ValueError):  # and so is a filter on a field that is not indexed
        alice.search(vector, {"tenant": "alice"}, 5, 0.5)


HOSTILE = [
    "*",
    "a,b",
    "x} | @s:{tenant-a",
    "-@f:{*}",
    '"quoted" (paren) [bracket] ~tilde $param',
    "tab\tnew\nline\\backslash",
    "",
    "\u202eRTL\u200b zero-width \U0001f600 emoji 日本語 \x00 nul",
]


def test_hostile_values_neither_crash_nor_leak(make_index: MakeIndex) -> None:
    index = make_index()
    rng = np.random.default_rng(5)
    vector = unit(rng)[0]
    ids = {}
    for n, value in enumerate(HOSTILE):
        point_id = ids[value] = new_id()
        question = f"{value} question {n} \ud800"  # a lone surrogate too: stored as it is
        index.upsert(point_id, vector, payload(value, question, form=value, ref=f"ref {value}"))
    for n, value in enumerate(HOSTILE):
        found = index.search(vector, {"scope": value}, 10, 0.5)
        assert [c.id for c in found] == [ids[value]], value
        assert found[0].payload == {
            "question": f"{value} question {n} \ud800",
            "ref": f"ref {value}",
        }
        assert [c.id for c in index.find({"scope": value, "form": value}, 10)] == [ids[value]]
        assert [c.id for c in index.find({"scope": "tenant-a", "form": value}, 10)] == []
    assert index.search(vector, {"scope": "tenant-a"}, 10, 0.0) == []
    assert index.count() == len(HOSTILE)
    for bad in (np.zeros(DIM), np.full(DIM, np.nan), np.ones(DIM + 1)):
        with pytest.raises(ValueError):
            index.upsert(new_id(), bad, payload("s", "q"))
        with pytest.raises(ValueError):
            index.search(bad, {"scope": "s"}, 5, 0.5)


# faults --------------------------------------------------------------------------------------
def test_a_paused_server_costs_the_timeout_never_a_hang(
    make_index: MakeIndex, search_server: SearchServer
) -> None:
    index = make_index(timeout=0.2)
    vector = unit(np.random.default_rng(6))[0]
    point_id = new_id()
    index.upsert(point_id, vector, payload("s", "q"))
    assert search_server.process is not None
    pid = search_server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        calls: list[Callable[[], object]] = [
            lambda: index.search(vector, {"scope": "s"}, 5, 0.5),
            lambda: index.find({"scope": "s", "form": "q"}, 5),
            lambda: index.upsert(new_id(), vector, payload("s", "other")),
        ]
        for call in calls:
            started = time.monotonic()
            with pytest.raises(redis.RedisError):
                call()
            assert time.monotonic() - started < 1.5
        started = time.monotonic()
        index.discard([point_id])  # the request path's deletion never waits on the server
        assert time.monotonic() - started < 0.05
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for_redis(search_server.port)
    assert until(lambda: index.count() == 0, timeout=10)  # the discard went through later
    assert index.search(vector, {"scope": "s"}, 5, 0.5) == []


def test_a_discarded_point_leaves_results_at_once(make_index: MakeIndex) -> None:
    index, elsewhere = make_index(), make_index()
    vector = unit(np.random.default_rng(7))[0]
    point_id = new_id()
    index.upsert(point_id, vector, payload("s", "q"))
    index.discard([point_id])
    assert index.search(vector, {"scope": "s"}, 5, 0.5) == []
    assert index.find({"scope": "s", "form": "q"}, 5) == []
    assert until(lambda: elsewhere.search(vector, {"scope": "s"}, 5, 0.5) == [])
    index.discard([point_id])
    index.upsert(point_id, vector, payload("s", "q"))  # written again: found again
    assert [c.id for c in index.search(vector, {"scope": "s"}, 5, 0.5)] == [point_id]


def test_a_server_restarted_empty_misses_then_rebuilds(
    make_index: MakeIndex, search_server: SearchServer
) -> None:
    index = make_index()
    rng = np.random.default_rng(8)
    old, new = unit(rng, 2)
    index.upsert(new_id(), old, payload("s", "old"))
    search_server.stop()
    search_server.start()
    assert index.search(old, {"scope": "s"}, 5, 0.5) == []  # a miss, no error
    assert index.find({"scope": "s", "form": "old"}, 5) == []
    assert index.count() == 0
    point_id = new_id()
    index.upsert(point_id, new, payload("s", "new"))  # makes the index again
    assert [c.id for c in index.search(new, {"scope": "s"}, 5, 0.5)] == [point_id]
    assert index.search(old, {"scope": "s"}, 5, 0.5) == []


def test_an_index_made_again_as_the_reindex_ends_is_reindexed(
    make_index: MakeIndex, search_server: SearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-index thread found nothing pending and was about to end when the index was
    made again (a loaded machine descheduled it there): its pass is not the last one, and
    the points left are indexed again (once, this lost them for good)."""
    import threading

    real = RedisSearchIndex._reindex
    ending, proceed = threading.Event(), threading.Event()

    def stalled(self: RedisSearchIndex, token: str, stop: threading.Event) -> bool:
        done = real(self, token, stop)
        if done and not ending.is_set():  # the first pass: held just before it ends
            ending.set()
            proceed.wait(10)
        return done

    monkeypatch.setattr(RedisSearchIndex, "_reindex", stalled)
    index = make_index(namespace=f"ending-{uuid.uuid4().hex[:8]}")  # made: a re-index runs
    assert ending.wait(10)
    rng = np.random.default_rng(11)
    old, new = unit(rng, 2)
    old_id = new_id()
    index.upsert(old_id, old, payload("s", "old", namespace=index.namespace))
    admin = redis.Redis(port=search_server.port)
    admin.execute_command("FT.DROPINDEX", index.index)  # the hashes stay
    assert index.search(old, {"scope": "s"}, 5, 0.5) == []
    index.upsert(new_id(), new, payload("s", "new", namespace=index.namespace))  # made again
    proceed.set()
    assert until(lambda: [c.id for c in index.search(old, {"scope": "s"}, 5, 0.5)] == [old_id], 10)


@pytest.mark.parametrize("with_documents", [False, True])
def test_an_index_dropped_by_someone_is_made_again(
    make_index: MakeIndex, search_server: SearchServer, with_documents: bool
) -> None:
    index = make_index()
    rng = np.random.default_rng(9)
    old, new = unit(rng, 2)
    old_id, new_id_ = new_id(), new_id()
    index.upsert(old_id, old, payload("s", "old"))
    admin = redis.Redis(port=search_server.port)
    admin.execute_command("FT.DROPINDEX", index.index, *(["DD"] if with_documents else []))
    assert index.search(old, {"scope": "s"}, 5, 0.5) == []  # a miss meanwhile
    assert index.find({"scope": "s", "form": "old"}, 5) == []
    index.upsert(new_id_, new, payload("s", "new"))  # the next write makes it again
    assert [c.id for c in index.search(new, {"scope": "s"}, 5, 0.5)] == [new_id_]
    if with_documents:  # its points went with it
        assert index.search(old, {"scope": "s"}, 5, 0.5) == []
    else:  # the hashes left are indexed again (in the background: a loaded machine may take
        # seconds to schedule its thread; CI once missed a 5 s wait)
        assert until(
            lambda: [c.id for c in index.search(old, {"scope": "s"}, 5, 0.5)] == [old_id], 30
        )


def _fill(index: RedisSearchIndex, count: int, seed: int) -> tuple[list[str], np.ndarray]:
    ids, vectors = [new_id() for _ in range(count)], unit(np.random.default_rng(seed), count)
    for start in range(0, count, 500):
        batch = range(start, min(start + 500, count))
        index.upsert_many([(ids[i], vectors[i], payload("s", f"q{i}")) for i in batch])
    return ids, vectors


def test_an_index_made_again_takes_the_points_left_back_a_few_at_a_time(
    make_index: MakeIndex, search_server: SearchServer
) -> None:
    """``FT.DROPINDEX`` over 3,000 points, then a write: the index is made with
    ``SKIPINITIALSCAN`` (the engine's own scan indexes them all at once and holds the server:
    exact reads timed out), the process that made it indexes them again in the background,
    a process that finds it made leaves that to the first, and a new point is found at once."""
    writer = make_index()
    ids, vectors = _fill(writer, 3000, 12)
    admin = redis.Redis(port=search_server.port)
    admin.execute_command("FT.DROPINDEX", writer.index)
    point_id, vector = new_id(), unit(np.random.default_rng(13))[0]
    writer.ensure(force=True)  # what the next write does
    writer.upsert(point_id, vector, payload("s", "new"))
    assert int(writer.info()["indexing"]) == 0  # the engine scans nothing by itself
    assert [c.id for c in writer.search(vector, {"scope": "s"}, 1, 0.5)] == [point_id]
    other = make_index()  # another process: the index is there, its re-index under way
    assert until(lambda: writer.count() == 3001, timeout=60)
    done = sorted([writer.reindexed, other.reindexed])  # one of them did it (and the new
    assert done[0] == 0 and done[1] >= 3000  # point, or a key SCAN returned twice)
    assert [c.id for c in other.search(vectors[7], {"scope": "s"}, 1, 0.5)] == [ids[7]]
    assert until(lambda: not admin.exists(writer._pending))


def test_a_re_index_left_midway_is_taken_up_by_the_next_process(
    make_index: MakeIndex, search_server: SearchServer
) -> None:
    """The process re-indexing exits midway: the marker stays, and the next process to open
    the index goes on (meanwhile the points not indexed again are misses)."""
    first = make_index()
    ids, vectors = _fill(first, 3000, 14)
    admin = redis.Redis(port=search_server.port)
    admin.execute_command("FT.DROPINDEX", first.index)
    first.ensure(force=True)
    first.close()  # at once: most points not indexed again
    assert admin.exists(first._pending)
    assert first.count() < 3000
    later = make_index()
    assert until(lambda: later.count() == 3000, timeout=60)
    assert [c.id for c in later.search(vectors[9], {"scope": "s"}, 1, 0.5)] == [ids[9]]
    assert until(lambda: not admin.exists(first._pending))


def test_another_process_notices_a_lost_index_within_recheck(
    make_index: MakeIndex, search_server: SearchServer
) -> None:
    """A process that only writes finds the index gone by itself (``recheck_s``)."""
    writer = make_index(recheck_s=0.2)
    vector = unit(np.random.default_rng(10))[0]
    redis.Redis(port=search_server.port).execute_command("FT.DROPINDEX", writer.index)
    time.sleep(0.3)
    point_id = new_id()
    writer.upsert(point_id, vector, payload("s", "q"))
    assert [c.id for c in writer.search(vector, {"scope": "s"}, 5, 0.5)] == [point_id]


def test_evicted_points_are_misses_never_wrong_answers(tmp_path: Path) -> None:
    server = SearchServer(tmp_path, ["--maxmemory", "6mb", "--maxmemory-policy", "allkeys-lru"])
    server.start()
    index = RedisSearchIndex(url=server.url, namespace=NS, dim=128)
    try:
        rng = np.random.default_rng(11)
        vectors = unit(rng, 12_000, 128)
        ids = [new_id() for _ in vectors]
        for start in range(0, len(ids), 500):
            batch = range(start, start + 500)
            index.upsert_many(
                [(ids[i], vectors[i], payload("s", f"q{i}", ref=f"ref{i}")) for i in batch]
            )
        admin = redis.Redis(port=server.port)
        assert int(admin.info("stats")["evicted_keys"]) > 0
        hits = misses = 0
        for i in range(0, len(ids), 20):
            found = index.search(vectors[i], {"scope": "s"}, 5, 0.9)
            if not found:
                misses += 1
                continue
            hits += 1
            assert [c.id for c in found] == [ids[i]]  # never another point
            assert found[0].payload == {"question": f"q{i}", "ref": f"ref{i}"}
        assert hits > 0 and misses > 0
    finally:
        index.close()
        server.stop()


def test_another_dimension_is_refused(make_index: MakeIndex) -> None:
    make_index(space="model-a")
    with pytest.raises(ValueError, match="dimension"):
        make_index(space="model-a", dim=DIM * 2)
    make_index(space="model-b", dim=DIM * 2)  # its own space: its own index


def test_detection(search_server: SearchServer) -> None:
    assert has_query_engine(redis.Redis.from_url(search_server.url))
    assert not has_query_engine(redis.Redis.from_url(REDIS_URL))  # plain Redis
    assert query_engine_at(search_server.url) and not query_engine_at(REDIS_URL)
    search_server.stop()
    with pytest.raises(redis.ConnectionError):  # not known: not a "no"
        query_engine_at(search_server.url, timeout=0.2)


def test_float32_and_flat(make_index: MakeIndex) -> None:
    rng = np.random.default_rng(12)
    vectors = unit(rng, 50)
    for options in ({"dtype": "float32"}, {"algorithm": "flat"}):
        index = make_index(space="-".join(options.values()), **options)
        ids = [new_id() for _ in vectors]
        index.upsert_many(
            [
                (i, v, payload("s", f"q{n}"))
                for n, (i, v) in enumerate(zip(ids, vectors, strict=True))
            ]
        )
        for n in (0, 17, 49):
            assert index.search(vectors[n], {"scope": "s"}, 1, 0.9)[0].id == ids[n]
        # another process opening it learns how it was made
        other = make_index(space="-".join(options.values()))
        assert other.search(vectors[3], {"scope": "s"}, 1, 0.9)[0].id == ids[3]


# Redis Cluster -------------------------------------------------------------------------------
@pytest.fixture
def search_cluster(tmp_path: Path) -> Iterator[list[SearchServer]]:
    """Three valkey-servers with RediSearch in one Redis Cluster (no replicas), the 16384
    slots split between them."""
    servers = []
    for n in range(3):
        directory = tmp_path / f"node{n}"
        directory.mkdir()
        server = SearchServer(directory)
        server.bus_port = free_port()  # (its port + 10000, the default, may not exist)
        server.extra_args += ["--cluster-enabled", "yes", "--cluster-port", str(server.bus_port)]
        servers.append(server)
    try:
        for server in servers:
            server.start()
        clients = [redis.Redis(port=s.port) for s in servers]
        bounds = [0, 5461, 10923, 16384]
        for n, client in enumerate(clients):
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[n], bounds[n + 1] - 1)
        for server in servers[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", server.port, server.bus_port)
        assert until(
            lambda: all(c.cluster("info")["cluster_state"] == "ok" for c in clients), timeout=20
        ), "the cluster did not form"
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_on_a_redis_cluster(search_cluster: list[SearchServer]) -> None:
    url = search_cluster[0].url
    client = RedisCluster.from_url(url)
    assert has_query_engine(client)
    namespaces = {}  # one namespace per node: the namespace's slot decides
    for n in range(200):
        ns = f"n{n}"
        node = client.get_node_from_key(f"tricache:{{{ns}}}:v:")
        namespaces.setdefault(node.port, ns)
        if len(namespaces) == 3:
            break
    assert len(namespaces) == 3
    rng = np.random.default_rng(13)
    vector = unit(rng)[0]
    indexes = {port: RedisSearchIndex(url=url, cluster=True, namespace=ns, dim=DIM)
               for port, ns in namespaces.items()}  # fmt: skip
    try:
        ids = {}
        for port, index in indexes.items():
            ns = namespaces[port]
            ids[port] = [new_id(), new_id()]
            index.upsert_many(
                [(i, vector, payload("s", f"q {ns} {k}", namespace=ns)) for k, i in
                 enumerate(ids[port])]
            )  # fmt: skip
            # the index lives on the node that owns the namespace's slot, beside its points
            owner = redis.Redis(port=port)
            assert index.index.encode() in owner.execute_command("FT._LIST")
        for port, index in indexes.items():
            found = index.search(vector, {"scope": "s"}, 5, 0.9)
            assert {c.id for c in found} == set(ids[port])  # and nothing of the others
            assert index.count() == 2
            assert [c.id for c in index.find({"scope": "s", "form": found[0].payload["question"]
                                              .lower()}, 5)] == [found[0].id]  # fmt: skip
        second_port, second = list(indexes.items())[1]
        redis.Redis(port=second_port).execute_command("FT.DROPINDEX", second.index)
        second.ensure(force=True)  # made again: its points left indexed again on their node
        assert until(lambda: second.count() == 2)
        assert second.reindex_errors == 0
        first_port, first = next(iter(indexes.items()))
        first.discard([ids[first_port][0]])
        assert until(lambda: first.count() == 1)
        first.delete_where({"namespace": namespaces[first_port]})
        assert first.count() == 0
        assert all(index.count() == 2 for port, index in indexes.items() if port != first_port)
    finally:
        for index in indexes.values():
            index.close()
        client.close()


# the semantic tier on it ---------------------------------------------------------------------
def test_the_semantic_tier_on_the_query_engine(search_server: SearchServer) -> None:
    embedder = get_embedder("use-m")
    index = RedisSearchIndex(
        url=search_server.url, namespace=NS, dim=embedder.dim, space=embedder.name
    )
    other_process = RedisSearchIndex(
        url=search_server.url, namespace=NS, dim=embedder.dim, space=embedder.name
    )
    writer, reader = SemanticTier(index, embedder), SemanticTier(other_process, embedder)
    entries: dict[str, CacheEntry] = {}
    try:

        def store(question: str, answer: str, **kw: Any) -> str:
            request = CacheRequest(question, namespace=NS, **kw)
            ref = f"tricache:{NS}:x:{uuid.uuid4().hex}"
            entries[ref] = CacheEntry(answer)
            assert writer.add(request, ref, entries[ref], ttl=600) is not None
            return ref

        ref = store("How do I reset my password?", "Use 'Forgot password'.")
        store("How do I upgrade my plan?", "alice: Pro", tenant="alice")

        def looked_up(question: str, **kw: Any) -> Any:
            return reader.lookup(ask(CacheRequest(question, namespace=NS, **kw), ""), entries.get)

        hit = looked_up("How can I reset my password?")  # a paraphrase, found by another process
        assert hit is not None and hit.ref == ref and hit.entry.text == "Use 'Forgot password'."
        assert 0.9 <= hit.score <= 1.0 and hit.question == "How do I reset my password?"
        same = looked_up("how do i reset my password")  # the same question in another form
        assert same is not None and same.ref == ref
        for look_alike in ("How do I not reset my password?", "How do I reset my email?"):
            assert looked_up(look_alike) is None, look_alike
        assert reader.metrics.snapshot()["semantic"].get("guard_polarity.negation", 0) >= 1
        paraphrase = "How can I upgrade my plan?"
        assert looked_up(paraphrase, tenant="bob") is None  # another tenant's scope
        assert looked_up(paraphrase, tenant="alice") is not None

        del entries[ref]  # the answer expired or went stale: its point is a miss, then goes
        assert looked_up("How can I reset my password?") is None
        assert until(lambda: index.count() == 1)
        assert looked_up("How can I reset my password?") is None
        writer.clear(NS)
        assert index.count() == 0 and looked_up(paraphrase, tenant="alice") is None
    finally:
        index.close()
        other_process.close()


def test_the_binaries_are_found() -> None:
    """The helper names what to install instead of skipping (see conftest)."""
    from conftest import query_engine_binaries

    binary, module = query_engine_binaries()
    assert binary.is_file() and module.is_file()
