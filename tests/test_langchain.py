"""The LangChain adapter with real langchain-core classes, fake chat models and real stores."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import FakeListChatModel, FakeListLLM, GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import Generation
from langchain_core.runnables import RunnableLambda

from langchain_tricache import CachedChatModel, TriCache, tenant, with_tricache
from tricache import Cache
from tricache.stores.redis import RedisStore

from conftest import REDIS_URL, roles_of_two_coalescers


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Cache]:
    with Cache(path=tmp_path / "lc.sqlite3", namespace="lc") as cache:
        yield cache


@pytest.fixture
def global_cache(core: Cache) -> Iterator[TriCache]:
    cache = TriCache(cache=core)
    set_llm_cache(cache)
    yield cache
    set_llm_cache(None)


def chat(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(a) for a in answers]))


def test_chat_model_round_trip_exact_and_semantic(global_cache: TriCache) -> None:
    system = SystemMessage("You are ACME's helpdesk.")
    first = chat("Use the forgot-password link.").invoke(
        [system, HumanMessage("How do I reset my password?")]
    )
    assert first.content == "Use the forgot-password link."
    exact = chat("NOT CALLED").invoke([system, HumanMessage("how do i reset my password")])
    assert exact.content == first.content
    assert exact.response_metadata["tricache"]["tier"] == "exact"
    similar = chat("NOT CALLED").invoke([system, HumanMessage("How can I reset my password?")])
    assert similar.content == first.content
    meta = similar.response_metadata["tricache"]
    assert meta["tier"] == "semantic" and meta["score"] > 0.9 and meta["entry_id"]
    negated = chat("Do nothing.").invoke([system, HumanMessage("How do I not reset my password?")])
    assert negated.content == "Do nothing."


def test_plain_llm_round_trip(global_cache: TriCache) -> None:
    llm = FakeListLLM(responses=["Paris", "NOT CALLED"])
    assert llm.invoke("What is the capital of France?") == "Paris"
    assert llm.invoke("What is the capital of France?") == "Paris"


def test_async_round_trip(global_cache: TriCache) -> None:
    async def scenario() -> tuple[str, str]:
        first = await chat("async answer").ainvoke("What is async caching?")
        second = await chat("NOT CALLED").ainvoke("What is async caching?")
        return str(first.content), str(second.content)

    assert asyncio.run(scenario()) == ("async answer", "async answer")


def test_model_parameters_change_the_key(global_cache: TriCache) -> None:
    cold = FakeListChatModel(responses=["cold answer"], sleep=None)
    assert cold.invoke("Write a haiku").content == "cold answer"
    hot = FakeListChatModel(responses=["hot answer"], sleep=0.0)  # another llm_string
    assert hot.invoke("Write a haiku").content == "hot answer"


def test_the_same_follow_up_after_different_histories_never_hits(global_cache: TriCache) -> None:
    pro = [HumanMessage("Tell me about the Pro plan"), AIMessage("It costs $20.")]
    basic = [HumanMessage("Tell me about the Basic plan"), AIMessage("It costs $5.")]
    chat("Pro includes support.").invoke([*pro, HumanMessage("Does it include support?")])
    reply = chat("Basic has no support.").invoke([*basic, HumanMessage("Does it include support?")])
    assert reply.content == "Basic has no support."
    again = chat("NOT CALLED").invoke([*pro, HumanMessage("Does it include support?")])
    assert again.content == "Pro includes support."


def test_message_ids_do_not_change_the_key(global_cache: TriCache) -> None:
    chat("answer").invoke([HumanMessage("What is a mortgage?", id="run-1")])
    again = chat("NOT CALLED").invoke([HumanMessage("What is a mortgage?", id="run-2")])
    assert again.content == "answer"


def test_tenants_are_isolated(global_cache: TriCache) -> None:
    with tenant("alice"):
        chat("alice's plan: Pro").invoke("What is my plan?")
    with tenant("bob"):
        assert chat("bob's plan: Basic").invoke("What is my plan?").content == "bob's plan: Basic"
    with tenant("alice"):
        assert chat("NOT CALLED").invoke("What is my plan?").content == "alice's plan: Pro"


def test_tool_calls_round_trip_and_stay_exact_only(global_cache: TriCache) -> None:
    call = AIMessage(
        "",
        tool_calls=[{"name": "get_opening_hours", "args": {"city": "Paris"}, "id": "call_1"}],
        usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
    )
    model = GenericFakeChatModel(messages=iter([call, AIMessage("fallback")]))
    model.invoke("When is the Paris office open?")
    again = GenericFakeChatModel(messages=iter([AIMessage("NOT CALLED")])).invoke(
        "When is the Paris office open?"
    )
    assert again.tool_calls[0]["name"] == "get_opening_hours"
    assert again.tool_calls[0]["args"] == {"city": "Paris"}
    assert again.usage_metadata["total_tokens"] == 19  # type: ignore[index]
    # a look-alike never gets another question's tool call
    other = chat("tool call not reused").invoke("When is the Paris office opened?")
    assert other.content == "tool call not reused"


def test_time_dependent_questions_are_not_cached(global_cache: TriCache) -> None:
    assert chat("sunny").invoke("What's the weather like in Paris right now?").content == "sunny"
    assert chat("rain").invoke("What's the weather like in Paris right now?").content == "rain"
    with tenant("acme"):  # another user of the tenant asks about "my order"
        chat("order 1 shipped").invoke("Where is my order?")
        assert chat("order 2 is packed").invoke("Where is my order?").content == (
            "order 2 is packed"
        )
    assert global_cache.core.stats()["exact"]["skipped_time_dependent"] == 8  # 4 reads, 4 writes


def test_time_dependent_questions_can_be_cached_exactly_when_asked_for(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "t.sqlite3", cache_time_dependent=True) as core:
        cache = TriCache(cache=core)
        GenericFakeChatModel(messages=iter([AIMessage("sunny")]), cache=cache).invoke(
            "What's the weather like in Paris today?"
        )
        exact = chat("NOT CALLED")
        exact.cache = cache
        assert exact.invoke("What's the weather like in Paris today?").content == "sunny"
        similar = chat("rain")
        similar.cache = cache
        assert similar.invoke("How is the weather in Paris today?").content == "rain"


def test_tool_call_answers_can_be_opened_to_look_alikes(core: Cache) -> None:
    cache = TriCache(cache=core, tool_calls_to_look_alikes=True)
    call = AIMessage("", tool_calls=[{"name": "search_docs", "args": {"q": "refunds"}, "id": "1"}])
    GenericFakeChatModel(messages=iter([call]), cache=cache).invoke("How do refunds work?")
    again = GenericFakeChatModel(messages=iter([AIMessage("NOT CALLED")]), cache=cache)
    assert again.invoke("How do refunds work exactly?").tool_calls[0]["name"] == "search_docs"


def test_after_a_tool_result_only_the_exact_prompt_hits(global_cache: TriCache) -> None:
    turn = [
        HumanMessage("What's the weather in Paris?"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "a"}]),
        ToolMessage("18°C, sunny", tool_call_id="a"),
    ]
    chat("It is 18°C and sunny.").invoke(turn)
    assert chat("NOT CALLED").invoke(turn).content == "It is 18°C and sunny."
    changed = [*turn[:2], ToolMessage("3°C, snow", tool_call_id="a")]
    assert chat("It is 3°C and snowing.").invoke(changed).content == "It is 3°C and snowing."


@pytest.mark.parametrize(
    "prompt",
    ["[", "[{]", '[{"lc": 1}]', "[" * 5000 + "]" * 5000, '[{"id": ["x"], "kwargs": 5}]', ""],
)
def test_odd_prompts_are_safe(core: Cache, prompt: str) -> None:
    cache = TriCache(cache=core)
    assert cache.lookup(prompt, "llm") is None
    cache.update(prompt, "llm", [Generation(text="x")])
    with pytest.raises(TypeError):
        cache.lookup(None, "llm")  # type: ignore[arg-type]


def test_a_tampered_payload_is_a_miss_not_an_import(core: Cache) -> None:
    cache = TriCache(cache=core)
    from langchain_core.load import dumps

    prompt = dumps([HumanMessage("hi")])
    request = cache._request(prompt, "llm")[0]
    assert request is not None
    evil = {"v": 1, "generations": [{"kind": "chat", "text": "x", "info": None,
            "message": {"type": "os.system", "data": {"content": "rm -rf /"}}}]}  # fmt: skip
    core.update(request, "x", evil, semantic=False)
    assert cache.lookup(prompt, "llm") is None


def test_faq_answers_reach_chat_models_and_llms(core: Cache) -> None:
    from tricache.faq import FaqEntry

    core.add_faq([FaqEntry("What is your uptime SLA?", "99.95% monthly.")])
    cache = TriCache(cache=core)
    reply = GenericFakeChatModel(messages=iter([AIMessage("NOT CALLED")]), cache=cache).invoke(
        "What uptime SLA do you offer?"
    )
    assert reply.content == "99.95% monthly."
    assert reply.response_metadata["tricache"]["tier"] == "faq"
    assert FakeListLLM(responses=["NOT CALLED"], cache=cache).invoke(
        "What is your uptime SLA?"
    ) == ("99.95% monthly.")


# the wrapper model ---------------------------------------------------------------------------
class CountingChat(GenericFakeChatModel):
    calls: int = 0
    delay: float = 0.0
    fail: bool = False

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("model down")
        return super()._generate(*args, **kwargs)

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("model down")
        return self._generate_plain(*args, **kwargs)

    def _generate_plain(self, *args: Any, **kwargs: Any) -> Any:
        return super()._generate(*args, **kwargs)


def counting(*answers: str, **kw: Any) -> CountingChat:
    return CountingChat(messages=iter([AIMessage(a) for a in answers] * 20), **kw)


def test_wrapper_streams_a_miss_stores_it_and_replays_a_hit(core: Cache) -> None:
    inner = counting("The capital of Peru is Lima.")
    model = CachedChatModel(inner=inner, tricache=core)
    streamed = [c.content for c in model.stream("What is the capital of Peru?")]
    assert "".join(streamed) == "The capital of Peru is Lima." and len(streamed) > 3
    replay = list(model.stream("What is the capital of Peru?"))
    assert "".join(str(c.content) for c in replay) == "The capital of Peru is Lima."
    assert len(replay) > 3 and inner.calls == 1
    assert any(c.response_metadata.get("tricache", {}).get("tier") == "exact" for c in replay)


def test_wrapper_async_stream(core: Cache) -> None:
    inner = counting("Santiago.")
    model = CachedChatModel(inner=inner, tricache=core)

    async def scenario() -> tuple[str, str]:
        first = "".join([str(c.content) async for c in model.astream("Capital of Chile?")])
        second = "".join([str(c.content) async for c in model.astream("Capital of Chile?")])
        return first, second

    assert asyncio.run(scenario()) == ("Santiago.", "Santiago.")
    assert inner.calls == 1  # the replay made no call


def test_wrapper_reports_the_tier_on_every_answer(core: Cache) -> None:
    model = CachedChatModel(inner=counting("Lima."), tricache=core)
    assert (
        model.invoke("What is the capital of Peru?").response_metadata["tricache"]["tier"] == "llm"
    )
    assert (
        model.invoke("What is the capital of Peru?").response_metadata["tricache"]["tier"]
        == "exact"
    )
    faq = CachedChatModel(
        inner=counting("LLM"),
        tricache=core,
        faq=lambda r: "curated" if "refund" in r.query else None,
    )
    reply = faq.invoke("What is your refund policy?")
    assert reply.content == "curated" and reply.response_metadata["tricache"]["tier"] == "faq"


def test_a_storm_of_identical_requests_makes_one_call(core: Cache) -> None:
    inner = counting("One answer for everyone.", delay=0.3)
    model = CachedChatModel(inner=inner, tricache=core)
    answers: list[str] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(str(model.invoke("What is TriCache?").content))
        )
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert inner.calls == 1 and answers == ["One answer for everyone."] * 8

    async def storm() -> list[str]:
        replies = await asyncio.gather(*(model.ainvoke("What is coalescing?") for _ in range(8)))
        return [str(r.content) for r in replies]

    assert len(set(asyncio.run(storm()))) == 1 and inner.calls == 2


def test_a_failing_leader_neither_hangs_the_waiters_nor_caches_the_error(core: Cache) -> None:
    inner = counting("never", delay=0.2, fail=True)
    model = CachedChatModel(inner=inner, tricache=core, coalesce_timeout=5)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            model.invoke("Will this fail?")
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 4 and time.monotonic() - started < 5
    assert core.lookup(core.request("Will this fail?", llm_key="x")) is None
    inner.fail = False
    assert model.invoke("Will this fail?").content == "never"


def test_coalescing_across_processes_through_redis(namespace: str, redis_client: Any) -> None:
    """Two coalescers on one Redis (as two processes would have): one leader."""
    store = RedisStore(REDIS_URL)
    key = f"tricache:{namespace}:x:{'ab' * 20}"
    assert roles_of_two_coalescers(store, key, hold=0.2) == [False, True]
    store.close()


# chain-level caching -------------------------------------------------------------------------
def test_chain_output_is_cached_on_the_question_and_invalidated_with_the_kb(core: Cache) -> None:
    calls: list[str] = []

    def rag(inputs: dict[str, str]) -> dict[str, Any]:
        calls.append(inputs["question"])
        return {"answer": f"answer to {inputs['question']}", "sources": ["handbook#3"]}

    chain = with_tricache(RunnableLambda(rag), core, tags=["kb:handbook"])
    first = chain.invoke({"question": "How do I reset my password?", "context": "..."})
    assert chain.invoke({"question": "How can I reset my password?"}) == first
    assert calls == ["How do I reset my password?"]  # retrieval and LLM skipped
    core.invalidate("kb:handbook")
    chain.invoke({"question": "How do I reset my password?"})
    assert len(calls) == 2
    assert asyncio.run(chain.ainvoke({"question": "How do I reset my password?"})) == first


def test_chain_messages_and_documents_come_back_as_objects(core: Cache) -> None:
    from langchain_core.documents import Document

    docs = with_tricache(
        RunnableLambda(lambda q: [Document(page_content="p1", metadata={"page": 1})]),
        core,
        name="d",
    )
    assert docs.invoke("find the refund policy") == docs.invoke("find the refund policy")
    assert isinstance(docs.invoke("find the refund policy")[0], Document)
    with pytest.raises(TypeError, match="key="):
        with_tricache(RunnableLambda(lambda x: x), core).invoke({"text": "no question field"})
