"""Counters per tier and their Prometheus exposition."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tricache import Cache
from tricache.ops.prometheus import exposition
from tricache.tools.cli import app


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
    assert ("semantic", "guard_polarity.negation") in events
    assert families["tricache_semantic_precision"].samples[0].value == 1.0


def test_metrics_command_prints_the_exposition(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["metrics", "--once", "--path", str(tmp_path / "x.sqlite3")])
    assert result.exit_code == 0
    assert "tricache_exact_stale_ratio" in result.output


def test_tokens_and_cost_saved_follow_the_price_table(tmp_path: Path) -> None:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from langchain_tricache import TriCache

    usage = {"input_tokens": 800, "output_tokens": 200, "total_tokens": 1000}
    with Cache(path=tmp_path / "p.sqlite3", prices={"": 2.0}) as core:  # fake model: no name
        cache = TriCache(cache=core)
        GenericFakeChatModel(
            messages=iter([AIMessage("A", usage_metadata=usage)]), cache=cache
        ).invoke("How do I reset my password?")
        again = GenericFakeChatModel(messages=iter([AIMessage("NOT CALLED")]), cache=cache)
        again.invoke("How do I reset my password?")  # exact hit
        again.invoke("How can I reset my password?")  # semantic hit
        stats = core.stats()
        families = {f.name: f for f in text_string_to_metric_families(exposition(core))}
    assert stats["exact"]["tokens_saved"] == 1000 and stats["semantic"]["tokens_saved"] == 1000
    assert stats["exact"]["cost_saved_micro_usd"] == 2000  # 1000 tokens at $2 per 1M
    cost = {s.labels["tier"]: s.value for s in families["tricache_cost_saved_usd"].samples}
    assert cost == {"exact": 0.002, "semantic": 0.002}


def test_cached_chat_model_prices_by_the_answers_model_name(tmp_path: Path) -> None:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from langchain_tricache import CachedChatModel

    usage = {"input_tokens": 300, "output_tokens": 200, "total_tokens": 500}
    answer = AIMessage("A", usage_metadata=usage, response_metadata={"model_name": "big-model"})
    with Cache(path=tmp_path / "m.sqlite3", prices={"big-model": 10.0, "": 99.0}) as core:
        model = CachedChatModel(inner=GenericFakeChatModel(messages=iter([answer])), tricache=core)
        model.invoke("What is the refund window?")
        model.invoke("What is the refund window?")
        saved = core.stats()["exact"]
    assert saved["tokens_saved"] == 500
    assert saved["cost_saved_micro_usd"] == 5000  # 500 tokens at $10 per 1M, not the "" price
