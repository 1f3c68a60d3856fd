"""``Cache``: the tiers in lookup order, write-back, and the admin verbs.

lookup: exact tier → semantic tier → FAQ fallback → miss (the caller asks the LLM);
update: the answer is written to the exact tier, and its question indexed by the semantic tier.

Each request is analysed once (``key/asked.py``: its exact key and its question) and the
analysis travels through the tiers.  Lookups and updates are written once, as steps
(``runtime/steps.py``); the sync and async methods only drive them.  Opening the semantic tier
and the FAQ is the tier loader's job (``tiers.py``).  No method raises because a store is down
or slow: a tier that fails is a miss, counted and logged.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import re
import sqlite3
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack

from .exact.coalesce import Coalescer
from .exact.link import store_error
from .exact.tier import ExactHit, ExactTier, StoreUnavailable
from .exact.upkeep import Upkeep
from .exact.versions import Stamp
from .faq.lookup import MAX_QUESTION_CHARS, faq_hit, faq_question
from .flow import (
    Answer,
    Outcome,
    Reuse,
    answer_steps,
    astream_outcome,
    reuse,
    store_steps,
    stream_outcome,
)
from .hit import Hit
from .key.asked import Asked, ask
from .key.conversation import Conversation
from .key.entry import CacheEntry
from .key.options import checked_ttl, current_entry_options
from .key.request import CacheRequest, Turn, is_entry_key, memo_bytes
from .key.tenancy import current_tenant
from .ops.ledger import FLUSH_S, Ledger, summary
from .ops.metrics import Metrics, failed
from .ops.requests import count_declined, count_lookup, in_request
from .ops.requests import request as one_request
from .runtime.exit import on_exit
from .runtime.home import data_dir
from .runtime.steps import Call, Off, Steps, arun, run
from .semantic.guards.cacheable import is_cacheable
from .settings import Exact, Faq, Redis, Semantic, resolve
from .stores.base import L2Store, PointLog, StatsLog
from .tiers import TierLoader

if TYPE_CHECKING:
    from .faq.store import FaqEntry, FaqStore
    from .semantic.tier import SemanticHit, SemanticTier

__all__ = ["Cache", "Entry", "Hit"]

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C")


class Cache:
    """TriCache's core, independent of LangChain and LlamaIndex.

    ``Cache()`` runs embedded: L1 in memory, L2 in SQLite and each process's replica of the
    vector index under ``$TRICACHE_HOME``, the packaged multilingual embedder.
    ``redis_url=`` (or ``store=Redis(url, cluster=..., timeout=...)``) shares the cache through
    Redis; ``Semantic(index=Qdrant(url))`` puts the vectors in a Qdrant server.  No method
    raises because a store is down or slow; wrong argument types raise ``TypeError`` /
    ``ValueError``.

    Questions whose answer depends on the time or on who asks (``cacheable`` says no: "today",
    "latest", "my order", 今天 …) are neither stored nor served, except by the curated FAQ;
    ``Exact(cache_time_dependent=True)`` caches them in the exact tier (never the semantic tier).

    Keys cover the whole request: every message with every field, the model's settings, the
    normalized question (DESIGN.md, "What makes a key").  ``volatile_context=True`` declares
    the context volatile: timestamps, UUIDs and long hex ids in the system prompt and earlier
    turns are then folded (for apps that inject them per request); never in the question.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        path: str | Path | None = None,
        store: Redis | L2Store | bool | None = None,
        namespace: str = "default",
        tenant: str = "default",
        exact: Exact | None = None,
        semantic: Semantic | bool = True,
        faq: Faq | bool = True,
        cacheable: Callable[[str], bool] | None = None,
        volatile_context: bool = False,
        prices: dict[str, float] | None = None,
        metrics: Metrics | None = None,
        warm: bool | None = None,
        **legacy: Any,
    ) -> None:
        self.settings = resolve(
            store=store, redis_url=redis_url, path=path, exact=exact, semantic=semantic,
            faq=faq, legacy=legacy,
        )  # fmt: skip
        self.namespace = namespace
        self.tenant = tenant
        self.metrics = metrics or Metrics()
        # USD per 1M tokens, per model name: what a hit saved (``cost_saved_micro_usd``).
        self.prices: dict[str, float] = dict(prices or {})
        # Questions whose answer depends on the time or on who asks ("today", "my order" …)
        # are not cached at all unless asked for: a repeat an hour later, or from another user
        # of the tenant, deserves a fresh answer.
        self._cacheable = cacheable or is_cacheable
        self.cache_time_dependent = self.settings.exact.cache_time_dependent
        self.exact = ExactTier(
            _open_store(self.settings.store, path, self.settings.exact)
            if self.settings.l2
            else None,
            self.settings.exact,
            namespace=namespace,
            volatile_context=volatile_context,
            metrics=self.metrics,
        )
        self.tiers = TierLoader(
            self.settings, self.exact, namespace=namespace, cacheable=self._cacheable,
            volatile_context=volatile_context, metrics=self.metrics,
        )  # fmt: skip
        self._recent_hits: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        store = self.exact.store
        # every process's counters, added up in the store (``shared_stats``, ``tricache stats``)
        self.ledger = (
            Ledger(self.metrics, store, namespace) if isinstance(store, StatsLog) else None
        )
        self._ledger_upkeep = (
            Upkeep(self.ledger, FLUSH_S, "tricache-stats") if self.ledger else None
        )
        if self._ledger_upkeep is not None:
            self._ledger_upkeep.start()
        # Validate the defaults now rather than on the first lookup.
        CacheRequest("", namespace=namespace, tenant=tenant)
        on_exit(self.tiers.stop)  # no warm-up left in native code when Python finalizes
        if warm if warm is not None else os.environ.get("TRICACHE_WARM") == "1":
            self.tiers.open_now()
        else:
            self.tiers.open_in_background()

    # what adapters need ----------------------------------------------------------------------
    def request(
        self,
        query: str,
        *,
        system: str = "",
        history: Iterable[Turn | tuple[str, str]] = (),
        tenant: str | None = None,
        llm_key: str = "",
        category: str | None = None,
        tags: Sequence[str] = (),
        query_meta: str = "",
    ) -> CacheRequest:
        """Build a request in this cache's namespace (and default tenant).  ``tags`` given as
        one string is a ``TypeError`` (a list of one tag is ``[tag]``).  The tags and category
        of an ``entry_options`` block around the call are added."""
        options = current_entry_options()
        if options.tags and not isinstance(tags, str | bytes):
            tags = tuple(dict.fromkeys((*tags, *options.tags)))
        category = category if category is not None else options.category
        return CacheRequest(
            query,
            system=system,
            history=() if history is None else history,  # type: ignore[arg-type]  # (validated)
            namespace=self.namespace,
            tenant=self.tenant if tenant is None else tenant,
            llm_key=llm_key,
            category=category,
            tags=tags,  # type: ignore[arg-type]  # validated by CacheRequest
            query_meta=query_meta,
        )

    def conversation_request(self, conversation: Conversation, llm_key: str) -> CacheRequest:
        """``request`` for a conversation an adapter read from its framework's messages, in
        the tenant of the enclosing ``tenant(...)`` block (else this cache's)."""
        return self.request(conversation.query, system=conversation.system,
                            history=conversation.history, tenant=current_tenant(),
                            llm_key=llm_key, query_meta=conversation.query_meta)  # fmt: skip

    def key(self, request: CacheRequest) -> str:
        """The exact-tier key of ``request`` (what coalescing locks, what ``Hit.key`` holds)."""
        self._check(request)
        return self.exact.key(request)

    @property
    def store(self) -> L2Store | None:
        """The L2 store (Redis or SQLite), or ``None`` when the cache runs on L1 only."""
        return self.exact.store

    def coalescer(self, *, timeout: float = 30.0) -> Coalescer:
        """Single flight over this cache's store: ``with c.turn(cache.key(request)) as
        leader:`` lets one caller (thread, coroutine or process) ask the LLM for a key while
        the others wait up to ``timeout`` seconds, then look the answer up."""
        return Coalescer(self.exact.store, timeout=timeout)

    # lookup --------------------------------------------------------------------------------
    def lookup(
        self, request: CacheRequest, *, semantic: bool = True, faq: bool = True
    ) -> Hit | None:
        """The cached answer for ``request``, or ``None``.  Never raises for store trouble.

        ``semantic=False`` asks the exact tier only (for prompts that must match exactly);
        ``faq=False`` leaves the curated answers out (a call that wants tools called or an
        answer in a format: a curated text is not what it asks for)."""
        return self._app_lookup(run(self.lookup_steps(self.asked(request), semantic, faq)))

    async def alookup(
        self, request: CacheRequest, *, semantic: bool = True, faq: bool = True
    ) -> Hit | None:
        """``lookup`` from async code: store calls awaited, embedding in a thread."""
        return self._app_lookup(await arun(self.lookup_steps(self.asked(request), semantic, faq)))

    def _app_lookup(self, hit: Hit | None) -> Hit | None:
        if hit is None and not in_request(self.metrics):  # the app asks its model now
            self.metrics.incr("requests", "lookup_misses")
        return hit

    def lookup_steps(self, asked: Asked, semantic: bool, faq: bool = True) -> Steps[Hit | None]:
        """The lookup, once for both: exact → semantic → FAQ (steps: ``runtime/steps.py``);
        one row in the audit log (``tricache review``) when the semantic tier keeps one."""
        tier = self.tiers.semantic
        if tier is None or tier.audit is None:
            return (yield from self._lookup_steps(asked, semantic, faq))
        with tier.audit.watching() as seen:  # (the decision the semantic tier records)
            hit = yield from self._lookup_steps(asked, semantic, faq)
        tier.audit.looked_up(asked, hit, seen)
        return hit

    def _lookup_steps(self, asked: Asked, semantic: bool, faq: bool) -> Steps[Hit | None]:
        count_lookup(self.metrics)  # once per request, whichever layers it passes
        faq = faq and semantic  # (curated answers match questions, as the semantic tier does)
        if faq and asked.tags:  # a curated answer is written under no tag: never served to
            self.metrics.incr("faq", "skipped_tagged")  # a request that declares one
            faq = False
        if not self._may_cache(asked):  # curated answers only
            count_declined(self.metrics)  # (once per request: ``tricache stats``)
            if not faq:
                return None
            return self._unlabelled(asked, (yield Off(self._faq_lookup, asked)))
        start = time.perf_counter()
        try:
            found = yield from self.exact.get_steps(asked)
        except Exception as exc:  # a bug in a tier must not break the app
            failed(self.metrics, "lookup", exc)
            found = None
        finally:
            self.metrics.observe("exact", time.perf_counter() - start)
        if found is not None:
            return self._unlabelled(asked, self._exact_hit(found))
        if not semantic:
            return None
        hit = yield Off(self._other_tiers, asked, faq)  # embedding: a thread in async
        if hit is not None:  # a miss answered by another tier: no answer will be written
            self.exact.settle(asked.key)
        return self._unlabelled(asked, hit)

    def _other_tiers(self, asked: Asked, faq: bool) -> Hit | None:
        return self._semantic_lookup(asked) or (self._faq_lookup(asked) if faq else None)

    def _unlabelled(self, asked: Asked, hit: Hit | None) -> Hit | None:
        """A request the cache answered labels nothing, even if the app stores the answer it
        was served (a label never comes from the cache's own answer)."""
        tier = self.tiers.semantic
        if hit is not None and tier is not None and tier.learning is not None:
            tier.learning.forget(asked.key)
        return hit

    def _exact_hit(self, found: ExactHit) -> Hit | None:
        entry = found.entry
        if entry.negative:  # "known to have no cacheable answer": a miss the caller can trust
            self.metrics.incr("exact", "negative_hits")
            return None
        self._count_savings("exact", entry)
        return Hit(text=entry.text, payload=_fresh(entry.payload), tier="exact",
                   level=found.level, key=found.key, entry=entry, entry_id=found.key)  # fmt: skip

    def _semantic_lookup(self, asked: Asked) -> Hit | None:
        tier = self.tiers.ready_semantic()
        if tier is None:
            return None
        if tier.index_on_store and not self.exact.link.available():
            self.metrics.incr("semantic", "skipped_store_down")  # one timeout per lookup
            return None
        if not self.tiers.breaker.allow():  # (last: it may hand this lookup its trial call)
            return None
        start = time.perf_counter()
        try:
            found = tier.lookup(asked.request, self.exact.fetch, asked.key, located=asked.located,
                                cacheable=partial(asked.cacheable, self.tiers.judge))  # fmt: skip
            self.tiers.breaker.success()
        except Exception as exc:
            self.tiers.breaker.failure()
            if tier.index_on_store and store_error(exc):  # its server failed: counted, one
                # warning now and then, nothing more asked of it in this lookup; the exact
                # tier's breaker is its own reads' (a search failing while the index rebuilds
                # must not switch L2 off: the semantic tier's breaker above stops searching)
                self.exact.link.failed("search", exc, breaker=False)
            else:
                failed(self.metrics, "semantic lookup", exc)
            return None
        finally:
            self.metrics.observe("semantic", time.perf_counter() - start)
        return self._semantic_hit(asked, tier, found) if found is not None else None

    def _semantic_hit(self, asked: Asked, tier: SemanticTier, found: SemanticHit) -> Hit:
        entry = found.entry
        self._count_savings("semantic", entry)
        entry_id = f"s:{found.ref}"
        # for the feedback record: the questions compared (never a whole long prompt)
        self._recent_hits[entry_id] = (found.question, asked.request.query[:MAX_QUESTION_CHARS],
                                       found.score)  # fmt: skip
        while len(self._recent_hits) > 1000:
            self._recent_hits.popitem(last=False)
        return Hit(text=entry.text, payload=_fresh(entry.payload), tier="semantic",
                   level=tier.index.name, key=asked.key, entry=entry, score=found.score,
                   entry_id=entry_id, matched_question=found.question)  # fmt: skip

    def _faq_lookup(self, asked: Asked) -> Hit | None:
        """The curated answer for the question of ``asked``, when the FAQ has a confident one."""
        try:
            store, settings = self.tiers.ready_faq(), self.settings.faq  # (it reads the file)
        except Exception as exc:  # a damaged or locked FAQ file: a miss, like a failing tier
            failed(self.metrics, "faq lookup", exc)
            return None
        if store is None or settings is None:
            return None
        question = faq_question(asked, settings.systems)
        if question is None:
            if asked.located is not None:  # a question, asked in a context curated answers
                self.metrics.incr("faq", "skipped_context")  # do not fit
            return None
        if len(question) > MAX_QUESTION_CHARS:  # a bounded-time miss
            self.metrics.incr("faq", "skipped_too_long")
            return None
        start = time.perf_counter()
        try:
            return faq_hit(store, question, asked, learn=settings.learn, tier=self.tiers.semantic,
                           metrics=self.metrics)  # fmt: skip
        except Exception as exc:
            failed(self.metrics, "faq lookup", exc)
            return None
        finally:
            self.metrics.observe("faq", time.perf_counter() - start)

    def _count_savings(self, tier: str, entry: CacheEntry) -> None:
        if entry.tokens:
            self.metrics.incr(tier, "tokens_saved", entry.tokens)
            price = self.prices.get(entry.model)
            if price:
                self.metrics.incr(tier, "cost_saved_micro_usd", round(entry.tokens * price))

    # write ---------------------------------------------------------------------------------
    def update(
        self,
        request: CacheRequest,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
        semantic: bool = True,
        tokens: int = 0,
        model: str = "",
        began: Stamp | None = None,
        ttl: float | None = None,
    ) -> bool:
        """Store an answer; ``False`` when it was not stored.  Never raises for store trouble.
        ``ttl``: its lifetime in seconds (default: an ``entry_options`` block's, else the
        ``TtlPolicy``'s for its category).

        ``semantic=False`` keeps the answer out of the semantic tier (served only to the same
        question, e.g. for tool calls or partial answers).  ``tokens`` and ``model`` (what the
        answer cost) feed the savings metrics and the ``prices`` table.

        The answer is written under the versions its lookup's miss began with, in this thread
        or task; an invalidation since then means it is not stored.  Code that stores from
        elsewhere (a stream drained by another thread) passes ``began=cache.began(request)``,
        taken right after the lookup."""
        fields = dict(category=category, negative=negative, tokens=tokens, model=model,
                      stamp=began, shared=semantic and not negative, ttl=_ttl(ttl))  # fmt: skip
        return run(self.update_steps(self.asked(request), text, payload, semantic, fields))

    async def aupdate(
        self,
        request: CacheRequest,
        text: str,
        payload: Any = None,
        *,
        category: str | None = None,
        negative: bool = False,
        semantic: bool = True,
        tokens: int = 0,
        model: str = "",
        began: Stamp | None = None,
        ttl: float | None = None,
    ) -> bool:
        """``update`` from async code: store calls awaited, indexing in a thread."""
        fields = dict(category=category, negative=negative, tokens=tokens, model=model,
                      stamp=began, shared=semantic and not negative, ttl=_ttl(ttl))  # fmt: skip
        return await arun(self.update_steps(self.asked(request), text, payload, semantic, fields))

    def update_steps(
        self, asked: Asked, text: str, payload: Any, semantic: bool, fields: dict[str, Any]
    ) -> Steps[bool]:
        """The update, once for both: written to the exact tier, then indexed."""
        if not self._may_cache(asked):
            return False
        try:
            entry = yield from self.exact.put_steps(asked, text, payload, **fields)
        except TypeError:
            raise
        except Exception as exc:
            failed(self.metrics, "update", exc)
            return False
        if entry is not None and entry.shared and self.tiers.semantic_on:
            yield Off(self.tiers.index_answer, asked, entry)  # embedding is CPU work
        self._labels(asked, text, semantic=fields["shared"])
        return entry is not None

    def _labels(self, asked: Asked, text: str, *, semantic: bool) -> None:
        """The LLM answered ``asked``: its answer labels the candidate its miss left pending
        (``learning``; the labelling itself runs in the background)."""
        tier = self.tiers.semantic
        if tier is None or tier.learning is None:
            return
        if semantic:
            tier.learning.answered(asked.key, text, asked.request.query[:MAX_QUESTION_CHARS])
        else:
            tier.learning.forget(asked.key)

    # one model call, the whole flow (flow.py) ------------------------------------------------
    def answer(
        self,
        request: CacheRequest,
        ask: Callable[[], T],
        convert: Callable[[T], Answer],
        served: Callable[[Hit], T | None],
        *,
        semantic: bool = True,
        faq: bool = True,
        coalescer: Coalescer | None = None,
        ttl: float | None = None,
        category: str | None = None,
    ) -> Outcome[T]:
        """The cached answer for ``request`` (``served(hit)``: the framework's answer; ``None``
        when it cannot read it), else what ``ask()`` (the model) returned, stored as
        ``flow.reuse`` allows (``convert`` says what it is as an ``Answer``).  With a
        ``coalescer``, concurrent identical misses make one call; ``semantic`` and ``faq`` as
        ``lookup`` takes them.  Never raises for store trouble; what ``ask`` raises
        propagates, and nothing is stored."""
        steps = answer_steps(self, request, Call(ask, _unused), convert, served,
                             semantic=semantic, faq=faq, coalescer=coalescer, ttl=_ttl(ttl),
                             category=category)  # fmt: skip
        with one_request(self.metrics):
            return run(steps)

    async def aanswer(
        self,
        request: CacheRequest,
        ask: Callable[[], Awaitable[T]],
        convert: Callable[[T], Answer],
        served: Callable[[Hit], T | None],
        *,
        semantic: bool = True,
        faq: bool = True,
        coalescer: Coalescer | None = None,
        ttl: float | None = None,
        category: str | None = None,
    ) -> Outcome[T]:
        """``answer`` from async code (``ask`` a coroutine function)."""
        steps = answer_steps(self, request, Call(_unused, ask), convert, served,
                             semantic=semantic, faq=faq, coalescer=coalescer, ttl=_ttl(ttl),
                             category=category)  # fmt: skip
        with one_request(self.metrics):
            return await arun(steps)

    def stream(
        self,
        request: CacheRequest,
        open_stream: Callable[[], Iterable[C]],
        combine: Callable[[Sequence[C]], Answer],
        replay: Callable[[Hit], Iterator[C] | None],
        *,
        semantic: bool = True,
        faq: bool = True,
        coalescer: Coalescer | None = None,
        ttl: float | None = None,
        category: str | None = None,
    ) -> Outcome[Iterator[C]]:
        """A hit replayed as the framework's stream (``replay``), else the model's stream
        (``open_stream()``) passed through and stored once complete (``combine`` makes the
        ``Answer`` of its chunks).  With a ``coalescer``, the threads that ask the same
        meanwhile replay that one stream as it comes, and end as it ends (its error when it
        failed, ``LeaderLeft`` when its reader left it unfinished)."""
        options = dict(semantic=semantic, ttl=_ttl(ttl), category=category)
        with one_request(self.metrics):
            return stream_outcome(self, self.asked(request), open_stream, combine, replay,
                                  options, faq=faq, coalescer=coalescer)  # fmt: skip

    async def astream(
        self,
        request: CacheRequest,
        open_stream: Callable[[], Awaitable[AsyncIterator[C]] | AsyncIterator[C]],
        combine: Callable[[Sequence[C]], Answer],
        replay: Callable[[Hit], AsyncIterator[C] | None],
        *,
        semantic: bool = True,
        faq: bool = True,
        coalescer: Coalescer | None = None,
        ttl: float | None = None,
        category: str | None = None,
    ) -> Outcome[AsyncIterator[C]]:
        """``stream`` from async code (``open_stream`` returns an async iterator, or a
        coroutine that makes one): the tasks of one event loop share a stream."""
        options = dict(semantic=semantic, ttl=_ttl(ttl), category=category)
        with one_request(self.metrics):
            return await astream_outcome(self, self.asked(request), open_stream, combine,
                                         replay, options, faq=faq, coalescer=coalescer)  # fmt: skip

    def update_answer(
        self,
        request: CacheRequest,
        answer: Answer,
        *,
        semantic: bool = True,
        ttl: float | None = None,
        began: Stamp | None = None,
        rule: Callable[[Answer], Reuse] = reuse,
    ) -> bool:
        """Store what the model answered, as ``rule`` (``flow.reuse``) allows (``update``
        stores what it is given): for an adapter whose framework drives the call (LangChain's
        ``BaseCache``)."""
        steps = store_steps(self, self.asked(request), answer, _same, semantic=semantic,
                            began=began, ttl=_ttl(ttl), rule=rule)  # fmt: skip
        return run(steps)

    async def aupdate_answer(
        self,
        request: CacheRequest,
        answer: Answer,
        *,
        semantic: bool = True,
        ttl: float | None = None,
        began: Stamp | None = None,
        rule: Callable[[Answer], Reuse] = reuse,
    ) -> bool:
        """``update_answer`` from async code."""
        steps = store_steps(self, self.asked(request), answer, _same, semantic=semantic,
                            began=began, ttl=_ttl(ttl), rule=rule)  # fmt: skip
        return await arun(steps)

    def began(self, request: CacheRequest) -> Stamp | None:
        """The versions the last miss of ``request`` began under, in this thread or task (see
        ``update``); ``None`` when it did not miss here."""
        return self.exact.began(self.key(request))

    # the FAQ -------------------------------------------------------------------------------
    @property
    def faq(self) -> FaqStore | None:
        """The FAQ store, opened on first use when it holds entries; ``None`` otherwise."""
        store = self.tiers.open_faq()
        return store if store is not None and store.count() else None

    def import_faq(self, path: str | Path) -> int:
        """Import curated Q/A (CSV or JSONL) into the FAQ; see ``add_faq``."""
        from .faq.store import read_entries

        return self.add_faq(read_entries(path))

    def add_faq(self, entries: Iterable[FaqEntry | dict[str, Any] | tuple[str, str]]) -> int:
        """Add curated entries to the FAQ: ``FaqEntry`` objects, dicts (question, answer[,
        paraphrases, tags, lang]) or ``(question, answer)`` tuples, each replacing the entry
        with its question.  Returns how many.  The FAQ is versioned on its own: cached LLM
        answers stay (``bump_kb_version()`` retires them when the knowledge behind them
        changed).  A bad entry, or a question given twice, is a ``ValueError`` or ``TypeError``
        naming it, and nothing is added.  Lookups never wait for it (docs/faq.md)."""
        from .faq.store import as_entry

        if isinstance(entries, dict | str) or hasattr(entries, "answer"):
            raise TypeError("add_faq takes a list of entries (one entry: [entry])")
        items = [as_entry(item, f"entries[{i}]") for i, item in enumerate(entries)]
        store = self.tiers.open_faq(create=True)
        if store is None:
            raise ValueError("this cache was created with faq=False")
        return int(store.add(items))

    def faq_entries(self) -> list[tuple[int, FaqEntry]]:
        """The FAQ's entries with their ids (``tricache faq list``)."""
        store = self.tiers.open_faq()
        return store.entries() if store is not None else []

    def delete_faq(self, faq_ids: Iterable[int]) -> int:
        """Delete FAQ entries by id; returns how many were deleted."""
        store = self.tiers.open_faq()
        return store.delete(faq_ids) if store is not None else 0

    # the entries -----------------------------------------------------------------------------
    def entries(
        self,
        *,
        tag: str | None = None,
        prefix: str | None = None,
        category: str | None = None,
        limit: int | None = None,
    ) -> list[Entry]:
        """What the cache holds for this namespace: each current entry's id (its key), the
        question it answers as asked, its answer, tags, category and when it was computed.
        ``tag``, ``prefix`` (of the question, case-insensitive) and ``category`` filter; at
        most ``limit`` (``0``: none).  An admin verb: it streams the store, one entry at a
        time, until ``limit`` entries are found (``StoreUnavailable`` when it cannot)."""
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        wanted = prefix.casefold() if prefix else None
        found: list[Entry] = []
        if limit == 0:
            return found
        with closing(self.exact.entries()) as scanned:  # (a scan left early ends now)
            for key, entry in scanned:
                if tag is not None and tag not in entry.tag_versions:
                    continue
                if category is not None and entry.category != category:
                    continue
                if wanted is not None and not entry.asked.casefold().startswith(wanted):
                    continue
                found.append(Entry.of(key, entry))
                if limit is not None and len(found) >= limit:
                    break
        return found

    def entry(self, entry_id: str) -> Entry | None:
        """One entry by its id (``Entry.id``, a hit's ``entry_id``), or ``None``; in any
        process (the versions are read first).  ``StoreUnavailable`` when the store does not
        answer."""
        kind, key = self._feedback_target(entry_id)
        if kind == "faq":
            raise ValueError("a FAQ entry: Cache.faq_entries() lists them")
        found = self.exact.read(key)
        return Entry.of(key, found) if found is not None else None

    def delete(self, entry_id: str) -> None:
        """Delete one entry (its id, or a hit's ``entry_id``): its answer from the store and
        from the L1 of every cache of this process at once (another process's L1 lets it go
        at its next poll or event, within ``refresh_s``), and the question indexed for it
        from every kind of index.  ``StoreUnavailable`` when the store did not take it."""
        kind, key = self._feedback_target(entry_id)
        if kind == "faq":
            raise ValueError("a FAQ entry: Cache.delete_faq([id]) deletes it")
        self.exact.delete(key)
        if (tier := self.semantic) is not None:
            _forget(tier, key, self.namespace)

    # feedback, versions and maintenance ----------------------------------------------------
    def feedback(self, entry_id: str, *, correct: bool) -> None:
        """Report whether a served answer was right (``entry_id``: the ``Hit.entry_id``).

        A wrong exact hit deletes that entry, a wrong semantic hit removes the matched question
        from the semantic tier (its own question still gets it), a wrong FAQ answer is not
        served to that question again.  Nothing outside this cache's namespace is touched;
        an id that is not one of its hits' is a ``ValueError``.  Works in any process (not
        only the one served).  Recorded for calibration once done: when the store cannot take
        it, ``StoreUnavailable`` and nothing is recorded."""
        kind, target = self._feedback_target(entry_id)
        tier = self.semantic
        if not correct:
            self._reject(kind, target, tier)
        cached_q, new_q, score = self._recent_hits.get(entry_id, (None, None, None))
        if tier is not None and tier.audit is not None:
            tier.audit.feedback(entry_id, bool(correct), cached_q, new_q, score)
        self.metrics.incr("feedback", "correct" if correct else "wrong")

    def _reject(self, kind: str, target: Any, tier: SemanticTier | None) -> None:
        """Take a wrong answer out: a FAQ answer from that question, an exact entry from the
        store, a matched question from every index (so from every process)."""
        if kind == "faq":
            if (store := self.faq) is not None:
                store.reject(*target)
            return
        if kind == "exact":
            self.exact.delete(target)
        if tier is not None:
            _forget(tier, target, self.namespace)
        elif kind == "semantic":  # the match would stay served
            raise StoreUnavailable("the semantic tier is not open here: the match is not forgotten")

    def _feedback_target(self, entry_id: str) -> tuple[str, Any]:
        """("exact" | "semantic", key) or ("faq", (id, question)) for a hit's ``entry_id``."""
        if not isinstance(entry_id, str):
            raise TypeError("entry_id must be the Hit.entry_id of a served answer")
        if is_entry_key(entry_id, self.namespace):
            return "exact", entry_id
        if entry_id.startswith("s:") and is_entry_key(entry_id[2:], self.namespace):
            return "semantic", entry_id[2:]
        faq = _FAQ_ID.fullmatch(entry_id)
        if faq:
            return "faq", (int(faq.group(1)), faq.group(2))
        raise ValueError(
            f"not the entry_id of a hit of this cache (namespace {self.namespace!r}): "
            f"{entry_id[:80]!r}"
        )

    def invalidate(self, tag: str) -> int:
        """Entries written under ``tag`` become unreachable everywhere; returns its new version.

        Raises when the shared store cannot be reached: a lost invalidation would leave stale
        answers in other processes, so the caller must know.
        """
        if not isinstance(tag, str) or not tag:
            raise TypeError("tag must be a non-empty str")
        return self.exact.invalidate(tag)

    def bump_kb_version(self) -> int:
        """The knowledge base changed: every existing entry of the namespace becomes stale."""
        return self.exact.bump_kb_version()

    def set_min_watermark(self, watermark: float | None = None) -> float:
        """Entries whose requests began before ``watermark`` become stale, in every process.
        The time is on the store's clock (Redis ``TIME``), seconds since the Unix epoch; the
        default, the store's clock now, needs no agreement between clocks.  Returns the floor
        set.  Raises when the store is unreachable, like ``invalidate``."""
        if watermark is not None and not isinstance(watermark, int | float):
            raise TypeError("watermark must be seconds since the Unix epoch, or None for now")
        return self.exact.set_min_watermark(None if watermark is None else float(watermark))

    def evict(self) -> dict[str, int]:
        """Delete stale and corrupt entries (and expired semantic points); returns the counts."""
        counts = self.exact.evict()
        if (tier := self.semantic) is not None:
            tier.index.delete_expired(time.time())
        return counts

    def clear(self) -> None:
        """Drop every entry of the namespace, and its semantic points, in every process."""
        self.exact.clear()  # the store's labels go with its entries
        if (tier := self.semantic) is not None:
            tier.clear(self.namespace)
            if tier.learning is not None:
                tier.learning.reset()
        elif isinstance(store := self.exact.store, PointLog):  # the tier is off here
            store.clear_points(self.namespace)

    def shared_stats(self, window_s: float = 3600.0) -> dict[str, Any]:
        """What every process of this namespace did over the last ``window_s`` seconds, from
        the counters each adds to the shared store every 10 s (``tricache stats``): lookups,
        hits and hit rate per tier, LLM calls, tokens and cost saved, feedback.  Without a
        store, this process's counters."""
        if self.ledger is None:
            return {"window_s": window_s, "processes": "this one", **summary(self.metrics.counts())}
        self.ledger.flush()
        return {"window_s": window_s, "processes": "all", **summary(self.ledger.read(window_s))}

    def _repr_html_(self) -> str:
        """A notebook shows the cache as a small table of what it did (this process)."""
        figures = summary(self.metrics.counts())
        rows = [("lookups", figures["lookups"]), ("LLM calls", figures["llm_calls"])]
        rows += [(f"{tier} hits", f"{n} ({figures['hit_rate'][tier]:.1%})")
                 for tier, n in figures["hits"].items()]  # fmt: skip
        rows += [("tokens saved", figures["tokens_saved"]),
                 ("cost saved", f"${figures['cost_saved_usd']:.4f}"),
                 ("answers reported wrong", figures["feedback"]["wrong"])]  # fmt: skip
        cells = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
                        for k, v in rows)  # fmt: skip
        where = html.escape(f"{self.namespace} · {self.exact.store_name}")
        return f"<table><caption>TriCache ({where})</caption>{cells}</table>"

    def stats(self) -> dict[str, Any]:
        """Counters and latency percentiles per tier, as a plain dict."""
        snapshot = self.metrics.snapshot()
        tier = self.tiers.semantic
        snapshot["store"] = {
            "l2": self.exact.store_name,
            "l1_items": len(self.exact.l1),
            "l1_bytes": self.exact.l1.bytes,
            "breaker_open": self.exact.breaker.is_open,
            "l2_evicted": getattr(self.exact.store, "evicted", 0),  # for a bounded SQLite
            "vector_index": tier.index.name if tier is not None else "none",
            "vector_replica": _replica_stats(tier),
            "warm_up_s": self.tiers.took_s,  # None while warming
            "memo_bytes": memo_bytes(),  # normalized prompts kept for reuse, this process
        }
        if tier is not None and tier.learning is not None:
            snapshot["learning"] = tier.learning.stats()
        return snapshot

    @property
    def semantic(self) -> SemanticTier | None:
        """The semantic tier, opened on first use; ``None`` when off or unavailable."""
        return self.tiers.open_semantic()

    def close(self) -> None:
        if self._ledger_upkeep is not None:
            self._ledger_upkeep.stop()
        if self.ledger is not None:
            self.ledger.flush()  # (one try, within the store's timeout)
        self.tiers.close()  # waits for a warm-up under way: it may be creating the index
        self.exact.close()

    async def aclose(self) -> None:
        """``close()`` from async code: the Redis asyncio client of the running loop is
        closed in it first."""
        store = self.exact.store
        if store is not None:
            await store.aclose()
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Cache:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # helpers -------------------------------------------------------------------------------
    def asked(self, request: CacheRequest) -> Asked:
        """``request`` checked and analysed: once per lookup or update, or per ``answer``."""
        self._check(request)
        return ask(request, self.exact.key(request))

    def _check(self, request: CacheRequest) -> None:
        if not isinstance(request, CacheRequest):
            raise TypeError(f"expected CacheRequest, got {type(request).__name__}")
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )

    def _may_cache(self, asked: Asked) -> bool:
        """False for a question whose answer depends on the time or the asker (unless
        ``cache_time_dependent``): no tier but the curated FAQ serves it, none stores it."""
        # judged on the canonical question (a template's context may say "latest": the
        # question is asked; "Hey, how do I cancel my subscription?" is a procedure)
        if self.cache_time_dependent or asked.cacheable(self.tiers.judge):
            return True
        self.metrics.incr("exact", "skipped_time_dependent")
        return False


