"""What a new user meets first with the adapters (issue 24): imports that load only what is
used, ``stats()`` on the objects they hold, and the tier that answered on every answer, through
a chain that ends in a parser too.  Real LangChain and LlamaIndex classes, fake models, real
caches.  Import costs are checked by what gets imported, never by timing (that is measured in
benchmarks)."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import FakeListChatModel, FakeListLLM
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.base.response.schema import Response, StreamingResponse
from llama_index.core.llms import MockLLM

import langchain_tricache
import llama_index_tricache
from langchain_tricache import CachedChatModel, TierCallbackHandler, TriCache, tricache_tiers
from llama_index_tricache import CachedQueryEngine, TriCacheEmbedding, TriCacheLLM
from tricache import Cache

ROOT = Path(__file__).resolve().parents[1]

# What an import must not load: langchain-core's tracers (event stream, LangSmith run trees),
# and in the core the heavy optional engines, loaded only where a feature needs them.
LANGCHAIN_HEAVY = ["langchain_core.tracers.event_stream", "langsmith.run_trees"]
CORE_HEAVY = ["jieba", "spacy", "qdrant_client", "redis", "numpy"]  # numpy: with the models


def imported(code: str, modules: list[str]) -> dict[str, bool]:
    """Which of ``modules`` a fresh interpreter has loaded after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {modules!r}}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# imports ---------------------------------------------------------------------------------------
def test_importing_the_langchain_adapter_loads_nothing_heavy() -> None:
    watched = [*LANGCHAIN_HEAVY, "tricache", "langchain_tricache.chain", "langchain_core"]
    assert not any(imported("import langchain_tricache", watched).values())


def test_the_cache_alone_does_not_load_the_chain_and_chat_model_wrappers() -> None:
    """``set_llm_cache(TriCache())`` needs the cache only: not langchain-core's runnables and
    tracers, which the wrappers (and any chat model) bring."""
    watched = [*LANGCHAIN_HEAVY, *CORE_HEAVY, "langchain_tricache.chain"]
    loaded = imported("from langchain_tricache import TriCache", [*watched, "tricache"])
    assert loaded == {**dict.fromkeys(watched, False), "tricache": True}


def test_importing_the_llama_index_adapter_loads_nothing_heavy() -> None:
    watched = ["llama_index.core", "tricache", "llama_index_tricache.llm"]
    assert not any(imported("import llama_index_tricache", watched).values())
    loaded = imported("from llama_index_tricache import TriCacheLLM", CORE_HEAVY)
    assert not any(v for m, v in loaded.items() if m != "numpy")  # (LlamaIndex brings numpy)


def test_importing_the_core_loads_no_optional_engine() -> None:
    assert not any(imported("import tricache", CORE_HEAVY).values())


@pytest.mark.parametrize("package", [langchain_tricache, llama_index_tricache])
def test_every_exported_name_imports_and_nothing_else_does(package: Any) -> None:
    for name in package.__all__:
        value = getattr(package, name)
        assert value is not None and name in dir(package)
        exec(f"from {package.__name__} import {name} as imported_name", {})
        if isinstance(value, type):  # classes keep their home (what a reference resolves to)
            home = importlib.import_module(value.__module__)
            assert getattr(home, value.__qualname__) is value
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {package.__name__} import no_such_name", {})


@pytest.mark.parametrize(
    ("blocked", "package", "extra"),
    [
        ("langchain_core", "langchain_tricache", "tricache[langchain]"),
        ("llama_index.core", "llama_index_tricache", "tricache[llama-index]"),
        ("llama_index", "llama_index_tricache", "tricache[llama-index]"),
    ],
)
def test_a_missing_framework_is_named_at_import(blocked: str, package: str, extra: str) -> None:
    code = f"import sys; sys.modules[{blocked!r}] = None\nimport {package}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode != 0
    assert "ImportError" in done.stderr and f"pip install '{extra}'" in done.stderr


# LangChain: stats() and the tier on every answer ------------------------------------------------
@pytest.fixture
def core(tmp_path: Path) -> Iterator[Cache]:
    with Cache(path=tmp_path / "first.sqlite3", namespace="first") as cache:
        yield cache


@pytest.fixture
def global_tricache(tmp_path: Path) -> Iterator[TriCache]:
    cache = TriCache(path=tmp_path / "global.sqlite3", namespace="global")
    set_llm_cache(cache)
    yield cache
    set_llm_cache(None)
    cache.close()


PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You are ACME's helpdesk."), ("human", "{q}")]
)
RESET = "How do I reset my password?"
RESET_AGAIN = "How can I reset my password?"
ANSWER = "Use the forgot-password link."


