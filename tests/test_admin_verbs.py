"""The admin verbs on a busy Redis: each gets the store's longer budget, never a lookup's 50 ms
(issue #32: ``TriCache.clear()`` raised ``TimeoutError``: its key scan ran under the lookup
timeout).  The server is made busy for real: another client keeps it in ``DEBUG SLEEP``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import redis

from tricache import Cache

from conftest import RedisServer


@contextlib.contextmanager
def busy(server: RedisServer) -> Iterator[None]:
    """The server spends most of its time asleep: 80 ms in every 100 ms."""
    stop = threading.Event()
    client = redis.Redis(port=server.port)

    def keep_busy() -> None:
        while not stop.is_set():
            client.execute_command("DEBUG", "SLEEP", "0.08")
            stop.wait(0.02)

    thread = threading.Thread(target=keep_busy, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def test_admin_verbs_succeed_on_a_busy_server(private_redis: RedisServer) -> None:
    cache = Cache(redis_url=private_redis.url, namespace="busy", semantic=False, faq=False)
    for i in range(300):  # enough keys for a scan of several rounds
        request = cache.request(f"question {i}", tags=["docs"] if i % 2 else [])
        cache.lookup(request)
        cache.update(request, f"answer {i}")
    with busy(private_redis):
        assert cache.invalidate("docs") >= 1
        assert cache.bump_kb_version() >= 1
        assert cache.set_min_watermark() > 0
        counts = cache.evict()
        assert counts["scanned"] >= 300 and counts["stale"] >= 300
        cache.clear()
    raw = redis.Redis(port=private_redis.port)
    assert not list(raw.scan_iter("tricache:busy:x:*"))
    cache.close()


def test_langchain_clear_succeeds_on_a_busy_server(private_redis: RedisServer) -> None:
    from langchain_core.outputs import Generation

    from langchain_tricache import TriCache

    cache = TriCache(redis_url=private_redis.url, namespace="lc", semantic=False, faq=False)
    cache.update("What is 2 + 2?", "llm-a", [Generation(text="4")])
    raw = redis.Redis(port=private_redis.port)
    raw.mset({f"tricache:lc:x:{i:040x}": b"old" for i in range(3000)})  # a scan of rounds
    try:
        with busy(private_redis):
            cache.clear()  # raised TimeoutError: the scan ran under the lookup's timeout
        assert cache.lookup("What is 2 + 2?", "llm-a") is None
        assert not list(raw.scan_iter("tricache:lc:x:*"))
    finally:
        cache.tricache.close()
