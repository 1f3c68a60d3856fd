"""The LangChain adapter with real langchain-core classes, fake chat models and real stores."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import (
    BaseChatModel,
    FakeListChatModel,
    FakeListLLM,
    GenericFakeChatModel,
)
from langchain_core.load import dumps
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult, Generation
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_tricache import CachedChatModel, TriCache, tenant, with_tricache
from langchain_tricache.convert import parse_messages, parse_prompt
from tricache import Cache, Exact
from tricache.key.options import entry_options
from tricache.stores.redis import RedisStore

from conftest import REDIS_URL, roles_of_two_coalescers


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Cache]:
    with Cache(path=tmp_path / "lc.sqlite3", namespace="lc") as cache:
        yield cache


def chat(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(a) for a in answers]))


def test_chat_model_round_trip_exact_and_semantic(global_cache: TriCache) -> None:
    system = SystemMessage("You are ACME's helpdesk.")
    first = chat("Use the forgot-password link.").invoke(
        [system, HumanMessage("How do I reset my password?")]
    )
    assert first.content == "Use the forgot-password link."
    exact = chat("NOT CALLED").invoke([system, HumanMessage("how do I reset my password")])
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
        chat("alice's plan: Pro").invoke("How do I upgrade my plan?")
    with tenant("bob"):
        said = chat("bob's plan: Basic").invoke("How do I upgrade my plan?").content
        assert said == "bob's plan: Basic"
    with tenant("alice"):
        assert chat("NOT CALLED").invoke("How do I upgrade my plan?").content == "alice's plan: Pro"


def test_a_repeated_prompt_keeps_its_tenant_and_options(core: Cache) -> None:
    """The cache reuses the request of a prompt it saw (a memo): never across tenants,
    nor across the tags or category the run asks for."""
    cache = TriCache(cache=core)
    prompt, llm_string = "How do I upgrade my plan?", "fake-llm"
    first, _ = cache._request(prompt, llm_string)
    assert first is not None and cache._request(prompt, llm_string)[0] is first
    with tenant("alice"):
        alice, _ = cache._request(prompt, llm_string)
    assert alice is not None and alice.tenant == "alice" and alice != first
    with entry_options(tags=["prices"], category="billing"):
        tagged, _ = cache._request(prompt, llm_string)
    assert tagged is not None and tagged.tags == ("prices",) and tagged.category == "billing"
    assert cache._request(prompt, llm_string)[0] is first  # the plain one again


def test_every_hit_is_a_fresh_message(global_cache: TriCache) -> None:
    chat("fresh each time").invoke("What is a fresh object?")
    one = chat("NOT CALLED").invoke("What is a fresh object?")
    two = chat("NOT CALLED").invoke("What is a fresh object?")
    assert one.content == two.content == "fresh each time" and one is not two
    one.response_metadata["tricache"]["tier"] = "changed by the app"
    assert two.response_metadata["tricache"]["tier"] == "exact"


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
    skipped = global_cache.tricache.stats()["exact"]["skipped_time_dependent"]
    assert skipped == 8  # 4 reads, 4 writes


def test_time_dependent_questions_can_be_cached_exactly_when_asked_for(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "t.sqlite3", exact=Exact(cache_time_dependent=True)) as core:
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


def test_the_old_name_of_the_core_cache_still_works_and_warns(core: Cache) -> None:
    cache = TriCache(cache=core)
    assert cache.tricache is core and CachedChatModel(inner=chat(), tricache=core).tricache is core
    with pytest.warns(DeprecationWarning, match=r"TriCache\.core is now TriCache\.tricache"):
        assert cache.core is core


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
    from tricache.faq.store import FaqEntry

    core.add_faq([FaqEntry("What is your uptime SLA?", "99.95% monthly.")])
    cache = TriCache(cache=core)
    reply = GenericFakeChatModel(messages=iter([AIMessage("NOT CALLED")]), cache=cache).invoke(
        "Hi! What's your uptime SLA? Thanks"  # the FAQ compares the canonical question
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


# every field in the key ----------------------------------------------------------------------
class Oracle(BaseChatModel):
    """Answers with everything it was sent (so a wrong cached answer shows), counting calls."""

    style: str = "plain"
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "oracle"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"style": self.style}

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, *a: Any, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        sent = " | ".join(f"{m.type}/{m.name}: {m.content}" for m in messages)
        answer = f"[{self.style} stop={stop} {sorted(kw) if kw else ''}] {sent}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(answer))])


ASK = HumanMessage("Write a short greeting for me.")
CALL = {"name": "lookup", "args": {"city": "Paris"}, "id": "call_1"}
BASE: list[BaseMessage] = [
    HumanMessage("Check the weather."),
    AIMessage("", tool_calls=[CALL], additional_kwargs={"function_call": {"name": "lookup"}}),
    ToolMessage("18C", tool_call_id="call_1", name="lookup"),
    ASK,
]


def _variant(index: int, **update: Any) -> list[BaseMessage]:
    messages = list(BASE)
    message = messages[index]
    messages[index] = type(message)(**{**message.model_dump(), **update})  # validated
    return messages


ANSWER_CHANGING = {
    "question author": _variant(3, name="Bob"),
    "tool call args": _variant(1, tool_calls=[{**CALL, "args": {"city": "Rome"}}]),
    "invalid tool call": _variant(
        1, invalid_tool_calls=[{"name": "x", "args": "{", "id": "b", "error": None}]
    ),
    "function_call": _variant(1, additional_kwargs={"function_call": {"name": "other"}}),
    "tool name": _variant(2, name="forecast"),
    "tool status": _variant(2, status="error"),
    "image part": _variant(
        3, content=[{"type": "text", "text": ASK.content}, {"type": "image_url", "image_url": "a"}]
    ),
    "function message": [*BASE[:3], FunctionMessage("18C", name="lookup"), ASK],
    "an empty system message": [SystemMessage(""), *BASE],  # shown to the model all the same
    # a result whose call is not in the conversation: it answers no call of this one
    "tool_call_id alone": _variant(2, tool_call_id="call_9"),
}
NOT_ANSWER_CHANGING = {
    "message id": _variant(3, id="run-7"),
    # the ids of a run: the result still answers the call (tests/test_tool_pairing.py)
    "tool call ids": [
        BASE[0],
        _variant(1, tool_calls=[{**CALL, "id": "call_9"}])[1],
        _variant(2, tool_call_id="call_9")[2],
        ASK,
    ],
    "artifact": _variant(2, artifact={"raw": [1, 2]}),
    "provider reports": _variant(
        1,
        response_metadata={"model_name": "m"},
        usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    ),
}


def _requests(cache: TriCache, messages: list[BaseMessage]) -> tuple[Any, Any]:
    """The request from LangChain's serialized prompt, and from the message objects."""
    from_prompt = cache._request(dumps(messages), "llm")[0]
    parsed = parse_messages(messages)
    return from_prompt, cache.tricache.request(
        parsed.query, system=parsed.system, history=parsed.history, tenant="default",
        llm_key=from_prompt.llm_key, query_meta=parsed.query_meta,
    )  # fmt: skip


