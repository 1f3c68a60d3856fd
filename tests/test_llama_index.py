"""The LlamaIndex adapter with real llama-index-core classes (MockLLM, VectorStoreIndex), a
packaged embedding model and real stores."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
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
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.base.response.schema import Response, StreamingResponse
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import PrivateAttr

from llama_index_tricache import CachedQueryEngine, TriCacheEmbedding, TriCacheLLM, tenant
from llama_index_tricache.calls import chat_call, completion_call
from llama_index_tricache.convert import llm_key
from tricache import Cache, CacheRequest
from tricache.key.conversation import stream_pieces


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
    exact = llm.chat(user("how do I reset my password"))
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


@pytest.fixture
def retrieved() -> Iterator[list[str]]:
    """The query of every retrieval LlamaIndex reports through its instrumentation."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent

    seen: list[str] = []

    class Handler(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            if isinstance(event, RetrievalStartEvent):
                query = event.str_or_query_bundle
                seen.append(getattr(query, "query_str", query))

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
    core: Cache, embed_model: TriCacheEmbedding, retrieved: list[str]
) -> None:
    inner = ScriptedLLM(answers=["14 days.", "30 days now."])
    index = index_of(DOCS, embed_model)
    base = index.as_query_engine(llm=inner, similarity_top_k=1)
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


def test_cached_query_engine_does_not_keep_an_answer_computed_while_the_index_changed(
    core: Cache, embed_model: TriCacheEmbedding
) -> None:
    index = index_of(DOCS, embed_model)

    class ChangingLLM(ScriptedLLM):
        """The first call runs while someone adds a document to the index."""

        def _next(self, prompt: str) -> str:
            if not self.calls:
                index.insert(Document(text="Since May, refunds are paid back within 30 days."))
            return super()._next(prompt)

    inner = ChangingLLM(answers=["14 days.", "30 days now.", "unused"])
    engine = CachedQueryEngine(index.as_query_engine(llm=inner, similarity_top_k=2), core,
                               index=index)  # fmt: skip
    assert str(engine.query("How long do refunds take?")) == "14 days."  # from the old index
    assert str(engine.query("How long do refunds take?")) == "30 days now."  # not the old one
    assert str(engine.query("How long do refunds take?")) == "30 days now."  # this one is kept
    assert len(inner.calls) == 2


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


def test_the_old_names_of_the_core_cache_still_work_and_warn(
    core: Cache, embed_model: TriCacheEmbedding
) -> None:
    llm = TriCacheLLM(ScriptedLLM(answers=["a"]), cache=core)
    engine = CachedQueryEngine(index_of(DOCS, embed_model).as_query_engine(llm=llm), core)
    assert llm.tricache is core and engine.tricache is core
    with pytest.warns(DeprecationWarning, match=r"TriCacheLLM\.cache is now TriCacheLLM\.tricache"):
        assert llm.cache is core
    with pytest.warns(DeprecationWarning, match=r"CachedQueryEngine\.cache is now"):
        assert engine.cache is core


def test_tenants_do_not_share(core: Cache) -> None:
    inner = ScriptedLLM(answers=["for acme", "for globex"])
    llm = TriCacheLLM(inner, cache=core)
    with tenant("acme"):
        assert llm.chat(user("How do I upgrade my plan?")).message.content == "for acme"
    with tenant("globex"):
        assert llm.chat(user("How do I upgrade my plan?")).message.content == "for globex"
    with tenant("acme"):
        assert llm.chat(user("How do I upgrade my plan?")).message.content == "for acme"
    assert len(inner.calls) == 2


@pytest.mark.parametrize("prompt", ["", "\ud800 lone surrogate", "x" * 200_000, "\u200b\u200b"])
def test_odd_prompts_never_break_the_call(core: Cache, prompt: str) -> None:
    inner = ScriptedLLM(answers=["ok"], chat_model=False)
    llm = TriCacheLLM(inner, cache=core)
    assert llm.complete(prompt).text == "ok"
    assert llm.complete(prompt).text == "ok"


def test_a_foreign_value_under_the_key_is_a_miss(core: Cache) -> None:
    inner = ScriptedLLM(answers=["fresh"], chat_model=False)
    llm = TriCacheLLM(inner, cache=core)
    call = completion_call(llm.tricache, llm.llm, "What is the refund window?", False, {})
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
    first = llm.complete("What does the cache keep?")
    again = llm.complete("What does the cache keep")
    assert first.text == again.text == "text text text text"
    assert first.additional_kwargs["tricache"]["tier"] == "llm"
    assert again.additional_kwargs["tricache"]["tier"] == "exact"
    streamed = list(llm.stream_complete("What does the cache keep?"))
    assert streamed[-1].text == first.text


