"""Prometheus exposition of a cache's counters (needs ``prometheus-client``).

The collector reads ``cache.stats()`` when scraped; nothing is added to the lookup path.

    from tricache.ops.prometheus import serve
    serve(cache, port=9464)          # http://host:9464/metrics

Names: ``tricache_lookups_total{tier}``, ``tricache_hits_total{tier,level}``,
``tricache_misses_total{tier}``, ``tricache_events_total{tier,event}`` (every counter, e.g.
guard refusals, stale entries, store errors, Bloom round trips saved),
``tricache_lookup_latency_seconds{tier,quantile}``, and the golden signals
``tricache_kv_prefix_hit_ratio``, ``tricache_exact_stale_ratio``,
``tricache_semantic_precision`` (from feedback) and
``tricache_lookup_p95_seconds{tier}``; savings: ``tricache_tokens_saved_total{tier}`` and
``tricache_cost_saved_usd_total{tier}`` (``Cache(prices={"gpt-4o-mini": 0.6})``: USD per 1M
tokens).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["CacheCollector", "counter_names", "exposition", "serve"]


class CacheCollector:
    """A prometheus-client collector over one ``Cache``."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.cache.stats()
        lookups = CounterMetricFamily(
            "tricache_lookups", "Lookups reaching a tier", labels=["tier"]
        )
        hits = CounterMetricFamily("tricache_hits", "Answers served", labels=["tier", "level"])
        misses = CounterMetricFamily("tricache_misses", "Lookups a tier missed", labels=["tier"])
        events = CounterMetricFamily("tricache_events", "Every counter", labels=["tier", "event"])
        latency = GaugeMetricFamily(
            "tricache_lookup_latency_seconds", "Recent lookup latency", labels=["tier", "quantile"]
        )
        p95 = GaugeMetricFamily("tricache_lookup_p95_seconds", "Golden signal", labels=["tier"])
        for tier, counters in stats.items():
            if tier in ("store", "learning") or not isinstance(counters, dict):
                continue
            tier_hits = {k: v for k, v in counters.items() if k.startswith("hits") and _int(v)}
            if tier in ("cache", "requests"):  # (the whole cache's counters) no tier
                for event, value in counters.items():
                    if _int(value):
                        events.add_metric([tier, event], value)
                continue
            for event, value in counters.items():
                if event == "latency_ms" and isinstance(value, dict):
                    for quantile, ms in value.items():
                        latency.add_metric([tier, "0." + quantile[1:]], ms / 1e3)
                    p95.add_metric([tier], value["p95"] / 1e3)
                elif _int(value):
                    events.add_metric([tier, event], value)
            level_hits = {k: v for k, v in tier_hits.items() if k.startswith("hits_l")}
            for event, value in (level_hits or {"hits": tier_hits.get("hits", 0)}).items():
                hits.add_metric([tier, event.removeprefix("hits_") if level_hits else "all"], value)
            total_hits = sum(level_hits.values()) if level_hits else tier_hits.get("hits", 0)
            missed = counters.get("misses", 0)
            lookups.add_metric([tier], total_hits + missed)
            misses.add_metric([tier], missed)
        yield from (lookups, hits, misses, events, latency, p95)
        yield from _golden(stats)


def _golden(stats: dict[str, Any]) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    exact = stats.get("exact", {})
    read = exact.get("hits_l1", 0) + exact.get("hits_l2", 0) + exact.get("stale", 0)
    stale = GaugeMetricFamily("tricache_exact_stale_ratio", "Stale share of exact L2 reads")
    stale.add_metric([], exact.get("stale", 0) / read if read else 0.0)
    feedback = stats.get("feedback", {})
    judged = feedback.get("correct", 0) + feedback.get("wrong", 0)
    precision = GaugeMetricFamily(
        "tricache_semantic_precision", "Share of judged answers reported correct (feedback)"
    )
    precision.add_metric([], feedback.get("correct", 0) / judged if judged else 1.0)
    tokens = CounterMetricFamily("tricache_tokens_saved", "LLM tokens not spent", labels=["tier"])
    cost = CounterMetricFamily("tricache_cost_saved_usd", "Per the price table", labels=["tier"])
    for tier, counters in stats.items():
        if isinstance(counters, dict) and "tokens_saved" in counters:
            tokens.add_metric([tier], counters["tokens_saved"])
            cost.add_metric([tier], counters.get("cost_saved_micro_usd", 0) / 1e6)
    kv = stats.get("kv", {})
    prefix = GaugeMetricFamily(
        "tricache_kv_prefix_hit_ratio",
        "Share of prompt tokens whose KV was reused (backends built with metrics=cache.metrics)",
    )
    prompt_tokens = kv.get("prompt_tokens", 0)
    prefix.add_metric([], kv.get("reused_tokens", 0) / prompt_tokens if prompt_tokens else 0.0)
    yield stale
    yield precision
    yield prefix
    yield tokens
    yield cost


def counter_names(counts: dict[str, int]) -> dict[str, dict[str, int]]:
    """``{"tier.event": n}`` as read from a shared store (any process, any version, or a row
    written there by hand) grouped as ``stats()`` groups them, every name made a Prometheus
    name (``[a-z0-9_]``, an underscore for anything else); ``latency_ms``, which ``stats()``
    keeps for the latency samples, becomes ``latency_ms_count``; non-integers are left out."""
    out: dict[str, dict[str, int]] = {}
    for name, n in counts.items():
        if not _int(n):
            continue
        tier, _, event = (_prometheus_name(part) for part in name.partition("."))
        event = "latency_ms_count" if event == "latency_ms" else event or "count"
        group = out.setdefault(tier, {})
        group[event] = group.get(event, 0) + n
    return out


def _prometheus_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", text.lower())
    return name if name[:1].isalpha() else f"_{name}"


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def exposition(cache: Any) -> str:
    """The Prometheus text format for ``cache``, as a string."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(CacheCollector(cache))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def serve(cache: Any, port: int = 9464, addr: str = "0.0.0.0") -> Any:
    """Serve ``/metrics`` for ``cache`` from a background thread; returns the server."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(CacheCollector(cache))  # type: ignore[arg-type]
    return start_http_server(port, addr=addr, registry=registry)