@pytest.mark.parametrize("change", sorted(ANSWER_CHANGING))
def test_every_field_that_changes_the_answer_changes_the_key(core: Cache, change: str) -> None:
    cache = TriCache(cache=core)
    base = _requests(cache, BASE)
    changed = _requests(cache, ANSWER_CHANGING[change])
    assert base[0] == base[1] and changed[0] == changed[1]  # both views agree
    assert changed[0] != base[0] and core.exact.key(changed[0]) != core.exact.key(base[0])


@pytest.mark.parametrize("change", sorted(NOT_ANSWER_CHANGING))
def test_run_ids_and_provider_reports_stay_out_of_the_key(core: Cache, change: str) -> None:
    cache = TriCache(cache=core)
    assert _requests(cache, NOT_ANSWER_CHANGING[change]) == _requests(cache, BASE)


def test_parse_prompt_reads_names_from_the_serialized_prompt() -> None:
    parsed = parse_prompt(dumps([HumanMessage("Hello there", name="Alice")]))
    assert parsed.query == "Hello there" and "Alice" in parsed.query_meta


def test_each_author_gets_their_own_answer(global_cache: TriCache, core: Cache) -> None:
    def ask(model: BaseChatModel, name: str) -> str:
        return str(model.invoke([HumanMessage("Write a short greeting.", name=name)]).content)

    shared = Oracle()
    assert "human/Alice" in ask(shared, "Alice")
    assert "human/Bob" in ask(shared, "Bob")  # not Alice's greeting
    assert "human/Alice" in ask(shared, "Alice") and shared.calls == 2
    wrapped = CachedChatModel(inner=Oracle(cache=False), tricache=core)
    assert "human/Bob" in ask(wrapped, "Bob")
    assert "human/Alice" in ask(wrapped, "Alice")


