"""Every process's counters in one place: this process's are added to the store now and then
(``Ledger``), and ``summary`` turns the sums into what a user asks of a running app — hit
rate per tier, LLM calls, tokens and cost saved, answers reported wrong — over a window.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from ..stores.base import STATS_BUCKET_S, StatsLog
from .metrics import Metrics

__all__ = ["FLUSH_S", "Ledger", "summary"]

log = logging.getLogger(__name__)
FLUSH_S = 10.0  # how often a process adds its counters to the store


class Ledger:
    """Adds what ``metrics`` counted since the last time to ``store`` (a ``StatsLog``); a
    failed add is tried again with the next one (nothing is counted twice)."""

    def __init__(self, metrics: Metrics, store: StatsLog, namespace: str) -> None:
        self.metrics, self.store, self.namespace = metrics, store, namespace
        self._sent: Counter[str] = Counter()
        self.errors = 0

    def upkeep(self) -> None:
        self.flush()

    def flush(self) -> bool:
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
    and hit rate, the LLM calls the cache did not avoid, tokens and cost saved, feedback."""
    lookups = counts.get("requests.lookups", 0)
    tiers = {
        "exact": counts.get("exact.hits_l1", 0) + counts.get("exact.hits_l2", 0),
        "semantic": counts.get("semantic.hits", 0),
        "faq": counts.get("faq.hits", 0),
    }
    served = sum(tiers.values())
    tokens = sum(counts.get(f"{t}.tokens_saved", 0) for t in tiers)
    cost = sum(counts.get(f"{t}.cost_saved_micro_usd", 0) for t in tiers) / 1e6
    return {
        "lookups": lookups,
        "hits": dict(tiers),
        "hit_rate": {tier: round(n / lookups, 4) if lookups else 0.0 for tier, n in tiers.items()},
        "hit_rate_total": round(served / lookups, 4) if lookups else 0.0,
        "llm_calls": max(0, lookups - served),
        "tokens_saved": tokens,
        "cost_saved_usd": round(cost, 6),
        "feedback": {
            "correct": counts.get("feedback.correct", 0),
            "wrong": counts.get("feedback.wrong", 0),
        },
        "store_errors": sum(n for name, n in counts.items() if name.endswith("_errors")),
    }
