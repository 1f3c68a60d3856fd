"""An answer that reports an error is not replayed after the model recovered, and a TTL the
store cannot take is refused where it is given (issue 38, items 8 and 9).

A provider that answers "temporarily unavailable (HTTP 503) … try again later" with 200 OK
is not an answer to keep for an hour: it serves its own request for ``TtlPolicy.error``
seconds at most (30 by default), on every path, through both frameworks; once the model
recovered, its real answer is what the app gets.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import GenericFakeChatModel
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import PrivateAttr

from langchain_tricache import CachedChatModel, TriCache
from llama_index_tricache import TriCacheLLM
from tricache import Cache, TtlPolicy, entry_options
from tricache.flow import Answer, Reuse, reuse
from tricache.key.options import MAX_TTL_S
from tricache.runtime.steps import run
from tricache.settings import Exact

from conftest import REDIS_URL, SHARED_DATA

pytestmark = pytest.mark.usefixtures("redis_client")

OUTAGES = [
    "Service temporarily unavailable (HTTP 503). Please try again later.",
    "Rate limit exceeded",
    "Error: upstream connect error or disconnect/reset before headers",
    "服务不可用，请稍后再试",
]
# what providers and gateways really answer with 200 OK (the blind round's texts, and more)
PROVIDER_ERRORS = [
    "That model is currently overloaded with other requests. You can retry your request, or "
    "contact us through our help center if the error persists.",
    "You exceeded your current quota, please check your plan and billing details.",
    "The server had an error while processing your request. Sorry about that!",
    '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    '{"error": {"message": "Internal error", "code": 500}}',
    "504 Gateway Time-out",
    "502 Bad Gateway",
    "Too many requests, please slow down.",
    "We're experiencing high demand. Please try again in a few minutes.",
    "The model `gpt-x` does not exist or you do not have access to it.",
    "当前请求量过大，请稍后重试",
    "系统繁忙",
    "网络异常，请检查网络后重试",
]
Q = "What does our premium plan include?"
RECOVERED = "Priority support and 1 TB of storage."


@pytest.fixture
def core(options: dict[str, Any]) -> Iterator[Cache]:
    cache = Cache(**options, semantic=False, exact=Exact(ttl=TtlPolicy(error=0.5)))
    yield cache
    cache.close()


@pytest.mark.parametrize("text", OUTAGES)
def test_the_rule_keeps_error_texts_briefly(text: str) -> None:
    assert reuse(Answer(text)) is Reuse.BRIEFLY
    assert reuse(Answer("I'm sorry, I can't help with that.")) is Reuse.SAME_REQUEST
    # answers that mention errors are answers (one that explains a gateway's error may be
    # taken for one: it is then kept briefly, a lost hit, never a wrong one)
    for answer in ("Python raises a KeyError when a key is missing from a dict.",
                   "An error in the formula gives the wrong total; check the cell reference.",
                   "公式中的错误会导致总数不对，请检查单元格引用。"):  # fmt: skip
        assert reuse(Answer(answer)) is Reuse.LOOK_ALIKES, answer


@pytest.mark.parametrize("text", PROVIDER_ERRORS)
def test_provider_error_texts_are_kept_briefly_too(text: str) -> None:
    assert reuse(Answer(text)) is Reuse.BRIEFLY


def test_real_answers_are_not_taken_for_errors() -> None:
    """Every short answer of the FAQ and dialogue sets (stackfaq, covid_faq, chatterbot in
    English and Chinese, ABCD's agent turns) is kept as an answer, not briefly as an error."""
    if not (SHARED_DATA / "stackfaq").exists():
        pytest.skip(f"the answer sets are not found under {SHARED_DATA}")
    answers = [a for line in _lines("stackfaq/stackfaq_kb.jsonl") for a in line["answers"]]
    answers += [line["answer"] for line in _lines("covid_faq/covid_faq_en.jsonl")]
    answers += [line["answer"] for line in _lines("chatterbot_corpus/chatterbot_qa_en_zh.jsonl")]
    answers += [turn["text"] for line in _lines("abcd_sample/abcd_sample.jsonl")
                for turn in line["turns"] if turn.get("speaker") == "agent"]  # fmt: skip
    assert len(answers) > 1000
    taken = [a for a in answers if reuse(Answer(a)) is Reuse.BRIEFLY]
    assert taken == []


def _lines(name: str) -> list[dict[str, Any]]:
    with open(SHARED_DATA / name, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def test_the_default_keeps_them_a_minute_at_most(options: dict[str, Any]) -> None:
    cache = Cache(**options, semantic=False)
    try:
        request = cache.request(Q)
        assert cache.update_answer(request, Answer(OUTAGES[0]))
        entry = cache.exact.fetch(cache.key(request))
        assert entry is not None and 0 < entry.ttl <= 60 and not entry.shared
    finally:
        cache.close()


@pytest.mark.parametrize("text", OUTAGES[:2])
def test_langchain_asks_again_once_the_model_recovered(core: Cache, text: str) -> None:
    set_llm_cache(TriCache(cache=core))
    try:
        model = GenericFakeChatModel(messages=iter([text, RECOVERED, "unused"]))
        assert model.invoke(Q).content == text
        assert model.invoke(Q).content == text  # the same request, a moment later
        time.sleep(0.8)
        assert model.invoke(Q).content == RECOVERED
        assert model.invoke(Q).content == RECOVERED  # a real answer is kept
    finally:
        set_llm_cache(None)


def test_cached_chat_model_and_its_streams_too(core: Cache) -> None:
    inner = GenericFakeChatModel(messages=iter([OUTAGES[1], RECOVERED, RECOVERED, "unused"]))
    model = CachedChatModel(inner=inner, tricache=core)
    assert "".join(str(c.content) for c in model.stream(Q)) == OUTAGES[1]
    time.sleep(0.8)
    assert model.invoke(Q).content == RECOVERED
    assert model.invoke(Q).content == RECOVERED  # (served: the fake's next answer is another)

    async def streamed() -> str:
        return "".join([str(c.content) async for c in model.astream(Q)])

    assert asyncio.run(streamed()) == RECOVERED


class _Flaky(CustomLLM):
    """A LlamaIndex model that answers from a list: an outage first, then the real answer."""

    _answers: list[str] = PrivateAttr()

    def __init__(self, answers: list[str]) -> None:
        super().__init__()
        self._answers = answers  # (not a field: a field is part of the model's key)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="flaky")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._answers.pop(0))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_llama_index_asks_again_once_the_model_recovered(core: Cache) -> None:
    llm = TriCacheLLM(_Flaky(answers=[OUTAGES[0], RECOVERED, "unused"]), cache=core)
    assert llm.complete(Q).text == OUTAGES[0]
    assert llm.complete(Q).text == OUTAGES[0]
    time.sleep(0.8)
    assert llm.complete(Q).text == RECOVERED
    assert llm.complete(Q).text == RECOVERED


# item 9: a TTL is checked where it is given ----------------------------------------------------
@pytest.mark.parametrize("bad", [sys.maxsize, MAX_TTL_S + 1, 1e300])
def test_a_ttl_the_store_cannot_keep_is_refused_where_given(core: Cache, bad: Any) -> None:
    request = core.request(Q)
    with pytest.raises(ValueError, match=f"at most {MAX_TTL_S}"):
        core.update(request, RECOVERED, ttl=bad)
    with pytest.raises(ValueError, match=f"at most {MAX_TTL_S}"), entry_options(ttl=bad):
        pass
    with pytest.raises(ValueError, match=f"at most {MAX_TTL_S}"):
        TtlPolicy(default=bad)
    assert core.update(request, RECOVERED, ttl=MAX_TTL_S)  # the bound itself is fine
    assert core.lookup(request) is not None


def test_a_write_redis_refuses_is_not_an_outage(namespace: str) -> None:
    """Redis refuses an expiry past its clock's range ("invalid expire time"): that entry is
    dropped and counted, and the store stays in use (three such writes opened the breaker,
    and every L2 lookup of the process missed)."""
    writer, reader = (Cache(namespace=namespace, redis_url=REDIS_URL, semantic=False)
                      for _ in range(2))  # fmt: skip
    try:
        kept = writer.request("What is a troy ounce?")
        assert writer.update(kept, "31.1 grams.")
        huge = writer.asked(writer.request(Q))
        for _ in range(5):  # past the checks, as a buggy caller of the tier could
            assert run(writer.exact.put_steps(huge, RECOVERED, ttl=float(sys.maxsize))) is None
        counts = writer.stats()["exact"]
        assert counts.get("refused_writes") == 5 and not counts.get("write_errors")
        assert writer.exact.breaker.allow()
        assert writer.lookup(writer.request(Q)) is None
        hit = reader.lookup(reader.request("What is a troy ounce?"))  # L2, another cache
        assert hit is not None and hit.level == "l2"
    finally:
        writer.close()
        reader.close()
