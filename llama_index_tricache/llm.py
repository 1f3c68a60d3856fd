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

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
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

from tricache import Cache, CacheRequest, Coalescer
from tricache.flow import SHAPING_OPTIONS
from tricache.key.conversation import Conversation
from tricache.key.options import entry_options, options_from
from tricache.verbs import CacheVerbs

from .codec import CHAT, COMPLETION
from .convert import (
    chat_turns,
    condenses_a_follow_up,
    llm_key,
    parse_chat,
    templated_conversation,
)

__all__ = ["TriCacheLLM"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Template:
    """Set while a prompt template is answered: its ``query_str`` (``None`` when it has none)."""

    question: str | None


_templated: ContextVar[_Template | None] = ContextVar("tricache_templated", default=None)


@dataclass(frozen=True, slots=True)
class _Call:
    request: CacheRequest
    semantic: bool  # may look-alikes be served (a template's question) or only this prompt
    faq: bool  # may a curated answer (not when the call asks for tools or a format)
    ttl: float | None = None  # the lifetime the call asked for (``tricache_ttl=``)


def _pop_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``entry_options`` a call asks for (``tricache_ttl=``, ``tricache_tags=``,
    ``tricache_category=``), taken out of its keyword arguments."""
    found = options_from(kwargs)
    for name in ("ttl", "tags", "category"):
        kwargs.pop(f"tricache_{name}", None)
    return found


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
        with self._templated(prompt, prompt_args):
            return super().predict(prompt, **prompt_args)

    def stream(self, prompt: BasePromptTemplate, **prompt_args: Any) -> Any:
        with self._templated(prompt, prompt_args):  # the LLM is called before this returns
            return super().stream(prompt, **prompt_args)

    async def apredict(self, prompt: BasePromptTemplate, **prompt_args: Any) -> str:
        with self._templated(prompt, prompt_args):
            return await super().apredict(prompt, **prompt_args)

    async def astream(self, prompt: BasePromptTemplate, **prompt_args: Any) -> Any:
        with self._templated(prompt, prompt_args):
            return await super().astream(prompt, **prompt_args)

    def structured_predict(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        with self._templated(prompt, prompt_args):
            return super().structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)

    async def astructured_predict(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        with self._templated(prompt, prompt_args):
            return await super().astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args)

    def _structured_stream_call(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        """(``stream_structured_predict``) The program's generator calls the LLM on its first
        step: each step is taken inside the template's context."""
        stream = super()._structured_stream_call(output_cls, prompt, llm_kwargs, **prompt_args)
        while True:
            with self._templated(prompt, prompt_args):
                item = next(stream, _DONE)
            if item is _DONE:
                return
            yield item

    async def _structured_astream_call(
        self, output_cls: Any, prompt: Any, llm_kwargs: Any = None, **prompt_args: Any
    ) -> Any:
        """(``astream_structured_predict``) The program calls the LLM before it returns."""
        with self._templated(prompt, prompt_args):
            return await super()._structured_astream_call(
                output_cls, prompt, llm_kwargs, **prompt_args
            )

    @contextlib.contextmanager
    def _templated(self, prompt: Any, args: dict[str, Any]) -> Iterator[None]:
        """Mark the calls made inside as answering ``prompt``: keyed on its ``query_str`` (which
        synthesizers fill in early, with ``partial_format``: it may be in ``prompt.kwargs``)
        and the rest of the prompt; without a ``query_str``, exact only."""
        filled = {**(getattr(prompt, "kwargs", None) or {}), **args}
        question = filled.get("query_str")
        token = _templated.set(_Template(question if isinstance(question, str) else None))
        try:
            yield
        finally:
            _templated.reset(token)

    # chat ----------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        call = self._chat_call(messages, kwargs)
        if call is None:
            return self.llm.chat(messages, **kwargs)
        ask = partial(self.llm.chat, messages, **kwargs)
        return CHAT.said(self.tricache.answer(call.request, ask, CHAT.answer, CHAT.served,
                                               **self._options(call)))  # fmt: skip

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        call = self._chat_call(messages, kwargs)
        if call is None:
            return await self.llm.achat(messages, **kwargs)
        ask = partial(self.llm.achat, messages, **kwargs)
        out = await self.tricache.aanswer(call.request, ask, CHAT.answer, CHAT.served,
                                          **self._options(call))  # fmt: skip
        return CHAT.said(out)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        call = self._chat_call(messages, kwargs)  # now: the template context ends on return
        if call is None:
            return self.llm.stream_chat(messages, **kwargs)
        ask = partial(self.llm.stream_chat, messages, **kwargs)
        out = self.tricache.stream(call.request, ask, CHAT.last, CHAT.replay, **self._options(call))
        return CHAT.said_stream(out)

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        call = self._chat_call(messages, kwargs)
        if call is None:
            return await self.llm.astream_chat(messages, **kwargs)
        ask = partial(self.llm.astream_chat, messages, **kwargs)
        options = self._options(call)
        return CHAT.asaid_stream(
            await self.tricache.astream(call.request, ask, CHAT.last, CHAT.areplay, **options)
        )

    # completion ------------------------------------------------------------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        call = self._completion_call(prompt, formatted, kwargs)
        if call is None:
            return self.llm.complete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.complete, prompt, formatted=formatted, **kwargs)
        out = self.tricache.answer(call.request, ask, COMPLETION.answer, COMPLETION.served,
                                  **self._options(call))  # fmt: skip
        return COMPLETION.said(out)

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        call = self._completion_call(prompt, formatted, kwargs)
        if call is None:
            return await self.llm.acomplete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.acomplete, prompt, formatted=formatted, **kwargs)
        options = self._options(call)
        out = await self.tricache.aanswer(call.request, ask, COMPLETION.answer, COMPLETION.served,
                                          **options)  # fmt: skip
        return COMPLETION.said(out)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        call = self._completion_call(prompt, formatted, kwargs)
        if call is None:
            return self.llm.stream_complete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.stream_complete, prompt, formatted=formatted, **kwargs)
        options = self._options(call)
        out = self.tricache.stream(call.request, ask, COMPLETION.last, COMPLETION.replay, **options)
        return COMPLETION.said_stream(out)

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        call = self._completion_call(prompt, formatted, kwargs)
        if call is None:
            return await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)
        ask = partial(self.llm.astream_complete, prompt, formatted=formatted, **kwargs)
        options = self._options(call)
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
        return self._tool_llm()._prepare_chat_with_tools_compat(
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
        return self._tool_llm()._validate_chat_with_tools_response(
            response, tools, allow_parallel_tool_calls=allow_parallel_tool_calls, **kwargs
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[Any]:
        return self._tool_llm().get_tool_calls_from_response(
            response, error_on_no_tool_call=error_on_no_tool_call, **kwargs
        )

    def _tool_llm(self) -> FunctionCallingLLM:
        if not isinstance(self.llm, FunctionCallingLLM):
            raise NotImplementedError(f"{type(self.llm).__name__} does not call tools")
        return self.llm

    # the cache -----------------------------------------------------------------------------
    def _chat_call(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> _Call | None:
        options = _pop_options(kwargs)  # (before the inner LLM sees the keyword arguments)
        try:
            conversation = _keyed(parse_chat(messages), lambda: chat_turns(messages))
        except Exception as exc:  # an odd message is a miss, never an error in the app
            log.warning("tricache: call not cacheable (%s)", exc)
            return None
        return self._call(conversation, llm_key(self.llm, "chat", kwargs), kwargs, options)

    def _completion_call(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> _Call | None:
        options = _pop_options(kwargs)
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a str")
        conversation = _keyed(Conversation(prompt), lambda: [("prompt", prompt, "")])
        key = llm_key(self.llm, f"complete:{formatted}", kwargs)
        return self._call(conversation, key, kwargs, options)

    def _call(
        self, conversation: Conversation, key: str, kwargs: dict[str, Any], options: dict[str, Any]
    ) -> _Call | None:
        """The request, or ``None`` when the call cannot be cached (it then goes to the LLM)."""
        with entry_options(**options):  # (a bad option is the caller's error: raised)
            try:
                request = self.tricache.conversation_request(conversation, key)
                faq = SHAPING_OPTIONS.isdisjoint(kwargs)
                return _Call(request, conversation.semantic, faq, ttl=options.get("ttl"))
            except Exception as exc:  # an odd prompt is a miss, never an error in the app
                log.warning("tricache: call not cacheable (%s)", exc)
                return None

    def _options(self, call: _Call) -> dict[str, Any]:
        """How the flow treats ``call``: look-alikes or not, its lifetime, its coalescer."""
        return {"semantic": call.semantic, "faq": call.faq, "ttl": call.ttl,
                "coalescer": self._coalescer}  # fmt: skip


_DONE = object()


def _keyed(conversation: Conversation, turns: Any) -> Conversation:
    """What a call is keyed on: ``conversation`` outside prompt templates (exact only when it
    condenses a chat engine's follow-up).  Inside one, the template's question and a digest of
    the rest of the prompt (``turns()``); without a question, ``conversation``, exact only."""
    template = _templated.get()
    if template is None:
        if conversation.semantic and condenses_a_follow_up(conversation.query):
            return replace(conversation, semantic=False)
        return conversation
    if template.question is not None:
        keyed = templated_conversation(template.question, turns())
        if keyed is not None:
            return keyed
    return replace(conversation, semantic=False)
