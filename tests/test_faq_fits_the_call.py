"""A curated answer is served only to a call it fits: a first question asked bare, under no
system prompt or one the FAQ was curated for (``Faq(systems=)``), asking for no tools and no
answer format.  Everything else goes to the model — driven through real LangChain and LlamaIndex
classes with oracle models, whose every answer is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

from langchain_tricache import CachedChatModel, TriCache
from llama_index_tricache import TriCacheLLM
from tricache import Cache, Faq

from oracles import ChatOracle, LlamaOracle

QUESTION = "How do I reset my password?"
CURATED = "Settings > Security > Forgot password."
HELPDESK = "You are ACME's helpdesk."


@tool
def reset_password(user: str) -> str:
    """Start a password reset for a user."""
    return "ok"


class Steps(BaseModel):
    steps: list[str]


@pytest.fixture
def cache(tmp_path: Path) -> Any:
    with Cache(path=tmp_path / "c.sqlite3", warm=True, faq=Faq(systems=(HELPDESK,))) as cache:
        cache.add_faq([(QUESTION, CURATED)])
        yield cache


def _tier(message: Any) -> str | None:
    return message.response_metadata.get("tricache", {}).get("tier")


def test_a_bare_question_and_the_apps_own_system_prompt_get_the_curated_answer(
    cache: Cache,
) -> None:
    model = CachedChatModel(inner=ChatOracle(), tricache=cache)
    for said in (model.invoke(QUESTION),
                 model.invoke([SystemMessage(HELPDESK), HumanMessage(QUESTION)])):  # fmt: skip
        assert said.content == CURATED and _tier(said) == "faq"
    llm = TriCacheLLM(LlamaOracle(), cache=cache)
    response = llm.chat([LlamaMessage(role="user", content=QUESTION)])
    assert response.message.content == CURATED
    assert response.additional_kwargs["tricache"]["tier"] == "faq"


def test_langchain_calls_the_curated_answer_does_not_fit_go_to_the_model(cache: Cache) -> None:
    oracle = ChatOracle()
    model = CachedChatModel(inner=oracle, tricache=cache)
    said = model.bind_tools([reset_password], tool_choice="reset_password").invoke(QUESTION)
    assert said.tool_calls and _tier(said) == "llm"  # tools bound: the model calls one
    structured = model.with_structured_output(Steps, method="function_calling").invoke(QUESTION)
    assert isinstance(structured, Steps)  # (the oracle fills the tool's arguments)
    said = model.bind(response_format={"type": "json_object"}).invoke(QUESTION)
    assert said.content != CURATED and _tier(said) == "llm"
    for system in ("Reply only in French.", "You are ChefBot. Only discuss recipes."):
        said = model.invoke([SystemMessage(system), HumanMessage(QUESTION)])
        assert said.content != CURATED and _tier(said) == "llm"
    for served in oracle.check():  # every answer the model's own
        assert served.message.content == served.expected.content
    assert cache.stats()["faq"]["skipped_context"] >= 2


def test_langchain_global_cache_leaves_calls_with_tools_to_the_model(cache: Cache) -> None:
    oracle = ChatOracle()
    set_llm_cache(TriCache(cache=cache))
    try:
        assert oracle.invoke(QUESTION).content == CURATED  # bare: curated
        said = oracle.bind_tools([reset_password], tool_choice="reset_password").invoke(QUESTION)
        assert said.tool_calls
        said = oracle.bind(response_format={"type": "json_object"}).invoke(QUESTION)
        assert said.content != CURATED
    finally:
        set_llm_cache(None)


def test_llama_index_rag_and_tool_calls_go_to_the_model(cache: Cache) -> None:
    """Inside a query engine the prompt holds retrieved context the curated answer never saw
    ("can no longer be reset online"): the model answers; so does a call with tools."""
    oracle = LlamaOracle()
    llm = TriCacheLLM(oracle, cache=cache)
    index = VectorStoreIndex.from_documents(
        [Document(text="Passwords can no longer be reset online; call 555-0100.")],
        embed_model=MockEmbedding(embed_dim=8),
    )
    engine = index.as_query_engine(llm=llm, embed_model=MockEmbedding(embed_dim=8))
    before = oracle.calls
    answer = str(engine.query(QUESTION))
    assert answer != CURATED and oracle.calls == before + 1

    def start_reset(user: str) -> str:
        """Start a password reset for a user."""
        return "ok"

    response = llm.chat_with_tools([FunctionTool.from_defaults(fn=start_reset)], QUESTION)
    assert response.message.content != CURATED
    assert response.additional_kwargs["tricache"]["tier"] == "llm"


def test_faq_systems_is_checked_when_built() -> None:
    with pytest.raises(TypeError, match="systems"):
        Faq(systems="You are ACME's helpdesk.")  # type: ignore[arg-type]
    assert Faq(systems=[HELPDESK]).systems == (HELPDESK,)  # type: ignore[arg-type]
