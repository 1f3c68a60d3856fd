"""Counters per tier and their Prometheus exposition."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tricache import Cache
from tricache.cli import app
from tricache.prometheus import exposition


def _hits(cache: Cache) -> dict[str, float]:
    families = {f.name: f for f in text_string_to_metric_families(exposition(cache))}
    return {s.labels["tier"]: s.value for s in families["tricache_hits"].samples}


def test_each_hit_increments_exactly_one_tier(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "m.sqlite3") as cache:
        request = cache.request("How do I reset my password?")
        cache.update(request, "A")
        cache.lookup(request)  # exact
        assert _hits(cache) == {"exact": 1.0, "semantic": 0.0}
        cache.lookup(cache.request("How can I reset my password?"))  # semantic
        assert _hits(cache) == {"exact": 1.0, "semantic": 1.0}
        cache.lookup(cache.request("How do I not reset my password?"))  # refused: no hit
        assert _hits(cache) == {"exact": 1.0, "semantic": 1.0}


def test_prometheus_text_has_the_documented_names(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "m.sqlite3") as cache:
        request = cache.request("How do I reset my password?")
        cache.lookup(request)
        cache.update(request, "Use the Forgot password link.")
        cache.lookup(request)
        cache.lookup(cache.request("How do I not reset my password?"))
        cache.feedback(cache.lookup(request).entry_id, correct=True)  # type: ignore[union-attr]
        families = {f.name: f for f in text_string_to_metric_families(exposition(cache))}
    names = [
        "tricache_lookups",
        "tricache_hits",
        "tricache_misses",
        "tricache_events",
        "tricache_lookup_latency_seconds",
        "tricache_exact_stale_ratio",
        "tricache_semantic_precision",
        "tricache_lookup_p95_seconds",
    ]
    assert set(names) <= set(families)
    lookups = {s.labels["tier"]: s.value for s in families["tricache_lookups"].samples}
    assert lookups["exact"] == 4
    events = {(s.labels["tier"], s.labels["event"]) for s in families["tricache_events"].samples}
    assert ("semantic", "guard_negation") in events
    assert families["tricache_semantic_precision"].samples[0].value == 1.0


def test_metrics_command_prints_the_exposition(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["metrics", "--once", "--path", str(tmp_path / "x.sqlite3")])
    assert result.exit_code == 0
    assert "tricache_exact_stale_ratio" in result.output
