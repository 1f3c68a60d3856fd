"""A differential run for the adapters' refactor (issue #34): one script of calls through
LangChain and LlamaIndex — invoke, stream, batch, async, tools, structured output, a chain,
a query engine — with the oracle stand-in models (``tests/oracles.py``: every answer a digest
of the whole prompt), printing, for every call, what was served, which tier said it served it,
and how many times the model has been called so far.

    python benchmarks/refactor_diff.py > new.jsonl
    PYTHONPATH=/path/to/old/packages python benchmarks/refactor_diff.py > old.jsonl

Two versions agree when the lines agree; ``benchmarks/refactor.py`` runs both and compares.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from langchain_core.globals import set_llm_cache  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from llama_index.core import Document, VectorStoreIndex  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.prompts import PromptTemplate  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from langchain_tricache import CachedChatModel, TriCache, with_tricache  # noqa: E402
from llama_index_tricache import CachedQueryEngine, TriCacheEmbedding, TriCacheLLM  # noqa: E402
from tricache import Cache  # noqa: E402

from oracles import ChatOracle, LlamaOracle  # noqa: E402

SAME = {"how do i reset my password": "How do I reset my password?"}


class City(BaseModel):
    name: str
    country: str


@tool
def opening_hours(office: str) -> str:
    """When an office is open."""
    return f"{office}: 9-17"


def _tier(meta: Any) -> Any:
    return (meta or {}).get("tricache", {}).get("tier") if isinstance(meta, dict) else None


def _emit(scenario: str, step: str, served: Any, tier: Any, calls: int) -> None:
    """One line; tool-call ids (random per run) left out, and for concurrent calls the tiers
    sorted (which of them led is the scheduler's choice)."""
    if isinstance(served, list):
        served = [{k: v for k, v in s.items() if k != "id"} if isinstance(s, dict) else s
                  for s in served]  # fmt: skip
    if "concurrent" in step or "batch" in step:
        tier = sorted(tier, key=str) if isinstance(tier, list) else tier
    print(json.dumps({"scenario": scenario, "step": step, "served": served, "tier": tier,
                      "calls": calls}, sort_keys=True, default=str))  # fmt: skip


def langchain_global(cache: Cache) -> None:
    oracle = ChatOracle(equivalents=SAME)
    set_llm_cache(TriCache(cache=cache))
    try:
        chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | oracle
        for step, q in [("invoke", "How do I reset my password?"),
                        ("again", "How do I reset my password?"),
                        ("paraphrase", "how do i reset my password")]:  # fmt: skip
            out = chain.invoke({"q": q})
            _emit("lc.set_llm_cache", step, out.content, None, oracle.calls)
        outs = chain.batch([{"q": "What is a VPN?"}, {"q": "What is a VPN?"}])
        _emit("lc.set_llm_cache", "batch", [o.content for o in outs], None, oracle.calls)
        out = asyncio.run(chain.ainvoke({"q": "What is a VPN?"}))
        _emit("lc.set_llm_cache", "ainvoke", out.content, None, oracle.calls)
    finally:
        set_llm_cache(None)


def langchain_model(cache: Cache) -> None:
    oracle = ChatOracle(equivalents=SAME)
    model = CachedChatModel(inner=oracle, tricache=cache)
    name = "lc.CachedChatModel"

    def show(step: str, message: Any) -> None:
        _emit(name, step, message.content or message.tool_calls,
              _tier(message.response_metadata), oracle.calls)  # fmt: skip

    show("invoke", model.invoke("How do I reset my password?"))
    show("again", model.invoke("How do I reset my password?"))
    show("paraphrase", model.invoke("how do i reset my password"))
    for step in ("stream-miss", "stream-hit"):
        chunks = list(model.stream("Where is the Louvre?"))
        total = chunks[0]
        for chunk in chunks[1:]:
            total = total + chunk
        _emit(name, step, total.content, _tier(chunks[0].response_metadata), oracle.calls)

    async def streamed() -> Any:
        chunks = [c async for c in model.astream("What is the capital of Peru?")]
        return chunks

    for step in ("astream-miss", "astream-hit"):
        chunks = asyncio.run(streamed())
        text = "".join(str(c.content) for c in chunks)
        _emit(name, step, text, _tier(chunks[0].response_metadata), oracle.calls)
    outs = model.batch(["What is DNS?", "What is DNS?", "What is TCP?"])
    _emit(name, "batch", [o.content for o in outs],
          [_tier(o.response_metadata) for o in outs], oracle.calls)  # fmt: skip
    outs = asyncio.run(model.abatch(["What is DNS?", "What is UDP?", "What is UDP?"]))
    _emit(name, "abatch", [o.content for o in outs],
          [_tier(o.response_metadata) for o in outs], oracle.calls)  # fmt: skip
    tools = model.bind_tools([opening_hours])
    show("tools", tools.invoke("When is the Lyon office open?"))
    show("tools-again", tools.invoke("When is the Lyon office open?"))
    structured = model.with_structured_output(City)
    for step in ("structured", "structured-again"):
        out = structured.invoke("Where is the Louvre?")
        _emit(name, step, out.model_dump() if out is not None else None, None, oracle.calls)


def langchain_chain(cache: Cache) -> None:
    calls: list[str] = []

    def answer(question: str) -> str:
        calls.append(question)
        return f"answer to {question}"

    chain = with_tricache(RunnableLambda(answer), cache, name="qa", fingerprint="v1")
    for step in ("invoke", "again"):
        _emit("lc.with_tricache", step, chain.invoke("What is a VPN?"), None, len(calls))
    out = asyncio.run(chain.ainvoke("What is DNS?"))
    _emit("lc.with_tricache", "ainvoke", out, None, len(calls))
    outs = chain.batch(["What is DNS?", "What is TCP?"])
    _emit("lc.with_tricache", "batch", outs, None, len(calls))


def llama_llm(cache: Cache) -> None:
    oracle = LlamaOracle(equivalents=SAME)
    llm = TriCacheLLM(oracle, cache=cache)
    name = "li.TriCacheLLM"

    def ask(text: str) -> list[ChatMessage]:
        return [ChatMessage(role="user", content=text)]

    def show(step: str, response: Any) -> None:
        text = getattr(response, "text", None) or str(response.message.content)
        _emit(name, step, text, _tier(response.additional_kwargs), oracle.calls)

    show("chat", llm.chat(ask("How do I reset my password?")))
    show("again", llm.chat(ask("How do I reset my password?")))
    show("paraphrase", llm.chat(ask("how do i reset my password")))
    show("complete", llm.complete("Where is the Louvre?"))
    show("complete-again", llm.complete("Where is the Louvre?"))
    for step in ("stream-miss", "stream-hit"):
        chunks = list(llm.stream_chat(ask("What is DNS?")))
        _emit(name, step, str(chunks[-1].message.content),
              [_tier(chunks[0].additional_kwargs), _tier(chunks[-1].additional_kwargs)],
              oracle.calls)  # fmt: skip
    for step in ("stream-complete-miss", "stream-complete-hit"):
        chunks = list(llm.stream_complete("What is TCP?"))
        _emit(name, step, chunks[-1].text,
              [_tier(chunks[0].additional_kwargs), _tier(chunks[-1].additional_kwargs)],
              oracle.calls)  # fmt: skip

    async def run_async() -> None:
        show("achat", await llm.achat(ask("What is UDP?")))
        show("achat-again", await llm.achat(ask("What is UDP?")))
        show("acomplete", await llm.acomplete("What is UDP?"))
        for step in ("astream-miss", "astream-hit"):
            chunks = [c async for c in await llm.astream_chat(ask("What is HTTP?"))]
            _emit(name, step, str(chunks[-1].message.content),
                  [_tier(chunks[0].additional_kwargs), _tier(chunks[-1].additional_kwargs)],
                  oracle.calls)  # fmt: skip
        both = await asyncio.gather(llm.achat(ask("What is SMTP?")),
                                    llm.achat(ask("What is SMTP?")))  # fmt: skip
        _emit(name, "achat-concurrent", [str(b.message.content) for b in both],
              [_tier(b.additional_kwargs) for b in both], oracle.calls)  # fmt: skip

    asyncio.run(run_async())
    hours = FunctionTool.from_defaults(fn=lambda office: f"{office}: 9-17", name="hours",
                                       description="When an office is open.")  # fmt: skip
    for step in ("tools", "tools-again"):
        response = llm.chat_with_tools([hours], user_msg="When is the Lyon office open?")
        calls = llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        _emit(name, step, [(c.tool_name, c.tool_kwargs) for c in calls],
              _tier(response.additional_kwargs), oracle.calls)  # fmt: skip
    prompt = PromptTemplate("Answer about {topic}: {query_str}")
    for step in ("predict", "predict-again"):
        out = llm.predict(prompt, topic="museums", query_str="Where is the Louvre?")
        _emit(name, step, out, None, oracle.calls)


def llama_engine(cache: Cache) -> None:
    oracle = LlamaOracle(equivalents=SAME)
    embed = TriCacheEmbedding()
    docs = ["Refunds are paid back within 14 days.", "The Lyon office opens at 9."]
    index = VectorStoreIndex.from_documents([Document(text=t) for t in docs], embed_model=embed)
    for streaming in (False, True):
        name = f"li.CachedQueryEngine{'.stream' if streaming else ''}"
        base = index.as_query_engine(llm=oracle, similarity_top_k=1, streaming=streaming)
        engine = CachedQueryEngine(base, cache, index=index)
        for step, q in [("query", "How long do refunds take?"),
                        ("again", "How long do refunds take?"),
                        ("paraphrase", "How long does a refund take?")]:  # fmt: skip
            response = engine.query(q)
            gen = getattr(response, "response_gen", None)
            text = "".join(gen) if gen is not None else str(response.response)
            _emit(name, step, text, _tier(response.metadata), oracle.calls)


SCENARIOS: list[Callable[[Cache], None]] = [
    langchain_global,
    langchain_model,
    langchain_chain,
    llama_llm,
    llama_engine,
]


def main() -> None:
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as home:
            cache = Cache(path=Path(home) / "c.sqlite3", warm=True)
            try:
                scenario(cache)
            finally:
                cache.close()


if __name__ == "__main__":
    main()
