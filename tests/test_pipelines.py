"""Whole LangChain and LlamaIndex pipelines over TriCache, checked against oracle models.

The rule under test: TriCache never serves a wrong answer.  The stand-in models (``oracles``)
answer with a digest of everything they were shown, so an answer is right iff the model would
have given it to the prompt the framework built for that call; every call made through the
frameworks (cache hits included) is checked that way.  Hits are counted separately: the
model's call count does not move.  Every test runs on the embedded defaults and on Redis.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder, PromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import BaseTool, tool
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.callbacks import CallbackManager
from llama_index.core.tools import FunctionTool
from llama_index.core.vector_stores import ExactMatchFilter, MetadataFilters
from pydantic import BaseModel, create_model

from langchain_tricache import CachedChatModel, TriCache, with_tricache
from llama_index_tricache import CachedQueryEngine, TriCacheEmbedding, TriCacheLLM
from tricache import Cache, Learn, Semantic
from tricache.key.asked import ask as asked_of
from tricache.semantic.learning import Label, encode_lookups

from conftest import REDIS_URL
from oracles import ChatOracle, LlamaOracle, LlamaTranscript, TextOracle, lc_answer


@pytest.fixture
def core(
    backend: str, namespace: str, tmp_path: Path, redis_client: redis.Redis
) -> Iterator[Cache]:
    """One cache per test, with its shared level on Redis, or embedded and learning from
    traffic (``Semantic(learn=...)``) whose labels have pushed its threshold to the floor —
    the most it ever serves: every answer must still be the model's."""
    if backend == "redis":
        cache = Cache(redis_url=REDIS_URL, namespace=namespace)
    else:
        learn = Semantic(learn=Learn(explore=0.001))
        cache = Cache(path=tmp_path / "c.sqlite3", namespace=namespace, semantic=learn)
        _teach_the_floor(cache)
    yield cache
    cache.clear()
    cache.close()


def _teach_the_floor(cache: Cache) -> None:
    """Labels (300 candidates from 0.77 to 0.92, 1 in 50 wrong, 40 answers) and 3,000
    lookups for the default tenant's English and Chinese pools."""
    tier = cache.semantic
    assert tier is not None and tier.learning is not None
    tier.learning.rng = random.Random(0)  # (whether a hit is explored: the same every run)
    rng = random.Random(0)
    for question in ("How do I reset my password?", "怎么重置密码"):
        pool = tier.pool(asked_of(cache.request(question), ""))
        tier.learning.add([
            Label(pool, uuid.uuid4().hex, 1.0, rng.uniform(0.77, 0.919), i % 50 != 0, 1.0,
                  f"answer {i % 40}")
            for i in range(300)
        ])  # fmt: skip
        tier.learning.store.add_labels(cache.namespace, [encode_lookups(pool, 3000, {})])  # type: ignore[union-attr]
    tier.learning.drain()
    assert tier.threshold_for(None, pool) <= 0.78


# LangChain: RAG through LCEL -------------------------------------------------------------------
EIFFEL = (
    "The Eiffel Tower in Paris is 330 metres tall. It was designed by Gustave Eiffel's "
    "engineering company and built from wrought iron for the 1889 World's Fair; it is named "
    "after Gustave Eiffel. Visitors may take the stairs to the second floor; only the lift goes "
    "to the top."
)
EIFFEL_300 = EIFFEL.replace("330 metres", "300 metres")
EIFFEL_KOECHLIN = EIFFEL.replace("Gustave Eiffel's engineering company", "Maurice Koechlin")
DRUG_SAFE = "Drug X is safe during pregnancy."
DRUG_UNSAFE = "Drug X is not safe during pregnancy."

