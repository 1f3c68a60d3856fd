"""Coalescing shares what the leader got (issue #38, items 14-15): concurrent identical
requests make one model call even when its answer is not stored (a time-dependent question),
and concurrent identical streams make one model stream, replayed to the others as it comes.

Both frameworks, sync threads and asyncio tasks, with oracle stand-in models (``oracles.py``)
made slow enough to overlap: every served answer is checked against what the model says to
that input, and the model's calls are counted."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.base.llms.types import ChatResponse, CompletionResponse
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import PrivateAttr

from langchain_tricache import CachedChatModel
from llama_index_tricache import TriCacheLLM
from tricache import Answer, Cache, Exact, LeaderLeft

from oracles import ChatOracle, LlamaOracle

N = 8
CALLER: ContextVar[int] = ContextVar("caller", default=-1)  # which task reached the model
DELAY = 0.3  # the model's latency (a whole answer; a stream: before each of its 4 pieces)
NOW = "What time is it now?"  # time-dependent: never stored
PERU = "What is the capital of Peru?"


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Cache]:
    cache = Cache(path=tmp_path / "c.sqlite3", warm=True)
    yield cache
    cache.close()


def _pieces(text: str) -> list[str]:
    step = -(-len(text) // 4)
    return [text[i : i + step] for i in range(0, len(text), step)]


class SlowChat(ChatOracle):
    """The chat oracle, ``DELAY`` slow, streaming its answer in 4 pieces (one every
    ``DELAY / 4``); ``fail_after`` pieces, it raises; ``streams`` counts its streams."""

    fail_after: int = -1
    _streams: list[int] = PrivateAttr(default_factory=list)
    _callers: list[int] = PrivateAttr(default_factory=list)
    _ended: list[float] = PrivateAttr(default_factory=list)

    @property
    def streams(self) -> int:
        return len(self._streams)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        time.sleep(DELAY)
        return super()._generate(messages, stop, run_manager, **kw)

    async def _agenerate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        await asyncio.sleep(DELAY)
        return super()._generate(messages, stop, run_manager, **kw)

    def _chunks(self, messages: Any, stop: Any, **kw: Any) -> list[ChatGenerationChunk]:
        self._streams.append(1)
        self._callers.append(CALLER.get())
        whole = self.respond(messages, stop, **kw)
        pieces = _pieces(str(whole.content))
        return [
            ChatGenerationChunk(
                message=AIMessageChunk(
                    content=piece,
                    response_metadata=whole.response_metadata if i == len(pieces) - 1 else {},
                )
            )
            for i, piece in enumerate(pieces)
        ]

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        for i, chunk in enumerate(self._chunks(messages, stop, **kw)):
            if i == self.fail_after:
                raise RuntimeError("the provider dropped the stream")
            time.sleep(DELAY / 4)
            yield chunk
        self._ended.append(time.monotonic())

    async def _astream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        for i, chunk in enumerate(self._chunks(messages, stop, **kw)):
            if i == self.fail_after:
                raise RuntimeError("the provider dropped the stream")
            await asyncio.sleep(DELAY / 4)
            yield chunk
        self._ended.append(time.monotonic())


class SlowLlama(LlamaOracle):
    """The LlamaIndex oracle, ``DELAY`` slow, streaming in 4 pieces."""

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self._count()
        time.sleep(DELAY)
        return CompletionResponse(text=self.respond_text(prompt, **kwargs))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self._count()
        await asyncio.sleep(DELAY)
        return CompletionResponse(text=self.respond_text(prompt, **kwargs))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self._count()
        text = self.respond_text(prompt, **kwargs)

        def gen() -> Any:
            so_far = ""
            for piece in _pieces(text):
                time.sleep(DELAY / 4)
                so_far += piece
                yield CompletionResponse(text=so_far, delta=piece)

        return gen()

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self._count()
        text = self.respond_text(prompt, **kwargs)

        async def gen() -> Any:
            so_far = ""
            for piece in _pieces(text):
                await asyncio.sleep(DELAY / 4)
                so_far += piece
                yield CompletionResponse(text=so_far, delta=piece)

        return gen()

    @llm_chat_callback()
    def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
        self._count()
        whole = self.respond(messages, **kwargs)

        def gen() -> Any:
            so_far = ""
            for piece in _pieces(whole.content or ""):
                time.sleep(DELAY / 4)
                so_far += piece
                yield ChatResponse(message=LlamaMessage(role="assistant", content=so_far),
                                   delta=piece)  # fmt: skip

        return gen()


def in_threads(call: Callable[[], Any], n: int = N) -> list[Any]:
    """``call()`` in ``n`` threads at once; their results (or what they raised)."""
    results: list[Any] = [None] * n
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return results


def text_of(chunks: list[Any]) -> str:
    return "".join(str(c.content) for c in chunks)


def expected_chat(oracle: ChatOracle, question: str) -> str:
    return str(oracle.respond([HumanMessage(question)]).content)


# item 14: an answer that is not stored is handed to the callers waiting for it --------------
def test_a_time_dependent_question_asked_at_once_costs_one_call(core: Cache) -> None:
    """Ten callers ask "what time is it now?" at the same instant: one model call, its fresh
    answer for all, in about one model latency (before: ten calls, the followers at twice
    it); nothing stored.  LangChain in threads and tasks, LlamaIndex in threads and tasks."""
    inner = SlowChat()
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=10)
    want = expected_chat(inner, NOW)
    started = time.monotonic()
    replies = in_threads(lambda: model.invoke(NOW), 10)
    took = time.monotonic() - started
    assert [r.content for r in replies] == [want] * 10
    assert inner.calls == 1 and took < 1.8 * DELAY + 0.5
    assert {r.response_metadata["tricache"]["tier"] for r in replies} == {"llm"}

    async def tasks() -> list[BaseMessage]:
        return await asyncio.gather(*(model.ainvoke(NOW) for _ in range(10)))

    assert [r.content for r in asyncio.run(tasks())] == [want] * 10 and inner.calls == 2
    assert core.lookup(core.request(NOW)) is None  # never stored
    assert core.stats()["requests"]["coalesced"] == 18

    llama_inner = SlowLlama()
    llm = TriCacheLLM(llama_inner, cache=core, coalesce_timeout=10)
    want_text = llama_inner.respond_text(NOW)
    assert [r.text for r in in_threads(lambda: llm.complete(NOW), 10)] == [want_text] * 10
    assert llama_inner.calls == 1

    async def llama_tasks() -> list[Any]:
        return await asyncio.gather(*(llm.acomplete(NOW) for _ in range(10)))

    assert [r.text for r in asyncio.run(llama_tasks())] == [want_text] * 10
    assert llama_inner.calls == 2


class Withheld(SlowChat):
    """An oracle whose answers the provider withheld (``finish_reason: content_filter``)."""

    def respond(self, messages: Any, stop: Any = None, **kwargs: Any) -> AIMessage:
        message = super().respond(messages, stop, **kwargs)
        return AIMessage(message.content, response_metadata={"finish_reason": "content_filter"})


def test_an_answer_the_reuse_rule_refuses_is_not_handed_on(core: Cache) -> None:
    """A withheld answer may not be reused, not even by the same request a moment later:
    each caller asks the model itself (and is not left waiting past the leader)."""
    inner = Withheld()
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=10)
    started = time.monotonic()
    replies = in_threads(lambda: model.invoke(PERU), 4)
    assert [r.content for r in replies] == [expected_chat(inner, PERU)] * 4
    assert inner.calls == 4 and time.monotonic() - started < 10


def test_an_answer_begun_before_an_invalidation_is_not_handed_to_a_later_caller(
    core: Cache,
) -> None:
    """A caller that began after ``invalidate(tag)`` does not get the answer of a leader that
    began before it: versions moved in between."""
    request = core.request(NOW, tags=["clock"])
    coalescer = core.coalescer(timeout=10)
    calls: list[int] = []
    leading = threading.Event()

    def ask() -> str:
        calls.append(1)
        n = len(calls)
        leading.set()
        time.sleep(DELAY)
        return f"answer {n}"

    def call() -> Any:
        return core.answer(request, ask, Answer, lambda hit: hit.text, coalescer=coalescer)

    core.lookup(request)  # (the tag's version read)
    first: list[Any] = []
    leader = threading.Thread(target=lambda: first.append(call()))
    leader.start()
    assert leading.wait(10)
    core.invalidate("clock")
    later = call()
    leader.join(10)
    assert first[0].answer == "answer 1" and later.answer == "answer 2" and len(calls) == 2


# item 15: streams take the coalescing turn ------------------------------------------------------
def test_concurrent_streams_make_one_model_stream_replayed_as_it_comes(core: Cache) -> None:
    """Eight ``stream()`` calls of one request at once: one model stream; every caller gets
    the whole answer, its first chunk before the model's stream ended (replayed as it
    comes, not after); the answer is stored once."""
    inner = SlowChat()
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=10)
    want = expected_chat(inner, PERU)
    firsts: list[float] = []

    def consume() -> list[Any]:
        chunks = []
        for chunk in model.stream(PERU):
            if not chunks:
                firsts.append(time.monotonic())
            chunks.append(chunk)
        return chunks

    streams = in_threads(consume)
    assert [text_of(s) for s in streams] == [want] * N
    assert inner.streams == 1 and inner.calls == 0
    assert max(firsts) < inner._ended[0]  # each got its first piece while the model streamed
    assert {s[0].response_metadata["tricache"]["tier"] for s in streams} == {"llm"}
    assert all("tricache" not in c.response_metadata for s in streams for c in s[1:])
    hit = core.lookup(core.conversation_request(*_parsed(model, PERU)))
    assert hit is not None and hit.text == want

    async def tasks() -> list[str]:
        async def one() -> str:
            return text_of([c async for c in model.astream(NOW)])

        return await asyncio.gather(*(one() for _ in range(N)))

    assert asyncio.run(tasks()) == [expected_chat(inner, NOW)] * N
    assert inner.streams == 2


def _parsed(model: CachedChatModel, question: str) -> tuple[Any, str]:
    from langchain_tricache.chat_model import _llm_string
    from langchain_tricache.convert import llm_key, parse_messages

    llm_string = _llm_string(model.inner, {})
    assert llm_string is not None
    return parse_messages([HumanMessage(question)]), llm_key(llm_string)


def test_llama_index_streams_coalesce_in_threads_and_tasks(core: Cache) -> None:
    inner = SlowLlama()
    llm = TriCacheLLM(inner, cache=core, coalesce_timeout=10)
    want = inner.respond_text(PERU)
    streams = in_threads(lambda: list(llm.stream_complete(PERU)))
    assert [s[-1].text for s in streams] == [want] * N and inner.calls == 1
    assert {r.additional_kwargs["tricache"]["tier"] for s in streams for r in s} == {"llm"}

    async def tasks() -> list[str]:
        async def one() -> str:
            return [r async for r in await llm.astream_complete(NOW)][-1].text

        return await asyncio.gather(*(one() for _ in range(N)))

    assert asyncio.run(tasks()) == [inner.respond_text(NOW)] * N and inner.calls == 2

    question = [LlamaMessage(role="user", content="What is the capital of Chile?")]
    chats = in_threads(lambda: list(llm.stream_chat(question)))
    want_chat = inner.respond(question).content
    assert [s[-1].message.content for s in chats] == [want_chat] * N and inner.calls == 3


def test_a_failed_stream_fails_its_followers_and_stores_nothing(core: Cache) -> None:
    inner = SlowChat(fail_after=2)
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=10)
    results = in_threads(lambda: list(model.stream(PERU)))
    assert all(isinstance(r, RuntimeError) for r in results), results
    assert {str(r) for r in results} == {"the provider dropped the stream"}
    assert inner.streams == 1
    inner.fail_after = -1
    assert text_of(list(model.stream(PERU))) == expected_chat(inner, PERU)  # not stored
    assert inner.streams == 2


def test_a_leader_that_stops_reading_never_hangs_its_followers(core: Cache) -> None:
    """The leading thread reads one chunk and drops its stream: the followers that got part of
    it end with ``LeaderLeft`` at once; the next call streams anew."""
    inner = SlowChat()
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=10)
    reading = threading.Event()
    results: list[Any] = []

    def follower() -> None:
        reading.wait(10)
        try:
            results.append(text_of(list(model.stream(PERU))))
        except LeaderLeft as exc:
            results.append(exc)

    followers = [threading.Thread(target=follower) for _ in range(4)]
    for t in followers:
        t.start()
    stream = model.stream(PERU)
    next(stream)
    reading.set()
    time.sleep(DELAY / 2)  # the followers joined
    started = time.monotonic()
    stream.close()
    for t in followers:
        t.join(10)
    assert not any(t.is_alive() for t in followers)
    assert time.monotonic() - started < 5 and len(results) == 4
    assert all(isinstance(r, LeaderLeft) for r in results), results
    assert text_of(list(model.stream(PERU))) == expected_chat(inner, PERU)


def test_cancelling_a_stream_leader_or_follower_hangs_no_one(core: Cache) -> None:
    """asyncio: the leader cancelled before its first chunk leaves its followers to one new
    leader; a follower cancelled mid-stream leaves the leader and the others whole; a leader
    cancelled mid-stream ends its followers with ``LeaderLeft``."""
    inner = SlowChat()
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=10)
    want = expected_chat(inner, PERU)

    async def read(question: str, into: list[Any] | None = None, i: int = -1) -> str:
        CALLER.set(i)
        chunks = into if into is not None else []
        async for chunk in model.astream(question):
            chunks.append(chunk)
        return text_of(chunks)

    async def scenario() -> None:
        # the leader cancelled before its first chunk: the followers elect one new leader
        calls = [asyncio.create_task(read(PERU, i=i)) for i in range(N)]
        while not inner._callers:
            await asyncio.sleep(0.005)
        (leader,) = inner._callers
        calls[leader].cancel()
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        assert isinstance(results.pop(leader), asyncio.CancelledError)
        assert results == [want] * (N - 1) and inner.streams == 2

        # a follower cancelled mid-stream: the others are whole, one model stream
        got: list[Any] = []
        calls = [asyncio.create_task(read(NOW, got if i == 1 else None)) for i in range(N)]
        while not got:
            await asyncio.sleep(0.01)
        calls[1].cancel()
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        assert isinstance(results[1], asyncio.CancelledError)
        others = results[:1] + results[2:]
        assert others == [expected_chat(inner, NOW)] * (N - 1) and inner.streams == 3

        # the leader cancelled mid-stream: its followers end, at once
        got = []
        calls = [asyncio.create_task(read(NOW, got if i == 0 else None)) for i in range(N)]
        while not got:
            await asyncio.sleep(0.01)
        calls[0].cancel()
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        assert isinstance(results[0], asyncio.CancelledError)
        assert all(isinstance(r, LeaderLeft) for r in results[1:]), results
        assert inner.streams == 4

    asyncio.run(scenario())
    assert asyncio.run(read(NOW)) == expected_chat(inner, NOW)


def test_a_stream_never_read_frees_its_turn(core: Cache) -> None:
    """A LlamaIndex stream opened and dropped unread does not hold the next caller."""
    inner = SlowLlama()
    llm = TriCacheLLM(inner, cache=core, coalesce_timeout=30)
    llm.stream_complete(PERU)  # dropped at once
    started = time.monotonic()
    assert list(llm.stream_complete(PERU))[-1].text == inner.respond_text(PERU)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("bloom", [True, False], ids=["bloom", "no-bloom"])
def test_streams_coalesce_across_processes_through_the_store(tmp_path: Path, bloom: bool) -> None:
    """Two caches on one SQLite file (as two processes): the second stream waits for the
    first's lock and replays its stored answer, saying it is a hit (its Bloom filter, which
    learns what others wrote at its next catch-up, does not make it skip the store)."""
    options: Any = dict(semantic=False, faq=False, exact=Exact(bloom=bloom))
    first = Cache(path=tmp_path / "shared.sqlite3", **options)
    second = Cache(path=tmp_path / "shared.sqlite3", **options)
    try:
        inner, other = SlowChat(), SlowChat()
        a = CachedChatModel(inner=inner, tricache=first, coalesce_timeout=10)
        b = CachedChatModel(inner=other, tricache=second, coalesce_timeout=10)
        out: list[Any] = []
        leader = threading.Thread(target=lambda: out.append(list(a.stream(PERU))))
        leader.start()
        while inner.streams == 0:
            time.sleep(0.01)
        follower = list(b.stream(PERU))
        leader.join(10)
        want = expected_chat(inner, PERU)
        assert text_of(out[0]) == text_of(follower) == want
        assert inner.streams == 1 and other.streams == 0
        assert follower[0].response_metadata["tricache"]["tier"] == "exact"
    finally:
        first.close()
        second.close()
