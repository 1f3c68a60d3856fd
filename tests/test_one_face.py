"""One face per framework (issue #33): what ``Cache`` can do, the LangChain and LlamaIndex
objects can do, and ``with_tricache`` takes either (it raised a pydantic ValidationError for a
``TriCache``)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from llama_index.core.llms import MockLLM

from langchain_tricache import CachedChatModel, TriCache, with_tricache
from llama_index_tricache import TriCacheLLM
from tricache import Cache
from tricache.admin import Admin
from tricache.verbs import CacheVerbs

VERBS = [n for n, f in inspect.getmembers(CacheVerbs, inspect.isfunction) if not n.startswith("_")]


def test_every_verb_is_the_admin_modules() -> None:
    """Each verb a framework object (and ``Cache``) offers is ``admin.Admin``'s, with its
    parameters: the CLI, the review page and the frameworks call the same code."""
    assert {"invalidate", "bump_kb_version", "feedback", "add_faq", "stats", "clear"} <= set(VERBS)
    for name in VERBS:
        mine = inspect.signature(getattr(CacheVerbs, name))
        theirs = inspect.signature(getattr(Admin, name))
        assert list(mine.parameters) == list(theirs.parameters), name
        assert getattr(Cache, name) is getattr(CacheVerbs, name), name


@pytest.mark.parametrize("kind", ["TriCache", "CachedChatModel", "TriCacheLLM", "with_tricache"])
def test_the_framework_objects_reach_every_verb(kind: str, tmp_path: Path) -> None:
    core = Cache(path=tmp_path / "c.sqlite3", semantic=False)
    inner = GenericFakeChatModel(messages=iter([AIMessage("x")]))
    face = {
        "TriCache": lambda: TriCache(cache=core),
        "CachedChatModel": lambda: CachedChatModel(inner=inner, tricache=core),
        "TriCacheLLM": lambda: TriCacheLLM(MockLLM(), cache=core),
        "with_tricache": lambda: with_tricache(RunnableLambda(str.upper), core, fingerprint="v1"),
    }[kind]()
    for name in VERBS:
        assert callable(getattr(face, name)), name
    assert face.add_faq([("Do you ship abroad?", "Yes.")]) == 1
    assert [e.question for _, e in face.faq_entries()] == ["Do you ship abroad?"]
    version = face.invalidate("docs")
    assert face.invalidate("docs") == version + 1  # the same store as the core's
    assert face.bump_kb_version() >= 1
    assert "exact" in face.stats() or "store" in face.stats()
    core.close()


def test_with_tricache_takes_a_cache_or_a_tricache(tmp_path: Path) -> None:
    chain = RunnableLambda(lambda question: f"answer to {question}")  # (pure: its fingerprint
    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as core:  # holds what it reads)
        for cache in (core, TriCache(cache=core)):
            cached = with_tricache(chain, cache, name="qa", fingerprint="v1")
            assert cached.invoke("What is a VPN?") == "answer to What is a VPN?"
        exact = core.stats()["exact"]
        assert exact["writes"] == 1 and exact["hits_l1"] == 1  # the second found the first's
        with pytest.raises(TypeError, match="a Cache or a TriCache"):
            with_tricache(chain, "not a cache", name="qa")  # type: ignore[arg-type]
