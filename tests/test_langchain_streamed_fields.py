"""A streamed answer keeps everything the model said: tool calls and other fields, whether the
model streams, answers whole where a stream was asked for, or is replayed from the cache —
checked against the oracle model (its answer is a digest of the whole prompt).  And a
LangChain cache given another core cache never uses requests built for the old one."""

from __future__ import annotations

from collections.abc import Iterator
from functools import reduce
from operator import add
from pathlib import Path
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from langchain_tricache import CachedChatModel, TriCache
from tricache import Cache, Semantic

from oracles import ChatOracle


def weather(city: str) -> str:
    """查询天气 / the weather of a city."""
    return city


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Cache]:
    cache = Cache(
        path=tmp_path / "c.sqlite3", semantic=Semantic(vector_path=tmp_path / "v"), warm=True
    )
    yield cache
    cache.close()


def _whole(chunks: list[Any]) -> AIMessageChunk:
    return reduce(add, (c for c in chunks))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "oracle",
    [
        pytest.param(lambda: ChatOracle(disable_streaming=True), id="disable_streaming"),
        pytest.param(lambda: ChatOracle(disable_streaming="tool_calling"), id="tool_calling"),
        pytest.param(lambda: ChatOracle().with_retry(), id="with_retry"),
    ],
)
def test_a_whole_answer_streamed_keeps_its_tool_calls(core: Cache, oracle: Any) -> None:
    """A model that answers whole where a stream was asked for: the tool call and the model's
    fields reach the app, and the entry stored serves ``invoke`` the same answer."""
    inner = oracle()
    bare = ChatOracle()
    model = CachedChatModel(inner=inner, tricache=core)
    question = "北京明天天气如何？"
    expected = bare.respond([HumanMessage(question)], None, tools=_tools())
    streamed = _whole(list(model.bind_tools([weather]).stream(question)))
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == [
        (c["name"], c["args"]) for c in expected.tool_calls
    ]
    assert streamed.additional_kwargs == expected.additional_kwargs
    plain = "长城有多长？"
    list(model.stream(plain))
    served = model.invoke(plain)
    assert served.response_metadata["tricache"]["tier"] == "exact"
    assert served.additional_kwargs == bare.respond([HumanMessage(plain)]).additional_kwargs


class _Reasoner(BaseChatModel):
    """A streaming model whose first chunk carries a reasoning text (``additional_kwargs``)."""

    @property
    def _llm_type(self) -> str:
        return "reasoner"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        message = AIMessage("答案是42", additional_kwargs={"reasoning_content": "思考过程"})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        first = AIMessageChunk(content="", additional_kwargs={"reasoning_content": "思考过程"})
        yield ChatGenerationChunk(message=first)
        yield ChatGenerationChunk(message=AIMessageChunk(content="答案是42"))


def test_a_replayed_stream_keeps_the_answers_fields(core: Cache) -> None:
    model = CachedChatModel(inner=_Reasoner(), tricache=core)
    first = _whole(list(model.stream("生命的意义是什么？")))
    again = list(model.stream("生命的意义是什么？"))
    assert again[0].response_metadata["tricache"]["tier"] == "exact"
    replayed = _whole(again)
    assert replayed.content == first.content == "答案是42"
    assert (
        replayed.additional_kwargs == first.additional_kwargs == {"reasoning_content": "思考过程"}
    )


def test_a_new_core_cache_is_never_asked_with_the_old_ones_requests(tmp_path: Path) -> None:
    """``TriCache`` keeps the requests of prompts it has seen; an app that gives it another
    ``tricache`` (another tenant, another namespace) gets requests of that cache."""
    shop_a = Cache(path=tmp_path / "c.sqlite3", tenant="shop-a", semantic=False)
    cache = TriCache(cache=shop_a)
    oracle = ChatOracle()
    set_llm_cache(cache)
    try:
        for _ in range(2):
            oracle.invoke("退货运费由谁承担？")
        assert [s.tier for s in oracle.check()] == ["model", "exact"]
        cache.tricache = Cache(path=tmp_path / "c.sqlite3", tenant="shop-b", semantic=False)
        oracle.invoke("退货运费由谁承担？")  # shop-b has no answer of its own yet
        assert [s.tier for s in oracle.check()] == ["model"]
        cache.tricache = Cache(path=tmp_path / "d.sqlite3", namespace="other", semantic=False)
        oracle.invoke("退货运费由谁承担？")  # never a ValueError in the app
        assert [s.tier for s in oracle.check()] == ["model"]
    finally:
        set_llm_cache(None)


def _tools() -> list[dict[str, Any]]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return [convert_to_openai_tool(weather)]
