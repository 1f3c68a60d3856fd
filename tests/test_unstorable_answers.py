"""A model's answer the store cannot hold (an integer past 64 bits, which MessagePack has no
type for) or could give back only as plain data (a pydantic ``parsed``, a provider's tool call
object, which the app's code reads as objects) is the app's all the same: returned every time,
never stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse
from llama_index.core.llms import CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import BaseModel

from langchain_tricache import CachedChatModel, TriCache
from llama_index_tricache import TriCacheLLM
from tricache import Cache

BIG = 265252859812191058636308480000000  # 30!: past MessagePack's 64-bit integers


class Factorials(BaseChatModel):
    """Calls a tool with a big integer argument; ``calls`` counts what reached it."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "factorials"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.calls += 1
        call = {"name": "check", "args": {"value": BIG}, "id": "c1"}
        message = AIMessage("", tool_calls=[call], response_metadata={"seed": -(2**70)})
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_a_langchain_answer_with_a_big_integer_is_returned_and_not_stored(tmp_path: Path) -> None:
    cache = Cache(path=str(tmp_path / "a.sqlite3"), semantic=False)
    inner = Factorials()
    wrapped = CachedChatModel(inner=inner, tricache=cache)
    global_ = Factorials(cache=TriCache(path=str(tmp_path / "b.sqlite3"), semantic=False))
    for model, counted in ((wrapped, inner), (global_, global_)):
        for _ in range(2):
            answer = model.invoke("Is 30! divisible by 7?")
            assert answer.tool_calls[0]["args"]["value"] == BIG
        assert counted.calls == 2  # both from the model: nothing was stored
    assert cache.metrics.snapshot()["exact"]["unstorable"] == 2
    cache.close()


class Big(CustomLLM):
    """A LlamaIndex LLM whose answers carry a big integer."""

    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="big", is_chat_model=True)

    @llm_chat_callback()
    def chat(self, messages: Any, **kw: Any) -> ChatResponse:
        self.calls += 1
        said = ChatMessage(role="assistant", content="yes", additional_kwargs={"n": BIG})
        return ChatResponse(message=said)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
        raise NotImplementedError


def test_a_llama_index_answer_with_a_big_integer_is_returned_and_not_stored(
    tmp_path: Path,
) -> None:
    cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
    inner = Big()
    llm = TriCacheLLM(inner, cache)
    for _ in range(2):
        said = llm.chat([ChatMessage(role="user", content="Is 30! divisible by 7?")])
        assert said.message.content == "yes" and said.message.additional_kwargs["n"] == BIG
    assert inner.calls == 2
    cache.close()


class City(BaseModel):
    name: str


class Structured(BaseChatModel):
    """Answers with a parsed object beside the text, as OpenAI's structured output does."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "structured"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.calls += 1
        message = AIMessage('{"name": "Paris"}', additional_kwargs={"parsed": City(name="Paris")})
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_an_answer_holding_objects_is_returned_as_objects_and_not_stored(tmp_path: Path) -> None:
    inner = Structured()
    wrapped = CachedChatModel(inner=inner, tricache=Cache(path=str(tmp_path / "a.sqlite3")))
    global_ = Structured(cache=TriCache(path=str(tmp_path / "b.sqlite3"), semantic=False))
    for model, counted in ((wrapped, inner), (global_, global_)):
        for _ in range(2):
            assert model.invoke("Capital of France?").additional_kwargs["parsed"].name == "Paris"
        assert counted.calls == 2