LOOK_ALIKES = [  # the same context, questions that look alike and mean something else
    ("How tall is the Eiffel Tower?", "Is the Eiffel Tower tall?"),
    ("Who designed the Eiffel Tower?", "Who painted the Eiffel Tower?"),
    ("Can I take the lift to the top?", "Can I take the stairs to the top?"),
    ("What is it made of?", "What is it named after?"),
]
OTHER_FACTS = [  # the same question over contexts whose facts differ
    ("Is drug X safe during pregnancy?", DRUG_SAFE, DRUG_UNSAFE),
    ("How tall is the Eiffel Tower?", EIFFEL, EIFFEL_300),
    ("Who designed the Eiffel Tower?", EIFFEL, EIFFEL_KOECHLIN),
]
REWRITTEN = ["How tall is the Eiffel Tower?", "Who designed the Eiffel Tower?"]


def full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def harmless_rewrites(question: str) -> list[str]:
    """Lower case, extra spaces, the final "?" dropped, full-width forms."""
    return [
        question.lower(),
        question.replace(" ", "  "),
        question.rstrip("?"),
        full_width(question),
    ]


# What the oracles treat as the same question: only these harmless rewrites.
EQUIVALENTS = {r: q for q in REWRITTEN for r in [q, *harmless_rewrites(q)]}

RAG_PROMPT = (
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
    "context to answer the question. If you don't know the answer, just say that you don't "
    "know. Use three sentences maximum and keep the answer concise.\n"
    "Question: {question} \nContext: {context} \nAnswer:"
)
LAYOUTS: dict[str, Any] = {
    "context-in-system": ChatPromptTemplate.from_messages(
        [
            ("system", "Answer from this context only.\n\nContext: {context}"),
            ("human", "{question}"),
        ]
    ),
    "question-then-context": ChatPromptTemplate.from_messages(
        [("human", "Question: {question}\nContext: {context}\nAnswer:")]
    ),
    "context-then-question": ChatPromptTemplate.from_messages(
        [("human", "Use the context below.\n\n{context}\n\nQuestion: {question}")]
    ),
    "rag-prompt": ChatPromptTemplate.from_messages([("human", RAG_PROMPT)]),
    "rag-prompt-text-llm": PromptTemplate.from_template(RAG_PROMPT),
}


@dataclass
class Rag:
    """``prompt | model | StrOutputParser()`` with the model's cache set to TriCache."""

    prompt: Any
    model: ChatOracle | TextOracle

    @classmethod
    def make(cls, layout: str, core: Cache) -> Rag:
        prompt = LAYOUTS[layout]
        cache = TriCache(cache=core)
        if isinstance(prompt, ChatPromptTemplate):
            return cls(prompt, ChatOracle(cache=cache, equivalents=EQUIVALENTS))
        return cls(prompt, TextOracle(cache=cache, equivalents=EQUIVALENTS))

    @property
    def chain(self) -> Any:
        return self.prompt | self.model | StrOutputParser()

    def expected(self, inputs: dict[str, str]) -> str:
        """The model's answer to the prompt rendered from ``inputs``."""
        rendered = self.prompt.invoke(inputs)
        if isinstance(self.model, ChatOracle):
            return str(self.model.respond(rendered.to_messages()).content)
        return self.model.respond(rendered.to_string())

    def ask(self, question: str, context: str) -> bool:
        """Ask through the chain; assert the answer is the model's; True when it was a hit."""
        inputs = {"question": question, "context": context}
        before = self.model.calls
        answer = self.chain.invoke(inputs)
        if isinstance(self.model, ChatOracle):
            self.model.check()  # every call, with the tier that answered it
        assert answer == self.expected(inputs), (
            f"wrong answer to {question!r} over {context[:50]!r}…: got {answer!r}, "
            f"the model says {self.expected(inputs)!r}"
        )
        return self.model.calls == before


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rag_look_alike_questions_and_other_facts_get_the_models_answer(
    core: Cache, layout: str
) -> None:
    rag = Rag.make(layout, core)
    for first, twin in LOOK_ALIKES:
        rag.ask(first, EIFFEL)
        rag.ask(twin, EIFFEL)
    for question, context, other in OTHER_FACTS:
        rag.ask(question, context)
        rag.ask(question, other)
    for first, twin in LOOK_ALIKES:  # and the first answers are still the right ones
        rag.ask(twin, EIFFEL)
        rag.ask(first, EIFFEL)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rag_repeats_and_harmless_rewrites_are_served_and_right(core: Cache, layout: str) -> None:
    rag = Rag.make(layout, core)
    for question in REWRITTEN:
        assert not rag.ask(question, EIFFEL)
        rag.ask(question, EIFFEL_300)  # the same question over other facts is cached too
    not_served = [
        variant
        for question in REWRITTEN
        for variant in [question, *harmless_rewrites(question)]
        if not rag.ask(variant, EIFFEL)
    ]
    assert not not_served, f"asked again over the same context, not served: {not_served}"