# What a key holds: every field of every message, every setting that changes the answer ----
def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def shown(messages: Sequence[ChatMessage]) -> list[Any]:
    """What a model reads of a chat prompt: roles, texts, tool calls and their arguments."""
    return [
        [
            m.role.value,
            m.content,
            [[b.tool_name, b.tool_kwargs] for b in m.blocks if isinstance(b, ToolCallBlock)],
            {k: v for k, v in m.additional_kwargs.items() if k != "tool_call_id"},
        ]
        for m in messages
    ]


class Oracle(CustomLLM):
    """Answers with a digest of its whole prompt and settings: an answer served for another
    prompt, or by another model, shows."""

    chat_model: bool = True
    max_tokens: int = 256
    base_url: str = "http://a"
    api_key: str = "k1"
    _prompts: list[Any] = PrivateAttr(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=self.chat_model, model_name="oracle")

    @property
    def prompts(self) -> list[Any]:
        return self._prompts

    def answer(self, prompt: Any) -> str:
        return f"answer-{digest([prompt, self.max_tokens, self.base_url])}"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._prompts.append(prompt)
        return CompletionResponse(text=self.answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        response = self.complete(prompt)

        def gen() -> Iterator[CompletionResponse]:
            yield CompletionResponse(text=response.text, delta=response.text)

        return gen()

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._prompts.append(shown(messages))
        text = self.answer(shown(messages))
        return ChatResponse(message=ChatMessage(role="assistant", content=text))


@pytest.fixture
def lookups(core: Cache, monkeypatch: pytest.MonkeyPatch) -> list[tuple[CacheRequest, bool]]:
    """Every lookup the adapter makes: the request, and whether look-alikes may answer."""
    seen: list[tuple[CacheRequest, bool]] = []
    lookup_steps = core.pipeline.lookup_steps  # (what lookup, alookup and the flow's answer run)

    def spy(asked: Any, semantic: bool, faq: bool = True) -> Any:
        seen.append((asked.request, semantic))
        return lookup_steps(asked, semantic, faq)

    monkeypatch.setattr(core.pipeline, "lookup_steps", spy)
    return seen


def tool_round(city: str, call_id: str = "call-1", **extra: Any) -> list[ChatMessage]:
    """A prompt that ends with a tool result, after a call with ``city``."""
    call = ToolCallBlock(tool_call_id=call_id, tool_name="weather", tool_kwargs={"city": city})
    return [
        ChatMessage(role="system", content="Helpdesk."),
        ChatMessage(role="user", content="Should I take an umbrella?"),
        ChatMessage(role="assistant", blocks=[call], additional_kwargs=extra),
        ChatMessage(
            role="tool", content="Rain all day.", additional_kwargs={"tool_call_id": call_id}
        ),
    ]


def request_of(llm: TriCacheLLM, messages: list[ChatMessage]) -> CacheRequest:
    call = chat_call(llm.tricache, llm.llm, messages, {})
    assert call is not None
    return call.request


def test_every_message_field_is_in_the_request_and_run_ids_are_not(core: Cache) -> None:
    llm = TriCacheLLM(Oracle(), cache=core)
    lyon = request_of(llm, tool_round("Lyon"))
    assert request_of(llm, tool_round("Lyon", call_id="call-2")) == lyon  # ids change per run
    assert request_of(llm, tool_round("Paris")).history != lyon.history  # the call's arguments
    assert '"Lyon"' in lyon.history[-1].meta and "call-1" not in lyon.history[-1].meta
    assert "weather" in lyon.query_meta and "call-1" not in lyon.query_meta  # what it answers
    usage = request_of(llm, tool_round("Lyon", usage={"total_tokens": 9}, run_id="r1"))
    assert usage == lyon  # usage counts and run ids never change an answer
    assert request_of(llm, tool_round("Lyon", refusal="no")).history != lyon.history
    named = [ChatMessage(role="user", content="Hi!", additional_kwargs={"name": "alice"})]
    assert "alice" in request_of(llm, named).query_meta


def test_tool_rounds_are_keyed_on_the_call_and_served_to_the_same_round(core: Cache) -> None:
    oracle = Oracle()
    llm = TriCacheLLM(oracle, cache=core)
    lyon = llm.chat(tool_round("Lyon")).message.content
    paris = llm.chat(tool_round("Paris")).message.content
    assert lyon == oracle.answer(shown(tool_round("Lyon")))
    assert paris == oracle.answer(shown(tool_round("Paris"))) != lyon
    again = llm.chat(tool_round("Lyon", call_id="call-9"))  # the same round in another run
    assert again.additional_kwargs["tricache"]["tier"] == "exact"
    assert again.message.content == lyon and len(oracle.prompts) == 2


def test_llm_key_holds_every_setting_but_credentials() -> None:
    from llama_index.core.llms import MockLLM

    def key(llm: Any) -> str:
        return llm_key(llm, "chat", {})

    assert key(MockLLM(max_tokens=4)) != key(MockLLM(max_tokens=8))
    assert key(Oracle(max_tokens=4)) != key(Oracle(max_tokens=8))
    assert key(Oracle(base_url="http://a")) != key(Oracle(base_url="http://b"))
    assert key(Oracle(api_key="k1")) == key(Oracle(api_key="k2"))  # who calls, not what
    assert llm_key(Oracle(), "chat", {"max_tokens": 5}) != llm_key(Oracle(), "chat", {})
    assert llm_key(Oracle(), "chat", {"api_key": "x"}) == llm_key(Oracle(), "chat", {})


def test_llms_differing_in_max_tokens_never_share_answers(core: Cache) -> None:
    for oracle in (Oracle(max_tokens=4), Oracle(max_tokens=400), Oracle(base_url="http://b")):
        served = TriCacheLLM(oracle, cache=core).chat(user("Explain refunds.")).message.content
        assert served == oracle.answer(shown(user("Explain refunds.")))
        assert len(oracle.prompts) == 1


# Query engines: every setting that shapes the response is in the key -------------------
PLANS = [
    Document(text="Alice's plan is Gold, renewed every March.", metadata={"user": "alice"}),
    Document(text="Bob's plan is Basic, renewed every June.", metadata={"user": "bob"}),
    Document(text="Plans can be changed in Settings, Billing.", metadata={"user": "all"}),
]


def for_user(name: str) -> Any:
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

    return MetadataFilters(filters=[MetadataFilter(key="user", value=name)])


def test_cached_query_engines_over_one_index_never_share_across_settings(
    make_cache: Any, embed_model: TriCacheEmbedding
) -> None:
    from llama_index.core import PromptTemplate

    core = make_cache(semantic=True)
    from llama_index.core.postprocessor import SimilarityPostprocessor

    index = VectorStoreIndex.from_documents(PLANS, embed_model=embed_model)
    oracle = Oracle()
    short = PromptTemplate("Context: {context_str}\nAnswer in one word: {query_str}")
    reprompted = index.as_query_engine(llm=oracle)
    reprompted.update_prompts({"response_synthesizer:text_qa_template": short})
    engines = [
        index.as_query_engine(llm=oracle, filters=for_user("alice")),
        index.as_query_engine(llm=oracle, filters=for_user("bob")),  # another user: a leak
        index.as_query_engine(llm=oracle, similarity_top_k=1),
        index.as_query_engine(llm=oracle, similarity_top_k=3),
        index.as_query_engine(llm=oracle, response_mode="tree_summarize"),
        index.as_query_engine(
            llm=oracle, node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.2)]
        ),
        reprompted,
        index.as_query_engine(llm=Oracle(max_tokens=5)),
    ]
    for engine in engines:
        cached = CachedQueryEngine(engine, core, index=index)
        question = "How do I upgrade my plan?"
        served, fresh = cached.query(question), engine.query(question)
        assert str(served) == str(fresh)
        assert [n.node.metadata for n in served.source_nodes] == [
            n.node.metadata for n in fresh.source_nodes
        ]
        again = cached.query("How do I upgrade my plan?")
        assert again.metadata["tricache"]["tier"] == "exact" and str(again) == str(fresh)
    assert len({str(e.query("How do I upgrade my plan?")) for e in engines}) == len(engines)


