"""One request flow for every adapter (issue #34): ``Cache.answer`` / ``aanswer`` /
``stream`` / ``astream`` own lookup, coalescing, the model call, the reuse rule and the
write-back, so LangChain and LlamaIndex cannot disagree about what is served or said."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse
from llama_index.core.llms import CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import Field, PrivateAttr

from langchain_tricache import CachedChatModel, TriCache
from llama_index_tricache import TriCacheLLM
from tricache import Answer, Cache, Reuse
from tricache.flow import reuse


@pytest.fixture
def core(tmp_path: Path) -> Any:
    cache = Cache(path=tmp_path / "c.sqlite3", warm=True)
    yield cache
    cache.close()


# the rule, once ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (Answer("Paris."), Reuse.LOOK_ALIKES),
        (Answer("Paris.", finish="stop"), Reuse.LOOK_ALIKES),
        (Answer("Paris.", finish="end_turn"), Reuse.LOOK_ALIKES),
        (Answer("Par", finish="length"), Reuse.SAME_REQUEST),
        (Answer("Par", finish="max_tokens"), Reuse.SAME_REQUEST),
        (Answer("", tool_calls=True, finish="tool_calls"), Reuse.SAME_REQUEST),
        (Answer("Paris.", finish="something_new"), Reuse.SAME_REQUEST),
        (Answer("I'm sorry, I can't help with that."), Reuse.SAME_REQUEST),
        (Answer("Paris.", finish="content_filter"), Reuse.NEVER),
        (Answer("Paris.", finish="SAFETY"), Reuse.NEVER),
        (Answer("Paris.", finish="refusal"), Reuse.NEVER),
        (Answer("   "), Reuse.NEVER),
        (Answer("Paris.", finish=7), Reuse.SAME_REQUEST),  # type: ignore[arg-type]
    ],
    ids=repr,
)
def test_the_reuse_rule(answer: Answer, expected: Reuse) -> None:
    assert reuse(answer) is expected


# the same rule through both frameworks -------------------------------------------------------
class _Filtered(CustomLLM):
    """A LlamaIndex model whose answers carry a finish reason in their raw response."""

    raw: dict[str, Any] = Field(default_factory=dict)
    _calls: list[int] = PrivateAttr(default_factory=list)  # (a field would be in the key)

    @property
    def calls(self) -> int:
        return len(self._calls)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="filtered", is_chat_model=True)

    @llm_chat_callback()
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        self._calls.append(1)
        message = ChatMessage(role="assistant", content="Paris.")
        return ChatResponse(message=message, raw=self.raw)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self._calls.append(1)
        so_far = ""
        for piece in ("Lima ", "is ", "the ", "capital."):
            so_far += piece
            yield CompletionResponse(text=so_far, delta=piece)


def _lc_model(meta: dict[str, Any]) -> tuple[GenericFakeChatModel, list[int]]:
    asked: list[int] = []

    def answers() -> Any:
        while True:
            asked.append(1)
            yield AIMessage("Paris.", response_metadata=meta)

    return GenericFakeChatModel(messages=answers()), asked


@pytest.mark.parametrize(
    ("meta", "again", "reworded"),
    [
        ({"finish_reason": "stop"}, 0, 0),
        ({"choices": [{"finish_reason": "length"}]}, 0, 1),  # OpenAI's raw response
        ({"done_reason": "length"}, 0, 1),  # Ollama
        ({"stopReason": "max_tokens"}, 0, 1),  # Bedrock Converse
        ({"candidates": [{"finish_reason": "MAX_TOKENS"}]}, 0, 1),  # Gemini's raw response
        ({"finish_reason": "content_filter"}, 1, 1),
        ({"stopReason": "guardrail_intervened"}, 1, 1),
    ],
    ids=repr,
)
def test_both_frameworks_reuse_the_same_answers(
    core: Cache, meta: dict[str, Any], again: int, reworded: int
) -> None:
    """How many more model calls the same question, then a reworded one, cost: the same
    through LangChain's global cache, ``CachedChatModel`` and LlamaIndex, wherever the
    provider put its finish reason (the metadata LangChain gives, LlamaIndex's raw response)."""
    question, rewording = "What is the capital of France?", "What's the capital of France?"
    counts = []
    for namespace, ask in [
        ("lc-global", "global"),
        ("lc-model", "model"),
        ("llama", "llama"),
    ]:
        cache = Cache(path=core.settings.path, namespace=namespace, warm=True)
        try:
            if ask == "llama":
                inner = _Filtered(raw=meta)
                llm = TriCacheLLM(inner, cache=cache)
                for q in (question, question, rewording):
                    llm.chat([ChatMessage(role="user", content=q)])
                made = inner.calls
            else:
                model, asked = _lc_model(meta)
                if ask == "model":
                    wrapped = CachedChatModel(inner=model, tricache=cache)
                    for q in (question, question, rewording):
                        wrapped.invoke(q)
                else:
                    set_llm_cache(TriCache(cache=cache))
                    try:
                        for q in (question, question, rewording):
                            model.invoke(q)
                    finally:
                        set_llm_cache(None)
                made = len(asked)
        finally:
            cache.close()
        counts.append(made)
    assert counts == [1 + again + reworded] * 3, counts


# streams say who answered on their first chunk ----------------------------------------------
def test_a_stream_says_who_answered_on_its_first_chunk(core: Cache) -> None:
    model = CachedChatModel(
        inner=GenericFakeChatModel(messages=iter([AIMessage("Lima is the capital.")])),
        tricache=core,
    )
    for expected in ("llm", "exact"):
        chunks = list(model.stream("What is the capital of Peru?"))
        assert chunks[0].response_metadata["tricache"]["tier"] == expected
        assert all("tricache" not in c.response_metadata for c in chunks[1:])
        total = chunks[0]
        for chunk in chunks[1:]:
            total = total + chunk
        assert total.content == "Lima is the capital."
        assert total.response_metadata["tricache"]["tier"] == expected  # merged, not doubled

    llm = TriCacheLLM(_Filtered(), cache=core)
    question = [ChatMessage(role="user", content="What is the capital of Peru?")]
    for expected in ("llm", "exact"):
        chunks = list(llm.stream_chat(question))
        assert {c.additional_kwargs["tricache"]["tier"] for c in chunks} == {expected}


def test_a_stream_left_unfinished_is_not_stored(core: Cache) -> None:
    calls: list[int] = []

    def model_stream() -> Any:
        calls.append(1)
        yield from ["Lima ", "is ", "the ", "capital."]

    request = core.request("What is the capital of Peru?")
    combine = lambda chunks: Answer("".join(chunks))  # noqa: E731
    out = core.stream(request, model_stream, combine, lambda hit: iter([hit.text]))
    assert out.hit is None and next(out.answer) == "Lima "
    out.answer.close()  # the caller stopped reading
    assert core.lookup(request) is None
    out = core.stream(request, model_stream, combine, lambda hit: iter([hit.text]))
    assert "".join(out.answer) == "Lima is the capital."
    hit = core.lookup(request)
    assert hit is not None and hit.text == "Lima is the capital."
    assert len(calls) == 2


# sync and async, from one body ----------------------------------------------------------------
def test_concurrent_identical_misses_make_one_call_in_threads_and_tasks(core: Cache) -> None:
    calls: list[str] = []

    def ask() -> str:
        calls.append("sync")
        time.sleep(0.2)
        return "One answer."

    async def aask() -> str:
        calls.append("async")
        await asyncio.sleep(0.2)
        return "One answer."

    coalescer = core.coalescer(timeout=10)
    request = core.request("What is TriCache?")
    got: list[Any] = []
    threads = [
        threading.Thread(target=lambda: got.append(
            core.answer(request, ask, Answer, lambda hit: hit.text, coalescer=coalescer)))
        for _ in range(6)
    ]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert calls == ["sync"] and [o.answer for o in got] == ["One answer."] * 6
    assert sum(o.hit is None for o in got) == 1

    other = core.request("What is a cache stampede?")

    async def many() -> list[Any]:
        return await asyncio.gather(*(
            core.aanswer(other, aask, Answer, lambda hit: hit.text, coalescer=coalescer)
            for _ in range(6)
        ))  # fmt: skip

    outs = asyncio.run(many())
    assert calls == ["sync", "async"] and {o.answer for o in outs} == {"One answer."}


def test_a_cancelled_call_stores_nothing_and_frees_its_turn(core: Cache) -> None:
    coalescer = core.coalescer(timeout=10)
    request = core.request("What is a cache stampede?")

    async def slow() -> str:
        await asyncio.sleep(30)
        return "never"

    async def fast() -> str:
        return "An answer."

    async def scenario() -> Any:
        task = asyncio.ensure_future(
            core.aanswer(request, slow, Answer, lambda hit: hit.text, coalescer=coalescer)
        )
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert core.lookup(request) is None
        start = time.monotonic()
        out = await core.aanswer(request, fast, Answer, lambda hit: hit.text, coalescer=coalescer)
        return out, time.monotonic() - start

    out, waited = asyncio.run(scenario())
    assert out.answer == "An answer." and out.hit is None
    assert waited < 5  # its turn was freed: no wait for the cancelled leader's timeout


def test_an_unreadable_hit_is_a_miss_counted_as_corrupt(core: Cache) -> None:
    request = core.request("What is the capital of Peru?")
    core.update(request, "Lima.", {"not": "ours"})

    def unreadable(hit: Any) -> str:
        raise ValueError("not a payload of this adapter")

    out = core.answer(request, lambda: "Lima, from the model.", Answer, unreadable)
    assert out.hit is None and out.answer == "Lima, from the model."
    assert core.stats()["exact"]["corrupt"] >= 1


def test_what_the_model_raises_propagates_and_nothing_is_stored(core: Cache) -> None:
    request = core.request("What is the capital of Peru?")

    def failing() -> str:
        raise TimeoutError("the provider timed out")

    with pytest.raises(TimeoutError):
        core.answer(request, failing, Answer, lambda hit: hit.text)
    assert core.lookup(request) is None


def test_a_request_is_judged_once_from_lookup_to_write_back(tmp_path: Path) -> None:
    """The exact tier, the semantic tier and the write-back (its point included) read one
    verdict on whether the question may be cached; and the verdict is the same rule for all."""
    judged: list[str] = []

    def cacheable(question: str) -> bool:
        judged.append(question)
        return "today" not in question

    with Cache(path=tmp_path / "c.sqlite3", cacheable=cacheable, warm=True) as cache:
        ask = cache.request("How do I reset my password?")
        out = cache.answer(ask, lambda: "Use the link.", Answer, lambda hit: hit.text)
        assert out.hit is None and len(judged) == 1  # a miss, written back and indexed
        assert cache.answer(cache.request("How can I reset my password?"), lambda: "model",
                            Answer, lambda hit: hit.text).hit is not None  # fmt: skip
        assert cache.stats()["semantic"].get("skipped_uncacheable", 0) == 0
        judged.clear()
        today = cache.request("What is on the menu today?")
        cache.answer(today, lambda: "Soup.", Answer, lambda hit: hit.text)
        assert len(judged) == 1 and cache.lookup(today) is None  # refused once, for every tier


def test_the_faq_hook_answers_streams_after_one_lookup(core: Cache) -> None:
    """``CachedChatModel(faq=)`` is asked after the cache missed and before the model, streamed
    or not, sync or async; its answer is never stored, and the call is one lookup."""
    inner = GenericFakeChatModel(messages=iter([AIMessage("From the model.")] * 4))
    model = CachedChatModel(inner=inner, tricache=core,
                            faq=lambda r: "Curated." if "refund" in r.query else None)  # fmt: skip

    def lookups() -> int:
        return int(core.stats().get("requests", {}).get("lookups", 0))

    def model_calls() -> int:
        return int(core.stats().get("requests", {}).get("model_calls", 0))

    before, called = lookups(), model_calls()
    chunks = list(model.stream("What is your refund policy?"))
    assert "".join(str(c.content) for c in chunks) == "Curated."
    assert chunks[0].response_metadata["tricache"]["tier"] == "faq"
    assert chunks[0].response_metadata["tricache"]["level"] == "app"  # the app's, a lookup's
    assert lookups() == before + 1 and model_calls() == called  # (no model was asked)
    reply = model.invoke("What is your refund policy?")
    assert reply.content == "Curated." and model_calls() == called

    async def astreamed() -> list[Any]:
        return [c async for c in model.astream("What is your refund policy?")]

    chunks = asyncio.run(astreamed())
    assert "".join(str(c.content) for c in chunks) == "Curated."
    assert lookups() == before + 3 and model_calls() == called
    assert core.lookup(core.request("What is your refund policy?")) is None  # never stored
    before = lookups()
    chunks = list(model.stream("What is the capital of Peru?"))  # the hook declines
    assert "".join(str(c.content) for c in chunks) == "From the model."
    assert lookups() == before + 1
