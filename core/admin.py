"""The admin verbs, once: what the CLI, the review page and every framework object call.

Entries (list, show, delete), feedback, invalidation (tags, the knowledge-base version, the
watermark), eviction, clearing, the FAQ's curation and the counters.  ``Cache`` and the
adapters reach them through ``verbs.CacheVerbs``; nothing here serves a request.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .exact.tier import ExactTier, StoreUnavailable
from .key.entry import CacheEntry
from .key.request import is_entry_key, memo_bytes
from .ops.ledger import Ledger, summary
from .ops.metrics import Metrics
from .pipeline import RecentHits
from .stores.base import PointLog
from .tiers import TierLoader

if TYPE_CHECKING:
    from .faq.store import FaqEntry, FaqStore
    from .semantic.tier import SemanticTier

__all__ = ["Admin", "Entry"]

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


class Admin:
    """The admin verbs of one cache (its namespace, its tiers, its counters)."""

    def __init__(
        self,
        exact: ExactTier,
        tiers: TierLoader,
        metrics: Metrics,
        *,
        namespace: str,
        ledger: Ledger | None,
        recent_hits: RecentHits,
    ) -> None:
        self.exact = exact
        self.tiers = tiers
        self.metrics = metrics
        self.namespace = namespace
        self.ledger = ledger
        self.recent_hits = recent_hits  # the questions each semantic hit compared

    # the entries ---------------------------------------------------------------------------
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
        """One entry by its id (``Entry.id``, a hit's ``entry_id``), or ``None`` when it is
        gone; in any process (the versions are read first).  An id that is not one of this
        cache's is a ``ValueError``; ``StoreUnavailable`` when the store does not answer."""
        kind, key = self._target(entry_id)
        if kind == "faq":
            raise ValueError("a FAQ entry: Cache.faq_entries() lists them")
        found = self.exact.read(key)
        return Entry.of(key, found) if found is not None else None

    def delete(self, entry_id: str) -> None:
        """Delete one entry (its id, or a hit's ``entry_id``): its answer from the store and
        from the L1 of every cache of this process at once (another process's L1 lets it go
        at its next poll or event, within ``refresh_s``), and the question indexed for it
        from every kind of index.  ``StoreUnavailable`` when the store did not take it."""
        kind, key = self._target(entry_id)
        if kind == "faq":
            raise ValueError("a FAQ entry: Cache.delete_faq([id]) deletes it")
        self.exact.delete(key)
        if (tier := self.tiers.open_semantic()) is not None:
            _forget(tier, key, self.namespace)

    # feedback ------------------------------------------------------------------------------
    def feedback(self, entry_id: str, *, correct: bool) -> None:
        """Report whether a served answer was right (``entry_id``: the ``Hit.entry_id``).

        A wrong exact hit deletes that entry, a wrong semantic hit removes the matched question
        from the semantic tier (its own question still gets it), a wrong FAQ answer is not
        served to that question again.  Nothing outside this cache's namespace is touched;
        an id that is not one of its hits' is a ``ValueError``.  Works in any process (not
        only the one served).  Recorded for calibration once done: when the store cannot take
        it, ``StoreUnavailable`` and nothing is recorded."""
        kind, target = self._target(entry_id)
        tier = self.tiers.open_semantic()
        if not correct:
            self._reject(kind, target, tier)
        cached_q, new_q, score = self.recent_hits.get(entry_id, (None, None, None))
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

    def _target(self, entry_id: str) -> tuple[str, Any]:
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

    # versions and upkeep -------------------------------------------------------------------
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
        if (tier := self.tiers.open_semantic()) is not None:
            tier.index.delete_expired(time.time())
        return counts

    def clear(self) -> None:
        """Drop every entry of the namespace, and its semantic points, in every process."""
        self.exact.clear()  # the store's labels go with its entries
        if (tier := self.tiers.open_semantic()) is not None:
            tier.clear(self.namespace)
            if tier.learning is not None:
                tier.learning.reset()
        elif isinstance(store := self.exact.store, PointLog):  # the tier is off here
            store.clear_points(self.namespace)

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

    # the counters --------------------------------------------------------------------------
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

    def shared_stats(self, window_s: float = 3600.0) -> dict[str, Any]:
        """What every process of this namespace did over the last ``window_s`` seconds, from
        the counters each adds to the shared store every 10 s (``tricache stats``): lookups,
        hits and hit rate per tier, LLM calls, tokens and cost saved, feedback.  Without a
        store, this process's counters."""
        if self.ledger is None:
            return {"window_s": window_s, "processes": "this one", **summary(self.metrics.counts())}
        self.ledger.flush()
        return {"window_s": window_s, "processes": "all", **summary(self.ledger.read(window_s))}

    def html(self) -> str:
        """What this process's cache did, as a small HTML table (a notebook's view of it)."""
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


def _forget(tier: SemanticTier, key: str, namespace: str) -> None:
    """The question indexed for ``key`` leaves every index (from the store, so from every
    process); ``StoreUnavailable`` when it cannot."""
    try:
        tier.forget(key, namespace)
    except Exception as exc:
        raise StoreUnavailable(f"the question indexed for it is not forgotten: {exc}") from exc


def _replica_stats(tier: SemanticTier | None) -> dict[str, Any] | None:
    """Points, lag and disk use of this process's replica of the vector index (or ``None``)."""
    stats = getattr(tier.index, "stats", None) if tier is not None else None
    return stats() if callable(stats) else None