def test_batch_and_abatch_of_mixed_questions(core: Cache) -> None:
    rag = Rag.make("context-in-system", core)
    mixed = [
        ("How tall is the Eiffel Tower?", EIFFEL),
        ("Is the Eiffel Tower tall?", EIFFEL),
        ("How tall is the Eiffel Tower?", EIFFEL_300),
        ("Who designed the Eiffel Tower?", EIFFEL),
        ("Who painted the Eiffel Tower?", EIFFEL),
        ("who designed the eiffel tower?", EIFFEL),
        ("Is drug X safe during pregnancy?", DRUG_SAFE),
        ("Is drug X safe during pregnancy?", DRUG_UNSAFE),
        ("Can I take the lift to the top?", EIFFEL),
        ("Can I take the stairs to the top?", EIFFEL),
        ("How tall is the Eiffel Tower?", EIFFEL),
    ]
    inputs = [{"question": q, "context": c} for q, c in mixed]
    answers = rag.chain.batch(inputs, config={"max_concurrency": 4})
    rag.model.check()
    assert answers == [rag.expected(i) for i in inputs]

    calls = rag.model.calls
    again = list(reversed(inputs))
    answers = asyncio.run(rag.chain.abatch(again, config={"max_concurrency": 4}))
    rag.model.check()
    assert answers == [rag.expected(i) for i in again]
    assert rag.model.calls == calls, "questions asked before were not all served"

    others = [  # look-alikes of cached questions, over cached contexts, in one async batch
        {"question": "What is it named after?", "context": EIFFEL},
        {"question": "What is it made of?", "context": EIFFEL},
        {"question": "Is drug X unsafe during pregnancy?", "context": DRUG_SAFE},
        {"question": "How tall is the Eiffel Tower?", "context": EIFFEL_KOECHLIN},
    ]
    answers = asyncio.run(rag.chain.abatch(others))
    rag.model.check()
    assert answers == [rag.expected(i) for i in others]


# LangChain: conversations ----------------------------------------------------------------------
CHAT_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You are a helpful assistant."),
        MessagesPlaceholder("history"),
        ("human", "{input}"),
    ]
)
SAME_TURNS = [
    "Let's plan a trip to Europe.",
    "What is the capital of France?",
    "And the capital of Italy?",
    "Tell me a fun fact about otters.",
    "Thanks, that is all for now.",
]
FINAL_QUESTIONS = ["Which code word did I give you?", "What was the code word?"]


def test_sessions_that_differ_in_an_early_turn_never_share_answers(
    global_cache: TriCache,
) -> None:
    model = ChatOracle()
    histories: dict[str, InMemoryChatMessageHistory] = {}
    chain = RunnableWithMessageHistory(
        CHAT_PROMPT | model,
        lambda session_id: histories.setdefault(session_id, InMemoryChatMessageHistory()),
        input_messages_key="input",
        history_messages_key="history",
    )
    finals: dict[str, list[str]] = {}
    for word in ("apple", "banana"):
        config = {"configurable": {"session_id": word}}
        for text in [f"My code word is {word}.", *SAME_TURNS, *FINAL_QUESTIONS]:
            history = list(histories[word].messages) if word in histories else []
            reply = chain.invoke({"input": text}, config=config)
            model.check()
            rendered = CHAT_PROMPT.invoke({"history": history, "input": text}).to_messages()
            expected = model.respond(rendered)
            assert lc_answer(reply) == lc_answer(expected), f"session {word}, turn {text!r}"
        finals[word] = [str(m.content) for m in histories[word].messages[-3::2]]
    assert finals["apple"] != finals["banana"]


