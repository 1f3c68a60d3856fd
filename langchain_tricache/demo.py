"""``tricache demo`` through LangChain: a stand-in chat model behind ``TriCache``.

The workload (tricache.tools.demo) knows the right answer of every request; the stand-in model
answers it after a realistic latency, and every answer the cache serves instead is scored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from tricache import Cache
from tricache.tools.demo import SYSTEM, DemoReport, workload

from .cache import TriCache

__all__ = ["StandInChatModel", "run_langchain_demo"]


class StandInChatModel(BaseChatModel):
    """Answers with ``next_answer`` after ``latency`` seconds; counts its calls."""

    latency: float = 0.3
    next_answer: str = ""
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "stand-in"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.calls += 1
        time.sleep(self.latency)
        usage = {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}
        message = AIMessage(self.next_answer, usage_metadata=usage)  # type: ignore[arg-type]
        return ChatResult(generations=[ChatGeneration(message=message)])


def run_langchain_demo(
    workers: list[Cache],
    n: int = 300,
    *,
    llm_latency: float = 0.3,
    seed: int = 7,
    on_step: Callable[[], None] | None = None,
) -> DemoReport:
    """``n`` requests, split in order over ``workers`` (caches sharing one store)."""
    models = [StandInChatModel(latency=llm_latency, cache=TriCache(cache=w)) for w in workers]
    report = DemoReport()
    started = time.perf_counter()
    for i, item in enumerate(workload(n, seed)):
        model = models[i * len(models) // n]
        expected = f"answer:{item.answer_id}"
        model.next_answer = expected
        messages: list[BaseMessage] = [SystemMessage(SYSTEM)]
        for role, text in item.history:
            messages.append(HumanMessage(text) if role == "user" else AIMessage(text))
        messages.append(HumanMessage(item.query))
        calls_before = model.calls
        t0 = time.perf_counter()
        reply = model.invoke(messages)
        elapsed = time.perf_counter() - t0
        called = model.calls > calls_before
        tier = "llm" if called else reply.response_metadata.get("tricache", {}).get("tier", "?")
        overhead_ms = (elapsed - (llm_latency if called else 0.0)) * 1e3
        report.record(item.kind, tier, reply.content != expected, overhead_ms)
        if on_step is not None:
            on_step()
    report.wall_s = time.perf_counter() - started
    report.llm_calls = sum(m.calls for m in models)
    report.no_cache_s = n * llm_latency
    return report
