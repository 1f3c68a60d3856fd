"""``TriCache``: a LangChain ``BaseCache`` over TriCache's tiers (sync and native async)."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation

from tricache import Answer, Cache, CacheRequest, Hit, Reuse
from tricache.flow import reuse
from tricache.key.options import current_entry_options, entry_options
from tricache.key.tenancy import current_tenant, tenant
from tricache.runtime.memo import ENTRY_BYTES, Memo, text_size
from tricache.verbs import CacheVerbs

from .convert import (
    answer_of,
    generations_from_payload,
    generations_of,
    llm_key,
    model_name,
    parse_prompt,
    shapes_answer,
)
from .run_options import install, run_options

__all__ = ["TriCache", "current_tenant", "tenant"]

log = logging.getLogger(__name__)

_REQUEST_MEMO_BYTES = 8 * 2**20  # per cache: the requests of recent prompts (``_built``)


class TriCache(CacheVerbs, BaseCache):
    """LangChain cache with exact, semantic and FAQ tiers.

    The FAQ tier serves curated answers (``Cache.add_faq``) to a question no cached entry
    answers, after the semantic tier; it is off with ``faq=False``.  A hit carries its tier
    under ``"tricache"`` (``{"tier", "level", "score", "entry_id"}``, and ``"matched"``, the
    cached question a semantic or FAQ hit matched) in the message's response metadata (chat
    models) or the generation info (plain LLMs); an answer without it came from the model.
    So a hit is not ``==`` the generations stored; ``tag_hits=False`` returns exactly what was
    stored (LangChain's cache contract, as its standard test suites check it).  Through a
    chain that ends in a parser, :func:`langchain_tricache.tricache_tiers` reports the tiers.
    ``stats()`` gives the cache's counters; the admin verbs of :class:`tricache.Cache`
    (``invalidate``, ``bump_kb_version``, ``feedback``, ``add_faq`` …) are here too.

    ``TriCache()`` runs embedded with no server; ``TriCache(redis_url=...)`` shares the tiers
    between processes.  Every keyword goes to :class:`tricache.Cache`, or pass
    a ready one: ``TriCache(cache=Cache(...))``; either way it is ``.tricache``.  A lookup never
    raises for store trouble or an odd prompt: it is a miss.  Answers with tool calls or cut off
    are served to the same prompt only, unless ``tool_calls_to_look_alikes=True``.
    """

    def __init__(
        self,
        cache: Cache | None = None,
        *,
        tool_calls_to_look_alikes: bool = False,
        tag_hits: bool = True,
        **options: Any,
    ) -> None:
        self.tricache = cache if cache is not None else Cache(**options)
        self.tool_calls_to_look_alikes = tool_calls_to_look_alikes
        self.tag_hits = tag_hits
        self._requests: Memo[tuple[CacheRequest | None, bool]] = Memo(_REQUEST_MEMO_BYTES)
        self._requests_of = self.tricache  # the cache they were built for
        install()  # the per-call options of every run reach lookup and update (run_options.py)

    @property
    def core(self) -> Cache:
        """Deprecated: ``tricache`` (the same :class:`tricache.Cache`)."""
        warnings.warn("TriCache.core is now TriCache.tricache", DeprecationWarning, stacklevel=2)
        return self.tricache

    def _repr_html_(self) -> str:
        """A notebook shows it as :class:`tricache.Cache` shows itself: what it did."""
        return self.tricache._repr_html_()

    # sync ----------------------------------------------------------------------------------
    def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        request, semantic = self._request(prompt, llm_string)
        if request is None:
            return None
        faq = not shapes_answer(llm_string)
        hit = self.tricache.lookup(request, semantic=semantic, faq=faq)
        return self._generations(hit, _is_chat(prompt))

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        stored = self._stored(prompt, llm_string, return_val)
        if stored is not None:
            request, answer, semantic = stored
            ttl = run_options().get("ttl")
            self.tricache.update_answer(request, answer, semantic=semantic, ttl=ttl,
                                        rule=self._rule)  # fmt: skip

    def clear(self, **kwargs: Any) -> None:
        self.tricache.clear()

    # async ---------------------------------------------------------------------------------
    async def alookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        request, semantic = self._request(prompt, llm_string)
        if request is None:
            return None
        faq = not shapes_answer(llm_string)
        hit = await self.tricache.alookup(request, semantic=semantic, faq=faq)
        return self._generations(hit, _is_chat(prompt))

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        stored = self._stored(prompt, llm_string, return_val)
        if stored is not None:
            request, answer, semantic = stored
            await self.tricache.aupdate_answer(request, answer, semantic=semantic,
                                               ttl=run_options().get("ttl"),
                                               rule=self._rule)  # fmt: skip

    async def aclear(self, **kwargs: Any) -> None:
        await asyncio.to_thread(self.tricache.clear)

    def close(self) -> None:
        """Close ``tricache``, the core cache (its stores and threads)."""
        self.tricache.close()

    async def aclose(self) -> None:
        await self.tricache.aclose()

    # conversions ---------------------------------------------------------------------------
    def _request(self, prompt: str, llm_string: str) -> tuple[CacheRequest | None, bool]:
        if not isinstance(prompt, str) or not isinstance(llm_string, str):
            raise TypeError("prompt and llm_string must be str")
        if "<class '" in llm_string:  # a class passed to the call (response_format=Invoice):
            return None, False  # the llm_string names it, not its fields: not cached
        # (config={"metadata": {"tricache_ttl": 600}} of the model's run, wherever it was given:
        # run_options.py; a bad option is the caller's error)
        options = run_options()
        if not options:  # (the block would change nothing: the common case, kept cheap)
            return self._built(prompt, llm_string)
        with entry_options(**options):
            return self._built(prompt, llm_string)

    def _built(self, prompt: str, llm_string: str) -> tuple[CacheRequest | None, bool]:
        """The request for ``prompt`` in the current tenant and entry options, memoized: a
        request is immutable and a function of exactly these (the cache's namespace and
        default tenant never change), and a cache sees the same prompts again and again.  An
        app that gives this object another ``tricache`` starts a new memo."""
        if self._requests_of is not self.tricache:
            self._requests, self._requests_of = Memo(_REQUEST_MEMO_BYTES), self.tricache
        memo_key = (prompt, llm_string, current_tenant(), current_entry_options())
        found = self._requests.get(memo_key)
        if found is not None:
            return found
        try:
            parsed = parse_prompt(prompt)
            request = self.tricache.conversation_request(parsed, llm_key(llm_string))
        except Exception as exc:  # an odd prompt is a miss, never an error in the app
            log.warning("tricache: prompt not cacheable (%s)", exc)
            return None, False
        built = (request, parsed.semantic)
        self._requests.put(memo_key, built, 2 * ENTRY_BYTES + 2 * text_size(prompt, llm_string))
        return built

    def _stored(
        self, prompt: str, llm_string: str, generations: Sequence[Generation]
    ) -> tuple[CacheRequest, Answer, bool] | None:
        """What LangChain asks to store: the request, the answer, and whether look-alikes
        may be served it (``Cache.update_answer`` then applies the reuse rule, ``_rule``)."""
        request, semantic = self._request(prompt, llm_string)
        if request is None or not generations:
            return None
        try:
            answer = answer_of(generations, model_name(llm_string))
        except ValueError as exc:  # not plain data: passed on, never stored
            log.warning("tricache: answer not stored (%s)", exc)
            return None
        return request, answer, semantic

    def _rule(self, answer: Answer) -> Reuse:
        """``tricache.flow.reuse``; with ``tool_calls_to_look_alikes``, tool calls it stores
        answer look-alikes too."""
        allowed = reuse(answer)
        if self.tool_calls_to_look_alikes and answer.tool_calls and allowed is not Reuse.NEVER:
            return Reuse.LOOK_ALIKES
        return allowed

    def _generations(self, hit: Hit | None, chat: bool) -> list[Generation] | None:
        """A hit as fresh LangChain generations tagged with the tier; ``None`` for a miss."""
        if hit is None:
            return None
        info = hit.metadata()
        if hit.tier == "faq":  # a curated answer: plain text, shaped for the caller
            if chat:
                message = AIMessage(hit.text, response_metadata={"tricache": info})
                return [ChatGeneration(message=message)]
            return [Generation(text=hit.text, generation_info={"tricache": info})]
        return served(self.tricache, hit, info if self.tag_hits else None)


def served(tricache: Cache, hit: Hit, info: dict[str, Any] | None) -> list[Generation] | None:
    """The generations in a hit's payload, fresh for each hit (``generations_of``: nothing
    shared with the cache or another hit); a payload this adapter cannot read is a miss,
    counted as corrupt."""
    try:
        if hit.tier in ("exact", "semantic"):  # (the entry's payload: a hit's is a copy of it)
            return generations_of(hit.entry, info)
        return generations_from_payload(hit.payload, info)
    except Exception as exc:  # valid MessagePack, not a LangChain answer: never an app error
        tricache.metrics.incr("exact", "corrupt")
        log.warning("tricache: cached value is not a LangChain payload (%s)", exc)
        return None


def _is_chat(prompt: str) -> bool:
    """Chat models hand the cache a JSON list of messages; plain LLMs a string."""
    return prompt[:1] == "["