def stored_history(word: str) -> list[BaseMessage]:
    """A stored conversation (canned replies): the same for every code word but its first turn."""
    history: list[BaseMessage] = [HumanMessage(f"My code word is {word}."), AIMessage("Noted.")]
    for text in SAME_TURNS:
        history += [HumanMessage(text), AIMessage("Sure.")]
    return history


def test_histories_that_differ_only_in_their_first_turn(global_cache: TriCache) -> None:
    model = ChatOracle()
    chain = CHAT_PROMPT | model
    answers: dict[str, list[str]] = {}
    for word in ("apple", "banana"):
        answers[word] = []
        for question in FINAL_QUESTIONS:
            reply = chain.invoke({"history": stored_history(word), "input": question})
            model.check()
            answers[word].append(str(reply.content))
    assert answers["apple"] != answers["banana"]
    for word in ("banana", "apple"):  # asked again, in the other order
        for question, answer in zip(FINAL_QUESTIONS, answers[word], strict=True):
            reply = chain.invoke({"history": stored_history(word), "input": question})
            model.check()
            assert reply.content == answer


def test_message_names_are_part_of_the_prompt(global_cache: TriCache) -> None:
    model = ChatOracle()
    system = SystemMessage("You are a helpful assistant.")
    for _ in range(2):
        for name in ("Alice", "Bob"):
            model.invoke([system, HumanMessage("What is my name?", name=name)])
            model.check()
            model.invoke(
                [
                    system,
                    HumanMessage("Hello, I am writing from the Lyon office.", name=name),
                    AIMessage("Welcome! How can I help?"),
                    HumanMessage("Who wrote the first message?"),
                ]
            )
            model.check()


# LangChain: tools and structured output --------------------------------------------------------
def handbook_tools(edition: str) -> list[BaseTool]:
    """Two tools whose results depend on their arguments and on the handbook's edition."""

    def result(*parts: str) -> str:
        return hashlib.blake2b("|".join(parts).encode(), digest_size=4).hexdigest()

    @tool
    def lookup_fact(topic: str) -> str:
        """Look up a fact about a topic in the company handbook."""
        return f"{topic}: {result(edition, 'fact', topic)}"

    @tool
    def opening_hours(site: str) -> str:
        """The opening hours of a site."""
        return f"{site}: {result(edition, 'hours', site)}"

    return [lookup_fact, opening_hours]


def tool_loop(model: ChatOracle, tools: list[BaseTool], question: str) -> list[BaseMessage]:
    """The loop of LangChain's tool-calling guide: call, run the tools, append the results."""
    bound = model.bind_tools(tools)
    by_name = {t.name: t for t in tools}
    messages: list[BaseMessage] = [
        SystemMessage("Answer with the help of the tools."),
        HumanMessage(question),
    ]
    for _ in range(model.tool_rounds + 2):
        reply = bound.invoke(messages)
        model.check()
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        for call in reply.tool_calls:
            messages.append(by_name[call["name"]].invoke(call))
    raise AssertionError(f"the tool loop did not end: {messages}")