_FAQ_ID = re.compile(r"faq:([0-9]{1,18}):([0-9a-f]{32})")


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached answer, as ``Cache.entries`` lists it."""

    id: str  # its key: what ``delete`` and ``feedback`` take
    question: str  # as asked (at most 300 characters; "" for entries written before 0.2)
    answer: str
    category: str | None
    tags: tuple[str, ...]
    computed_at: float  # seconds since the epoch, on the store's clock
    shared: bool  # may answer other questions (semantic=True when stored)
    tokens: int
    model: str

    @classmethod
    def of(cls, key: str, entry: CacheEntry) -> Entry:
        return cls(key, entry.asked, entry.text, entry.category, tuple(sorted(entry.tag_versions)),
                   entry.watermark, entry.shared and not entry.negative, entry.tokens,
                   entry.model)  # fmt: skip


def _forget(tier: SemanticTier, key: str, namespace: str) -> None:
    """The question indexed for ``key`` leaves every index (from the store, so from every
    process); ``StoreUnavailable`` when it cannot."""
    try:
        tier.forget(key, namespace)
    except Exception as exc:
        raise StoreUnavailable(f"the question indexed for it is not forgotten: {exc}") from exc


def _same(answer: Answer) -> Answer:
    return answer


def _unused(*args: Any) -> Any:
    raise AssertionError("the other runner's call")  # (Call needs both; one runs)


def _ttl(ttl: float | None) -> float | None:
    """An update's TTL: given, or the ``entry_options`` block's (``None``: the policy's)."""
    if ttl is None:
        return current_entry_options().ttl
    return checked_ttl(ttl)


def _fresh(payload: Any) -> Any:
    """A copy of a stored payload for one caller: the L1 entry is shared by every hit, so a
    caller that edits what it was served must not change what the next one gets."""
    if isinstance(payload, dict | list):
        packed = msgpack.packb(payload, use_bin_type=True, unicode_errors="surrogatepass")
        return msgpack.unpackb(
            packed, raw=False, strict_map_key=False, unicode_errors="surrogatepass"
        )
    return payload


def _open_store(
    where: Redis | L2Store | None, path: str | Path | None, exact: Exact
) -> L2Store | None:
    """The configured L2 store, or ``None`` (L1 only) when SQLite cannot be opened."""
    if isinstance(where, Redis):
        try:
            from .stores.redis import RedisStore  # redis is an optional dependency
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] not in ("redis", "hiredis"):
                raise
            raise ImportError(
                "Cache(redis_url=...) needs redis: pip install 'tricache[redis]'"
            ) from exc
        return RedisStore(where.url, timeout=where.timeout, cluster=where.cluster)
    if where is not None:
        return where
    from .stores.sqlite import SQLiteStore

    file = Path(path) if path else data_dir() / "exact.sqlite3"
    try:
        return SQLiteStore(file, max_entries=exact.max_entries, max_bytes=exact.max_bytes)
    except (OSError, sqlite3.Error) as exc:
        log.error("tricache: L2 store unavailable (%s: %s); running on L1 only", file, exc)
        return None


def _replica_stats(tier: SemanticTier | None) -> dict[str, Any] | None:
    """Points, lag and disk use of this process's replica of the vector index (or ``None``)."""
    stats = getattr(tier.index, "stats", None) if tier is not None else None
    return stats() if callable(stats) else None
