"""The exact tier on a real three-master Redis Cluster on loopback."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tricache import Cache, Exact, Redis

from conftest import free_port, roles_of_two_coalescers, wait_for_redis


def cluster_ports(n: int) -> list[int]:
    """Ports whose cluster-bus port (+10000) is free too."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(20000, 30000)
        if port not in ports and all(_is_free(p) for p in (port, port + 10000)):
            ports.append(port)
    return ports


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    assert server and cli, "redis-server and redis-cli are needed (.ci/run installs them)"
    ports = cluster_ports(3)
    procs = []
    for port in ports:
        directory: Path = tmp_path_factory.mktemp(f"node{port}")
        procs.append(
            subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no",
                 "--dir", str(directory)],
                stdout=subprocess.DEVNULL,
            )
        )  # fmt: skip
    try:
        for port in ports:
            wait_for_redis(port)
        nodes = [f"127.0.0.1:{p}" for p in ports]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 20
        while redis.Redis(port=ports[0]).cluster("info")["cluster_state"] != "ok":
            assert time.monotonic() < deadline, "cluster never became ok"
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_exact_tier_on_redis_cluster(cluster_url: str) -> None:
    a = Cache(store=Redis(cluster_url, cluster=True), namespace="clu")
    b = Cache(store=Redis(cluster_url, cluster=True), namespace="clu", exact=Exact(bloom=False))
    reqs = [a.request(f"question {i}", tags=["docs"]) for i in range(30)]
    for r in reqs:
        assert a.update(r, f"answer {r.query}")
    # entries spread over the masters' slots, and another client reads every one
    hits = [b.lookup(r) for r in reqs]
    assert all(h is not None and h.level == "l2" for h in hits)
    masters = {
        redis.Redis.from_url(cluster_url).cluster("keyslot", a.exact.key(r)) // 5462 for r in reqs
    }
    assert len(masters) == 3

    a.invalidate("docs")
    deadline = time.monotonic() + 1
    while any(b.lookup(r) is not None for r in reqs):
        assert time.monotonic() < deadline, "invalidation did not reach the other client"
        time.sleep(0.02)

    async def roundtrip() -> str | None:
        req = a.request("async question")
        await a.aupdate(req, "async answer")
        hit = await b.alookup(req)
        return hit.text if hit else None

    assert asyncio.run(roundtrip()) == "async answer"
    # b deleted the 30 stale entries as it met them; evict finds the rest
    assert len(list(a.exact.store.keys("clu"))) == 1  # type: ignore[union-attr]
    for i in range(5):
        a.update(a.request(f"old {i}", tags=["old"]), "x")
    a.invalidate("old")
    assert a.evict() == {"scanned": 6, "stale": 5, "corrupt": 0}
    a.clear()
    assert list(a.exact.store.keys("clu")) == []  # type: ignore[union-attr]
    a.close()
    b.close()


def test_unreachable_cluster_is_a_miss_not_an_error() -> None:
    cache = Cache(store=Redis(f"redis://127.0.0.1:{free_port()}/0", cluster=True), namespace="x")
    req = cache.request("q")
    assert cache.lookup(req) is None
    assert cache.update(req, "a") is False  # its versions cannot be vouched for: not kept
    assert cache.lookup(req) is None
    assert cache.stats()["exact"]["unverified_writes"] == 1


def test_coalescing_locks_on_redis_cluster(cluster_url: str) -> None:
    """One leader among two coalescers over the cluster, the lock released afterwards,
    whichever master owns the key's slot."""
    from tricache.stores.redis import RedisStore

    store = RedisStore(cluster_url, cluster=True)
    for i in range(6):  # keys on every master
        assert roles_of_two_coalescers(store, f"tricache:clu:x:{i:040x}") == [False, True]
    store.close()