def chat_model(*answers: str) -> FakeListChatModel:
    return FakeListChatModel(responses=list(answers))


def test_tricache_stats_are_the_core_caches(global_tricache: TriCache) -> None:
    model = chat_model(ANSWER, "NOT CALLED")
    model.invoke(RESET)
    model.invoke(RESET)
    stats = global_tricache.stats()
    assert stats["exact"]["hits_l1"] == 1 and stats["exact"]["writes"] == 1
    assert stats["store"]["l2"] == "sqlite"
    assert stats.keys() == global_tricache.tricache.stats().keys()


def test_set_llm_cache_tags_chat_answers_with_their_tier(global_tricache: TriCache) -> None:
    model = chat_model(ANSWER, "NOT CALLED")
    fresh = model.invoke(RESET)
    assert "tricache" not in fresh.response_metadata  # the model answered
    exact = model.invoke(RESET)
    assert exact.content == ANSWER
    assert exact.response_metadata["tricache"]["tier"] == "exact"
    assert exact.response_metadata["tricache"]["score"] is None
    similar = model.invoke(RESET_AGAIN)
    meta = similar.response_metadata["tricache"]
    assert similar.content == ANSWER and meta["tier"] == "semantic"
    assert meta["score"] > 0.9 and meta["entry_id"] and meta["matched"] == RESET


def test_cached_chat_model_tags_every_answer_and_has_stats(core: Cache) -> None:
    model = CachedChatModel(inner=chat_model(ANSWER, "NOT CALLED"), tricache=core)
    assert model.invoke(RESET).response_metadata["tricache"] == {"tier": "llm"}
    assert model.invoke(RESET).response_metadata["tricache"]["tier"] == "exact"
    similar = model.invoke(RESET_AGAIN).response_metadata["tricache"]
    assert similar["tier"] == "semantic" and similar["score"] > 0.9
    assert similar["matched"] == RESET and similar["level"]
    assert model.stats()["exact"]["hits_l1"] == 1


def test_tricache_tiers_sees_through_a_string_parser(global_tricache: TriCache) -> None:
    chain = PROMPT | chat_model(ANSWER, "Four.", "NOT CALLED") | StrOutputParser()
    with tricache_tiers() as tiers:
        assert chain.invoke({"q": RESET}) == ANSWER
        assert tiers.last is None  # the model answered
        assert chain.invoke({"q": RESET}) == ANSWER
        assert tiers.last is not None and tiers.last["tier"] == "exact"
        assert chain.invoke({"q": RESET_AGAIN}) == ANSWER
        assert tiers.last["tier"] == "semantic" and tiers.last["score"] > 0.9
        assert asyncio.run(chain.ainvoke({"q": RESET})) == ANSWER
        assert tiers.last["tier"] == "exact"
        assert chain.batch([{"q": RESET}, {"q": "What is 2 + 2?"}]) == [ANSWER, "Four."]
    assert [r and r["tier"] for r in tiers.records[:4]] == [None, "exact", "semantic", "exact"]
    assert sorted(str(r and r["tier"]) for r in tiers.records[4:]) == ["None", "exact"]
    assert (tiers.hits, tiers.misses) == (4, 2)
    chain.invoke({"q": RESET})  # outside the block: not recorded
    assert len(tiers.records) == 6


def test_tricache_tiers_counts_a_cached_chat_model_once_per_call(core: Cache) -> None:
    """The wrapped model's own run is not a second answer: only the wrapper's is recorded."""
    model = CachedChatModel(inner=chat_model(ANSWER, "NOT CALLED"), tricache=core)
    chain = PROMPT | model | StrOutputParser()
    with tricache_tiers() as tiers:
        assert chain.invoke({"q": RESET}) == ANSWER
        assert tiers.records == [None]
        assert "".join(chain.stream({"q": RESET_AGAIN})) == ANSWER  # a replayed stream
        assert tiers.last is not None and tiers.last["tier"] == "semantic"
        assert asyncio.run(chain.ainvoke({"q": RESET})) == ANSWER
        assert tiers.last["tier"] == "exact"
    assert len(tiers.records) == 3


def test_nested_blocks_and_a_handler_given_in_the_config(global_tricache: TriCache) -> None:
    chain = PROMPT | chat_model(ANSWER, "NOT CALLED") | StrOutputParser()
    with tricache_tiers() as outer:
        chain.invoke({"q": RESET})
        with tricache_tiers() as inner:
            chain.invoke({"q": RESET})
    assert [r and r["tier"] for r in outer.records] == [None, "exact"]
    assert [r and r["tier"] for r in inner.records] == ["exact"]
    handler = TierCallbackHandler()
    chain.invoke({"q": RESET}, config={"callbacks": [handler]})
    assert handler.last is not None and handler.last["tier"] == "exact"
    handler.reset()
    assert handler.records == [] and handler.last is None


