"""Counters and latency samples per tier, cheap enough for every lookup."""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict, deque
from typing import Any

from ..runtime.forks import on_fork

_log = logging.getLogger("tricache.cache")  # the fail-open guarantee is the Cache's

__all__ = ["Metrics", "failed"]


class Metrics:
    """Thread-safe event counts and a window of recent latencies per tier."""

    def __init__(self, window: int = 4096) -> None:
        self._lock = threading.Lock()
        on_fork(self._after_fork)
        self._counts: Counter[tuple[str, str]] = Counter()
        self._latency: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def incr(self, tier: str, event: str, n: int = 1) -> None:
        with self._lock:
            self._counts[tier, event] += n

    def observe(self, tier: str, seconds: float) -> None:
        self._latency[tier].append(seconds)  # deque.append is atomic

    def count(self, tier: str, event: str) -> int:
        return self._counts[tier, event]

    def counts(self) -> dict[str, int]:
        """Every counter, as ``{"tier.event": n}`` (a copy)."""
        with self._lock:
            return {f"{tier}.{event}": n for (tier, event), n in self._counts.items()}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{tier: {event: count, ..., "latency_ms": {"p50": .., "p95": .., "p99": ..}}}``."""
        with self._lock:
            out: dict[str, dict[str, Any]] = defaultdict(dict)
            for (tier, event), n in self._counts.items():
                out[tier][event] = n
        for tier, samples in list(self._latency.items()):
            ordered = sorted(samples)
            if ordered:
                out[tier]["latency_ms"] = {
                    f"p{q}": round(ordered[min(len(ordered) - 1, len(ordered) * q // 100)] * 1e3, 4)
                    for q in (50, 95, 99)
                }
        return dict(out)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._latency.clear()


def failed(metrics: Metrics, what: str, exc: BaseException) -> None:
    """A tier failed (``what``: "lookup", "semantic update" …): counted under ``cache`` and
    logged with its traceback; the app is answered without the cache."""
    metrics.incr("cache", f"{what.replace(' ', '_')}_errors")
    _log.error("tricache: %s failed; answering without the cache", what, exc_info=exc)
