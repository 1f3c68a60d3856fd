"""``CachedQueryEngine``: whole query-engine responses from the cache (retrieval skipped too).

The response (text, source nodes, metadata) is keyed on the query string and on a fingerprint
of everything else that shapes it (the retriever's filters and ``similarity_top_k``, the node
postprocessors, the response mode and prompts, the LLM, the index: see ``fingerprint.py``), in
a scope named after the index.  An engine that cannot be fingerprinted is not cached.  Given the
index, the engine invalidates its entries when the index changes (insert, delete, update,
refresh), in every process that shares the cache.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    StreamingResponse,
)
from llama_index.core.schema import QueryBundle

from tricache import Cache, CacheRequest
from tricache.key.conversation import stream_pieces
from tricache.key.request import context_token
from tricache.key.tenancy import current_tenant
from tricache.runtime.aiter import async_iter
from tricache.verbs import CacheVerbs

from .codec import QUERY
from .fingerprint import engine_fingerprint

__all__ = ["CachedQueryEngine", "watch_index"]

log = logging.getLogger(__name__)

# What changes an index: every public mutation goes through one of these.
_MUTATORS = (
    "insert_nodes",
    "ainsert_nodes",
    "delete_nodes",
    "adelete_nodes",
    "delete_ref_doc",
    "adelete_ref_doc",
)


class CachedQueryEngine(CacheVerbs, BaseQueryEngine):
    """Wrap ``engine`` so repeated (and, through the semantic tier, reworded) queries are
    answered from ``cache`` (read back as ``.tricache``) without retrieval or generation.

    ``index``: the index the engine reads; its changes invalidate the cached responses.
    ``name``: the scope of the entries when no index is given (engines over different data
    that share a cache need different names).  Every response says who answered it in
    ``metadata["tricache"]``: ``{"tier": "exact" | "semantic" | "faq", "level", "score",
    "entry_id"}`` (and ``"matched"``, the cached question a semantic or FAQ hit matched) from
    the cache, ``{"tier": "llm"}`` when the wrapped engine answered.  ``stats()`` gives the
    cache's counters.  Engines over one index with other settings (filters,
    ``similarity_top_k``, prompts, LLM …) never share entries; an engine whose settings cannot
    be described is passed through, uncached (its responses carry no ``"tricache"``).
    """

    def __init__(
        self,
        engine: BaseQueryEngine,
        cache: Cache | None = None,
        *,
        index: Any = None,
        name: str | None = None,
    ) -> None:
        super().__init__(callback_manager=engine.callback_manager)
        self.engine = engine
        self.tricache = cache if cache is not None else Cache()
        scope = name or (index.index_id if index is not None else _index_id(engine))
        self.scope = scope or type(engine).__qualname__
        self.tag = f"llama_index:{self.scope}"
        self._warned = False
        if index is not None:
            watch_index(index, self.tricache, self.tag)

    @property
    def cache(self) -> Cache:
        """Deprecated: ``tricache`` (the same :class:`tricache.Cache`)."""
        warnings.warn(
            "CachedQueryEngine.cache is now CachedQueryEngine.tricache",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.tricache

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {"engine": self.engine}

    # query ---------------------------------------------------------------------------------
    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        request = self._request(query_bundle)
        if request is None:
            return self.engine.query(query_bundle)
        if not _streams(self.engine):
            ask = functools.partial(self.engine.query, query_bundle)
            return QUERY.said(self.tricache.answer(request, ask, QUERY.answer, QUERY.served))
        opened: list[Any] = []  # the engine's response, once asked

        def open_stream() -> Iterator[str]:
            response = self.engine.query(query_bundle)
            opened.append(response)
            return (
                response.response_gen
                if isinstance(response, StreamingResponse)
                else _whole(response)
            )

        out = self.tricache.stream(request, open_stream, QUERY.streamed(opened), QUERY.replay)
        if out.hit is not None:
            return StreamingResponse(out.answer, *QUERY.sources(out.hit))
        return QUERY.said_stream(opened[0], out.answer)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        request = self._request(query_bundle)
        if request is None:
            return await self.engine.aquery(query_bundle)
        if not _streams(self.engine):
            ask = functools.partial(self.engine.aquery, query_bundle)
            return QUERY.said(await self.tricache.aanswer(request, ask, QUERY.answer, QUERY.served))
        opened: list[Any] = []

        async def open_stream() -> AsyncIterator[str]:
            response = await self.engine.aquery(query_bundle)
            opened.append(response)
            if isinstance(response, AsyncStreamingResponse):
                return response.response_gen
            return async_iter(stream_pieces(str(response)))

        out = await self.tricache.astream(request, open_stream, QUERY.streamed(opened),
                                          QUERY.areplay)  # fmt: skip
        if out.hit is not None:
            return AsyncStreamingResponse(out.answer, *QUERY.sources(out.hit))
        return QUERY.said_stream(opened[0], out.answer)

    # the cache -----------------------------------------------------------------------------
    def _request(self, query_bundle: QueryBundle) -> CacheRequest | None:
        """The request for ``query_bundle``, or ``None``: the query goes to the engine."""
        fingerprint = self._fingerprint()
        if fingerprint is None:
            return None
        try:
            return self.tricache.request(
                query_bundle.query_str,
                system=f"[query engine] {context_token(_scope_of(self.scope, query_bundle))}",
                tenant=current_tenant(),
                llm_key=fingerprint,
                tags=(self.tag,),
            )
        except Exception as exc:  # an odd query is a miss, never an error in the app
            log.warning("tricache: query not cacheable (%s)", exc)
            return None

    def _fingerprint(self) -> str | None:
        """The engine's fingerprint, taken at each query (its settings may change); ``None``,
        logged once, when the engine cannot be described."""
        try:
            return engine_fingerprint(self.engine)
        except Exception as exc:  # Opaque, or a part that fails when read: not cached
            if not self._warned:
                self._warned = True
                log.warning("tricache: %s not cached: %s", type(self.engine).__name__, exc)
            return None


def watch_index(index: Any, cache: Cache, tag: str) -> None:
    """Invalidate ``tag`` in ``cache`` whenever ``index`` is changed through its methods."""
    for name in _MUTATORS:
        method = getattr(index, name, None)
        if method is None:
            continue
        targets = getattr(method, "_tricache_targets", None)
        if targets is None:  # first watcher of this index: wrap the method
            targets = []
            setattr(index, name, _invalidating(method, targets))
        if (cache, tag) not in targets:
            targets.append((cache, tag))


def _invalidating(method: Any, targets: list[tuple[Cache, str]]) -> Any:
    def invalidate() -> None:
        for cache, tag in targets:
            try:
                cache.invalidate(tag)
            except Exception:  # the index did change: say so loudly, keep the app running
                log.exception("tricache: could not invalidate %s after an index change", tag)

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await method(*args, **kwargs)
            finally:
                invalidate()
    else:

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            finally:
                invalidate()

    wrapper._tricache_targets = targets  # type: ignore[attr-defined]
    return wrapper


def _whole(response: Any) -> Iterator[str]:
    return iter([str(response.response or "")])


def _scope_of(scope: str, query_bundle: QueryBundle) -> str:
    """The entries' scope, with whatever the query bundle adds to the query string (custom
    embedding strings, an image, a given embedding)."""
    extra = [query_bundle.custom_embedding_strs, query_bundle.image_path, query_bundle.embedding]
    return scope if not any(extra) else json.dumps([scope, extra], default=str)


def _index_id(engine: Any) -> str | None:
    """The index behind a retriever query engine, when it can be found."""
    index = getattr(getattr(engine, "retriever", None), "_index", None)
    return getattr(index, "index_id", None)


def _streams(engine: Any) -> bool:
    synthesizer = getattr(engine, "_response_synthesizer", None)
    return bool(getattr(synthesizer, "_streaming", False))