def tool_results(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


def test_tool_loop_answers_are_the_models_for_every_round(core: Cache) -> None:
    model = ChatOracle(cache=TriCache(cache=core))
    tools = handbook_tools("2024")
    first = tool_loop(model, tools, "When can I visit the Lyon office?")
    assert sum(isinstance(m, AIMessage) for m in first) == 3  # two tool rounds, then the answer
    other = tool_loop(model, tools, "When can I visit the Paris office?")
    assert tool_results(first) != tool_results(other)
    assert first[-1].content != other[-1].content
    calls = model.calls
    again = tool_loop(model, tools, "When can I visit the Lyon office?")
    assert model.calls == calls, "a repeated tool loop was not served from the cache"
    assert again[-1].content == first[-1].content
    # The handbook changed: the same question, the same tool calls, other tool results.
    changed = tool_loop(model, handbook_tools("2025"), "When can I visit the Lyon office?")
    assert tool_results(changed) != tool_results(first)
    assert changed[-1].content != first[-1].content


class Movie(BaseModel):
    """A movie."""

    title: str
    year: int


class Book(BaseModel):
    """A book."""

    title: str
    year: int


# Two schemas of one name (as two versions of an app would have): only their fields differ.
SummaryV1 = create_model("Summary", __doc__="A summary.", text=(str, ...))
SummaryV2 = create_model("Summary", __doc__="A summary.", text=(str, ...), stars=(int, ...))


def test_structured_output_schemas_never_share_answers(core: Cache) -> None:
    model = ChatOracle(cache=TriCache(cache=core))
    outputs: dict[str, Any] = {}
    for method in ("function_calling", "json_schema"):
        for schema in (Movie, Book, SummaryV1, SummaryV2):
            out = model.with_structured_output(schema, method=method).invoke("Tell me about Dune.")
            (call,) = model.check()
            assert call.expected is not None
            assert isinstance(out, schema)
            assert out.model_dump() == call.expected.tool_calls[0]["args"]
            outputs[f"{method}:{schema.__name__}:{len(schema.model_fields)}"] = out.model_dump()
    assert outputs["function_calling:Movie:2"] != outputs["function_calling:Book:2"]
    assert outputs["function_calling:Summary:1"] != outputs["function_calling:Summary:2"]


# LangChain: chains on one cache ----------------------------------------------------------------
def test_two_chains_without_names_on_one_cache(core: Cache) -> None:
    model = ChatOracle()
    prompt_a = ChatPromptTemplate.from_messages(
        [("system", "Answer in French."), ("human", "{question}")]
    )
    prompt_b = ChatPromptTemplate.from_messages(
        [("system", "Answer in German."), ("human", "{question}")]
    )
    chain_a = with_tricache(prompt_a | model, core)
    chain_b = with_tricache(prompt_b | model, core)
    inputs = {"question": "What is the capital of Peru?"}
    for chain, prompt in [(chain_a, prompt_a), (chain_b, prompt_b), (chain_a, prompt_a)]:
        out = chain.invoke(inputs)
        expected = model.respond(prompt.invoke(inputs).to_messages())
        assert lc_answer(out) == lc_answer(expected), "another chain's output was served"


def test_the_same_input_with_another_chat_history_on_one_cache(core: Cache) -> None:
    model = ChatOracle()
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You are a helpful assistant."),
            MessagesPlaceholder("chat_history"),
            ("human", "{input}"),
        ]
    )
    chain = with_tricache(prompt | model | StrOutputParser(), core)
    question = "What is the main language spoken in that city?"
    for city in ("Lyon", "Oslo", "Lyon"):
        inputs = {
            "input": question,
            "chat_history": [HumanMessage(f"I live in {city}."), AIMessage("Nice city!")],
        }
        expected = model.respond(prompt.invoke(inputs).to_messages()).content
        assert chain.invoke(inputs) == expected, f"another conversation's output ({city})"


def test_wrapped_models_with_other_settings_on_one_cache(core: Cache) -> None:
    large = ChatOracle(model_name="oracle-large")
    small = ChatOracle(model_name="oracle-small")
    warm = ChatOracle(model_name="oracle-large", temperature=0.9)
    question = [HumanMessage("Summarize the plot of Hamlet in one line.")]
    for model in (large, small, warm, large):
        reply = CachedChatModel(inner=model.with_retry(), tricache=core).invoke(question)
        tier = reply.response_metadata["tricache"]["tier"]
        assert lc_answer(reply) == lc_answer(model.respond(question)), (
            f"{model.model_name} (temperature {model.temperature}) got another model's "
            f"answer (tier {tier!r})"
        )