# the wrapped model in the key ----------------------------------------------------------------
def test_wrapped_models_with_other_settings_never_share_answers(core: Cache) -> None:
    terse = CachedChatModel(inner=Oracle(style="terse", cache=False).with_retry(), tricache=core)
    verbose = CachedChatModel(inner=Oracle(style="long", cache=False).with_retry(), tricache=core)
    assert terse.invoke("Describe Paris.").content.startswith("[terse")
    assert verbose.invoke("Describe Paris.").content.startswith("[long")
    assert terse.invoke("Describe Paris.").response_metadata["tricache"]["tier"] == "exact"


def test_bound_arguments_reach_the_model_and_the_key(core: Cache) -> None:
    inner = Oracle(cache=False)
    ended = CachedChatModel(inner=inner.bind(stop=["END"]), tricache=core)
    assert "stop=['END']" in ended.invoke("Count to three.").content  # not overridden by None
    stopped = CachedChatModel(inner=inner.bind(stop=["STOP"]), tricache=core)
    assert "stop=['STOP']" in stopped.invoke("Count to three.").content
    tools = CachedChatModel(inner=inner.bind(tool_choice="auto"), tricache=core)
    assert "tool_choice" in tools.invoke("Count to three.").content
    assert inner.calls == 3
    assert "stop=['END']" in ended.invoke("Count to three.").content and inner.calls == 3


def test_fallbacks_are_part_of_the_key(core: Cache) -> None:
    first = Oracle(style="a", cache=False)
    CachedChatModel(
        inner=first.with_fallbacks([Oracle(style="b", cache=False)]), tricache=core
    ).invoke("Name a colour.")
    second = Oracle(style="a", cache=False)
    other = CachedChatModel(
        inner=second.with_fallbacks([Oracle(style="c", cache=False)]), tricache=core
    )
    other.invoke("Name a colour.")
    assert first.calls == 1 and second.calls == 1  # another fallback: another key


def test_an_unknown_wrapped_runnable_passes_through_uncached(
    core: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def answer(messages: Any, **kw: Any) -> AIMessage:
        calls.append(1)
        return AIMessage(f"answer {len(calls)}")

    model = CachedChatModel(inner=RunnableLambda(answer), tricache=core)
    assert model.invoke("What is two plus two?").content == "answer 1"
    assert model.invoke("What is two plus two?").content == "answer 2"
    assert "".join(str(c.content) for c in model.stream("What is two plus two?")) == "answer 3"
    assert sum("cannot tell which model" in r.message for r in caplog.records) == 1


# served answers are copies -------------------------------------------------------------------
class Fixed(BaseChatModel):
    """Answers every call with a fresh copy of ``answer``."""

    answer: AIMessage

    @property
    def _llm_type(self) -> str:
        return "fixed"

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer.model_copy(deep=True))])


def _rich_answer() -> AIMessage:
    return AIMessage(
        [{"type": "text", "text": "Calling the tool."}],
        tool_calls=[{"name": "weather", "args": {"cities": ["Paris"]}, "id": "c1"}],
        additional_kwargs={"extra": {"list": [1]}},
        response_metadata={"finish_reason": "tool_calls", "nested": {"k": [1]}},
    )


def _vandalize(message: Any) -> None:
    message.content[0]["text"] = "vandalized"
    message.tool_calls[0]["args"]["cities"].append("Rome")
    message.additional_kwargs["extra"]["list"].append(2)
    message.response_metadata["nested"]["k"].append(2)


def _assert_pristine(message: Any) -> None:
    assert message.content[0]["text"] == "Calling the tool."
    assert message.tool_calls[0]["args"] == {"cities": ["Paris"]}
    assert message.additional_kwargs["extra"] == {"list": [1]}
    assert message.response_metadata["nested"] == {"k": [1]}


