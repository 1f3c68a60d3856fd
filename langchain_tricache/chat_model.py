"""``CachedChatModel``: any chat model behind TriCache, with what a ``BaseCache`` cannot do.

- streaming: a hit replays as a stream of chunks; a streamed miss is stored once complete
  (LangChain itself skips its cache on ``stream()``);
- request coalescing: concurrent identical misses make one call to the inner model, across
  threads, coroutines and processes (through the shared store's lock);
- the FAQ fallback hook, tried after the cache tiers and before the model;
- ``response_metadata["tricache"]`` on every answer: ``{"tier", "level", "score", "entry_id"}``
  (and ``"matched"``) on a hit, ``{"tier": "llm"}`` when the wrapped model answered;
- ``bind_tools`` / ``with_structured_output``: tools are bound on the wrapped model and the
  result stays cached (the tools are in the key, so two tool sets never share answers).

Tokens are streamed once, by this model: the wrapped model runs without the callback handlers
that collect streams (``astream_events``, ``astream_log``, LangGraph's message stream), so a
consumer does not see each token twice; tracers still see the wrapped model's run, tagged
``"tricache:inner"`` (:func:`langchain_tricache.tricache_tiers` counts this model's run only).

The key holds the wrapped chat model's LangChain ``llm_string`` (model, settings, bound tools,
stop …): ``inner`` may be a chat model, or one wrapped in ``.bind()``/``.bind_tools()``,
``.with_retry()`` or ``.with_fallbacks()`` (fallback chat models).  Anything else passes through
uncached: a key that cannot tell two models apart would serve one's answers for the other.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    BaseCallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableWithFallbacks,
    ensure_config,
)
from langchain_core.runnables.configurable import DynamicRunnable
from langchain_core.runnables.retry import RunnableRetry
from langchain_core.tracers._streaming import (
    _StreamingCallbackHandler,
    _V2StreamingCallbackHandler,
)
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from tricache import Cache, CacheRequest, Coalescer, Outcome
from tricache.key.options import entry_options
from tricache.key.tenancy import CallScope, call_scope, in_scope
from tricache.verbs import CacheVerbs

from .codec import CHAT, to_chunk
from .convert import (
    llm_key,
    parse_messages,
    shapes_answer,
)
from .run_options import install, run_options

__all__ = ["CachedChatModel"]

log = logging.getLogger(__name__)

FaqHook = Callable[[CacheRequest], "str | None"]
_M = TypeVar("_M", AIMessage, AIMessageChunk)
INNER_TAG = "tricache:inner"  # the wrapped model's runs: its answer is reported by this model


class CachedChatModel(CacheVerbs, BaseChatModel):
    """Wrap ``inner`` (a chat model, or one with tools bound) with the :class:`tricache.Cache`
    ``tricache`` (``cache`` is LangChain's own cache field: off here)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Runnable[Any, Any]
    tricache: Cache = Field(default_factory=Cache)
    faq: FaqHook | None = None
    coalesce_timeout: float = 30.0
    cache: Any = False  # LangChain's own cache stays out: this model is the cache
    _coalescer: Coalescer = PrivateAttr()
    _warned: bool = PrivateAttr(default=False)

    def model_post_init(self, __context: Any) -> None:
        self._coalescer = self.tricache.coalescer(timeout=self.coalesce_timeout)
        install()  # the run's options, when LangChain calls this model's cache (run_options.py)

    @property
    def _llm_type(self) -> str:
        return "tricache"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """This model with ``tools`` bound on the wrapped chat model(s) (through bindings,
        retries and fallbacks), still cached: the tools are in the key.  Raises
        ``NotImplementedError`` where the wrapped model cannot bind tools."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        inner, _ = _with_tools(self.inner, tools, kwargs)
        return self.model_copy(update={"inner": inner})

    # ``with_structured_output``: BaseChatModel's, through ``bind_tools`` above.

    # LangChain's entry points, with the config they were called with in context --------------
    def invoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AIMessage:
        with _calling(config):
            return super().invoke(input, config, **kwargs)

    # A coroutine or a stream runs when it is awaited or read, maybe after the caller left its
    # ``with tenant(...)`` / ``entry_options(...)`` block (a web handler returns the stream it
    # made): each runs in the scope of the moment it was made (``call_scope``).
    def ainvoke(  # type: ignore[override]
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, AIMessage]:
        return self._ainvoke(call_scope(), input, config, kwargs)

    def stream(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[AIMessageChunk]:
        return self._streamed(call_scope(), input, config, kwargs)

    def astream(  # type: ignore[override]
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[AIMessageChunk]:
        return self._astreamed(call_scope(), input, config, kwargs)

    async def _ainvoke(
        self, scope: CallScope, input: LanguageModelInput, config: RunnableConfig | None,
        kwargs: dict[str, Any],
    ) -> AIMessage:  # fmt: skip
        with _calling(config), in_scope(scope):
            return await super().ainvoke(input, config, **kwargs)

    def _streamed(
        self, scope: CallScope, input: LanguageModelInput, config: RunnableConfig | None,
        kwargs: dict[str, Any],
    ) -> Iterator[AIMessageChunk]:  # fmt: skip
        chunks = super().stream(input, config, **kwargs)
        while True:
            with _calling(config), in_scope(scope):  # (each step: a generator may end in
                chunk = next(chunks, None)  # another context)
            if chunk is None:
                return
            yield chunk

    async def _astreamed(
        self, scope: CallScope, input: LanguageModelInput, config: RunnableConfig | None,
        kwargs: dict[str, Any],
    ) -> AsyncIterator[AIMessageChunk]:  # fmt: skip
        chunks = super().astream(input, config, **kwargs)
        while True:
            with _calling(config), in_scope(scope):
                chunk = await anext(chunks, None)
            if chunk is None:
                return
            yield chunk

    # sync ----------------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = _call_args(stop, kwargs)
        request, flags = self._request(messages, call, run_manager)

        def ask() -> AIMessage:
            return _as_message(self.inner.invoke(messages, _inner_config(), **call))

        if request is None:
            return CHAT.result(Outcome(ask(), None))
        return CHAT.result(self.tricache.answer(request, ask, CHAT.answer, CHAT.served,
                                                **self._options(flags)))  # fmt: skip

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        call = _call_args(stop, kwargs)
        request, flags = self._request(messages, call, run_manager)
        # LangChain reports each chunk this yields (``on_llm_new_token``): reporting it here
        # too, or letting the wrapped model report it to the same handlers, doubles it.
        chunks = partial(self.inner.stream, messages, _inner_config(), **call)
        if request is None:
            yield from CHAT.said_stream(Outcome(map(_as_chunk, chunks()), None))
            return

        def opened() -> Iterator[AIMessageChunk]:
            return map(_as_chunk, chunks())

        out = self.tricache.stream(request, opened, CHAT.combine, CHAT.replay,
                                   **self._options(flags))  # fmt: skip
        yield from CHAT.said_stream(out)

    # async ---------------------------------------------------------------------------------
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = _call_args(stop, kwargs)
        request, flags = self._request(messages, call, run_manager)

        async def ask() -> AIMessage:
            return _as_message(await self.inner.ainvoke(messages, _inner_config(), **call))

        if request is None:
            return CHAT.result(Outcome(await ask(), None))
        out = await self.tricache.aanswer(request, ask, CHAT.answer, CHAT.served,
                                          **self._options(flags))  # fmt: skip
        return CHAT.result(out)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        call = _call_args(stop, kwargs)
        request, flags = self._request(messages, call, run_manager)

        async def chunks() -> AsyncIterator[AIMessageChunk]:
            async for chunk in self.inner.astream(messages, _inner_config(), **call):
                yield _as_chunk(chunk)

        if request is None:
            out: Outcome[AsyncIterator[AIMessageChunk]] = Outcome(chunks(), None)
        else:
            out = await self.tricache.astream(request, chunks, CHAT.combine, CHAT.areplay,
                                              **self._options(flags))  # fmt: skip
        async for chunk in CHAT.asaid_stream(out):
            yield chunk

    # the cache -----------------------------------------------------------------------------
    def _request(
        self, messages: Sequence[BaseMessage], call: dict[str, Any], run_manager: Any = None
    ) -> tuple[CacheRequest | None, dict[str, Any]]:
        """The request for ``messages`` sent with ``call``, and what may answer it (look-alikes,
        curated answers) and for how long (the run's ``tricache_ttl``); ``None`` when the
        wrapped model cannot be told (the call then passes through uncached).  The run's
        ``tricache_tags`` and ``tricache_category`` go into the request (a bad one raises)."""
        options = run_options(run_manager)
        llm_string = _llm_string(self.inner, call)
        if llm_string is None:
            if not self._warned:
                self._warned = True
                log.warning("tricache: not caching: cannot tell which model %r is", self.inner)
            return None, {}
        parsed = parse_messages(messages)
        with entry_options(**options):
            request = self.tricache.conversation_request(parsed, llm_key(llm_string))
        return request, {"semantic": parsed.semantic, "faq": not shapes_answer(llm_string),
                         "ttl": options.get("ttl")}  # fmt: skip

    def _options(self, flags: dict[str, Any]) -> dict[str, Any]:
        """What the flow takes besides the request: the flags, the coalescer and the app's
        FAQ hook (``faq=``: asked when every tier missed, its answer served as a FAQ hit and
        never stored)."""
        return {**flags, "coalescer": self._coalescer, "curated": self.faq}


def _as_message(output: Any) -> AIMessage:
    return _coerce(output, AIMessage)


def _as_chunk(output: Any) -> AIMessageChunk:
    return _coerce(output, AIMessageChunk)


def _coerce(output: Any, kind: type[_M]) -> _M:
    """What the inner runnable returned, as ``kind`` (an AI message or chunk): a whole message
    where a stream was asked for (a model without streaming, ``disable_streaming``, a
    ``with_retry`` wrapper) keeps its tool calls and other fields."""
    if isinstance(output, kind):
        return output
    if kind is AIMessageChunk and isinstance(output, AIMessage):
        return to_chunk(output)  # type: ignore[return-value]
    return kind(content=output.content if isinstance(output, BaseMessage) else str(output))


def _call_args(stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments for the inner model (``stop`` only when given, so a ``stop``
    bound with ``.bind(stop=...)`` is not overridden by ``None``)."""
    return kwargs if stop is None else {**kwargs, "stop": stop}


def _llm_string(inner: Runnable[Any, Any], call: dict[str, Any]) -> str | None:
    """The LangChain llm_string of every chat model ``inner`` may call, with the arguments
    that reach it (and the call's ``configurable`` choices); ``None`` when ``inner`` wraps
    anything else."""
    models = _chat_models(inner, {}, _configurable())
    if models is None:
        return None
    strings = []
    for bound, model in models:
        params = {**bound, **call}  # what a call's keywords do to bound ones in LangChain
        strings.append(model._get_llm_string(**{k: _schema(v) for k, v in params.items()}))
    return strings[0] if len(strings) == 1 else json.dumps(strings)


def _schema(value: Any) -> Any:
    """An output class given as a keyword (``response_format=Invoice``) as its JSON schema:
    LangChain's llm_string writes its name only, and a field added must change the key."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return {"class": f"{value.__module__}.{value.__qualname__}",
                "schema": value.model_json_schema()}  # fmt: skip
    return value


def _chat_models(
    inner: Runnable[Any, Any], bound: dict[str, Any], configurable: dict[str, Any]
) -> list[tuple[dict[str, Any], BaseChatModel]] | None:
    """The chat models behind bindings, retries, fallbacks and configurable fields or
    alternatives (as ``configurable`` chooses), each with its bound keywords (outer bindings
    win, as in LangChain); ``None`` when something else is in the way."""
    if isinstance(inner, BaseChatModel):
        return [(bound, inner)]
    if isinstance(inner, RunnableBinding | RunnableRetry):  # .bind(), .with_retry() …
        chosen = {**(inner.config or {}).get("configurable", {}), **configurable}
        return _chat_models(inner.bound, {**inner.kwargs, **bound}, chosen)
    if isinstance(inner, DynamicRunnable):  # .configurable_fields(), _alternatives()
        prepared, _ = inner.prepare({"configurable": configurable})
        # every choice of the call in the key: a model's llm_string need not show the fields
        # they set, and which keys a nested or prefixed choice reads is LangChain's business
        choices = json.dumps(configurable, sort_keys=True, default=repr)
        return _chat_models(prepared, {**bound, "tricache_configurable": choices}, configurable)
    if isinstance(inner, RunnableWithFallbacks):
        models: list[tuple[dict[str, Any], BaseChatModel]] = []
        for runnable in (inner.runnable, *inner.fallbacks):
            found = _chat_models(runnable, bound, configurable)
            if found is None:
                return None
            models += found
        return models
    return None


def _with_tools(
    inner: Runnable[Any, Any], tools: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Runnable[Any, Any], set[str]]:
    """``inner`` with ``tools`` bound on each chat model behind it, and the keywords that
    binding set (taken out of outer bindings, which would otherwise win over them)."""
    if isinstance(inner, BaseChatModel):
        bound = inner.bind_tools(tools, **kwargs)
        return bound, set(bound.kwargs) if isinstance(bound, RunnableBinding) else set()
    if isinstance(inner, RunnableBinding | RunnableRetry):
        new, keys = _with_tools(inner.bound, tools, kwargs)
        rest = {k: v for k, v in inner.kwargs.items() if k not in keys}
        return inner.model_copy(update={"bound": new, "kwargs": rest}), keys
    if isinstance(inner, RunnableWithFallbacks):
        runnable, keys = _with_tools(inner.runnable, tools, kwargs)
        fallbacks = []
        for fallback in inner.fallbacks:
            new, more = _with_tools(fallback, tools, kwargs)
            fallbacks.append(new)
            keys |= more
        return inner.model_copy(update={"runnable": runnable, "fallbacks": fallbacks}), keys
    raise NotImplementedError(f"tricache: cannot bind tools on {type(inner).__name__}")


def _inner_config() -> RunnableConfig:
    """The config for a call to the wrapped model: the callbacks in context (LangChain runs it
    beside this model's run), less the handlers that collect streamed tokens: they get every
    token from this model already; its run is tagged as the wrapped model's."""
    callbacks: Any = ensure_config().get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        callbacks = callbacks.copy()
        for handler in [*callbacks.handlers, *callbacks.inheritable_handlers]:
            if _collects_stream(handler):
                callbacks.remove_handler(handler)
    elif isinstance(callbacks, list):
        callbacks = [h for h in callbacks if not _collects_stream(h)]
    return {"callbacks": callbacks, "tags": [INNER_TAG], "configurable": _configurable()}


# The config this model was called with: LangChain does not pass it on to ``_generate`` or
# ``_stream``, and the wrapped model must see its ``configurable`` choices (a temperature, an
# alternative model) — in its key too.
_called_with: ContextVar[RunnableConfig | None] = ContextVar("tricache_called_with", default=None)


def _configurable() -> dict[str, Any]:
    return dict((_called_with.get() or {}).get("configurable") or {})


@contextlib.contextmanager
def _calling(config: RunnableConfig | None) -> Iterator[None]:
    token = _called_with.set(config)
    try:
        yield
    finally:
        _called_with.reset(token)


def _collects_stream(handler: Any) -> bool:
    return isinstance(handler, _StreamingCallbackHandler | _V2StreamingCallbackHandler)