# LangChain: code, math and case-sensitive prompts ----------------------------------------------
PYTHON_A = "What does this print?\n```python\nfor i in range(3):\n    if i:\n        print(i)\nprint('done')\n```"  # noqa: E501
PYTHON_B = "What does this print?\n```python\nfor i in range(3):\n    if i:\n        print(i)\n    print('done')\n```"  # noqa: E501
DIFFERENT_PROMPTS = [
    ("What does `ls -R` do?", "What does `ls -r` do?"),
    ("What is 5!", "What is 5?"),
    ("What is 10³?", "What is 103?"),
    (r"What does the regex `\W` match?", r"What does the regex `\w` match?"),
    (PYTHON_A, PYTHON_B),
    (
        "Please Polish the following sentence: 'The meeting is at noon.'",
        "Please polish the following sentence: 'The meeting is at noon.'",
    ),
    ("What does Maße mean in German?", "What does Masse mean in German?"),
    (
        "What does the emoji 👨\u200d👩\u200d👧 show?",
        "What does the emoji 👨👩👧 show?",
    ),
    (
        "Summarize the log entries between 10:00:00 and 10:00:30.",
        "Summarize the log entries between 11:00:00 and 11:00:30.",
    ),
]


PAIR_IDS = [
    "ls-R/ls-r",
    "5!/5?",
    "10^3/103",
    "W/w",
    "indentation",
    "Polish/polish",
    "eszett/ss",
    "emoji-zwj",
    "10h/11h",
]


@pytest.mark.parametrize("first, second", DIFFERENT_PROMPTS, ids=PAIR_IDS)
def test_code_math_and_case_sensitive_prompts_never_share(
    core: Cache, first: str, second: str
) -> None:
    model = ChatOracle(cache=TriCache(cache=core))
    system = SystemMessage("You are a precise technical assistant.")
    answers = []
    for text in (first, second, first, second):
        answers.append(model.invoke([system, HumanMessage(text)]).content)
        model.check()
    assert answers[0] != answers[1]


# LangChain: a served answer is the caller's to change ------------------------------------------
def test_changing_a_served_message_or_chain_output_does_not_change_the_cache(core: Cache) -> None:
    model = ChatOracle(cache=TriCache(cache=core))
    inner = ChatOracle(model_name="oracle-wrapped")
    wrapped = CachedChatModel(inner=inner, tricache=core)
    bound = model.bind_tools(handbook_tools("2024"))
    for oracle, ask in (
        (model, lambda: bound.invoke("Look up the opening hours of the Louvre.")),
        (model, lambda: model.invoke("What is aliasing in caches?")),
        (inner, lambda: wrapped.invoke("What is aliasing in caches?")),
    ):
        first = ask()
        expected = copy.deepcopy(lc_answer(first))
        calls = oracle.calls
        for _ in range(3):
            for message in (first, ask()):  # the model's answer, then a served one
                message.content = "tampered"
                message.additional_kwargs["oracle"]["digest"] = "tampered"
                message.additional_kwargs["tampered"] = True
                for call in message.tool_calls:
                    call["args"]["tampered"] = True
                    call["name"] = "tampered"
            assert lc_answer(ask()) == expected
        assert oracle.calls == calls, "the repeats were not served from the cache"
    model.check()
    inner.check()

    questions: list[str] = []

    def rag(inputs: dict[str, str]) -> dict[str, Any]:
        questions.append(inputs["question"])
        answer = model.invoke(inputs["question"]).content
        return {"answer": answer, "sources": ["handbook#3"], "meta": {"pages": [1, 2]}}

    chain = with_tricache(RunnableLambda(rag), core, name="rag-dict")
    question = {"question": "How long do refunds take?"}
    first_output = chain.invoke(question)
    expected_output = copy.deepcopy(first_output)
    for output in (first_output, chain.invoke(question)):
        output["answer"] = "tampered"
        output["sources"].append("tampered")
        output["meta"]["pages"].append(99)
    assert chain.invoke(question) == expected_output
    assert questions == ["How long do refunds take?"]


