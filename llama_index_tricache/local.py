"""``LocalPrefixLLM``: a LlamaIndex LLM over a local KV backend that reuses the system-prompt
prefix KV across chains (``tricache.kv``: transformers or vLLM)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import Field

from tricache.kv import KVResult, PrefixBackend

from .convert import role_of

__all__ = ["LocalPrefixLLM"]


class LocalPrefixLLM(CustomLLM):
    """``LocalPrefixLLM(backend=TransformersBackend(path), system_prompt="...")``.

    A chat model: LlamaIndex sends the system prompt as the first message, which the backend
    keeps as a shared token prefix.  Reuse counts are in ``additional_kwargs["kv"]``.
    """

    backend: Any = Field(description="A tricache.kv backend.")
    max_new_tokens: int = Field(default=256)
    context_window: int = Field(default=4096)
    model_name: str = Field(default="local")

    def __init__(self, backend: PrefixBackend, **kwargs: Any) -> None:
        super().__init__(backend=backend, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "LocalPrefixLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.max_new_tokens,
            is_chat_model=True,
            model_name=self.model_name,
        )

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        result = self.backend.generate(_plain(messages), max_new_tokens=self._limit(kwargs))
        message = ChatMessage(role=MessageRole.ASSISTANT, content=result.text)
        return ChatResponse(message=message, additional_kwargs=_usage(result))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        pieces = self.backend.stream(_plain(messages), max_new_tokens=self._limit(kwargs))

        def gen() -> ChatResponseGen:
            text = ""
            for piece in pieces:
                text += piece
                yield ChatResponse(message=ChatMessage(role="assistant", content=text), delta=piece)

        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = self.chat(self._as_chat(prompt), **kwargs)
        return CompletionResponse(
            text=response.message.content or "", additional_kwargs=response.additional_kwargs
        )

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        def gen() -> CompletionResponseGen:
            for response in self.stream_chat(self._as_chat(prompt), **kwargs):
                yield CompletionResponse(text=response.message.content or "", delta=response.delta)

        return gen()

    def _as_chat(self, prompt: str) -> list[ChatMessage]:
        system = (
            [ChatMessage(role="system", content=self.system_prompt)] if self.system_prompt else []
        )
        return [*system, ChatMessage(role="user", content=prompt)]

    def _limit(self, kwargs: dict[str, Any]) -> int:
        return int(kwargs.get("max_new_tokens") or kwargs.get("max_tokens") or self.max_new_tokens)


def _plain(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": role_of(m), "content": m.content or ""} for m in messages]


def _usage(result: KVResult) -> dict[str, Any]:
    generated = len(result.token_ids)
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": generated,
        "total_tokens": result.prompt_tokens + generated,
        "kv": {"reused_tokens": result.reused_tokens, "ttft_s": result.ttft_s},
    }
