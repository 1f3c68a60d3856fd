"""A call's tenant and entry options are the ones in force when the call is made, and what a
streamed miss stores is what the model said, whatever the app does to the chunks it reads.

A web handler returns the stream it made inside ``with tenant(org):``; the framework reads it
after the block.  ``CachedChatModel`` keeps the scope of the moment the call was made (a stream,
an async stream, an ``ainvoke`` coroutine), so the answer is looked up and stored in the org's
tenant, under its tags.  An app that edits the chunks of a streamed miss as they come (a
redaction, a prefix) edits its own copies: the next caller is served the model's answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage

from langchain_tricache import CachedChatModel, tenant
from llama_index_tricache import TriCacheLLM
from tricache import Cache, entry_options

from oracles import ChatOracle, LlamaOracle


def _tier(message: Any) -> str | None:
    return (message.response_metadata.get("tricache") or {}).get("tier")


def _streamed_tiers(chunks: Any) -> list[str]:
    return [t for c in chunks if (t := _tier(c))]


@pytest.fixture
def model(tmp_path: Path) -> Any:
    cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
    yield CachedChatModel(inner=ChatOracle(), tricache=cache)
    cache.close()


def test_a_stream_read_after_its_tenant_block_stays_in_that_tenant(model: Any) -> None:
    def handler(org: str, question: str) -> Any:  # return StreamingResponse(model.stream(q))
        with tenant(org):
            return model.stream(question)

    question = "Describe the Gold plan."
    assert _streamed_tiers(handler("org-a", question)) == ["llm"]  # a miss, stored for org-a
    assert _streamed_tiers(model.stream(question)) == ["llm"]  # no tenant: not org-a's answer
    assert _streamed_tiers(handler("org-b", question)) == ["llm"]  # nor org-b's
    assert _streamed_tiers(handler("org-a", question)) == ["exact"]  # org-a's own
    with tenant("org-a"):
        assert _tier(model.invoke(question)) == "exact"


def test_an_async_stream_and_a_coroutine_keep_the_scope_they_were_made_in(model: Any) -> None:
    async def main() -> list[str | None]:
        with tenant("org-a"):
            stream = model.astream("What does the Silver plan cost?")
            call = model.ainvoke("What does the Bronze plan cost?")
        tiers = [t async for c in stream if (t := _tier(c))]
        tiers.append(_tier(await call))
        with tenant("org-a"):  # both stored in org-a: hits there
            tiers.append(_tier(await model.ainvoke("What does the Silver plan cost?")))
            tiers.append(_tier(await model.ainvoke("What does the Bronze plan cost?")))
        tiers.append(_tier(await model.ainvoke("What does the Bronze plan cost?")))  # not here
        return tiers

    assert asyncio.run(main()) == ["llm", "llm", "exact", "exact", "llm"]


def test_a_stream_keeps_the_tags_of_its_entry_options_block(model: Any) -> None:
    def handler(question: str) -> Any:
        with entry_options(tags=["pricing"]):
            return model.stream(question)

    question = "Describe the Silver plan's prices."
    assert _streamed_tiers(handler(question)) == ["llm"]
    assert _tier(model.invoke(question)) == "exact"
    model.tricache.invalidate("pricing")  # the answer was written under the tag: it goes
    assert _tier(model.invoke(question)) == "llm"


class _Streaming(ChatOracle):
    """The oracle, streaming its answer in word-sized chunks with fields an app may edit."""

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        said = self._generate(messages, stop, run_manager, **kw).generations[0].message
        words = str(said.content).split(":")
        for i, word in enumerate(words):
            last = i == len(words) - 1
            text = word if last else word + ":"
            extra = {"nested": {"list": ["model"]}} if last else {}
            yield ChatGenerationChunk(message=AIMessageChunk(text, additional_kwargs=extra))


def test_editing_the_chunks_of_a_streamed_miss_leaves_what_is_stored(tmp_path: Path) -> None:
    cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
    inner = _Streaming()
    model = CachedChatModel(inner=inner, tricache=cache)
    question = "Describe Trondheim in detail."
    truth = inner.respond([HumanMessage(question)])
    for chunk in model.stream(question):  # a miss: the app redacts what it reads, in place
        chunk.content = "REDACTED"
        if "nested" in chunk.additional_kwargs:
            chunk.additional_kwargs["nested"]["list"].append("app")
    served = model.invoke(question)
    assert _tier(served) == "exact" and inner.calls == 1
    assert isinstance(served, AIMessage) and served.content == truth.content
    assert served.additional_kwargs["nested"] == {"list": ["model"]}

    async def edit_async() -> None:
        async for chunk in model.astream("And Bergen?"):
            chunk.content = "REDACTED"

    asyncio.run(edit_async())
    assert (
        model.invoke("And Bergen?").content == inner.respond([HumanMessage("And Bergen?")]).content
    )
    cache.close()


def test_editing_a_llama_index_stream_leaves_what_is_stored(tmp_path: Path) -> None:
    cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
    inner = LlamaOracle()
    llm = TriCacheLLM(inner, cache)
    messages = [LlamaMessage(role="user", content="Describe Trondheim in detail.")]
    truth = inner.respond(messages).content
    for response in llm.stream_chat(messages):  # a miss: the app prefixes what it reads
        response.message.content = "[app] " + (response.message.content or "")
        response.additional_kwargs["app"] = True
    served = llm.chat(messages)
    assert served.message.content == truth and "app" not in served.additional_kwargs
    assert served.additional_kwargs["tricache"]["tier"] == "exact"

    async def edit_async() -> str | None:
        other = [LlamaMessage(role="user", content="And Bergen?")]
        async for response in await llm.astream_chat(other):
            response.message.content = "[app]"
        return (await llm.achat(other)).message.content

    assert (
        asyncio.run(edit_async())
        == inner.respond([LlamaMessage(role="user", content="And Bergen?")]).content
    )
    cache.close()
