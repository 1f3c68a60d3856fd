"""Code that runs in child processes of the two-process tests (importable under spawn)."""

from __future__ import annotations

import time
from multiprocessing.queues import Queue
from typing import Any

from tricache import Cache


def write_entries(options: dict[str, Any], questions: list[str]) -> None:
    with Cache(**options) as cache:
        for q in questions:
            cache.update(cache.request(q), f"answer to {q}")


def hold_until_invalidated(options: dict[str, Any], ready: Queue, started: Queue) -> None:
    """Keep a tagged entry hot in L1, then report how long after the parent's invalidation
    (a wall-clock time it sends) the first miss came."""
    with Cache(**options) as cache:
        req = cache.request("what does the handbook say?", tags=["handbook"])
        cache.update(req, "page 12")
        for _ in range(5):
            assert cache.lookup(req) is not None
        assert cache.exact.l1.get(cache.exact.key(req)) is not None
        ready.put("ready")
        invalidated_at = started.get(timeout=20)
        deadline = time.time() + 10
        while time.time() < deadline:
            if cache.lookup(req) is None:
                ready.put(time.time() - invalidated_at)
                return
            time.sleep(0.005)
        ready.put(None)


def open_cache_and_report(path: str, results: Queue) -> None:
    """Open a cache on a path whose vector index another process holds."""
    with Cache(path=path) as cache:
        report = {"semantic": cache.semantic is not None}
        hit = cache.lookup(cache.request("How do I reset my password?"))
        report["exact_hit"] = hit is not None and hit.tier == "exact"
        results.put(report)