def test_changing_a_served_answer_never_changes_the_next_one(global_cache: TriCache) -> None:
    question = "Which museums are in Paris?"
    first = Fixed(answer=_rich_answer()).invoke(question)
    _vandalize(first)  # the answer that was just stored
    not_called = Fixed(answer=AIMessage("NOT CALLED"))  # the same llm_string
    hit = not_called.invoke(question)
    _assert_pristine(hit)
    _vandalize(hit)  # an answer served from L1
    _assert_pristine(not_called.invoke(question))


def test_generations_served_by_the_cache_are_copies(core: Cache) -> None:
    cache = TriCache(cache=core)
    stored = Generation(text="x", generation_info={"logprobs": [1]})
    cache.update("Say x.", "llm", [stored])
    stored.generation_info["logprobs"].append(2)  # type: ignore[index]
    served = cache.lookup("Say x.", "llm")
    assert served is not None and served[0].generation_info["logprobs"] == [1]  # type: ignore[index]
    served[0].generation_info["logprobs"].append(3)  # type: ignore[index]
    again = cache.lookup("Say x.", "llm")
    assert again is not None and again[0].generation_info["logprobs"] == [1]  # type: ignore[index]


def test_the_wrapper_serves_copies(core: Cache) -> None:
    model = CachedChatModel(inner=Fixed(answer=_rich_answer()), tricache=core)
    model.invoke("Which museums are in Paris?")
    hit = model.invoke("Which museums are in Paris?")
    _vandalize(hit)
    _assert_pristine(model.invoke("Which museums are in Paris?"))


def test_plain_llm_hits_carry_the_tier(global_cache: TriCache) -> None:
    llm = FakeListLLM(responses=["Paris", "NOT CALLED"])
    llm.invoke("What is the capital of France?")
    info = llm.generate(["What is the capital of France?"]).generations[0][0].generation_info
    assert info is not None and info["tricache"]["tier"] == "exact"


# payloads that are not ours ------------------------------------------------------------------
BAD_PAYLOADS = [
    {"v": 1, "generations": [{"kind": "chat", "text": "x", "info": None,
                              "message": {"type": "ai", "data": 5}}]},
    {"v": 1, "generations": [{"kind": "chat", "text": "x", "info": None,
                              "message": {"type": "human", "data": {"content": "hi"}}}]},
    {"v": 1, "generations": [{"kind": "text", "text": 5, "info": None}]},
    {"v": 1, "generations": [{"kind": "text", "text": "x", "info": "not a dict"}]},
    {"v": 1, "generations": [{"kind": "text", "text": "x"}]},
    {"v": 1, "generations": ["not an item"]},
    {"v": 1, "generations": 5},
    {"v": 1, "generations": []},
    {"v": 1},
    {"v": 2, "generations": []},
    "not a dict",
]  # fmt: skip


def _corrupt(core: Cache, request: Any, payload: Any) -> None:
    assert core.update(request, "x", payload, semantic=False)


@pytest.mark.parametrize("payload", BAD_PAYLOADS)
def test_a_payload_that_is_not_ours_is_a_corrupt_miss(core: Cache, payload: Any) -> None:
    cache = TriCache(cache=core)
    prompt = dumps([HumanMessage("What is a payload?")])
    request = cache._request(prompt, "llm")[0]
    _corrupt(core, request, payload)
    assert cache.lookup(prompt, "llm") is None
    assert asyncio.run(cache.alookup(prompt, "llm")) is None
    assert core.metrics.count("exact", "corrupt") == 2
    model = GenericFakeChatModel(messages=iter([AIMessage("fresh")]), cache=cache)
    assert model.invoke("What is a payload?").content == "fresh"