# LlamaIndex ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def embed_model() -> TriCacheEmbedding:
    return TriCacheEmbedding()


@dataclass
class Llama:
    transcript: LlamaTranscript
    oracle: LlamaOracle  # behind the cache
    reference: LlamaOracle  # the same model, uncached: what the app should get
    llm: TriCacheLLM

    def check(self) -> None:
        self.transcript.check(self.oracle)


@pytest.fixture
def llama(core: Cache, request: pytest.FixtureRequest) -> Iterator[Llama]:
    """The cached LLM's calls are reported to ``Settings.callback_manager`` (where query and
    chat engines send them) and checked against the oracle: a chat model, or a completion
    model when parametrized with ``False``."""
    chat_model = getattr(request, "param", True)
    transcript = LlamaTranscript()
    previous = Settings._callback_manager
    Settings.callback_manager = CallbackManager([transcript])
    oracle = LlamaOracle(chat_model=chat_model)
    reference = LlamaOracle(chat_model=chat_model)
    llm = TriCacheLLM(oracle, cache=core, callback_manager=Settings.callback_manager)
    yield Llama(transcript, oracle, reference, llm)
    Settings._callback_manager = previous


ACCOUNTS = [
    ("Alice's subscription is the Pro plan. It renews on 1 March.", "alice"),
    ("Bob's subscription is the Basic plan. It renews on 9 July.", "bob"),
    ("The Lyon office is open Monday to Friday, 9:00 to 17:00, and closed at weekends.", "all"),
    ("Refunds are paid back to the original card within 14 days of the return.", "all"),
]
ACCOUNT_QUESTIONS = [
    "When does the subscription renew?",
    "Which plan is the subscription on?",
    "When does the subscription renew?",
]


def accounts_index(embed_model: TriCacheEmbedding) -> VectorStoreIndex:
    docs = [Document(text=t, metadata={"user": u}) for t, u in ACCOUNTS]
    return VectorStoreIndex.from_documents(docs, embed_model=embed_model)


def only(user: str) -> MetadataFilters:
    return MetadataFilters(filters=[ExactMatchFilter(key="user", value=user)])


def assert_same_response(got: Any, want: Any, what: str) -> None:
    tier = (got.metadata or {}).get("tricache")
    assert str(got) == str(want), f"{what}: got {str(got)!r}, expected {str(want)!r} ({tier})"
    sources = [(n.node.node_id, n.node.get_content()) for n in got.source_nodes]
    expected = [(n.node.node_id, n.node.get_content()) for n in want.source_nodes]
    assert sources == expected, f"{what}: other source nodes ({tier})"


ENGINES: dict[str, dict[str, Any]] = {
    "alice": {"filters": only("alice"), "similarity_top_k": 1},
    "bob": {"filters": only("bob"), "similarity_top_k": 1},
    "top-1": {"similarity_top_k": 1},
    "top-3": {"similarity_top_k": 3},
}


@pytest.mark.parametrize("llama", [True, False], ids=["chat", "complete"], indirect=True)
def test_query_engines_with_other_filters_get_their_own_answers(
    llama: Llama, embed_model: TriCacheEmbedding
) -> None:
    index = accounts_index(embed_model)
    cached = {k: index.as_query_engine(llm=llama.llm, **kw) for k, kw in ENGINES.items()}
    truth = {k: index.as_query_engine(llm=llama.reference, **kw) for k, kw in ENGINES.items()}
    for question in ACCOUNT_QUESTIONS:
        for name in ENGINES:
            got = cached[name].query(question)
            llama.check()
            assert_same_response(got, truth[name].query(question), f"{name}: {question}")

    previous = Settings._llm
    Settings.llm = llama.llm  # the same through Settings.llm
    try:
        for name in ("bob", "alice"):
            engine = index.as_query_engine(**ENGINES[name])
            for question in ACCOUNT_QUESTIONS:
                got = engine.query(question)
                llama.check()
                want = truth[name].query(question)
                assert_same_response(got, want, f"Settings.llm, {name}: {question}")
    finally:
        Settings._llm = previous


