"""The KV tier with transformers on CPU: a tiny random Llama built here, nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tricache.kv import (
    PrefixBackend,
    TransformersBackend,
    kv_budget,
    kv_bytes_per_token,
    suggest_max_model_len,
)
from tricache.kv.tiny import build_tiny_llama
from tricache.ops.metrics import Metrics
from tricache.tools.cli import app

SYSTEM = "You are a helpful support assistant for ACME. Answer briefly, cite the policy. " * 12
QUESTIONS = ["How do refunds work?", "Where do orders ship from?", "Why did my account lock?"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def backend(tiny_model: Path) -> TransformersBackend:
    return TransformersBackend(str(tiny_model))


def chat(question: str, system: str = SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def test_outputs_with_reuse_equal_generation_from_scratch(backend: TransformersBackend) -> None:
    assert isinstance(backend, PrefixBackend)
    for question in QUESTIONS * 2:
        result = backend.generate(chat(question), max_new_tokens=12)
        ids = backend.layout.lay_out(chat(question)).ids
        reference = backend.model.generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=0
        )[0, len(ids) :].tolist()
        assert list(result.token_ids) == reference


def test_reuse_counters(backend: TransformersBackend) -> None:
    prefix_len = backend.layout.lay_out(chat("x")).prefix_len
    assert prefix_len > 100
    first = backend.generate(chat(QUESTIONS[0]), max_new_tokens=2)
    assert first.reused_tokens == 0 and first.prefilled_tokens == first.prompt_tokens
    later = [backend.generate(chat(q), max_new_tokens=2) for q in QUESTIONS]
    assert all(r.reused_tokens == prefix_len for r in later)
    other = backend.generate(chat(QUESTIONS[0], system="Another system prompt."), max_new_tokens=2)
    assert other.reused_tokens == 0
    stats = backend.stats.as_dict()
    assert stats["requests"] == 5
    assert stats["reused_tokens"] == 3 * prefix_len
    assert stats["prompt_tokens"] == sum(r.prompt_tokens for r in [first, *later, other])


def test_prefix_kv_is_never_changed_by_a_call(backend: TransformersBackend) -> None:
    backend.warm(SYSTEM)
    runs = [backend.generate(chat(QUESTIONS[1]), max_new_tokens=8).token_ids for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]


def test_lru_is_bounded_by_bytes(tiny_model: Path) -> None:
    probe = TransformersBackend(str(tiny_model))
    probe.warm(SYSTEM)
    one_prefix = probe._prefixes._bytes
    backend = TransformersBackend(str(tiny_model), max_cache_bytes=int(one_prefix * 1.5))
    backend.warm(SYSTEM)
    backend.warm(SYSTEM.replace("ACME", "Globex"))
    assert backend.cached_prefixes == 1  # the first was evicted
    assert backend.generate(chat(QUESTIONS[0]), max_new_tokens=1).reused_tokens == 0


def test_warm_then_reuse_and_metrics(tiny_model: Path) -> None:
    metrics = Metrics()
    backend = TransformersBackend(str(tiny_model), metrics=metrics)
    n = backend.warm(SYSTEM)
    result = backend.generate(chat(QUESTIONS[2]), max_new_tokens=2)
    assert result.reused_tokens == n > 0
    assert metrics.count("kv", "reused_tokens") == n
    assert metrics.count("kv", "prompt_tokens") == result.prompt_tokens


def test_reuse_off_is_the_baseline(tiny_model: Path) -> None:
    backend = TransformersBackend(str(tiny_model), reuse=False)
    for question in QUESTIONS:
        assert backend.generate(chat(question), max_new_tokens=1).reused_tokens == 0
    assert backend.cached_prefixes == 0


def test_stream_and_odd_prompts(backend: TransformersBackend) -> None:
    text = backend.generate(chat(QUESTIONS[0]), max_new_tokens=10).text
    assert "".join(backend.stream(chat(QUESTIONS[0]), max_new_tokens=10)) in (text, text.rstrip())
    only_system = backend.generate([{"role": "system", "content": SYSTEM}], max_new_tokens=2)
    assert only_system.reused_tokens == 0  # nothing after the prefix: nothing to reuse it for
    empty_question = backend.generate(chat(""), max_new_tokens=2)
    assert empty_question.prompt_tokens > 0
    with pytest.raises(ValueError):
        backend.generate([], max_new_tokens=2)


LLAMA_3_8B = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
}


def test_kv_budget_arithmetic() -> None:
    assert kv_bytes_per_token(LLAMA_3_8B) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_bytes_per_token(LLAMA_3_8B, dtype="fp8") == 65_536
    budget = kv_budget(LLAMA_3_8B, 4097, concurrency=10, block_size=16)
    assert budget.blocks_per_request == 257
    assert budget.bytes_per_request == 257 * 16 * 131_072
    assert budget.total_bytes == 10 * budget.bytes_per_request
    assert kv_bytes_per_token({"text_config": LLAMA_3_8B}) == 131_072
    with pytest.raises(ValueError):
        kv_bytes_per_token({"hidden_size": 8})
    assert suggest_max_model_len([100] * 19 + [1000]) == 128  # p95 = 100 → 120 → one block up
    assert suggest_max_model_len([1000] * 20, output_tokens=256) == 1456


def test_kv_budget_command(tmp_path: Path, tiny_model: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_3_8B))
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(n) for n in [800, 900, 1000, 3000]))
    result = CliRunner().invoke(
        app,
        ["kv-budget", str(config), "--tokens", "8192", "--concurrency", "16",
         "--prompt-lengths", str(lengths), "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["bytes_per_token"] == 131_072
    assert report["total_bytes"] == 16 * 8192 * 131_072
    assert report["suggested_max_model_len"] == 3600
    assert CliRunner().invoke(app, ["kv-budget", str(tiny_model), "--tokens", "10"]).exit_code == 0


def test_llama_index_local_llm_reuses_the_system_prompt_across_chains(
    backend: TransformersBackend, tmp_path: Path
) -> None:
    from llama_index.core import Document, VectorStoreIndex

    from llama_index_tricache import LocalPrefixLLM, TriCacheEmbedding, TriCacheLLM
    from tricache import Cache

    llm = LocalPrefixLLM(backend, system_prompt=SYSTEM, max_new_tokens=4)
    index = VectorStoreIndex.from_documents(
        [Document(text="Refunds take 14 days."), Document(text="Orders ship from Lyon.")],
        embed_model=TriCacheEmbedding(),
    )
    engine = index.as_query_engine(llm=llm, similarity_top_k=1)
    engine.query("How long do refunds take?")
    second = engine.query("Where do orders ship from?")  # another chain, same system prompt
    assert backend.stats.requests == 2 and backend.stats.reused_tokens > 0
    assert second.response is not None
    # The answer cache sits in front: a repeated chain does not reach the model at all.
    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as core:
        cached = index.as_query_engine(llm=TriCacheLLM(llm, cache=core), similarity_top_k=1)
        cached.query("Where do orders ship from?")
        cached.query("Where do orders ship from?")
    assert backend.stats.requests == 3


def test_langchain_local_chat_model(backend: TransformersBackend) -> None:
    from langchain_core.messages import HumanMessage, SystemMessage

    from langchain_tricache import LocalPrefixChatModel

    model = LocalPrefixChatModel(backend=backend, max_new_tokens=3)
    first = model.invoke([SystemMessage(SYSTEM), HumanMessage(QUESTIONS[0])])
    second = model.invoke([SystemMessage(SYSTEM), HumanMessage(QUESTIONS[1])])
    assert first.response_metadata["kv"]["reused_tokens"] == 0
    assert second.response_metadata["kv"]["reused_tokens"] > 100
    assert second.usage_metadata is not None and second.usage_metadata["output_tokens"] <= 3
    streamed = "".join(
        str(c.content) for c in model.stream([SystemMessage(SYSTEM), HumanMessage("Hi")])
    )
    assert isinstance(streamed, str) and backend.stats.requests == 3


def test_prefix_hit_ratio_is_a_golden_signal(tiny_model: Path, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tricache import Cache
    from tricache.ops.prometheus import exposition

    with Cache(path=tmp_path / "g.sqlite3", semantic=False) as core:
        backend = TransformersBackend(str(tiny_model), metrics=core.metrics)
        results = [backend.generate(chat(q), max_new_tokens=1) for q in QUESTIONS]
        families = {f.name: f for f in text_string_to_metric_families(exposition(core))}
    (sample,) = families["tricache_kv_prefix_hit_ratio"].samples
    expected = sum(r.reused_tokens for r in results) / sum(r.prompt_tokens for r in results)
    assert sample.value == pytest.approx(expected) and sample.value > 0.5
