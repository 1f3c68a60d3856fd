"""``CachedChatModel``: any chat model behind TriCache, with what a ``BaseCache`` cannot do.

- streaming: a hit replays as a stream of chunks; a streamed miss is stored once complete
  (LangChain itself skips its cache on ``stream()``);
- request coalescing: concurrent identical misses make one call to the inner model, across
  threads, coroutines and processes (through the shared store's lock);
- the FAQ fallback hook, tried after the cache tiers and before the model;
- ``response_metadata["tricache"] = {"tier", "score", "entry_id"}`` on every answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding
from pydantic import ConfigDict, Field, PrivateAttr

from tricache import Cache, CacheRequest, Hit
from tricache.coalesce import Coalescer
from tricache.conversation import stream_pieces

from .cache import current_tenant
from .convert import (
    generations_from_payload,
    llm_key,
    parse_messages,
    payload_from_generations,
    servable_to_look_alikes,
    usage_tokens,
)

__all__ = ["CachedChatModel"]

log = logging.getLogger(__name__)

FaqHook = Callable[[CacheRequest], "str | None"]
_M = TypeVar("_M", AIMessage, AIMessageChunk)


class CachedChatModel(BaseChatModel):
    """Wrap ``inner`` (a chat model, or one with tools bound) with a TriCache ``Cache``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Runnable[Any, Any]
    tricache: Cache = Field(default_factory=Cache)
    faq: FaqHook | None = None
    coalesce_timeout: float = 30.0
    cache: Any = False  # LangChain's own cache stays out: this model is the cache
    _coalescer: Coalescer = PrivateAttr()

    def model_post_init(self, __context: Any) -> None:
        self._coalescer = Coalescer(self.tricache.exact.store, timeout=self.coalesce_timeout)

    @property
    def _llm_type(self) -> str:
        return "tricache"

    # sync ----------------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request, semantic = self._request(messages, stop, kwargs)
        cached = self._from_cache(request, semantic)
        if cached is not None:
            return cached
        with self._coalescer.turn(self.tricache.exact.key(request)) as leader:
            if not leader and (cached := self._from_cache(request, semantic)) is not None:
                return cached
            message = self.inner.invoke(messages, stop=stop, **kwargs)
            return self._store(request, semantic, _as_message(message))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        request, semantic = self._request(messages, stop, kwargs)
        cached = self._from_cache(request, semantic)
        if cached is not None:
            yield from _replay(cached.generations[0])
            return
        total: AIMessageChunk | None = None
        for chunk in self.inner.stream(messages, stop=stop, **kwargs):
            piece = _as_chunk(chunk)
            total = piece if total is None else total + piece
            if run_manager is not None and isinstance(piece.content, str):
                run_manager.on_llm_new_token(
                    piece.content, chunk=ChatGenerationChunk(message=piece)
                )
            yield ChatGenerationChunk(message=piece)
        if total is not None:  # complete: store it (a stream that raised is never stored)
            self._store(request, semantic, _from_chunk(total))

    # async ---------------------------------------------------------------------------------
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request, semantic = self._request(messages, stop, kwargs)
        cached = await self._afrom_cache(request, semantic)
        if cached is not None:
            return cached
        async with self._coalescer.aturn(self.tricache.exact.key(request)) as leader:
            if not leader and (cached := await self._afrom_cache(request, semantic)) is not None:
                return cached
            message = await self.inner.ainvoke(messages, stop=stop, **kwargs)
            return await self._astore(request, semantic, _as_message(message))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        request, semantic = self._request(messages, stop, kwargs)
        cached = await self._afrom_cache(request, semantic)
        if cached is not None:
            for chunk in _replay(cached.generations[0]):
                yield chunk
            return
        total: AIMessageChunk | None = None
        async for chunk in self.inner.astream(messages, stop=stop, **kwargs):
            piece = _as_chunk(chunk)
            total = piece if total is None else total + piece
            if run_manager is not None and isinstance(piece.content, str):
                await run_manager.on_llm_new_token(
                    piece.content, chunk=ChatGenerationChunk(message=piece)
                )
            yield ChatGenerationChunk(message=piece)
        if total is not None:
            await self._astore(request, semantic, _from_chunk(total))

    # the cache -----------------------------------------------------------------------------
    def _request(
        self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> tuple[CacheRequest, bool]:
        parsed = parse_messages(messages)
        request = self.tricache.request(
            parsed.query,
            system=parsed.system,
            history=parsed.history,
            tenant=current_tenant(),
            llm_key=llm_key(_llm_string(self.inner, stop, kwargs)),
        )
        return request, parsed.semantic

    def _from_cache(self, request: CacheRequest, semantic: bool) -> ChatResult | None:
        return self._result(self.tricache.lookup(request, semantic=semantic), request)

    async def _afrom_cache(self, request: CacheRequest, semantic: bool) -> ChatResult | None:
        return self._result(await self.tricache.alookup(request, semantic=semantic), request)

    def _result(self, hit: Hit | None, request: CacheRequest) -> ChatResult | None:
        if hit is not None:
            info = {"tier": hit.tier, "score": hit.score, "entry_id": hit.entry_id}
            try:
                generations = generations_from_payload(hit.payload, {"tricache": info})
            except (ValueError, KeyError, TypeError):
                generations = None
            if generations and isinstance(generations[0], ChatGeneration):
                return ChatResult(generations=generations)  # type: ignore[arg-type]
        if self.faq is not None and (answer := self.faq(request)) is not None:
            message = AIMessage(answer, response_metadata={"tricache": {"tier": "faq"}})
            return ChatResult(generations=[ChatGeneration(message=message)])
        return None

    def _store(self, request: CacheRequest, semantic: bool, message: AIMessage) -> ChatResult:
        text, payload, servable, cost = _prepared(message)
        self.tricache.update(request, text, payload, semantic=semantic and servable, **cost)
        return _fresh(message)

    async def _astore(
        self, request: CacheRequest, semantic: bool, message: AIMessage
    ) -> ChatResult:
        text, payload, servable, cost = _prepared(message)
        await self.tricache.aupdate(request, text, payload, semantic=semantic and servable, **cost)
        return _fresh(message)


def _prepared(message: AIMessage) -> tuple[str, dict[str, Any], bool, dict[str, Any]]:
    """What to store: text, payload, whether look-alikes may get it, and what it cost."""
    generation = ChatGeneration(message=message)
    meta = message.response_metadata
    model = meta.get("model_name") or meta.get("model") or ""
    cost = {"tokens": usage_tokens([generation]), "model": model if isinstance(model, str) else ""}
    return (
        generation.text,
        payload_from_generations([generation]),
        servable_to_look_alikes([generation]),
        cost,
    )


def _fresh(message: AIMessage) -> ChatResult:
    tagged = message.model_copy(
        update={"response_metadata": {**message.response_metadata, "tricache": {"tier": "llm"}}}
    )
    return ChatResult(generations=[ChatGeneration(message=tagged)])


def _replay(generation: Any) -> Iterator[ChatGenerationChunk]:
    """A cached answer as a stream: word-sized chunks, metadata and usage on the last one."""
    message: AIMessage = generation.message
    if message.tool_calls or not isinstance(message.content, str) or not message.content:
        yield ChatGenerationChunk(message=_to_chunk(message))
        return
    pieces = stream_pieces(message.content)
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        chunk = AIMessageChunk(
            content=piece,
            response_metadata=message.response_metadata if last else {},
            usage_metadata=message.usage_metadata if last else None,
        )
        yield ChatGenerationChunk(message=chunk)


def _to_chunk(message: AIMessage) -> AIMessageChunk:
    return AIMessageChunk(
        content=message.content,
        response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata,
        tool_call_chunks=[
            {"name": c["name"], "args": json.dumps(c["args"]), "id": c.get("id"), "index": i}
            for i, c in enumerate(message.tool_calls)
        ],
    )


def _as_message(output: Any) -> AIMessage:
    return _coerce(output, AIMessage)


def _as_chunk(output: Any) -> AIMessageChunk:
    return _coerce(output, AIMessageChunk)


def _coerce(output: Any, kind: type[_M]) -> _M:
    """What the inner runnable returned, as ``kind`` (an AI message or chunk)."""
    if isinstance(output, kind):
        return output
    return kind(content=output.content if isinstance(output, BaseMessage) else str(output))


def _from_chunk(chunk: AIMessageChunk) -> AIMessage:
    return AIMessage(
        content=chunk.content,
        response_metadata=chunk.response_metadata,
        usage_metadata=chunk.usage_metadata,
        tool_calls=chunk.tool_calls,
        additional_kwargs=chunk.additional_kwargs,
    )


def _llm_string(inner: Runnable[Any, Any], stop: list[str] | None, kwargs: dict[str, Any]) -> str:
    """The inner model's LangChain llm_string, bound arguments (tools …) included."""
    bound: dict[str, Any] = {}
    while isinstance(inner, RunnableBinding):
        bound = {**inner.kwargs, **bound}
        inner = inner.bound
    params = {**bound, **kwargs}
    if hasattr(inner, "_get_llm_string"):
        return str(inner._get_llm_string(stop=stop, **params))
    return f"{type(inner).__qualname__}|{sorted(params.items())!r}|{stop!r}"