@pytest.mark.parametrize("payload", BAD_PAYLOADS[:7])
def test_the_wrapper_treats_a_payload_not_its_own_as_a_miss(core: Cache, payload: Any) -> None:
    model = CachedChatModel(inner=counting("fresh"), tricache=core)
    request = model._request([HumanMessage("What is a payload?")], {})[0]
    _corrupt(core, request, payload)

    async def both_async() -> tuple[str, str]:
        answer = await model.ainvoke("What is a payload?")
        streamed = "".join([str(c.content) async for c in model.astream("What is a payload?")])
        return str(answer.content), streamed

    _corrupt(core, request, payload)
    assert model.invoke("What is a payload?").content == "fresh"
    _corrupt(core, request, payload)
    assert "".join(str(c.content) for c in model.stream("What is a payload?")) == "fresh"
    _corrupt(core, request, payload)
    assert asyncio.run(both_async())[0] == "fresh"
    assert core.metrics.count("exact", "corrupt") >= 3


# chain-level caching -------------------------------------------------------------------------
def test_chain_output_is_cached_on_the_question_and_invalidated_with_the_kb(core: Cache) -> None:
    calls: list[str] = []

    def rag(inputs: dict[str, str]) -> dict[str, Any]:
        calls.append(inputs["question"])
        return {"answer": f"answer to {inputs['question']}", "sources": ["handbook#3"]}

    chain = with_tricache(RunnableLambda(rag), core, tags=["kb:handbook"])
    first = chain.invoke({"question": "How do I reset my password?", "lang": "en"})
    assert chain.invoke({"question": "How can I reset my password?", "lang": "en"}) == first
    assert calls == ["How do I reset my password?"]  # retrieval and LLM skipped
    core.invalidate("kb:handbook")
    chain.invoke({"question": "How do I reset my password?", "lang": "en"})
    assert len(calls) == 2
    again = asyncio.run(chain.ainvoke({"question": "How do I reset my password?", "lang": "en"}))
    assert again == first and len(calls) == 2


def test_chain_messages_and_documents_come_back_as_objects(core: Cache) -> None:
    from langchain_core.documents import Document

    docs = with_tricache(
        RunnableLambda(lambda q: [Document(page_content="p1", metadata={"page": 1})]),
        core,
        name="d",
    )
    assert docs.invoke("find the refund policy") == docs.invoke("find the refund policy")
    assert isinstance(docs.invoke("find the refund policy")[0], Document)


def _history_chain(system: str, model: Oracle) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [("system", system), MessagesPlaceholder("chat_history"), ("human", "{input}")]
    )
    return prompt | model


def test_two_chains_of_the_same_class_never_share_outputs(core: Cache) -> None:
    model = Oracle(cache=False)
    support = with_tricache(_history_chain("You are ACME support.", model), core)
    sales = with_tricache(_history_chain("You are ACME sales.", model), core)
    question = {"input": "What do you offer?", "chat_history": []}
    assert "ACME support" in support.invoke(question).content
    assert "ACME sales" in sales.invoke(question).content
    assert "ACME support" in support.invoke(question).content and model.calls == 2


def test_other_input_fields_are_in_the_key(core: Cache) -> None:
    model = Oracle(cache=False)
    chain = with_tricache(_history_chain("You are ACME support.", model), core)
    pro = [HumanMessage("Tell me about the Pro plan"), AIMessage("It costs $20.")]
    basic = [HumanMessage("Tell me about the Basic plan"), AIMessage("It costs $5.")]
    ask = "Does it include support?"
    assert "Pro plan" in chain.invoke({"input": ask, "chat_history": pro}).content
    assert "Basic plan" in chain.invoke({"input": ask, "chat_history": basic}).content
    assert "Pro plan" in chain.invoke({"input": ask, "chat_history": pro}).content
    assert model.calls == 2  # the repeat was served; nothing crossed histories


def test_inputs_without_a_question_are_matched_exactly(core: Cache) -> None:
    calls: list[Any] = []

    def summarize(inputs: dict[str, Any]) -> str:
        calls.append(inputs)
        return f"summary of {inputs['text']} in {inputs['words']} words"

    chain = with_tricache(RunnableLambda(summarize), core)
    assert chain.invoke({"text": "How do I reset my password?", "words": 5}).endswith("5 words")
    assert chain.invoke({"text": "How do I reset my password?", "words": 9}).endswith("9 words")
    assert "can I" in chain.invoke({"text": "How can I reset my password?", "words": 5})
    assert chain.invoke({"text": "How do I reset my password?", "words": 5}).endswith("5 words")
    assert len(calls) == 3


