"""LangChain's standard ``BaseCache`` suites (``langchain-tests``) against ``TriCache``,
embedded (SQLite) and shared (Redis)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from langchain_core.caches import BaseCache
from langchain_tests.integration_tests.cache import AsyncCacheTestSuite, SyncCacheTestSuite

from langchain_tricache import TriCache

from conftest import REDIS_URL


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[TriCache]:
    # tag_hits=False: a hit is exactly what was stored, the contract these suites check
    cache = TriCache(path=tmp_path / "standard.sqlite3", namespace="standard", tag_hits=False)
    yield cache
    cache.tricache.close()


@pytest.fixture
def shared() -> Iterator[TriCache]:
    namespace = f"std{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()  # the suite needs the real server: fail loudly, never skip
    cache = TriCache(redis_url=REDIS_URL, namespace=namespace, tag_hits=False)
    yield cache
    cache.clear()
    cache.tricache.close()
    for key in client.scan_iter(match=f"tricache:{namespace}:*", count=1000):
        client.delete(key)
    client.close()


class TestEmbeddedSync(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self, embedded: TriCache) -> BaseCache:
        return embedded


@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function test_no_overrides:pytest.PytestWarning")
class TestEmbeddedAsync(AsyncCacheTestSuite):
    @pytest.fixture
    def cache(self, embedded: TriCache) -> BaseCache:
        return embedded


class TestRedisSync(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self, shared: TriCache) -> BaseCache:
        return shared


@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function test_no_overrides:pytest.PytestWarning")
class TestRedisAsync(AsyncCacheTestSuite):
    @pytest.fixture
    def cache(self, shared: TriCache) -> BaseCache:
        return shared
