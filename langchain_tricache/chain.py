"""Chain-level caching: cache a whole chain's output keyed on the user's question.

A hit in a RAG chain skips retrieval as well as the LLM.  Tag the entries with the knowledge
base (``tags=["kb:docs"]``) and ``cache.invalidate("kb:docs")`` — or ``cache.bump_kb_version()``
— when the index changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.load import dumpd, load
from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from pydantic import ConfigDict

from tricache import Cache, CacheRequest

from .cache import current_tenant

__all__ = ["CachedRunnable", "with_tricache"]

# What a cached chain output may be rebuilt into: never any other class.
_ALLOWED: list[type[Serializable]] = [
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    Document,
]


def _default_key(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for name in ("question", "query", "input"):
            if isinstance(value.get(name), str):
                return value[name]
    raise TypeError("with_tricache cannot tell the question in this input; pass key=lambda x: ...")


class CachedRunnable(RunnableSerializable[Any, Any]):
    """``runnable`` with its output cached; see :func:`with_tricache`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    runnable: Runnable[Any, Any]
    tricache: Cache
    key: Callable[[Any], str] = _default_key
    name_for_key: str = "chain"
    tags_for_entries: Sequence[str] = ()
    category: str | None = None
    semantic: bool = True

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        request = self._request(input)
        hit = self.tricache.lookup(request, semantic=self.semantic)
        if hit is not None and (cached := _decode(hit.payload)) is not _MISSING:
            return cached
        output = self.runnable.invoke(input, config, **kwargs)
        self._store(request, output)
        return output

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        request = self._request(input)
        hit = await self.tricache.alookup(request, semantic=self.semantic)
        if hit is not None and (cached := _decode(hit.payload)) is not _MISSING:
            return cached
        output = await self.runnable.ainvoke(input, config, **kwargs)
        encoded = _encode(output)
        if encoded is not None:
            await self.tricache.aupdate(
                request, _text(output), encoded, category=self.category, semantic=self.semantic
            )
        return output

    def _request(self, input: Any) -> CacheRequest:
        return self.tricache.request(
            self.key(input),
            tenant=current_tenant(),
            llm_key=f"chain:{self.name_for_key}",
            category=self.category,
            tags=list(self.tags_for_entries),
        )

    def _store(self, request: CacheRequest, output: Any) -> None:
        encoded = _encode(output)
        if encoded is not None:  # outputs we cannot rebuild safely are not cached
            self.tricache.update(
                request, _text(output), encoded, category=self.category, semantic=self.semantic
            )


def with_tricache(
    runnable: Runnable[Any, Any],
    cache: Cache,
    *,
    key: Callable[[Any], str] = _default_key,
    name: str | None = None,
    tags: Sequence[str] = (),
    category: str | None = None,
    semantic: bool = True,
) -> CachedRunnable:
    """Cache ``runnable``'s output keyed on the user's question (``key(input)``; by default
    the input itself when it is a string, else its "question", "query" or "input" field).

    ``name`` separates chains sharing one cache; ``tags`` let ``cache.invalidate(tag)`` drop
    every output computed from a knowledge base that changed."""
    return CachedRunnable(
        runnable=runnable,
        tricache=cache,
        key=key,
        name_for_key=name or runnable.get_name(),
        tags_for_entries=tuple(tags),
        category=category,
        semantic=semantic,
    )


_MISSING = object()


def _encode(output: Any) -> dict[str, Any] | None:
    """Plain JSON data, or LangChain's own serialization of messages and documents."""
    if isinstance(output, Serializable) or (
        isinstance(output, list) and output and all(isinstance(o, Serializable) for o in output)
    ):
        return {"v": 1, "kind": "lc", "data": json.loads(json.dumps(dumpd(output)))}
    try:
        return {"v": 1, "kind": "json", "data": json.loads(json.dumps(output))}
    except (TypeError, ValueError):
        return None


def _decode(payload: Any) -> Any:
    if not isinstance(payload, dict) or payload.get("v") != 1:
        return _MISSING
    if payload.get("kind") == "json":
        return payload["data"]
    if payload.get("kind") == "lc":
        try:
            return load(payload["data"], allowed_objects=_ALLOWED)
        except Exception:  # not one of the allowed classes: a miss, never an import
            return _MISSING
    return _MISSING


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    content = getattr(output, "content", None) or getattr(output, "page_content", None)
    return content if isinstance(content, str) else json.dumps(output, default=str)[:10_000]