def test_inputs_without_a_canonical_form_are_not_cached(core: Cache) -> None:
    calls: list[int] = []
    chain = with_tricache(RunnableLambda(lambda x: calls.append(1) or len(calls)), core)
    marker = object()
    assert chain.invoke({"question": "Which one?", "obj": marker}) == 1
    assert chain.invoke({"question": "Which one?", "obj": marker}) == 2


def test_the_configurable_part_of_the_config_is_in_the_key(core: Cache) -> None:
    def greet(name: str, config: RunnableConfig) -> str:
        return f"{config['configurable']['tone']} hello, {name}"

    chain = with_tricache(RunnableLambda(greet), core)
    polite = {"configurable": {"tone": "polite"}}
    assert chain.invoke("Ada", polite) == "polite hello, Ada"
    assert chain.invoke("Ada", {"configurable": {"tone": "rude"}}) == "rude hello, Ada"


def test_functions_with_other_closures_are_other_chains(core: Cache) -> None:
    def times(n: int) -> Any:
        return RunnableLambda(lambda q: f"{q} x{n}")

    assert with_tricache(times(2), core).invoke("What is 3?") == "What is 3? x2"
    assert with_tricache(times(3), core).invoke("What is 3?") == "What is 3? x3"


TONE = "polite"


def _toned(question: str) -> str:
    return f"{TONE}: {question}"


