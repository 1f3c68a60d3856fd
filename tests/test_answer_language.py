"""An answer is in its question's script: the semantic tier and the FAQ never serve a question
asked in one script the answer to a question asked in another ("Docker是什么" / "What is
Docker?", "Что такое Linux?" / "What is Linux?"), however near the multilingual embedder puts
them.  Driven through LangChain with the oracle stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_tricache import TriCache
from tricache import Cache
from tricache.key.script import writing

from oracles import ChatOracle

PAIRS = [
    ("What is Docker?", "Docker是什么？"),
    ("What is machine learning?", "什么是machine learning？"),
    ("什么是Redis？", "What is Redis?"),
    ("What is Linux?", "Что такое Linux?"),
    ("What is SQL?", "SQL是什么"),
    ("How do I install Python?", "Pythonをインストールするには？"),
]


@pytest.mark.parametrize(("stored", "asked"), PAIRS)
def test_a_question_in_another_script_gets_the_models_answer(
    tmp_path: Path, stored: str, asked: str
) -> None:
    cache = TriCache(path=str(tmp_path / "c.sqlite3"), warm=True)
    model = ChatOracle(cache=cache)
    model.invoke(stored)
    model.invoke(asked)
    model.invoke(stored)
    assert [s.tier for s in model.check()] == ["model", "model", "exact"]
    cache.close()


def test_a_paraphrase_in_the_same_script_is_still_served(tmp_path: Path) -> None:
    cache = TriCache(path=str(tmp_path / "c.sqlite3"), warm=True)
    same = "How do I reset my password?"
    model = ChatOracle(cache=cache, equivalents={"How can I reset my password?": same})
    model.invoke(same)
    model.invoke("How can I reset my password?")
    assert [s.tier for s in model.check()] == ["model", "semantic"]
    cache.close()


@pytest.mark.parametrize(("stored", "asked"), PAIRS[:5])
def test_the_faq_answers_only_in_the_script_of_its_curated_forms(
    tmp_path: Path, stored: str, asked: str
) -> None:
    cache = Cache(path=tmp_path / "c.sqlite3", semantic=False, warm=True)
    cache.add_faq([(stored, "The curated answer.")])
    assert cache.lookup(cache.request(stored)) is not None
    assert cache.lookup(cache.request(asked)) is None
    cache.close()


def test_writing_names_the_script() -> None:
    assert [writing(q) for _, q in PAIRS] == ["han", "han", "latin", "cyrillic", "han", "kana"]
