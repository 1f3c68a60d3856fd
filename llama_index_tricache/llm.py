"""``TriCacheLLM``: any LlamaIndex LLM behind TriCache's tiers (sync, async, streaming).

Use it as ``Settings.llm = TriCacheLLM(llm=OpenAI(...))`` or pass it to
``index.as_query_engine(llm=...)``.  Inside a query engine the LLM is called through a prompt
template; the wrapper then keys the call on the user's question (``query_str``) and a digest of
the whole prompt with the question cut out (retrieved context, existing answer, instructions
…), so the semantic tier compares questions, not context blobs.  A template without
``query_str`` (a chat engine's condense step, a structured extraction …) is answered from the
exact tier only, keyed on its whole prompt.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import LLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.prompts import BasePromptTemplate
from pydantic import Field, PrivateAttr, SerializeAsAny

from tricache import Cache, Coalescer
from tricache.verbs import CacheVerbs

from .calls import chat_call, completion_call, templated, tool_llm
from .codec import CHAT, COMPLETION

__all__ = ["TriCacheLLM"]

log = logging.getLogger(__name__)


class TriCacheLLM(CacheVerbs, FunctionCallingLLM):
    """A LlamaIndex LLM that answers from the cache when it can and asks ``llm`` otherwise.

    ``cache`` is a :class:`tricache.Cache` (default: ``Cache(**options)``, embedded), read back
    as ``.tricache``.  Which tier answered is in ``additional_kwargs["tricache"]`` of every
    response, streamed ones included: ``{"tier": "exact" | "semantic" | "faq", "level",
    "score", "entry_id"}`` (and ``"matched"``, the cached question a semantic or FAQ hit
    matched) from the cache, ``{"tier": "llm"}`` when the inner model answered.  ``stats()``
    gives the cache's counters, and the admin verbs of :class:`tricache.Cache` (``invalidate``,
    ``feedback``, ``add_faq`` …) are here too.  Tool calls and cut-off answers are served to
    the very same call only.
    """

    llm: SerializeAsAny[LLM] = Field(description="The LLM asked on a miss.")
    coalesce_timeout: float = Field(default=30.0, description="Wait for a concurrent same call.")
    _tricache: Cache = PrivateAttr()
    _coalescer: Coalescer = PrivateAttr()

    def __init__(self, llm: LLM, cache: Cache | None = None, **options: Any) -> None:
        own = ("coalesce_timeout", "callback_manager")
        fields = {k: options.pop(k) for k in own if k in options}
        super().__init__(
            llm=llm,
            system_prompt=llm.system_prompt,
            messages_to_prompt=llm.messages_to_prompt,
            completion_to_prompt=llm.completion_to_prompt,
            output_parser=llm.output_parser,
            pydantic_program_mode=llm.pydantic_program_mode,
            query_wrapper_prompt=llm.query_wrapper_prompt,
            **fields,
        )
        self._tricache = cache if cache is not None else Cache(**options)
        self._coalescer = self._tricache.coalescer(timeout=self.coalesce_timeout)

    @classmethod
    def class_name(cls) -> str:
        return "TriCacheLLM"

    @property
    def tricache(self) -> Cache:
        """The :class:`tricache.Cache` behind this LLM."""
        return self._tricache

    @property
    def cache(self) -> Cache:
        """Deprecated: ``tricache`` (the same :class:`tricache.Cache`)."""
        warnings.warn(
            "TriCacheLLM.cache is now TriCacheLLM.tricache", DeprecationWarning, stacklevel=2
        )
        return self._tricache

    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    # prompt templates: key on the question ---------------------------------------------------
    def predict(self, prompt: BasePromptTemplate, **prompt_args: Any) -> str:
        with templated(prompt, prompt_args):
            return super().predict(prompt, **prompt_args)

    def stream(self, prompt: BasePromptTemplate, **prompt_args: Any) -> Any:
        with templated(prompt, prompt_args):  # the LLM is called before this returns
            return super().stream(prompt, **prompt_args)

    async def apredict(self, prompt: BasePromptTemplate, **prompt_args: Any) -> str:
        with templated(prompt, prompt_args):
            return await super().apredict(prompt, **prompt_args)

    async def astream(self, prompt: BasePromptTemplate, **prompt_args: Any) -> Any:
        with templated(prompt, prompt_args):
            return await super().astream(prompt, **prompt_args)

    def structured_predict(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        with templated(prompt, prompt_args):
            return super().structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)

    async def astructured_predict(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        with templated(prompt, prompt_args):
            return await super().astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args)

    def _structured_stream_call(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        """(``stream_structured_predict``) The program's generator calls the LLM on its first
        step: each step is taken inside the template's context."""
        stream = super()._structured_stream_call(output_cls, prompt, llm_kwargs, **prompt_args)
        while True:
            with templated(prompt, prompt_args):
                item = next(stream, _DONE)
            if item is _DONE:
                return
            yield item

    async def _structured_astream_call(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        """(``astream_structured_predict``) The program calls the LLM before it returns."""
        with templated(prompt, prompt_args):
            return await super()._structured_astream_call(
                output_cls, prompt, llm_kwargs, **prompt_args
            )

    # chat ----------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        call = chat_call(self.tricache, self.llm, messages, kwargs)
        if call is None:
            return self.llm.chat(messages, **kwargs)
        ask = partial(self.llm.chat, messages, **kwargs)
        return CHAT.said(self.tricache.answer(call.request, ask, CHAT.answer, CHAT.served,
                                               **call.options(self._coalescer)))  # fmt: skip

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        call = chat_call(self.tricache, self.llm, messages, kwargs)
        if call is None:
            return await self.llm.achat(messages, **kwargs)
        ask = partial(self.llm.achat, messages, **kwargs)
        out = await self.tricache.aanswer(call.request, ask, CHAT.answer, CHAT.served,
                                          **call.options(self._coalescer))  # fmt: skip
        return CHAT.said(out)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        # the call now: the template context ends on return
        call = chat_call(self.tricache, self.llm, messages, kwargs)
        if call is None:
            return self.llm.stream_chat(messages, **kwargs)
        ask = partial(self.llm.stream_chat, messages, **kwargs)
        out = self.tricache.stream(
            call.request, ask, CHAT.last, CHAT.replay, **call.options(self._coalescer)
        )
        return CHAT.said_stream(out)

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        call = chat_call(self.tricache, self.llm, messages, kwargs)
        if call is None:
            return await self.llm.astream_chat(messages, **kwargs)
        ask = partial(self.llm.astream_chat, messages, **kwargs)
        options = call.options(self._coalescer)
        return CHAT.asaid_stream(
            await self.tricache.astream(call.request, ask, CHAT.last, CHAT.areplay, **options)
        )

    # completion ------------------------------------------------------------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        call = completion_call(self.tricache, self.llm, prompt, formatted, kwargs)
        if call is None:
            return self.llm.complete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.complete, prompt, formatted=formatted, **kwargs)
        out = self.tricache.answer(call.request, ask, COMPLETION.answer, COMPLETION.served,
                                  **call.options(self._coalescer))  # fmt: skip
        return COMPLETION.said(out)

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        call = completion_call(self.tricache, self.llm, prompt, formatted, kwargs)
        if call is None:
            return await self.llm.acomplete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.acomplete, prompt, formatted=formatted, **kwargs)
        options = call.options(self._coalescer)
        out = await self.tricache.aanswer(call.request, ask, COMPLETION.answer, COMPLETION.served,
                                          **options)  # fmt: skip
        return COMPLETION.said(out)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        call = completion_call(self.tricache, self.llm, prompt, formatted, kwargs)
        if call is None:
            return self.llm.stream_complete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.stream_complete, prompt, formatted=formatted, **kwargs)
        options = call.options(self._coalescer)
        out = self.tricache.stream(call.request, ask, COMPLETION.last, COMPLETION.replay, **options)
        return COMPLETION.said_stream(out)

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        call = completion_call(self.tricache, self.llm, prompt, formatted, kwargs)
        if call is None:
            return await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.astream_complete, prompt, formatted=formatted, **kwargs)
        options = call.options(self._coalescer)
        out = await self.tricache.astream(call.request, ask, COMPLETION.last, COMPLETION.areplay,
                                          **options)  # fmt: skip
        return COMPLETION.asaid_stream(out)

    # tools: the inner model's own handling ---------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return tool_llm(self.llm)._prepare_chat_with_tools_compat(
            tools, user_msg=user_msg, chat_history=chat_history, verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls, tool_required=tool_required,
            **kwargs,
        )  # fmt: skip

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[Any],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        return tool_llm(self.llm)._validate_chat_with_tools_response(
            response, tools, allow_parallel_tool_calls=allow_parallel_tool_calls, **kwargs
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[Any]:
        return tool_llm(self.llm).get_tool_calls_from_response(
            response, error_on_no_tool_call=error_on_no_tool_call, **kwargs
        )


_DONE = object()
