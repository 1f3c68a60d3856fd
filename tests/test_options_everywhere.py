"""Per-call options on every path the docs name (issue 38, items 3 and 4).

``config={"metadata": {"tricache_tags": [...], "tricache_ttl": ...}}`` reaches the cache
whether it is given to a chain, to ``model.invoke``, through ``with_config``, to a plain LLM,
in a batch, from async code, or to ``CachedChatModel``; and a request that declares a tag is
never served an answer that was not written under it (exact, semantic and FAQ tiers, both
frameworks).  Each test asks the oracle model again where a stale answer would have been
served: its call count is the witness.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.globals import set_llm_cache
from langchain_core.prompts import ChatPromptTemplate
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage

from langchain_tricache import CachedChatModel, TriCache, with_tricache
from llama_index_tricache import TriCacheLLM
from tricache import Cache, entry_options

from oracles import ChatOracle, LlamaOracle, TextOracle

pytestmark = pytest.mark.usefixtures("redis_client")

TAGGED = {"metadata": {"tricache_tags": ["prices"]}}
SHORT = {"metadata": {"tricache_ttl": 0.5}}
Q = "What is the spot price of gold?"


@pytest.fixture
def core(options: dict[str, Any]) -> Iterator[Cache]:
    cache = Cache(**options, semantic=False)
    yield cache
    cache.close()


# How each documented path makes one call with a config ----------------------------------------
def _invoke(model: Any, config: dict[str, Any]) -> Any:
    return model.invoke(Q, config=config)


def _with_config(model: Any, config: dict[str, Any]) -> Any:
    return model.with_config(config).invoke(Q)


def _ainvoke(model: Any, config: dict[str, Any]) -> Any:
    return asyncio.run(model.ainvoke(Q, config=config))


def _batch(model: Any, config: dict[str, Any]) -> Any:
    return model.batch([Q, "What is a troy ounce?"], config=config)[0]


def _chain(model: Any, config: dict[str, Any]) -> Any:
    return (ChatPromptTemplate.from_messages([("human", "{q}")]) | model).invoke(
        {"q": Q}, config=config
    )


PATHS: list[Callable[[Any, dict[str, Any]], Any]] = [_invoke, _with_config, _ainvoke, _batch,
                                                     _chain]  # fmt: skip


def _asked(call: Any) -> int:
    """How many questions one call asks the model."""
    return 2 if call is _batch else 1


def _text(out: Any) -> str:
    return str(getattr(out, "content", out))


@pytest.mark.parametrize("call", PATHS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("kind", ["chat", "llm"])
def test_set_llm_cache_honours_tags_and_ttl(
    global_cache: TriCache, core: Cache, call: Any, kind: str
) -> None:
    oracle = ChatOracle() if kind == "chat" else TextOracle()
    first = call(oracle, TAGGED)
    assert _text(call(oracle, TAGGED)) == _text(first)
    calls = oracle.calls
    assert [e.tags for e in core.entries() if Q in e.question] == [("prices",)]
    core.invalidate("prices")
    assert _text(call(oracle, TAGGED)) == _text(first)  # the model's answer, asked again
    assert oracle.calls == calls + _asked(call), "the invalidated answer was served"

    core.clear()
    call(oracle, SHORT)
    calls = oracle.calls
    call(oracle, SHORT)
    assert oracle.calls == calls  # served while it lives
    time.sleep(0.9)
    call(oracle, SHORT)
    assert oracle.calls == calls + _asked(call), "tricache_ttl was ignored"


@pytest.mark.parametrize("call", PATHS, ids=lambda f: f.__name__.strip("_"))
def test_cached_chat_model_honours_tags_and_ttl(core: Cache, call: Any) -> None:
    oracle = ChatOracle()
    model = CachedChatModel(inner=oracle, tricache=core)
    first = call(model, TAGGED)
    calls = oracle.calls
    assert [e.tags for e in core.entries() if Q in e.question] == [("prices",)]
    core.invalidate("prices")
    assert _text(call(model, TAGGED)) == _text(first)
    assert oracle.calls == calls + _asked(call), "the invalidated answer was served"

    core.clear()
    call(model, SHORT)
    calls = oracle.calls
    call(model, SHORT)
    assert oracle.calls == calls
    time.sleep(0.9)
    call(model, SHORT)
    assert oracle.calls == calls + _asked(call), "tricache_ttl was ignored"


def test_cached_chat_model_streams_honour_them(core: Cache) -> None:
    oracle = ChatOracle()
    model = CachedChatModel(inner=oracle, tricache=core)
    text = "".join(str(c.content) for c in model.stream(Q, config=TAGGED))
    assert [e.tags for e in core.entries() if Q in e.question] == [("prices",)]
    core.invalidate("prices")
    calls = oracle.calls
    again = asyncio.run(_collect(model.astream(Q, config=TAGGED)))
    assert again == text and oracle.calls == calls + 1


async def _collect(chunks: Any) -> str:
    return "".join([str(c.content) async for c in chunks])


def test_a_bad_option_on_a_plain_call_is_an_error(global_cache: TriCache) -> None:
    for model in (
        ChatOracle(),
        TextOracle(),
        CachedChatModel(inner=ChatOracle(), tricache=global_cache.tricache),
    ):
        with pytest.raises(ValueError, match="ttl must be a positive number"):
            model.invoke(Q, config={"metadata": {"tricache_ttl": -1}})
        with pytest.raises(TypeError, match="one string"):
            model.invoke(Q, config={"metadata": {"tricache_tags": "prices"}})


def test_options_do_not_leak_into_the_next_call(global_cache: TriCache, core: Cache) -> None:
    oracle = ChatOracle()
    oracle.invoke(Q, config=TAGGED)
    oracle.invoke("What is a troy ounce?")  # no options: none from the call before
    tags = {e.question: e.tags for e in core.entries()}
    assert tags == {Q: ("prices",), "What is a troy ounce?": ()}


# Item 4: a tagged request is served only what was written under its tags -----------------------
def test_an_untagged_answer_is_not_served_to_a_tagged_request(
    global_cache: TriCache, core: Cache
) -> None:
    oracle = ChatOracle()
    oracle.invoke(Q)  # cached before the app tagged its calls
    oracle.invoke(Q, config=TAGGED)  # not served the untagged answer: asked, stored tagged
    assert oracle.calls == 2
    oracle.invoke(Q, config=TAGGED)
    assert oracle.calls == 2  # its own, tagged answer serves it
    core.invalidate("prices")
    oracle.invoke(Q, config=TAGGED)
    assert oracle.calls == 3, "an answer the invalidation could not reach was served"
    oracle.check()


def test_the_core_rule_holds_on_every_tier(tmp_path: Path, options: dict[str, Any]) -> None:
    cache = Cache(**options, warm=True)
    try:
        if cache.semantic is None:
            pytest.skip("the semantic tier did not open")
        plain = cache.request("How do I reset my password?")
        assert cache.update(plain, "Open Settings, then Security.")
        tagged = cache.request("How do I reset my password?", tags=["accounts"])
        assert cache.lookup(tagged) is None  # exact: written under no tag
        paraphrase = cache.request("how can i reset my password", tags=["accounts"])
        assert cache.lookup(paraphrase) is None  # semantic: the same
        assert cache.stats()["semantic"].get("undeclared_tags", 0) >= 1
        assert cache.lookup(cache.request("how can i reset my password")) is not None
        cache.add_faq([("How do I close my account?", "Write to support.")])
        with entry_options(tags=["accounts"]):
            asked = cache.request("How do I close my account?")
        assert cache.lookup(asked) is None  # a curated answer declares no tag
        assert cache.lookup(cache.request("How do I close my account?")) is not None
    finally:
        cache.close()


def test_llama_index_tags_are_a_dependency_too(core: Cache) -> None:
    oracle = LlamaOracle()
    llm = TriCacheLLM(oracle, cache=core)
    ask = [LlamaMessage(role="user", content=Q)]
    first = llm.chat(ask)  # untagged
    again = llm.chat(ask, tricache_tags=["prices"])
    assert oracle.calls == 2 and again.message.content == first.message.content
    core.invalidate("prices")
    llm.chat(ask, tricache_tags=["prices"])
    assert oracle.calls == 3


class _Counting(BaseCallbackHandler):
    """The app's own handler: what it sees must not change because a cache is there."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        self.seen["start"] += 1

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.seen["start"] += 1

    def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        self.seen["end"] += 1