def test_an_engine_that_cannot_be_fingerprinted_is_not_cached(
    core: Cache,
    embed_model: TriCacheEmbedding,
    lookups: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    class Custom(BaseNodePostprocessor):
        keep: Any = None  # a lambda: what it does cannot be told from the outside

        def _postprocess_nodes(self, nodes: list[Any], query_bundle: Any = None) -> list[Any]:
            return [n for n in nodes if self.keep(n)]

    inner = ScriptedLLM(answers=["first", "second"])
    index = index_of(DOCS, embed_model)
    custom = Custom(keep=lambda node: True)
    engine = CachedQueryEngine(
        index.as_query_engine(llm=inner, node_postprocessors=[custom]), core, index=index
    )
    assert str(engine.query("How long do refunds take?")) == "first"
    assert str(engine.query("How long do refunds take?")) == "second"
    assert lookups == []
    assert len([r for r in caplog.records if "not cached" in r.getMessage()]) == 1


# Prompt templates without a question: the exact tier only --------------------------------
@pytest.mark.parametrize("mode", ["condense_question", "condense_plus_context"])
def test_chat_engine_condense_step_is_exact_and_follow_ups_never_share_it(
    core: Cache, embed_model: TriCacheEmbedding, lookups: list[Any], mode: str
) -> None:
    index = index_of(DOCS, embed_model)
    history = [
        ChatMessage(role="user", content="Tell me about refunds."),
        ChatMessage(role="assistant", content="Refunds are paid back to the original card."),
    ]
    follow_ups = ["How long does that take?", "How long does that take on a gift card?"]

    def ask(llm: Any, follow_up: str) -> str:
        engine = index.as_chat_engine(chat_mode=mode, llm=llm, similarity_top_k=1)
        return str(engine.chat(follow_up, chat_history=list(history)))

    oracle = Oracle()
    llm = TriCacheLLM(oracle, cache=core)
    expected = [ask(Oracle(), f) for f in follow_ups]
    assert [ask(llm, f) for f in follow_ups] == expected
    calls = len(oracle.prompts)
    assert [ask(llm, f) for f in follow_ups] == expected and len(oracle.prompts) == calls
    condense = [(r, semantic) for r, semantic in lookups if "Follow Up" in r.query]
    assert condense and not any(semantic for _, semantic in condense)


def test_every_templated_path_keys_a_template_without_query_str_exactly(
    core: Cache, lookups: list[Any]
) -> None:
    from llama_index.core import PromptTemplate

    llm = TriCacheLLM(Oracle(), cache=core)
    bare = PromptTemplate("Rewrite as a standalone question: {question}")
    llm.predict(bare, question="And in June?")
    list(llm.stream(bare, question="And in July?"))

    async def run() -> None:
        await llm.apredict(bare, question="And in May?")
        [t async for t in await llm.astream(bare, question="And in April?")]

    asyncio.run(run())
    assert len(lookups) == 4 and not any(semantic for _, semantic in lookups)
    qa = PromptTemplate("Context: {context_str}\nQuestion: {query_str}")
    llm.predict(qa, context_str="Refunds take 14 days.", query_str="How long do refunds take?")
    request, semantic = lookups[-1]
    assert semantic and request.query == "How long do refunds take?"


class JsonOracle(Oracle):
    """Answers with a JSON object whose ``name`` is the digest of the prompt."""

    def answer(self, prompt: Any) -> str:
        return json.dumps({"name": super().answer(prompt)})


def test_structured_predict_is_keyed_on_the_whole_prompt_and_output_class(
    core: Cache, lookups: list[Any]
) -> None:
    from llama_index.core import PromptTemplate
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str

    class Company(BaseModel):
        name: str

    prompt = PromptTemplate("Extract it from: {text}")
    llm = TriCacheLLM(JsonOracle(), cache=core)
    text = "Ada Lovelace worked with Babbage & Co."
    for cls in (Person, Company):
        expected = JsonOracle().structured_predict(cls, prompt, text=text)
        assert llm.structured_predict(cls, prompt, text=text) == expected
        assert asyncio.run(llm.astructured_predict(cls, prompt, text=text)) == expected
        assert list(llm.stream_structured_predict(cls, prompt, text=text))[-1] == expected
    assert len(lookups) == 6 and not any(semantic for _, semantic in lookups)


# Served objects are the caller's own; a value that is not ours is a miss -----------------
class ExtrasLLM(ScriptedLLM):
    """Answers with provider extras: nested data a caller might edit."""

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = self._next(str(messages[-1].content))
        extra = {"citations": [{"page": 1}]}
        message = ChatMessage(role="assistant", content=text, additional_kwargs=extra)
        return ChatResponse(message=message)


def test_served_responses_are_copies_a_caller_may_edit(
    core: Cache, embed_model: TriCacheEmbedding
) -> None:
    llm = TriCacheLLM(ExtrasLLM(answers=["Gold."]), cache=core)
    for _ in range(3):
        served = llm.chat(user("How do I upgrade my plan?"))
        assert served.message.content == "Gold."
        assert served.message.additional_kwargs["citations"] == [{"page": 1}]
        served.message.additional_kwargs["citations"][0]["page"] = 99
        served.message.blocks.append(TextBlock(text="edited"))

    index = VectorStoreIndex.from_documents(
        [Document(text="Refunds take 14 days.", metadata={"tags": ["billing"]})],
        embed_model=embed_model,
    )
    inner = ScriptedLLM(answers=["14 days.", "unused"])
    engine = CachedQueryEngine(index.as_query_engine(llm=inner), core, index=index)
    for _ in range(3):
        response = engine.query("How long do refunds take?")
        assert str(response) == "14 days."
        assert response.source_nodes[0].node.metadata["tags"] == ["billing"]
        response.source_nodes[0].node.metadata["tags"].append("edited")
        response.metadata.clear()
    assert len(inner.calls) == 1


def test_a_stored_value_that_is_not_a_payload_is_a_corrupt_miss(
    make_cache: Any, embed_model: TriCacheEmbedding
) -> None:
    from llama_index.core.schema import QueryBundle

    core = make_cache()
    foreign = [
        {"v": 1, "kind": "chat", "message": 5},
        {"v": 1, "kind": "chat", "message": {"role": "nobody", "blocks": "x"}},
        {"v": 1, "kind": "completion", "text": {"not": "text"}},
        {"v": 1, "kind": "response", "sources": "abc", "metadata": {}},
        {"v": 1, "kind": "response", "sources": [{"id": 1}], "metadata": []},
        ["a", "list"],
    ]
    chat = ScriptedLLM(answers=["fresh"])
    complete = ScriptedLLM(answers=["fresh"], chat_model=False)
    index = index_of(DOCS, embed_model)
    engine = CachedQueryEngine(index.as_query_engine(llm=chat), core, index=index)
    for n, payload in enumerate(foreign):
        question = f"What is the refund window, case {n}?"
        calls: list[tuple[Any, Any]] = [
            (chat_call(core, chat, user(question), {}), None),
            (completion_call(core, complete, question, False, {}), None),
        ]
        for call, _ in calls:
            core.update(call.request, "WRONG", payload, semantic=False)
        core.update(engine._request(QueryBundle(question)), "WRONG", payload, semantic=False)
        before = core.metrics.count("exact", "corrupt")
        llm, plain_llm = TriCacheLLM(chat, cache=core), TriCacheLLM(complete, cache=core)
        assert llm.chat(user(question)).message.content == "fresh"
        assert plain_llm.complete(question).text == "fresh"
        assert str(engine.query(question)) == "fresh"
        assert core.metrics.count("exact", "corrupt") == before + 3
    # the streaming forms too
    question = "What is the refund window, streamed?"
    call = chat_call(core, chat, user(question), {})
    core.update(call.request, "WRONG", foreign[0], semantic=False)
    streamed = list(TriCacheLLM(chat, cache=core).stream_chat(user(question)))
    assert streamed[-1].message.content == "fresh"


# Agents: the tool loop --------------------------------------------------------------------
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"Rain in {city}."


def tool_agent_step(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """Calls ``lookup(Lyon)`` twice whatever the question, then answers (a digest of it all)."""
    asked = max(i for i, m in enumerate(messages) if m.role.value == "user")
    if sum(m.role.value == "tool" for m in messages[asked:]) < 2:
        call = ToolCallBlock(
            tool_call_id=f"id-{uuid.uuid4().hex}", tool_name="lookup", tool_kwargs={"city": "Lyon"}
        )
        return ChatMessage(role="assistant", blocks=[call])
    return ChatMessage(role="assistant", content=f"answer-{digest(shown(messages))}")


def react_step(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """The same loop, written as ReAct text."""
    if sum(str(m.content).startswith("Observation:") for m in messages) < 2:
        text = 'Thought: I need the weather.\nAction: lookup\nAction Input: {"city": "Lyon"}'
    else:
        text = f"Thought: I can answer.\nAnswer: answer-{digest(shown(messages))}"
    return ChatMessage(role="assistant", content=text)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inside llama-index's workflows
@pytest.mark.parametrize("kind", ["function", "react"])
def test_agents_never_serve_one_questions_steps_to_another(
    core: Cache, lookups: list[Any], kind: str
) -> None:
    from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    step = tool_agent_step if kind == "function" else react_step
    answered: list[int] = []

    def counted(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        answered.append(1)
        return step(messages, **kwargs)

    def ask(llm: Any, question: str) -> str:
        agent_class = FunctionAgent if kind == "function" else ReActAgent
        agent = agent_class(tools=[lookup], llm=llm)

        async def run() -> str:
            return str(await agent.run(user_msg=question)).strip()

        return asyncio.run(run())

    model = MockFunctionCallingLLM(response_generator=counted, is_chat_model=True)
    questions = ["Should I take an umbrella in Lyon?", "Can I have lunch outside in Lyon?"]
    expected = [ask(model, q) for q in questions]
    assert expected[0] != expected[1] and expected[0].startswith("answer-")
    llm = TriCacheLLM(model, cache=core)
    assert [ask(llm, q) for q in questions] == expected
    assert len(answered) == 12  # 3 steps per question, uncached then cached
    assert [ask(llm, q) for q in questions] == expected  # again: every step from the cache
    assert len(answered) == 12 and len(lookups) == 12
    tool_rounds = [semantic for r, semantic in lookups if "Rain in Lyon" in r.query]
    assert len(tool_rounds) == 8 and not any(tool_rounds)  # keyed on it all, exact only


def test_the_key_holds_how_the_model_formats_prompts_and_an_output_class_fields() -> None:
    """``completion_to_prompt`` / ``messages_to_prompt`` (left out of ``to_dict()``) change what
    a local model sees; an output class passed to the call changes with its fields."""
    from pydantic import BaseModel

    from llama_index_tricache.convert import llm_key

    from oracles import LlamaOracle

    def inst(prompt: str) -> str:
        return f"<s>[INST] {prompt} [/INST]"

    plain = LlamaOracle()
    formats = [
        LlamaOracle(completion_to_prompt=inst),
        LlamaOracle(completion_to_prompt=lambda p: f"Answer in Spanish. {p}"),
        LlamaOracle(completion_to_prompt=lambda p: f"Answer in French. {p}"),
        LlamaOracle(messages_to_prompt=lambda ms: " ".join(str(m.content) for m in ms)),
    ]
    keys = {llm_key(m, "complete:False", {}) for m in [plain, *formats]}
    assert len(keys) == 5
    assert llm_key(LlamaOracle(completion_to_prompt=inst), "complete:False", {}) == llm_key(
        formats[0], "complete:False", {}
    )  # the same function: the same key (another process too)

    class Invoice(BaseModel):
        number: str

    first = llm_key(plain, "chat", {"response_format": Invoice})

    class Invoice(BaseModel):  # type: ignore[no-redef]  # the app added a field
        number: str
        total_cents: int

    assert llm_key(plain, "chat", {"response_format": Invoice}) != first


class _Reporting(CustomLLM):
    """Answers with what providers report beside the text: token counts, log probabilities."""

    _calls: int = PrivateAttr(default=0)  # (a field would be one of the LLM's settings)

    @property
    def metadata(self) -> Any:
        from llama_index.core.llms import LLMMetadata

        return LLMMetadata(model_name="reporting", is_chat_model=True)

    def _said(self) -> dict[str, Any]:
        from llama_index.core.base.llms.types import LogProb

        self._calls += 1
        return {"additional_kwargs": {"prompt_tokens": 3, "completion_tokens": 5},
                "logprobs": [[LogProb(token="Paris", logprob=-0.1, bytes=[80])]]}  # fmt: skip

    @llm_chat_callback()
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=ChatMessage(role="assistant", content="Paris"), **self._said())

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="Paris", **self._said())

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_a_hit_keeps_the_responses_token_counts_and_log_probabilities(tmp_path: Path) -> None:
    inner = _Reporting()
    llm = TriCacheLLM(inner, Cache(path=str(tmp_path / "c.sqlite3"), semantic=False))
    asked = [ChatMessage(role="user", content="Capital of France?")]
    for said in (llm.chat(asked), llm.chat(asked), llm.complete("Capital of France?"),
                 llm.complete("Capital of France?")):  # fmt: skip
        extra = {k: v for k, v in said.additional_kwargs.items() if k != "tricache"}
        assert extra == {"prompt_tokens": 3, "completion_tokens": 5}
        assert said.logprobs is not None and said.logprobs[0][0].token == "Paris"
    assert inner._calls == 2  # the second of each: a hit
