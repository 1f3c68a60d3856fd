"""``Cache``: the one object a user makes — it builds the tiers and hands requests on.

- a request's way through the tiers (exact → semantic → FAQ) and its write-back:
  ``pipeline.py``; the model call around it (coalescing, streams, what may be stored):
  ``flow.py``;
- the admin verbs (entries, feedback, invalidation, the FAQ, the counters): ``admin.py``,
  reached through ``verbs.CacheVerbs`` as on every framework object;
- opening the semantic tier and the FAQ: ``tiers.py``.

The sync and async methods only drive steps (``runtime/steps.py``) written once.  No method
raises because a store is down or slow: a tier that fails is a miss, counted and logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .admin import Admin, Entry
from .exact.coalesce import Coalescer
from .exact.tier import ExactTier
from .exact.upkeep import Upkeep
from .exact.versions import Stamp
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
from .key.asked import Asked
from .key.conversation import Conversation
from .key.options import checked_ttl, current_entry_options
from .key.request import CacheRequest, Turn
from .key.tenancy import current_tenant
from .ops.ledger import FLUSH_S, Ledger
from .ops.metrics import Metrics
from .ops.requests import in_request
from .ops.requests import request as one_request
from .pipeline import Pipeline
from .runtime.closing import Closable
from .runtime.exit import on_exit
from .runtime.home import data_dir
from .runtime.steps import Call, arun, run
from .semantic.guards.cacheable import is_cacheable
from .settings import Exact, Faq, Redis, Semantic, resolve
from .stores.base import L2Store, StatsLog
from .stores.reopening import Reopening
from .tiers import TierLoader
from .verbs import CacheVerbs

if TYPE_CHECKING:
    from .faq.store import FaqStore
    from .semantic.tier import SemanticTier

__all__ = ["Cache", "Entry", "Hit"]

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C")


class Cache(CacheVerbs, Closable):
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

    The admin verbs (``invalidate``, ``feedback``, ``entries``, ``delete``, ``add_faq``,
    ``stats`` …) are ``admin.Admin``'s, here as on every framework object (``CacheVerbs``).
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
        self.pipeline = Pipeline(self.settings, self.exact, self.tiers, self.metrics,
                                 namespace=namespace, prices=self.prices)  # fmt: skip
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
        self._admin = Admin(self.exact, self.tiers, self.metrics, namespace=namespace,
                            ledger=self.ledger, recent_hits=self.pipeline.recent_hits)  # fmt: skip
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
        self.pipeline.check(request)
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
        pipeline = self.pipeline
        return self._app_lookup(run(pipeline.lookup_steps(pipeline.asked(request), semantic, faq)))

    async def alookup(
        self, request: CacheRequest, *, semantic: bool = True, faq: bool = True
    ) -> Hit | None:
        """``lookup`` from async code: store calls awaited, embedding in a thread."""
        steps = self.pipeline.lookup_steps(self.pipeline.asked(request), semantic, faq)
        return self._app_lookup(await arun(steps))

    def _app_lookup(self, hit: Hit | None) -> Hit | None:
        if hit is None and not in_request(self.metrics):  # the app asks its model now
            self.metrics.incr("requests", "lookup_misses")
        return hit

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
        steps = self.pipeline.update_steps(self.pipeline.asked(request), text, payload, semantic,
                                           fields)  # fmt: skip
        return run(steps)

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
        steps = self.pipeline.update_steps(self.pipeline.asked(request), text, payload, semantic,
                                           fields)  # fmt: skip
        return await arun(steps)

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
        curated: Callable[[CacheRequest], str | None] | None = None,
    ) -> Outcome[T]:
        """The cached answer for ``request`` (``served(hit)``: the framework's answer; ``None``
        when it cannot read it), else what ``ask()`` (the model) returned, stored as
        ``flow.reuse`` allows (``convert`` says what it is as an ``Answer``).  With a
        ``coalescer``, concurrent identical misses make one call; ``semantic`` and ``faq`` as
        ``lookup`` takes them.  ``curated(request)``: the app's own curated answer, asked
        when every tier missed; its text is served as a FAQ hit (``level="app"``) and never
        stored.  Never raises for store trouble; what ``ask`` raises propagates, and nothing
        is stored."""
        steps = answer_steps(self.pipeline, request, Call(ask, _unused), convert, served,
                             semantic=semantic, faq=faq, coalescer=coalescer, ttl=_ttl(ttl),
                             category=category, curated=curated)  # fmt: skip
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
        curated: Callable[[CacheRequest], str | None] | None = None,
    ) -> Outcome[T]:
        """``answer`` from async code (``ask`` a coroutine function)."""
        steps = answer_steps(self.pipeline, request, Call(_unused, ask), convert, served,
                             semantic=semantic, faq=faq, coalescer=coalescer, ttl=_ttl(ttl),
                             category=category, curated=curated)  # fmt: skip
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
        curated: Callable[[CacheRequest], str | None] | None = None,
    ) -> Outcome[Iterator[C]]:
        """A hit replayed as the framework's stream (``replay``), else the model's stream
        (``open_stream()``) passed through and stored once complete (``combine`` makes the
        ``Answer`` of its chunks).  With a ``coalescer``, the threads that ask the same
        meanwhile replay that one stream as it comes, and end as it ends (its error when it
        failed, ``LeaderLeft`` when its reader left it unfinished).  ``curated`` as ``answer``
        takes it: its text replayed as a FAQ hit."""
        options = dict(semantic=semantic, ttl=_ttl(ttl), category=category)
        with one_request(self.metrics):
            asked = self.pipeline.asked(request)
            asked.curated = curated
            return stream_outcome(self.pipeline, asked, open_stream, combine, replay, options,
                                  faq=faq, coalescer=coalescer)  # fmt: skip

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
        curated: Callable[[CacheRequest], str | None] | None = None,
    ) -> Outcome[AsyncIterator[C]]:
        """``stream`` from async code (``open_stream`` returns an async iterator, or a
        coroutine that makes one): the tasks of one event loop share a stream."""
        options = dict(semantic=semantic, ttl=_ttl(ttl), category=category)
        with one_request(self.metrics):
            asked = self.pipeline.asked(request)
            asked.curated = curated
            return await astream_outcome(self.pipeline, asked, open_stream, combine, replay,
                                         options, faq=faq, coalescer=coalescer)  # fmt: skip

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
        pipeline = self.pipeline
        steps = store_steps(pipeline, pipeline.asked(request), answer, _same, semantic=semantic,
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
        pipeline = self.pipeline
        steps = store_steps(pipeline, pipeline.asked(request), answer, _same, semantic=semantic,
                            began=began, ttl=_ttl(ttl), rule=rule)  # fmt: skip
        return await arun(steps)

    def began(self, request: CacheRequest) -> Stamp | None:
        """The versions the last miss of ``request`` began under, in this thread or task (see
        ``update``); ``None`` when it did not miss here."""
        return self.exact.began(self.key(request))

    # the parts ------------------------------------------------------------------------------
    @property
    def admin(self) -> Admin:
        """The admin verbs (``admin.py``): what the CLI and the review page call."""
        return self._admin

    @property
    def faq(self) -> FaqStore | None:
        """The FAQ store, opened on first use when it holds entries; ``None`` otherwise."""
        return self._admin.faq

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

    def asked(self, request: CacheRequest) -> Asked:
        """``request`` checked and analysed (``Pipeline.asked``)."""
        return self.pipeline.asked(request)

    def _repr_html_(self) -> str:
        """A notebook shows the cache as a small table of what it did (this process)."""
        return self._admin.html()


def _same(answer: Answer) -> Answer:
    return answer


def _unused(*args: Any) -> Any:
    raise AssertionError("the other runner's call")  # (Call needs both; one runs)


def _ttl(ttl: float | None) -> float | None:
    """An update's TTL: given, or the ``entry_options`` block's (``None``: the policy's)."""
    if ttl is None:
        return current_entry_options().ttl
    return checked_ttl(ttl)


def _open_store(
    where: Redis | L2Store | None, path: str | Path | None, exact: Exact
) -> L2Store | None:
    """The configured L2 store; a SQLite file that cannot be opened now (locked, unreadable,
    damaged) is a store that is down until it opens (``Reopening``), never skipped."""
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

    def opened() -> SQLiteStore:
        return SQLiteStore(file, max_entries=exact.max_entries, max_bytes=exact.max_bytes)

    try:
        return opened()
    except (OSError, sqlite3.Error) as exc:
        log.error("tricache: L2 store unavailable (%s: %s); serving nothing it cannot verify "
                  "until it opens (tried every 2 s)", file, exc)  # fmt: skip
        return cast(L2Store, Reopening(opened, SQLiteStore, exc, name="sqlite", path=file))