def test_plain_llm_hits_carry_the_tier_in_generation_info(global_tricache: TriCache) -> None:
    """LangChain reports no callback for a plain LLM's cache hit: the tier is in what
    ``generate`` returns (and ``tricache_tiers`` sees the miss only)."""
    llm = FakeListLLM(responses=["Paris", "NOT CALLED"])
    chain = PromptTemplate.from_template("What is the capital of {c}?") | llm | StrOutputParser()
    with tricache_tiers() as tiers:
        assert chain.invoke({"c": "France"}) == "Paris"
        assert chain.invoke({"c": "France"}) == "Paris"
    assert tiers.records == [None]
    result = llm.generate(["What is the capital of France?"])
    assert result.generations[0][0].generation_info["tricache"]["tier"] == "exact"


# LlamaIndex: stats() and the tier on every answer -----------------------------------------------
def test_tricache_llm_tags_every_response_and_has_stats(core: Cache) -> None:
    llm = TriCacheLLM(MockLLM(max_tokens=4), cache=core)
    first = llm.complete("What does the cache keep?")
    assert first.additional_kwargs["tricache"] == {"tier": "llm"}
    again = llm.complete("What does the cache keep?")
    assert again.text == first.text and again.additional_kwargs["tricache"]["tier"] == "exact"
    streamed = list(llm.stream_complete("What does the cache keep?"))
    assert streamed[-1].additional_kwargs["tricache"]["tier"] == "exact"
    question = [ChatMessage(role="user", content="How do I reset my password?")]
    assert llm.chat(question).additional_kwargs["tricache"] == {"tier": "llm"}
    reworded = [ChatMessage(role="user", content="How can I reset my password?")]
    similar = llm.chat(reworded).additional_kwargs["tricache"]
    assert similar["tier"] == "semantic" and similar["score"] > 0.9
    assert similar["matched"] == "How do I reset my password?"
    stats = llm.stats()
    assert stats["exact"]["hits_l1"] == 2 and stats.keys() == core.stats().keys()


@pytest.fixture(scope="module")
def embed_model() -> TriCacheEmbedding:
    return TriCacheEmbedding()


DOCS = [
    "To reset your password, open Settings, choose Security and click 'Forgot password'.",
    "Refunds are paid back to the original card within 14 days of the return.",
]


@pytest.mark.parametrize("streaming", [False, True])
def test_query_engine_responses_say_who_answered(
    core: Cache, embed_model: TriCacheEmbedding, streaming: bool
) -> None:
    index = VectorStoreIndex.from_documents([Document(text=t) for t in DOCS],
                                            embed_model=embed_model)  # fmt: skip
    base = index.as_query_engine(llm=MockLLM(max_tokens=6), similarity_top_k=1, streaming=streaming)
    engine = CachedQueryEngine(base, core, index=index)

    def text(response: Any) -> str:
        if isinstance(response, StreamingResponse):
            return "".join(response.response_gen)
        assert isinstance(response, Response)
        return str(response.response)

    first = engine.query("How long do refunds take?")
    assert first.metadata["tricache"] == {"tier": "llm"}
    answer = text(first)  # a stream is stored once drained
    hit = engine.query("How long do refunds take?")
    assert text(hit) == answer and hit.metadata["tricache"]["tier"] == "exact"
    similar = engine.query("How long does a refund take?")
    assert text(similar) == answer
    meta = similar.metadata["tricache"]
    assert meta["tier"] == "semantic" and meta["score"] > 0.9
    assert meta["matched"] == "How long do refunds take?"
    assert engine.stats()["exact"]["hits_l1"] == 1


def test_a_query_engine_hit_does_not_keep_the_miss_tag(
    core: Cache, embed_model: TriCacheEmbedding
) -> None:
    """The tag of the engine's own answer is not stored with it."""
    index = VectorStoreIndex.from_documents([Document(text=DOCS[1])], embed_model=embed_model)
    engine = CachedQueryEngine(index.as_query_engine(llm=MockLLM(max_tokens=3)), core, index=index)
    engine.query("How long do refunds take?")
    hit = engine.query("How long do refunds take?")
    assert hit.metadata["tricache"]["tier"] == "exact"
    node_metadata = {k: v for k, v in hit.metadata.items() if k != "tricache"}
    assert all(isinstance(v, dict) and "tricache" not in v for v in node_metadata.values())
