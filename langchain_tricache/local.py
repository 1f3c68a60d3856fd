"""``LocalPrefixChatModel``: a LangChain chat model over a local KV backend that reuses the
system-prompt prefix KV across chains (``tricache.kv``: transformers or vLLM)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

__all__ = ["LocalPrefixChatModel"]

_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


class LocalPrefixChatModel(BaseChatModel):
    """``LocalPrefixChatModel(backend=TransformersBackend(path))``; reuse counts are in
    ``response_metadata["kv"]``, token counts in ``usage_metadata``."""

    backend: Any
    model_name: str = "local"
    max_new_tokens: int = 256

    @property
    def _llm_type(self) -> str:
        return "tricache-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "max_new_tokens": self.max_new_tokens}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result = self.backend.generate(_plain(messages), max_new_tokens=self.max_new_tokens)
        generated = len(result.token_ids)
        message = AIMessage(
            result.text,
            response_metadata={
                "model_name": self.model_name,
                "kv": {"reused_tokens": result.reused_tokens, "ttft_s": result.ttft_s},
            },
            usage_metadata={
                "input_tokens": result.prompt_tokens,
                "output_tokens": generated,
                "total_tokens": result.prompt_tokens + generated,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for piece in self.backend.stream(_plain(messages), max_new_tokens=self.max_new_tokens):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


def _plain(messages: list[BaseMessage]) -> list[dict[str, str]]:
    return [{"role": _ROLES.get(m.type, m.type), "content": m.text} for m in messages]