@pytest.mark.parametrize("model", [TextOracle, ChatOracle], ids=["llm", "chat"])
def test_the_apps_callbacks_see_what_they_see_without_the_cache(core: Cache, model: Any) -> None:
    """The app's handler sees the same runs start and end as under LangChain's own cache,
    sync and async, streamed, hit or miss (a handler of the cache's own, added to every run,
    once made LangChain's async manager skip the app's on_llm_start for plain LLMs)."""
    seen = []
    for cache in (InMemoryCache(), TriCache(cache=core)):
        set_llm_cache(cache)
        oracle, counting = model(), _Counting()
        config: Any = {"callbacks": [counting], **TAGGED}
        for _ in range(2):  # each a miss, then a hit
            oracle.invoke("What is gold?", config=config)
            asyncio.run(oracle.ainvoke("What is silver?", config=config))
            asyncio.run(_drain(oracle.astream("What is copper?", config=config)))
            list(oracle.stream("What is zinc?", config=config))
        seen.append(dict(counting.seen))
    set_llm_cache(None)
    assert seen[1] == seen[0] and seen[0]["start"] == seen[0]["end"] > 0


async def _drain(chunks: Any) -> None:
    async for _ in chunks:
        pass


def test_a_cached_chains_tags_reach_the_answers_cached_inside_it(
    global_cache: TriCache, core: Cache
) -> None:
    """``with_tricache(chain, tags=[...])`` over a chain whose model uses the global cache: the
    model's answer is written under the chain's tags too, so ``invalidate`` reaches it (the
    chain's own output went, and the re-run chain was served the model's untagged answer)."""
    oracle = ChatOracle()
    chain = with_tricache(ChatPromptTemplate.from_messages([("human", "{q}")]) | oracle, core,
                          name="prices", fingerprint="v1", tags=["prices"])  # fmt: skip
    chain.invoke({"q": Q})
    assert {e.tags for e in core.entries()} == {("prices",)}  # the chain's and the model's
    chain.invoke({"q": Q})
    assert oracle.calls == 1
    core.invalidate("prices")
    chain.invoke({"q": Q})
    assert oracle.calls == 2, "the model's answer cached inside the chain was served"
