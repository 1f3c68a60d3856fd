"""Per-call entry options (issue #33, part 3): a TTL, tags and a category for what one call
caches, given where the call is made — ``Cache.update(ttl=)``, an ``entry_options`` block,
a LangChain run's ``config={"metadata": {"tricache_ttl": ...}}`` or LlamaIndex's
``tricache_ttl=`` keyword — and, given wrong, a clear error rather than a silent default."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage

from langchain_tricache import TriCache, with_tricache
from llama_index_tricache import TriCacheLLM
from tricache import Cache, entry_options

from oracles import ChatOracle, LlamaOracle

pytestmark = pytest.mark.usefixtures("redis_client")


@pytest.fixture
def core(tmp_path: Path, backend: str, options: dict[str, Any]) -> Any:
    cache = Cache(**options, semantic=False)
    yield cache
    cache.close()


def _stored(core: Cache, question: str) -> Any:
    found = [e for e in core.entries() if e.question == question]
    assert len(found) == 1, [e.question for e in core.entries()]
    return found[0]


def test_an_update_lives_as_long_as_it_asks(core: Cache, options: dict[str, Any]) -> None:
    short, long = core.request("What is the spot price of gold?"), core.request("What is gold?")
    assert core.update(short, "2400 USD", ttl=0.5)
    assert core.update(long, "A chemical element.")
    assert core.lookup(short) is not None  # (from L1, which keeps it no longer either)
    time.sleep(0.9)
    assert core.lookup(short) is None
    assert core.lookup(long) is not None
    other = Cache(**options, semantic=False)
    try:  # another process: its L1 is empty, the store let it go too
        assert other.lookup(core.request("What is the spot price of gold?")) is None
        assert other.lookup(core.request("What is gold?")) is not None
    finally:
        other.close()


def test_another_caches_l1_keeps_an_entry_no_longer_than_the_store(
    core: Cache, options: dict[str, Any]
) -> None:
    """Another cache that read the entry from the store late in its life kept it in L1 for a
    whole TTL from that read: served up to a TTL past the store's expiry."""
    assert core.update(core.request("What is the spot price of gold?"), "2400 USD", ttl=3.0)
    written = time.monotonic()
    other = Cache(**options, semantic=False)
    try:
        time.sleep(1.0)
        assert other.lookup(other.request("What is the spot price of gold?")) is not None
        time.sleep(max(0.0, written + 3.6 - time.monotonic()))
        assert other.lookup(other.request("What is the spot price of gold?")) is None
    finally:
        other.close()


def test_a_block_gives_its_calls_a_ttl_tags_and_a_category(core: Cache) -> None:
    with (
        entry_options(ttl=0.5, tags=["pricing"], category="knowledge"),
        entry_options(tags=["gold"]),  # nested: tags add up, the TTL carries on
    ):
        request = core.request("What is the spot price of gold?")
        assert core.update(request, "2400 USD")
    entry = _stored(core, "What is the spot price of gold?")
    assert set(entry.tags) == {"pricing", "gold"} and entry.category == "knowledge"
    core.invalidate("gold")
    tagged = core.request("What is the spot price of gold?", tags=["pricing", "gold"])
    assert core.lookup(tagged) is None
    outside = core.request("What is gold?")
    assert outside.tags == () and outside.category is None  # the block ended


@pytest.mark.parametrize("where", ["here", "in another thread"])
def test_a_block_around_the_write_alone_tags_the_answer(
    core: Cache, options: dict[str, Any], where: str
) -> None:
    """A request made (and looked up) before the block, written inside it: the answer was
    written without the block's tags, so ``invalidate(tag)`` left it served."""
    request = core.request("Which plans include SSO?")
    assert core.lookup(request) is None
    began = core.began(request)

    def write() -> None:
        with entry_options(tags=["pricing"], category="billing"):
            assert core.update(request, "Pro and Enterprise.", began=began)

    if where == "here":
        write()
    else:
        worker = threading.Thread(target=write)
        worker.start()
        worker.join()
    entry = _stored(core, "Which plans include SSO?")
    assert entry.tags == ("pricing",) and entry.category == "billing"
    assert core.invalidate("pricing") == 1
    assert core.lookup(core.request("Which plans include SSO?")) is None
    other = Cache(**options, semantic=False)
    try:  # another process, from the store
        assert other.lookup(other.request("Which plans include SSO?")) is None
    finally:
        other.close()


