"""The LlamaIndex adapter with real llama-index-core classes (MockLLM, VectorStoreIndex), a
packaged embedding model and real stores."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.base.response.schema import Response, StreamingResponse
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import PrivateAttr

from llama_index_tricache import CachedQueryEngine, TriCacheEmbedding, TriCacheLLM, tenant
from llama_index_tricache.convert import servable_to_look_alikes
from tricache import Cache
from tricache.conversation import stream_pieces


class ScriptedLLM(CustomLLM):
    """Answers from a list, counts its calls; the prompt it saw is kept."""

    answers: list[str]
    chat_model: bool = True
    _calls: list[str] = PrivateAttr(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=self.chat_model, model_name="scripted")

    @property
    def calls(self) -> list[str]:
        return self._calls

    def _next(self, prompt: str) -> str:
        self._calls.append(prompt)
        return self.answers[min(len(self._calls), len(self.answers)) - 1]

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._next(prompt), additional_kwargs={"total_tokens": 7})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        text = self._next(prompt)

        def gen() -> Iterator[CompletionResponse]:
            so_far = ""
            for piece in stream_pieces(text):
                so_far += piece
                yield CompletionResponse(text=so_far, delta=piece)

        return gen()

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = self._next(str(messages[-1].content))
        return ChatResponse(message=ChatMessage(role="assistant", content=text))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Cache]:
    with Cache(path=tmp_path / "li.sqlite3", namespace="li") as cache:
        yield cache


@pytest.fixture(scope="module")
def embed_model() -> TriCacheEmbedding:
    return TriCacheEmbedding()


DOCS = [
    "To reset your password, open Settings, choose Security and click 'Forgot password'.",
    "Refunds are paid back to the original card within 14 days of the return.",
    "Our office in Lyon is open Monday to Friday, 9:00 to 17:00.",
]


def index_of(texts: list[str], embed_model: BaseEmbedding) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(
        [Document(text=t) for t in texts], embed_model=embed_model
    )


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="Helpdesk."), ChatMessage(role="user", content=text)]


def test_chat_exact_semantic_and_a_look_alike_that_must_miss(core: Cache) -> None:
    inner = ScriptedLLM(answers=["Use the forgot-password link.", "Leave it as it is."])
    llm = TriCacheLLM(inner, cache=core)
    first = llm.chat(user("How do I reset my password?"))
    assert first.additional_kwargs["tricache"]["tier"] == "llm"
    exact = llm.chat(user("how do i reset my password"))
    similar = llm.chat(user("How can I reset my password?"))
    negated = llm.chat(user("How do I not reset my password?"))
    assert exact.message.content == similar.message.content == "Use the forgot-password link."
    assert exact.additional_kwargs["tricache"]["tier"] == "exact"
    assert similar.additional_kwargs["tricache"]["tier"] == "semantic"
    assert negated.message.content == "Leave it as it is."
    assert len(inner.calls) == 2


def test_complete_and_chat_keep_apart_and_metadata_passes_through(core: Cache) -> None:
    inner = ScriptedLLM(answers=["one", "two"], chat_model=False)
    llm = TriCacheLLM(inner, cache=core)
    assert llm.metadata.model_name == "scripted" and not llm.metadata.is_chat_model
    assert llm.complete("What is TriCache?").text == "one"
    assert llm.chat(user("What is TriCache?")).message.content == "two"
    assert llm.complete("What is TriCache?").additional_kwargs["tricache"]["tier"] == "exact"
    assert core.stats()["exact"]["tokens_saved"] == 7  # from additional_kwargs["total_tokens"]


def test_streams_are_stored_and_replayed(core: Cache) -> None:
    inner = ScriptedLLM(answers=["Open Settings then Security.", "unused"], chat_model=False)
    llm = TriCacheLLM(inner, cache=core)
    fresh = list(llm.stream_complete("How do I reset my password?"))
    assert fresh[-1].text == "Open Settings then Security."
    replay = list(llm.stream_complete("How do I reset my password?"))
    assert len(replay) > 1 and "".join(r.delta or "" for r in replay) == fresh[-1].text
    assert replay[-1].text == fresh[-1].text
    assert replay[-1].additional_kwargs["tricache"]["tier"] == "exact"
    chat_replay = list(TriCacheLLM(ScriptedLLM(answers=["A b c."]), cache=core).stream_chat(
        user("Tell me a b c")
    ))  # fmt: skip
    assert chat_replay[-1].message.content == "A b c."  # first call: the inner stream (chat)
    assert len(inner.calls) == 1


def test_async_forms(core: Cache) -> None:
    inner = ScriptedLLM(answers=["async answer here", "unused"])
    llm = TriCacheLLM(inner, cache=core)

    async def run() -> tuple[Any, Any, Any, list[Any]]:
        first = await llm.achat(user("What does the async path do?"))
        second = await llm.achat(user("What does the async path do?"))
        done = await llm.acomplete("Async completion?")
        chunks = [c async for c in await llm.astream_chat(user("What does the async path do?"))]
        return first, second, done, chunks

    first, second, done, chunks = asyncio.run(run())
    assert first.message.content == second.message.content == "async answer here"
    assert second.additional_kwargs["tricache"]["tier"] == "exact"
    assert done.text == "unused"
    assert "".join(c.delta for c in chunks) == "async answer here"
    assert len(inner.calls) == 2


@pytest.fixture
def llm_events() -> Iterator[list[Any]]:
    """The responses of every LLM call LlamaIndex reports through its instrumentation."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events.llm import (
        LLMChatEndEvent,
        LLMCompletionEndEvent,
    )

    seen: list[Any] = []

    class Handler(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            if isinstance(event, LLMChatEndEvent | LLMCompletionEndEvent):
                seen.append(event.response)

    root = get_dispatcher()
    handler = Handler()
    root.add_event_handler(handler)
    yield seen
    root.event_handlers.remove(handler)


@pytest.mark.parametrize("chat_model", [True, False])
def test_query_engine_keys_the_llm_on_the_question_and_its_context(
    core: Cache, embed_model: TriCacheEmbedding, llm_events: list[Any], chat_model: bool
) -> None:
    inner = ScriptedLLM(answers=["Settings, Security.", "Other docs.", "x"], chat_model=chat_model)
    llm = TriCacheLLM(inner, cache=core)
    engine = index_of(DOCS, embed_model).as_query_engine(llm=llm, similarity_top_k=1)
    first = engine.query("How do I reset my password?")
    again = engine.query("How can I reset my password?")  # same context, reworded question
    assert str(first) == str(again) == "Settings, Security."
    assert len(inner.calls) == 1
    info = [r.additional_kwargs.get("tricache") for r in llm_events if r.additional_kwargs]
    hits = [i for i in info if i and i["tier"] == "semantic"]
    assert hits and hits[-1]["matched"] == "How do I reset my password?"  # the question alone
    # The same question over other documents is a different call: the context is in the key.
    other = index_of(["Passwords are reset by the administrator only."], embed_model)
    assert str(other.as_query_engine(llm=llm).query("How do I reset my password?")) == (
        "Other docs."
    )
    assert len(inner.calls) == 2


def test_settings_llm_is_used_by_query_engines(core: Cache, embed_model: TriCacheEmbedding) -> None:
    inner = ScriptedLLM(answers=["From Settings.llm.", "unused"])
    previous = Settings._llm
    Settings.llm = TriCacheLLM(inner, cache=core)
    try:
        engine = index_of(DOCS, embed_model).as_query_engine(similarity_top_k=1)
        assert str(engine.query("When is the Lyon office open?")) == "From Settings.llm."
        assert str(engine.query("When is the Lyon office open?")) == "From Settings.llm."
    finally:
        Settings._llm = previous
    assert len(inner.calls) == 1


def test_cached_query_engine_skips_retrieval_and_forgets_on_index_change(
    core: Cache, embed_model: TriCacheEmbedding
) -> None:
    inner = ScriptedLLM(answers=["14 days.", "30 days now."])
    index = index_of(DOCS, embed_model)
    retrieved: list[str] = []
    base = index.as_query_engine(llm=inner, similarity_top_k=1)
    original = base.retrieve
    base.retrieve = lambda bundle: retrieved.append(bundle.query_str) or original(bundle)  # type: ignore[method-assign]
    engine = CachedQueryEngine(base, core, index=index)

    first = engine.query("How long do refunds take?")
    assert isinstance(first, Response) and str(first) == "14 days."
    hit = engine.query("How long do refunds take?")
    assert str(hit) == "14 days." and hit.metadata["tricache"]["tier"] == "exact"
    assert [n.node.node_id for n in hit.source_nodes] == [
        n.node.node_id for n in first.source_nodes
    ]
    assert "14 days" in hit.source_nodes[0].node.get_content()
    assert retrieved == ["How long do refunds take?"]  # the hit did not retrieve

    index.insert(Document(text="Since May, refunds are paid back within 30 days."))
    after = engine.query("How long do refunds take?")
    assert str(after) == "30 days now." and len(retrieved) == 2


def test_cached_query_engine_streaming_hit_streams(
    core: Cache, embed_model: TriCacheEmbedding
) -> None:
    inner = ScriptedLLM(answers=["Monday to Friday.", "unused"], chat_model=False)
    index = index_of(DOCS, embed_model)
    engine = CachedQueryEngine(index.as_query_engine(llm=inner, streaming=True), core, index=index)
    first = engine.query("When is the Lyon office open?")
    assert isinstance(first, StreamingResponse)
    assert "".join(first.response_gen) == "Monday to Friday."
    again = engine.query("When is the Lyon office open?")
    assert isinstance(again, StreamingResponse)
    assert "".join(again.response_gen) == "Monday to Friday."
    assert again.metadata["tricache"]["tier"] == "exact" and len(inner.calls) == 1


def test_tenants_do_not_share(core: Cache) -> None:
    inner = ScriptedLLM(answers=["for acme", "for globex"])
    llm = TriCacheLLM(inner, cache=core)
    with tenant("acme"):
        assert llm.chat(user("What is my plan?")).message.content == "for acme"
    with tenant("globex"):
        assert llm.chat(user("What is my plan?")).message.content == "for globex"
    with tenant("acme"):
        assert llm.chat(user("What is my plan?")).message.content == "for acme"
    assert len(inner.calls) == 2


def test_tool_calls_are_served_to_the_same_call_only() -> None:
    call = ToolCallBlock(tool_call_id="1", tool_name="weather", tool_kwargs={"city": "Lyon"})
    with_call = ChatResponse(message=ChatMessage(role="assistant", blocks=[call]))
    plain_answer = ChatResponse(message=ChatMessage(role="assistant", content="Sunny."))
    cut_off = CompletionResponse(text="Sun", raw={"choices": [{"finish_reason": "length"}]})
    assert not servable_to_look_alikes(with_call)
    assert servable_to_look_alikes(plain_answer)
    assert not servable_to_look_alikes(cut_off)


@pytest.mark.parametrize("prompt", ["", "\ud800 lone surrogate", "x" * 200_000, "\u200b\u200b"])
def test_odd_prompts_never_break_the_call(core: Cache, prompt: str) -> None:
    inner = ScriptedLLM(answers=["ok"], chat_model=False)
    llm = TriCacheLLM(inner, cache=core)
    assert llm.complete(prompt).text == "ok"
    assert llm.complete(prompt).text == "ok"


def test_a_foreign_value_under_the_key_is_a_miss(core: Cache) -> None:
    inner = ScriptedLLM(answers=["fresh"], chat_model=False)
    llm = TriCacheLLM(inner, cache=core)
    call = llm._completion_call("What is the refund window?", False, {})
    assert call is not None
    core.update(call.request, "WRONG", {"kind": "pickle", "data": b"\x80"}, semantic=False)
    assert llm.complete("What is the refund window?").text == "fresh"
    assert llm.complete("What is the refund window?").text == "fresh"
    assert len(inner.calls) == 1


def test_tool_calling_goes_through_the_inner_model_and_replays_exactly(core: Cache) -> None:
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    def opening_hours(city: str) -> str:
        """When the office in a city is open."""
        return "9 to 5"

    tool = FunctionTool.from_defaults(opening_hours)
    llm = TriCacheLLM(MockFunctionCallingLLM(), cache=core)
    assert llm.metadata.is_function_calling_model
    first = llm.chat_with_tools([tool], user_msg="When is the Lyon office open?")
    again = llm.chat_with_tools([tool], user_msg="When is the Lyon office open?")
    assert again.additional_kwargs["tricache"]["tier"] == "exact"
    calls = llm.get_tool_calls_from_response(again, error_on_no_tool_call=True)
    assert [c.tool_name for c in calls] == ["opening_hours"]
    assert [c.tool_name for c in llm.get_tool_calls_from_response(first)] == ["opening_hours"]
    reworded = llm.chat_with_tools([tool], user_msg="When is the office in Lyon open?")
    assert reworded.additional_kwargs["tricache"]["tier"] == "llm"  # tool calls: same call only


def test_with_llama_index_mock_llm(core: Cache) -> None:
    from llama_index.core.llms import MockLLM

    llm = TriCacheLLM(MockLLM(max_tokens=4), cache=core)
    first = llm.complete("What does TriCache cache?")
    again = llm.complete("what does tricache cache")
    assert first.text == again.text == "text text text text"
    assert first.additional_kwargs["tricache"]["tier"] == "llm"
    assert again.additional_kwargs["tricache"]["tier"] == "exact"
    streamed = list(llm.stream_complete("What does TriCache cache?"))
    assert streamed[-1].text == first.text