def test_cached_query_engines_with_other_filters_or_top_k_on_one_cache(
    llama: Llama, core: Cache, embed_model: TriCacheEmbedding
) -> None:
    index = accounts_index(embed_model)
    cached = {
        k: CachedQueryEngine(index.as_query_engine(llm=llama.llm, **kw), core, index=index)
        for k, kw in ENGINES.items()
    }
    truth = {k: index.as_query_engine(llm=llama.reference, **kw) for k, kw in ENGINES.items()}
    for question in ACCOUNT_QUESTIONS:
        for name in ENGINES:
            got = cached[name].query(question)
            assert_same_response(got, truth[name].query(question), f"{name}: {question}")


LYON = [
    LlamaMessage(role="user", content="Tell me about the Lyon office."),
    LlamaMessage(role="assistant", content="It is our office in France."),
]
REFUNDS = [
    LlamaMessage(role="user", content="Tell me about refunds."),
    LlamaMessage(role="assistant", content="They go back to the original card."),
]
FOLLOW_UPS = [
    (LYON, "Is it open on Saturday?"),
    (LYON, "Is it open on Monday?"),
    (LYON, "When does it close?"),
    (REFUNDS, "When does it close?"),
    (REFUNDS, "How long does it take?"),
    (LYON, "How long does it take?"),
    (LYON, "Is it open on Saturday?"),
]


@pytest.mark.parametrize("mode", ["condense_question", "condense_plus_context"])
def test_chat_engines_answer_each_follow_up_in_its_conversation(
    llama: Llama, embed_model: TriCacheEmbedding, mode: str
) -> None:
    index = accounts_index(embed_model)
    for history, follow_up in FOLLOW_UPS:
        engine = index.as_chat_engine(chat_mode=mode, llm=llama.llm, similarity_top_k=1)
        got = engine.chat(follow_up, chat_history=list(history))
        llama.check()
        reference = index.as_chat_engine(chat_mode=mode, llm=llama.reference, similarity_top_k=1)
        want = reference.chat(follow_up, chat_history=list(history))
        assert got.response == want.response, f"{follow_up!r} after {history[0].content!r}"


def agent_tool(log: list[str]) -> FunctionTool:
    def lookup_fact(topic: str) -> str:
        """Look up a fact about a topic in the company handbook."""
        log.append(topic)
        return f"{topic}: " + hashlib.blake2b(topic.encode(), digest_size=4).hexdigest()

    return FunctionTool.from_defaults(fn=lookup_fact)


# Noise from LlamaIndex's workflows: step discovery reads every attribute of the agent (pydantic
# warns on its deprecated ones); the ReAct agent asks its context whether it runs.
@pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecatedSince20",
    "ignore::pydantic.warnings.PydanticDeprecatedSince211",
    "ignore:is_running called from within a step",
)
@pytest.mark.parametrize("kind", [FunctionAgent, ReActAgent], ids=["function", "react"])
def test_agents_with_a_tool_get_the_models_answers(llama: Llama, kind: Callable[..., Any]) -> None:
    questions = ["What is the refund window?", "When is the Lyon office open?"]

    async def run(llm: Any, question: str) -> tuple[str, list[str]]:
        log: list[str] = []
        agent = kind(tools=[agent_tool(log)], llm=llm, system_prompt="Use the handbook.")
        output = await agent.run(user_msg=question)
        return str(output.response.content), log

    async def scenario() -> None:
        for question in [*questions, *questions]:
            got = await run(llama.llm, question)
            llama.check()
            want = await run(llama.reference, question)
            assert got == want, f"{question!r}: got {got}, expected {want}"

    asyncio.run(scenario())
    # two calls per question (the tool call, the answer); the repeated runs all served
    assert llama.oracle.calls == 4, "repeated agent runs were not served from the cache"
