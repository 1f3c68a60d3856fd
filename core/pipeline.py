"""A request through the tiers: lookup exact → semantic → FAQ, and the write-back.

Every tier has one shape (``TierLookup``): a lookup step over the request's analysis
(``Asked``) that answers a ``Hit`` or ``None``; the pipeline asks them in order (``_order``:
which tiers the call allows) and stops at the first hit.  ``TierFrame`` gives every tier the
same frame — its time measured, a failure counted and taken as a miss — so a tier that is down
or broken never reaches the app; what a hit saved is counted once, for any tier.  The
model call around a lookup (coalescing, streams, what may be stored) is ``flow.py``; ``Cache``
is the facade that builds a ``Pipeline`` and hands it requests.

Lookups and updates are steps (``runtime/steps.py``): written once, driven by the sync and the
async runner alike.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from .exact.link import store_error
from .exact.tier import ExactTier
from .faq.lookup import MAX_QUESTION_CHARS, faq_hit, faq_question
from .hit import STORED, Hit
from .key.asked import Asked, ask
from .key.entry import CacheEntry
from .key.options import in_block
from .key.request import CacheRequest
from .ops.metrics import Metrics, failed
from .ops.requests import count_declined, count_lookup
from .runtime.steps import Off, Steps
from .settings import Resolved
from .tiers import TierLoader

if TYPE_CHECKING:
    from .semantic.tier import SemanticTier

__all__ = ["TRUSTED_MISS", "Pipeline", "RecentHits", "TierFrame", "TierLookup"]

# the questions a semantic hit compared, by its entry_id: what ``feedback`` records
RecentHits = OrderedDict[str, tuple[str, str, float]]
_RECENT_HITS = 1000


class TierFrame:
    """The frame of one tier's work, as a ``with`` block: timed under ``tier``; an exception
    is counted (``what`` failed), logged and a miss — unless ``failure(exc)`` says it dealt
    with it — so a bug or an outage in a tier never breaks the app.  The block's result keeps
    the value it had before the block (``None``: a miss)."""

    __slots__ = ("failure", "metrics", "start", "tier", "what")

    def __init__(
        self,
        metrics: Metrics,
        tier: str,
        what: str,
        failure: Callable[[Exception], bool] | None = None,
    ) -> None:
        self.metrics, self.tier, self.what, self.failure = metrics, tier, what, failure
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        self.metrics.observe(self.tier, time.perf_counter() - self.start)
        if not isinstance(exc, Exception):  # none, or the caller leaving (cancel, exit)
            return False
        if self.failure is None or not self.failure(exc):
            failed(self.metrics, self.what, exc)
        return True


class Pipeline:
    """The tiers in lookup order and the write-back, for one ``Cache``."""

    def __init__(
        self,
        settings: Resolved,
        exact: ExactTier,
        tiers: TierLoader,
        metrics: Metrics,
        *,
        namespace: str,
        prices: dict[str, float],
    ) -> None:
        self.settings = settings
        self.exact = exact
        self.tiers = tiers
        self.metrics = metrics
        self.namespace = namespace
        self.prices = prices  # USD per 1M tokens, per model name: what a hit saved
        self.cache_time_dependent = settings.exact.cache_time_dependent
        self.recent_hits: RecentHits = OrderedDict()
        # the tiers, each asked the same way (``TierLookup``)
        self._exact = ExactLookup(exact, metrics)
        self._semantic = SemanticLookup(tiers, exact, metrics, self.recent_hits)
        self._faq = FaqLookup(tiers, settings, metrics)

    # the request's analysis ----------------------------------------------------------------
    def asked(self, request: CacheRequest) -> Asked:
        """``request`` checked and analysed: once per lookup or update, or per ``answer``
        (with the tags and category of an ``entry_options`` block around the call)."""
        self.check(request)
        request = in_block(request)
        return ask(request, self.exact.key(request))

    def check(self, request: CacheRequest) -> None:
        """``TypeError`` / ``ValueError`` for a request this cache cannot take."""
        if not isinstance(request, CacheRequest):
            raise TypeError(f"expected CacheRequest, got {type(request).__name__}")
        if request.namespace != self.namespace:
            raise ValueError(
                f"request namespace {request.namespace!r} != cache namespace {self.namespace!r}"
            )

    def may_store(self, asked: Asked) -> bool:
        """Whether an answer to ``asked`` may be cached at all: not when it depends on the time
        or the asker (unless ``cache_time_dependent``), judged on the canonical question (a
        template's context may say "latest": the question is what is asked)."""
        return self.cache_time_dependent or asked.cacheable(self.tiers.judge)

    def _may_cache(self, asked: Asked) -> bool:
        """``may_store``, counted when it says no: then no tier but the curated FAQ serves
        it, and none stores it."""
        if self.may_store(asked):
            return True
        self.metrics.incr("exact", "skipped_time_dependent")
        return False

    # lookup --------------------------------------------------------------------------------
    def lookup_steps(self, asked: Asked, semantic: bool, faq: bool = True) -> Steps[Hit | None]:
        """The lookup: exact → semantic → FAQ; one row in the audit log (``tricache
        review``) when the semantic tier keeps one."""
        tier = self.tiers.semantic
        if tier is None or tier.audit is None:
            return (yield from self._lookup_steps(asked, semantic, faq))
        with tier.audit.watching() as seen:  # (the decision the semantic tier records)
            hit = yield from self._lookup_steps(asked, semantic, faq)
        tier.audit.looked_up(asked, hit, seen)
        return hit

    def _lookup_steps(self, asked: Asked, semantic: bool, faq: bool) -> Steps[Hit | None]:
        count_lookup(self.metrics)  # once per request, whichever tiers it passes
        order = self._order(asked, semantic, faq)
        found: Hit | TrustedMiss | None = None
        for tier in order:
            found = yield from tier.lookup_steps(asked)
            if found is not None:
                break
        if isinstance(found, TrustedMiss):  # no later tier answers it, but the app may
            return self._unlabelled(asked, self._curated(asked))
        if found is not None:
            self._count_savings(found)
        hit = found or self._curated(asked)
        if hit is not None and hit.tier != "exact" and order[:1] == (self._exact,):
            self.exact.settle(asked.key)  # its miss was answered: no answer will be written
        return self._unlabelled(asked, hit)

    def _order(self, asked: Asked, semantic: bool, faq: bool) -> tuple[TierLookup, ...]:
        """The tiers that may answer ``asked``, in lookup order."""
        faq = faq and semantic  # (curated answers match questions, as the semantic tier does)
        if faq and asked.tags:  # a curated answer is written under no tag: never served to
            self.metrics.incr("faq", "skipped_tagged")  # a request that declares one
            faq = False
        after: tuple[TierLookup, ...] = (self._faq,) if faq else ()
        if not self._may_cache(asked):  # curated answers only
            count_declined(self.metrics)  # (once per request: ``tricache stats``)
            return after
        return (self._exact, self._semantic, *after) if semantic else (self._exact, *after)

    def _unlabelled(self, asked: Asked, hit: Hit | None) -> Hit | None:
        """A request the cache answered labels nothing, even if the app stores the answer it
        was served (a label never comes from the cache's own answer)."""
        tier = self.tiers.semantic
        if hit is not None and tier is not None and tier.learning is not None:
            tier.learning.forget(asked.key)
        return hit

    def _curated(self, asked: Asked) -> Hit | None:
        """The app's own curated answer for this call (``Asked.curated``), when every tier
        missed: served as a FAQ answer, never stored.  What the app's function raises is the
        app's error: it propagates."""
        if asked.curated is None:
            return None
        text = asked.curated(asked.request)
        if text is None:
            return None
        self.metrics.incr("faq", "app_hits")
        return Hit(text=text, payload=None, tier="faq", level="app", key=asked.key,
                   entry=CacheEntry(text), entry_id="")  # fmt: skip

    def _count_savings(self, hit: Hit) -> None:
        """What ``hit`` saved: the tokens of the answer it served, and their price."""
        entry = hit.entry
        if entry.tokens:
            self.metrics.incr(hit.tier, "tokens_saved", entry.tokens)
            price = self.prices.get(entry.model)
            if price:
                self.metrics.incr(hit.tier, "cost_saved_micro_usd", round(entry.tokens * price))

    # write-back ----------------------------------------------------------------------------
    def update_steps(
        self, asked: Asked, text: str, payload: Any, semantic: bool, fields: dict[str, Any]
    ) -> Steps[bool]:
        """The update: written to the exact tier, then indexed; the answer labels the
        candidate its miss left pending."""
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


class TrustedMiss:
    """A miss no later tier may answer: the exact tier holds "no cacheable answer" for it."""


TRUSTED_MISS = TrustedMiss()


class TierLookup(Protocol):
    """A tier as the pipeline asks it: one lookup step over the request's analysis, which
    answers a ``Hit``, ``None`` (a miss: the next tier is asked) or ``TRUSTED_MISS``.  Its
    work runs in a ``TierFrame``; CPU work in an ``Off`` (a thread, when async)."""

    def lookup_steps(self, asked: Asked) -> Steps[Hit | TrustedMiss | None]: ...


class ExactLookup:
    """The exact tier: L1, then L2 behind its Bloom filter (``exact/tier.py``)."""

    def __init__(self, exact: ExactTier, metrics: Metrics) -> None:
        self.exact, self.metrics = exact, metrics

    def lookup_steps(self, asked: Asked) -> Steps[Hit | TrustedMiss | None]:
        found = None
        with TierFrame(self.metrics, "exact", "lookup"):
            found = yield from self.exact.get_steps(asked)
        if found is None:
            return None
        entry = found.entry
        if entry.negative:  # "known to have no cacheable answer": a miss the caller can trust
            self.metrics.incr("exact", "negative_hits")
            return TRUSTED_MISS
        # (its payload copied for the caller when read: an adapter may rebuild from the entry)
        return Hit(text=entry.text, payload=STORED, tier="exact",
                   level=found.level, key=found.key, entry=entry, entry_id=found.key)  # fmt: skip


class SemanticLookup:
    """The semantic tier (``semantic/tier.py``), when its index is up and its breaker lets
    it ask; it embeds, so it runs in a thread when async."""

    def __init__(
        self, tiers: TierLoader, exact: ExactTier, metrics: Metrics, recent_hits: RecentHits
    ) -> None:
        self.tiers, self.exact, self.metrics = tiers, exact, metrics
        self.recent_hits = recent_hits

    def lookup_steps(self, asked: Asked) -> Steps[Hit | TrustedMiss | None]:
        return (yield Off(self.lookup, asked))

    def lookup(self, asked: Asked) -> Hit | None:
        tier = self.tiers.ready_semantic()
        if tier is None:
            return None
        if tier.index_on_store and not self.exact.link.available():
            self.metrics.incr("semantic", "skipped_store_down")  # one timeout per lookup
            return None
        if not self.tiers.breaker.allow():  # (last: it may hand this lookup its trial call)
            return None
        found = None
        with TierFrame(self.metrics, "semantic", "semantic lookup", partial(self._failed, tier)):
            found = tier.lookup(asked, self.exact.fetch)
            self.tiers.breaker.success()
        if found is None:
            return None
        entry_id = f"s:{found.ref}"
        # for the feedback record: the questions compared (never a whole long prompt)
        self.recent_hits[entry_id] = (found.question, asked.request.query[:MAX_QUESTION_CHARS],
                                      found.score)  # fmt: skip
        while len(self.recent_hits) > _RECENT_HITS:
            self.recent_hits.popitem(last=False)
        entry = found.entry
        return Hit(text=entry.text, payload=STORED, tier="semantic",
                   level=tier.index.name, key=asked.key, entry=entry, score=found.score,
                   entry_id=entry_id, matched_question=found.question)  # fmt: skip

    def _failed(self, tier: SemanticTier, exc: Exception) -> bool:
        """The search failed: the breaker counts it; when the store's server failed, the
        store link says so (one warning now and then; the exact tier's breaker is its own
        reads': a search failing while the index rebuilds must not switch L2 off)."""
        self.tiers.breaker.failure()
        if tier.index_on_store and store_error(exc):
            self.exact.link.failed("search", exc, breaker=False)
            return True
        return False


class FaqLookup:
    """The curated answers (``faq/``), for a first question asked bare; it embeds, so it
    runs in a thread when async."""

    def __init__(self, tiers: TierLoader, settings: Resolved, metrics: Metrics) -> None:
        self.tiers, self.settings, self.metrics = tiers, settings.faq, metrics

    def lookup_steps(self, asked: Asked) -> Steps[Hit | TrustedMiss | None]:
        return (yield Off(self.lookup, asked))

    def lookup(self, asked: Asked) -> Hit | None:
        try:
            store, settings = self.tiers.ready_faq(), self.settings  # (it reads the file)
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
        hit = None
        with TierFrame(self.metrics, "faq", "faq lookup"):
            hit = faq_hit(store, question, asked, learn=settings.learn, tier=self.tiers.semantic,
                          metrics=self.metrics)  # fmt: skip
        return hit
