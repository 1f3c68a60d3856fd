"""The tiers' options: one small value object per tier, so ``Cache`` stays readable.

The common case needs none of them::

    Cache()                                   # embedded: SQLite + a local vector replica
    Cache(redis_url="redis://cache:6379/0")   # shared by every process that uses this Redis
    Cache(exact=Exact(ttl=TtlPolicy(default=600)), semantic=Semantic(threshold=0.95))
    Cache(semantic=False, faq=False)          # the exact tier only

Where the stores are (``redis_url``, ``path``, ``qdrant_url``), who asks (``namespace``,
``tenant``) and what may be cached (``cacheable``, ``volatile_context``) stay arguments of
``Cache`` itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .exact.policy import TtlPolicy
from .semantic.guards.checks import DEFAULT_GUARDS, Guard

if TYPE_CHECKING:
    from .semantic.tier import Reranker

__all__ = ["Exact", "Faq", "Learn", "Semantic"]


@dataclass(frozen=True, slots=True)
class Exact:
    """The exact tier: L1 in memory, L2 in the store, the Bloom filter, versions."""

    ttl: TtlPolicy | None = None  # per-category TTLs with jitter (None: the default policy)
    l1_max_items: int = 10_000
    l1_max_bytes: int = 64 * 2**20
    bloom: bool = True  # skip the round trip for keys never written
    refresh_s: float = 0.5  # how often versions are polled (pub/sub tells Redis users at once)
    cache_version: str = "1"  # change it to retire every entry (a new prompt format, say)
    cache_time_dependent: bool = False  # cache "today"/"my order" questions (exact tier only)


@dataclass(frozen=True, slots=True)
class Learn:
    """Decisions learned from the app's own traffic (``semantic.learning``): a candidate the
    guards accept is served when the labels keep the expected share of wrong answers under
    ``error_bound``; ``explore`` of the hits that would be served are asked of the LLM instead,
    to keep checking them; ``judge(cached_question, cached_answer, new_question, new_answer)``
    decides whether two answers are the same (default: equal in form, or the same numbers,
    negations and names and very close embeddings).  ``floor``: no threshold below it."""

    error_bound: float = 0.01
    explore: float = 0.05
    judge: Any = None
    floor: float = 0.77

    def __post_init__(self) -> None:
        if not 0 < self.error_bound < 1:
            raise ValueError("Learn(error_bound=...) is a share of lookups, in (0, 1)")
        if not 0 < self.explore <= 0.5:
            raise ValueError("Learn(explore=...) must be in (0, 0.5]: unexplored hits go unchecked")
        if not 0 < self.floor < 1:
            raise ValueError("Learn(floor=...) is a similarity, in (0, 1)")
        if self.judge is not None and not callable(self.judge):
            raise TypeError(
                "Learn(judge=...) takes (cached_question, cached_answer, question, answer)"
            )


@dataclass(frozen=True, slots=True)
class Semantic:
    """The semantic tier: embedder, threshold, guards, re-ranker, audit, index location."""

    embedder: Any = None  # a packaged name, a sentence-transformers model name, or an object
    threshold: float | None = None  # None: the embedder's calibrated threshold
    top_k: int = 5
    guards: Sequence[Guard] = DEFAULT_GUARDS
    reranker: Reranker | None = None
    rerank_threshold: float = 0.5
    audit: bool = True  # record every decision (hashed) for calibration
    vector_path: str | Path | None = None  # where this machine's replicas of the index live
    learn: Learn | None = None  # learn decisions from the app's traffic (off: the threshold)
    # where the vectors are searched: "auto" (the Redis query engine when redis_url points at a
    # server that has it, else each process's replica), "replica" or "redis-search"
    index: str = "auto"

    def __post_init__(self) -> None:
        if self.index not in ("auto", "replica", "redis-search"):
            raise ValueError("Semantic(index=...) is 'auto', 'replica' or 'redis-search'")


@dataclass(frozen=True, slots=True)
class Faq:
    """The curated FAQ fallback (``learn``: its threshold learned from the app's traffic,
    as the semantic tier's)."""

    path: str | Path | None = None  # None: beside the L2 file, or in the data directory
    threshold: float = 0.80
    learn: Learn | None = None


# Keyword arguments ``Cache`` took before the settings objects: kept for one release.
_LEGACY: dict[str, tuple[type, str]] = {
    **{f.name: (Exact, f.name) for f in fields(Exact)},
    **{f.name: (Semantic, f.name) for f in fields(Semantic)},
    "faq_path": (Faq, "path"),
    "faq_threshold": (Faq, "threshold"),
}
del _LEGACY["learn"], _LEGACY["index"]  # new: never keywords of Cache


def from_legacy(
    legacy: Mapping[str, Any], exact: Exact, semantic: Semantic | None, faq: Faq | None
) -> tuple[Exact, Semantic | None, Faq | None]:
    """Fold old keyword arguments into the settings objects, with one ``DeprecationWarning``
    naming their new home; an unknown keyword is a ``TypeError`` as it always was."""
    unknown = sorted(set(legacy) - set(_LEGACY))
    if unknown:
        raise TypeError(f"Cache() got unexpected keyword arguments: {', '.join(unknown)}")
    if not legacy:
        return exact, semantic, faq
    moved = ", ".join(f"{name}= → {_LEGACY[name][0].__name__}(...)" for name in sorted(legacy))
    warnings.warn(
        f"pass the tiers' options as settings objects ({moved}); the old keywords go in the "
        "next release",
        DeprecationWarning,
        stacklevel=3,
    )
    by_kind: dict[type, dict[str, Any]] = {Exact: {}, Semantic: {}, Faq: {}}
    for name, value in legacy.items():
        kind, field = _LEGACY[name]
        by_kind[kind][field] = value
    return (
        replace(exact, **by_kind[Exact]),
        replace(semantic, **by_kind[Semantic]) if semantic is not None else None,
        replace(faq, **by_kind[Faq]) if faq is not None else None,
    )
