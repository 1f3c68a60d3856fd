"""Every process's counters in one place: this process's are added to the store now and then
(``Ledger``), and ``summary`` turns the sums into what a user asks of a running app — hit
rate per tier, LLM calls, tokens and cost saved, answers reported wrong — over a window.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from ..runtime.exit import on_terminate
from ..runtime.forks import on_fork
from ..stores.base import STATS_BUCKET_S, StatsLog
from .metrics import Metrics

__all__ = ["FLUSH_S", "Ledger", "summary"]

log = logging.getLogger(__name__)
FLUSH_S = 10.0  # how often a process adds its counters to the store


class Ledger:
    """Adds what ``metrics`` counted since the last time to ``store`` (a ``StatsLog``); a
    failed add is tried again with the next one (nothing is counted twice).  What is left is
    added at interpreter exit and on SIGTERM (a script that never calls ``close()``), in one
    try within the store's timeout."""

    def __init__(self, metrics: Metrics, store: StatsLog, namespace: str) -> None:
        self.metrics, self.store, self.namespace = metrics, store, namespace
        self._sent: Counter[str] = Counter()
        self._lock = threading.Lock()  # one flush at a time: a delta is added once
        self.errors = 0
        on_fork(self._after_fork)
        on_terminate(self.flush_left)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def flush_left(self) -> None:
        """(At exit, on SIGTERM) what was not added yet."""
        self.flush()

    def upkeep(self) -> None:
        self.flush()

    def flush(self) -> bool:
        with self._lock:
            return self._flush()

    def _flush(self) -> bool:
        now = Counter(self.metrics.counts())
        delta = {name: n - self._sent[name] for name, n in now.items() if n > self._sent[name]}
        if not delta:
            return True
        try:
            self.store.add_stats(self.namespace, int(time.time()) // STATS_BUCKET_S, delta)
        except Exception as exc:  # a store down: the next flush sends it
            self.errors += 1
            log.debug("tricache: counters not added to the store: %s", exc)
            return False
        self._sent = now
        return True

    def read(self, window_s: float) -> dict[str, int]:
        """Every process's counters over the last ``window_s`` seconds (to the bucket)."""
        return self.store.read_stats(self.namespace, int(time.time() - window_s) // STATS_BUCKET_S)


def summary(counts: dict[str, int]) -> dict[str, Any]:
    """What a user asks of the counters ``counts`` (``"tier.event"`` → n): per tier its hits
    and hit rate, the calls that reached the model, the callers that waited for another's
    (coalesced), what the cache declined, tokens and cost saved, feedback.  A request is
    counted once, whichever layers of the cache it passed (``requests.py``)."""
    lookups = counts.get("requests.lookups", 0)
    tiers = {
        "exact": counts.get("exact.hits_l1", 0) + counts.get("exact.hits_l2", 0),
        "semantic": counts.get("semantic.hits", 0),
        "faq": counts.get("faq.hits", 0),
    }
    served = sum(tiers.values())
    coalesced = counts.get("requests.coalesced", 0)
    if "requests.model_calls" in counts or "requests.lookup_misses" in counts:
        llm_calls = counts.get("requests.model_calls", 0) + counts.get("requests.lookup_misses", 0)
    else:  # counters of a version that did not count them: what the cache did not answer
        llm_calls = max(0, lookups - served - coalesced)
    tokens = sum(counts.get(f"{t}.tokens_saved", 0) for t in tiers)
    cost = sum(counts.get(f"{t}.cost_saved_micro_usd", 0) for t in tiers) / 1e6
    return {
        "lookups": lookups,
        "hits": dict(tiers),
        "hit_rate": {tier: _share(n, lookups) for tier, n in tiers.items()},
        "hit_rate_total": _share(served, lookups),
        "llm_calls": llm_calls,
        "coalesced": coalesced,
        "llm_calls_avoided": _share(max(0, lookups - llm_calls), lookups),
        "skipped": {
            "time_dependent": counts.get("requests.skipped_time_dependent", 0),
            "faq_context": counts.get("faq.skipped_context", 0),
        },
        "tokens_saved": tokens,
        "cost_saved_usd": round(cost, 6),
        "feedback": {
            "correct": counts.get("feedback.correct", 0),
            "wrong": counts.get("feedback.wrong", 0),
        },
        "store_errors": sum(n for name, n in counts.items() if name.endswith("_errors")),
    }


def _share(n: int, of: int) -> float:
    return round(min(n, of) / of, 4) if of else 0.0