def test_module_settings_a_function_reads_are_in_the_key(
    core: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert with_tricache(RunnableLambda(_toned), core).invoke("Greet me.") == "polite: Greet me."
    monkeypatch.setitem(globals(), "TONE", "rude")  # another deployment's setting
    assert with_tricache(RunnableLambda(_toned), core).invoke("Greet me.") == "rude: Greet me."


def test_a_chain_without_a_fingerprint_is_not_cached_unless_named(
    core: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    index = object()  # stands for a vector store: no description two processes agree on
    calls: list[int] = []

    def retrieve(q: str) -> str:
        calls.append(1)
        return f"{q}: {id(index) and len(calls)}"

    chain = with_tricache(RunnableLambda(retrieve), core)
    chain.invoke("Where are the docs?")
    chain.invoke("Where are the docs?")
    assert len(calls) == 2
    assert sum("no reliable fingerprint" in r.message for r in caplog.records) == 1
    named = with_tricache(RunnableLambda(retrieve), core, fingerprint="docs-rag-v1")
    assert named.invoke("Where are the docs?") == named.invoke("Where are the docs?")
    assert len(calls) == 3


def test_tags_must_be_a_list(core: Cache) -> None:
    with pytest.raises(TypeError, match="tags"):
        with_tricache(RunnableLambda(lambda x: x), core, tags="kb:docs")


def test_cached_chain_outputs_are_copies(core: Cache) -> None:
    chain = with_tricache(
        RunnableLambda(lambda q: {"answer": q.upper(), "sources": ["a"]}), core, semantic=False
    )
    chain.invoke("where are the docs?")
    hit = chain.invoke("where are the docs?")
    hit["sources"].append("vandalized")
    assert chain.invoke("where are the docs?")["sources"] == ["a"]


def test_outputs_that_would_not_come_back_equal_are_not_cached(core: Cache) -> None:
    calls: list[int] = []
    chain = with_tricache(RunnableLambda(lambda q: calls.append(1) or {1: ("a", "b")}), core)
    assert chain.invoke("Give me a pair.") == {1: ("a", "b")}
    assert chain.invoke("Give me a pair.") == {1: ("a", "b")} and len(calls) == 2


@pytest.mark.parametrize(
    "payload", [{"v": 1, "kind": "json"}, {"v": 1, "kind": "lc", "data": 5}, {"v": 1, "kind": 3}]
)
def test_a_chain_payload_not_ours_is_a_corrupt_miss(core: Cache, payload: Any) -> None:
    chain = with_tricache(RunnableLambda(lambda q: f"fresh {q}"), core, semantic=False)
    request = chain._request("What is this?", None, {})[0]
    _corrupt(core, request, payload)
    assert chain.invoke("What is this?") == "fresh What is this?"
    _corrupt(core, request, payload)
    assert asyncio.run(chain.ainvoke("What is this?")) == "fresh What is this?"
    assert core.metrics.count("exact", "corrupt") == 2


# tools and structured output through the wrapper ---------------------------------------------
def test_bound_tools_are_part_of_the_key_and_a_repeat_is_a_hit(core: Cache) -> None:
    from langchain_core.tools import tool

    from oracles import ChatOracle

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    @tool
    def population(city: str) -> int:
        """How many people live in a city."""
        return 1

    oracle = ChatOracle()
    model = CachedChatModel(inner=oracle, tricache=core)
    question = "Tell me about Lima."
    with_weather = model.bind_tools([weather], tool_choice="weather")
    with_population = model.bind_tools([population], tool_choice="population")
    first = with_weather.invoke(question)
    assert first.tool_calls[0]["name"] == "weather"
    assert first.response_metadata["tricache"]["tier"] == "llm"
    other = with_population.invoke(question)
    assert other.tool_calls[0]["name"] == "population"  # never the other tool set's answer
    assert oracle.calls == 2
    again = with_weather.invoke(question)
    assert again.response_metadata["tricache"]["tier"] == "exact" and oracle.calls == 2
    assert again.tool_calls == first.tool_calls
    assert model.invoke(question).tool_calls == [] and oracle.calls == 3  # no tools: its own
    oracle.check()


def test_tools_bound_through_a_binding_keep_its_arguments(core: Cache) -> None:
    from oracles import ChatOracle

    oracle = ChatOracle()
    model = CachedChatModel(inner=oracle.bind(stop=["\n\n"]), tricache=core)
    tool = {"name": "lookup", "description": "Look it up.", "parameters": {"type": "object"}}
    bound = model.bind_tools([tool], tool_choice="lookup")
    assert isinstance(bound, CachedChatModel) and bound.tricache is core
    bound.invoke("Where is Lima?")
    served = oracle.check()
    assert served[-1].params.get("stop") == ["\n\n"]


def test_structured_output_is_cached_per_schema(core: Cache) -> None:
    from pydantic import BaseModel

    from oracles import ChatOracle

    class City(BaseModel):
        """A city."""

        name: str

    class Country(BaseModel):
        """A country."""

        code: str

    oracle = ChatOracle()
    model = CachedChatModel(inner=oracle, tricache=core)
    city = model.with_structured_output(City).invoke("Where is the Louvre?")
    country = model.with_structured_output(Country).invoke("Where is the Louvre?")
    assert isinstance(city, City) and isinstance(country, Country)
    assert oracle.calls == 2
    assert model.with_structured_output(City).invoke("Where is the Louvre?") == city
    assert oracle.calls == 2
    raw = model.with_structured_output(City, include_raw=True).invoke("Where is the Louvre?")
    assert raw["parsed"] == city and raw["raw"].response_metadata["tricache"]["tier"] == "exact"


def test_a_wrapped_model_without_tools_cannot_bind_them(core: Cache) -> None:
    model = CachedChatModel(inner=chat("x"), tricache=core)
    with pytest.raises(NotImplementedError):
        model.bind_tools([{"name": "f", "description": "f", "parameters": {"type": "object"}}])


# streaming inside a chain --------------------------------------------------------------------
def test_a_chain_streams_each_token_once(core: Cache) -> None:
    answer = "The capital of Peru is Lima."
    inner = counting(answer)
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | CachedChatModel(
        inner=inner, tricache=core
    )

    async def events(question: str) -> list[tuple[str, Any]]:
        return [
            (e["name"], e["data"]["chunk"].content)
            async for e in chain.astream_events({"q": question}, version="v2")
            if e["event"] == "on_chat_model_stream"
        ]

    for tier in ("miss", "hit"):
        streamed = asyncio.run(events("What is the capital of Peru?"))
        assert {name for name, _ in streamed} == {"CachedChatModel"}, tier
        assert "".join(text for _, text in streamed) == answer, tier
    assert "".join(c.content for c in chain.stream({"q": "Capital of Peru, please?"})) == answer

    async def astream() -> str:
        return "".join([c.content async for c in chain.astream({"q": "Peru's capital?"})])

    assert asyncio.run(astream()) == answer


def test_a_configurable_inner_model_gets_the_calls_choices_and_keys_on_them(
    tmp_path: Path,
) -> None:
    """``config={"configurable": ...}`` reaches the wrapped model (LangChain does not pass it
    to ``_generate``), and two choices never share an answer: invoke, stream, ainvoke."""
    from langchain_core.runnables import ConfigurableField

    from oracles import ChatOracle

    oracle = ChatOracle()
    fields = oracle.configurable_fields(temperature=ConfigurableField(id="temp"))
    alternatives = oracle.configurable_alternatives(
        ConfigurableField(id="model"), default_key="a", b=ChatOracle(temperature=0.5)
    )
    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as cache:
        for inner, choices in ((fields, [{"temp": 0.9}, {"temp": 0.1}, {}]),
                               (alternatives, [{"model": "b"}, {}])):  # fmt: skip
            model = CachedChatModel(inner=inner, tricache=cache)
            for choice in choices * 2:  # the second round from the cache
                config: Any = {"configurable": choice}
                expected = inner.invoke("Write a limerick.", config=config).content
                assert model.invoke("Write a limerick.", config=config).content == expected
                chunks = model.stream("Write a limerick.", config=config)
                streamed = "".join(str(c.content) for c in chunks)
                assert streamed == expected
                said = asyncio.run(model.ainvoke("Write a limerick.", config=config))
                assert said.content == expected
        exact = cache.stats()["exact"]
        assert exact["misses"] == 4 and exact["hits_l1"] >= 10  # cached, one entry per choice


def test_an_output_class_passed_to_the_call_is_keyed_by_its_fields(tmp_path: Path) -> None:
    """``response_format=Invoice``: a field added is another key through ``CachedChatModel``;
    LangChain's own llm_string names the class only, so the global cache leaves such calls
    to the model."""
    from langchain_core.globals import set_llm_cache
    from pydantic import BaseModel

    from oracles import ChatOracle

    class Invoice(BaseModel):
        number: str

    first = Invoice

    class Invoice(BaseModel):  # type: ignore[no-redef]
        number: str
        total_cents: int

    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as cache:
        model = CachedChatModel(inner=ChatOracle(), tricache=cache)
        model.invoke("Give me an example invoice.", response_format=first)
        said = model.invoke("Give me an example invoice.", response_format=Invoice)
        assert said.response_metadata["tricache"]["tier"] == "llm"
        oracle = ChatOracle()
        set_llm_cache(TriCache(cache=cache))
        try:
            for _ in range(2):
                oracle.invoke("Give me an example invoice.", response_format=Invoice)
        finally:
            set_llm_cache(None)
        assert oracle.calls == 2


def test_configurable_choices_are_keyed_even_where_the_llm_string_does_not_show_them(
    tmp_path: Path,
) -> None:
    """A model whose ``llm_string`` leaves out the fields a choice sets (no
    ``_identifying_params``), and a nested, prefixed alternative: every choice of the call is
    in the key (the blind round of the configurable models served one choice's answer to
    another)."""
    import hashlib

    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import ConfigurableField

    class Plain(BaseChatModel):
        temperature: float = 0.0
        model_name: str = "m"

        @property
        def _llm_type(self) -> str:
            return "plain"

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:  # fmt: skip
            seen = repr([m.content for m in messages]) + repr((self.temperature, self.model_name))
            text = "ans:" + hashlib.sha256(seen.encode()).hexdigest()[:12]
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    fields = Plain().configurable_fields(temperature=ConfigurableField(id="temp"))
    prefixed = Plain().configurable_alternatives(
        ConfigurableField(id="which"), default_key="a", prefix_keys=True,
        b=Plain(model_name="b").configurable_fields(temperature=ConfigurableField(id="t")),
    )  # fmt: skip
    cases = [
        (fields, [{}, {"temp": 0.5}, {}, {"temp": 0.9}]),
        (prefixed, [{"which": "b"}, {"which": "b", "t": 0.3}, {"which": "b", "which==b/t": 0.3}]),
    ]
    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as cache:
        for inner, choices in cases:
            model = CachedChatModel(inner=inner, tricache=cache)
            for choice in choices * 2:
                config: Any = {"configurable": choice}
                expected = inner.invoke("hi", config=config).content
                assert model.invoke("hi", config=config).content == expected, choice
