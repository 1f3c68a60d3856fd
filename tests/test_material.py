"""Text handed over as material (``key/material.py``): a message the model is told to work on
is served only its own answer, as typed; a question keeps its folded key and its look-alikes.

Driven as an app drives it: a LangChain chat model with ``cache=TriCache(...)`` and the
oracle stand-in, whose every served answer must be the one it would give to that prompt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from langchain_tricache import TriCache
from tricache.key.material import hands_over_text, instructs_on_text

from oracles import ChatOracle

# (the instruction, a text, a text that differs in form or wording only)
SYSTEM_TASKS = [
    ("Translate the user's message into French.", "How do I reset my password?",
     "How can I reset my password?"),
    ("Count the words in the user's message.", "Hi, how do I reset my password? Thanks!",
     "How do I reset my password?"),
    ("Repeat the user's message back exactly.", "What's up?", "Whats up?"),
    ("Does the user's message end with a question mark? Answer yes or no.",
     "How do I make pancakes?", "How do I make pancakes"),
    ("Fix the spelling and capitalization of the user's message.",
     "how do i reset my password", "How do I reset my password?"),
    ("Rate how polite the user's message is from 1 to 10.",
     "Could you please tell me how to reset my password? Thanks!", "How do I reset my password?"),
    ("把用户的话翻译成英文。", "天空为什么是蓝色的？", "为什么天空是蓝色的？"),
    ("判断用户的句子是否通顺，只回答是或否。", "我怎么重置密码？", "我怎么密码重置？"),
    ("数一数用户的话有几个字。", "那个，请问怎么重置密码？谢谢哈", "怎么重置密码？"),
    ("用户的话是否以问号结尾？只回答是或否。", "怎么注册微信？", "怎么注册微信"),
    ("You are a copy editor.", "how do i reset my password", "How do I reset my password?"),
    ("You are an echo bot.", "What's up?", "Whats up?"),
    ("Answer with just the number of words.", "Hi, how are you?", "How are you?"),
    ("Answer with the number of words only.", "Um, hi, how do I reset my password? Thanks",
     "How do I reset my password?"),
    ("你是一个复读机。", "那个，请问怎么重置密码？", "怎么重置密码？"),
    ("只回答字数。", "那个，请问怎么重置密码？", "怎么重置密码？"),
]  # fmt: skip
TEMPLATES = [
    ("Is this sentence grammatical?\n{text}", "How do I reset my password?",
     "How I reset my password?"),
    ("Reverse this sentence:\n{text}", "How do I make pancakes?", "How do you make pancakes?"),
    ("Is this question formal?\n{text}", "Hey, how do I reset my password?",
     "How do I reset my password?"),
    ("Translate into French: {text}", "How do I reset my password?",
     "how do I reset my password"),
    ("这句话通顺吗？\n{text}", "我怎么重置密码？", "我怎么密码重置？"),
    ("翻译成英文：\n{text}", "天空为什么是蓝色的？", "为什么天空是蓝色的？"),
    ("Convert to title case: {text}", "how do i reset my password", "How do I reset my password"),
    ("Make it sound like a pirate: {text}", "How do I reset my password?",
     "How can I reset my password?"),
    ("转成全角：{text}", "ABC 123", "ABC123"),
]  # fmt: skip

# Instructions that answer the user: the cache folds and compares their questions as before
ANSWERING_SYSTEMS = [
    "You are a helpful assistant.",
    "You are the helpdesk assistant of ACME Cloud. Answer briefly.",
    "Answer the user's question using only the context below.",
    "Reply to the user's message in a friendly tone.",
    "You are a customer support agent. Be polite and concise.",
    "You are an expert Q&A system that is trusted around the world.\nAlways answer the query "
    "using the provided context information, and not prior knowledge.",
    "你是一个乐于助人的助手。",
    "请用中文简洁地回答用户的问题。",
    "请礼貌地回复用户的消息。",
    "You are a support assistant for Amazon Echo devices.",
    "Keep answers short; limit the number of words.",
    "Always answer in lower case.",
    "You are a helpful assistant for the VS Code editor.",
]
QUESTIONS = [
    "How do I translate a PDF?",
    "How do I count words in Excel?",
    "What is the grammar of Japanese like?",
    "Quick question: how do I reset my password?",
    "Context information is below.\n---\nThe Eiffel Tower is 330 m tall. It was translated...\n"
    "---\nGiven the context information, answer the query.\nQuery: How tall is it?\nAnswer: ",
    "怎么把PDF翻译成中文？",
    "请问怎么统计Excel里的字数？",
    "How do I convert a PDF to Word?",
    "Convert 5 miles to km",
]


@pytest.mark.parametrize(("system", "_a", "_b"), SYSTEM_TASKS)
def test_a_system_prompt_that_works_on_the_users_text_is_recognised(
    system: str, _a: str, _b: str
) -> None:
    assert instructs_on_text(system)


@pytest.mark.parametrize("system", ANSWERING_SYSTEMS)
def test_a_system_prompt_that_answers_the_user_is_not_material(system: str) -> None:
    assert not instructs_on_text(system)


@pytest.mark.parametrize(("template", "text", "_b"), TEMPLATES)
def test_a_template_that_hands_over_a_text_is_recognised(template: str, text: str, _b: str) -> None:
    assert hands_over_text(template.format(text=text))


@pytest.mark.parametrize("question", QUESTIONS)
def test_a_question_is_not_material(question: str) -> None:
    assert not hands_over_text(question)


@pytest.fixture
def model(tmp_path: Path) -> Iterator[ChatOracle]:
    cache = TriCache(path=str(tmp_path / "c.sqlite3"), warm=True)
    yield ChatOracle(cache=cache)
    cache.close()


@pytest.mark.parametrize(("system", "first", "second"), SYSTEM_TASKS)
def test_material_under_a_system_prompt_is_served_only_its_own_answer(
    model: ChatOracle, system: str, first: str, second: str
) -> None:
    model.invoke([SystemMessage(system), HumanMessage(first)])
    model.invoke([SystemMessage(system), HumanMessage(second)])
    again = model.invoke([SystemMessage(system), HumanMessage(first)])
    served = model.check()  # every answer is the oracle's for its own prompt
    assert [s.tier for s in served] == ["model", "model", "exact"]
    assert again.response_metadata["tricache"]["tier"] == "exact"


@pytest.mark.parametrize(("template", "first", "second"), TEMPLATES)
def test_material_in_a_template_is_served_only_its_own_answer(
    model: ChatOracle, template: str, first: str, second: str
) -> None:
    chain = ChatPromptTemplate.from_messages([("human", template)]) | model | StrOutputParser()
    chain.invoke({"text": first})
    chain.invoke({"text": second})
    chain.invoke({"text": first})
    assert [s.tier for s in model.check()] == ["model", "model", "exact"]


def test_questions_under_an_answering_system_prompt_still_share_answers(tmp_path: Path) -> None:
    """The semantic tier still serves a paraphrase, and the exact tier a form variant, under a
    system prompt that answers the user."""
    cache = TriCache(path=str(tmp_path / "c.sqlite3"), warm=True)
    same = "How do I reset my password?"
    model = ChatOracle(cache=cache, equivalents={"how do I reset my password": same,
                                                 "How can I reset my password?": same})  # fmt: skip
    system = SystemMessage("Answer the user's question briefly.")
    model.invoke([system, HumanMessage("How do I reset my password?")])
    model.invoke([system, HumanMessage("how do I reset my password")])
    model.invoke([system, HumanMessage("How can I reset my password?")])
    assert [s.tier for s in model.check()] == ["model", "exact", "semantic"]
    cache.close()