def test_a_tag_gained_after_a_change_is_not_written(core: Cache) -> None:
    """Its version when the request began is unknown: once anything changed in the namespace
    since, the answer may predate an invalidation of that very tag, and is not stored."""
    request = core.request("Which plans include SSO?")
    assert core.lookup(request) is None
    core.invalidate("pricing")  # while the model was answering
    with entry_options(tags=["pricing"]):
        assert not core.update(request, "Pro and Enterprise (the old price list).")
    assert core.lookup(core.request("Which plans include SSO?")) is None


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "600"], ids=repr)
def test_a_bad_ttl_is_a_clear_error(core: Cache, bad: Any) -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        core.update(core.request("What is gold?"), "A metal.", ttl=bad)
    with pytest.raises(ValueError, match="ttl must be a positive number"), entry_options(ttl=bad):
        pass
    with pytest.raises(TypeError, match="one string"), entry_options(tags="pricing"):  # type: ignore[arg-type]
        pass


def test_blocks_are_per_task(core: Cache) -> None:
    async def ask(tag: str) -> tuple[str, ...]:
        with entry_options(tags=[tag]):
            await asyncio.sleep(0.01)  # the other task's block is open meanwhile
            return core.request(f"What is {tag}?").tags

    async def both() -> list[tuple[str, ...]]:
        return list(await asyncio.gather(ask("copper"), ask("zinc")))

    assert asyncio.run(both()) == [("copper",), ("zinc",)]


# LangChain ------------------------------------------------------------------------------------
def test_langchain_reads_the_options_from_the_run_metadata(core: Cache) -> None:
    oracle = ChatOracle()
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | oracle
    set_llm_cache(TriCache(cache=core))
    try:
        config = {"metadata": {"tricache_ttl": 0.5, "tricache_tags": ["prices"]}}
        first = chain.invoke({"q": "What is the spot price of gold?"}, config=config)
        chain.invoke({"q": "What is a troy ounce?"})  # no options: the policy's TTL
        entry = _stored(core, "What is the spot price of gold?")
        assert entry.tags == ("prices",)
        assert _stored(core, "What is a troy ounce?").tags == ()
        again = chain.invoke({"q": "What is the spot price of gold?"}, config=config)
        assert again.content == first.content and oracle.calls == 2  # served while it lived
        time.sleep(0.9)
        chain.invoke({"q": "What is the spot price of gold?"}, config=config)
        chain.invoke({"q": "What is a troy ounce?"})
        assert oracle.calls == 3  # only the short-lived one was asked again
        oracle.check()
        with pytest.raises(ValueError, match="ttl must be a positive number"):
            chain.invoke({"q": "What is silver?"}, config={"metadata": {"tricache_ttl": -5}})
    finally:
        set_llm_cache(None)


def test_a_cached_chain_reads_them_too(core: Cache) -> None:
    calls: list[str] = []

    def answer(question: str) -> str:
        calls.append(question)
        return f"answer to {question}"

    chain = with_tricache(RunnableLambda(answer), core, name="qa", fingerprint="v1")
    config: Any = {"metadata": {"tricache_ttl": 0.5, "tricache_category": "news"}}
    answer_now = chain.invoke("Who wrote the report on rivers?", config=config)
    assert answer_now == "answer to Who wrote the report on rivers?"
    entry = _stored(core, "Who wrote the report on rivers?")
    assert entry.category == "news"
    chain.invoke("Who wrote the report on rivers?", config=config)
    assert len(calls) == 1
    time.sleep(0.9)
    chain.invoke("Who wrote the report on rivers?", config=config)
    assert len(calls) == 2


# LlamaIndex -----------------------------------------------------------------------------------
def test_llama_index_takes_them_as_keywords(core: Cache) -> None:
    oracle = LlamaOracle()
    llm = TriCacheLLM(oracle, cache=core)
    ask = [LlamaMessage(role="user", content="What is the spot price of gold?")]
    first = llm.chat(ask, tricache_ttl=0.5, tricache_tags=["prices"])
    entry = _stored(core, "What is the spot price of gold?")
    assert entry.tags == ("prices",)
    # the options are the cache's, not the model's: its answer and key are as without them
    assert llm.chat(ask).message.content == first.message.content
    assert oracle.calls == 1
    time.sleep(0.9)
    assert llm.complete("What is a troy ounce?", tricache_ttl=60).text
    llm.chat(ask)
    assert oracle.calls == 3
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        llm.chat(ask, tricache_ttl=0)
