"""The tiers' options: one small value object per tier, so ``Cache`` stays readable.

The common case needs none of them::

    Cache()                                   # embedded: SQLite + a local vector replica
    Cache(redis_url="redis://cache:6379/0")   # shared by every process that uses this Redis
    Cache(store=Redis("redis://cache:6379/0", cluster=True, timeout=0.1))
    Cache(path="/srv/app/cache.sqlite3")      # SQLite there; the FAQ and vectors beside it
    Cache(exact=Exact(ttl=TtlPolicy(default=600)), semantic=Semantic(threshold=0.95))
    Cache(semantic=Semantic(index=Qdrant("http://qdrant:6333")))
    Cache(semantic=False, faq=False)          # the exact tier only

Where the L2 store is (``store=``: ``Redis(...)``, a store object, or ``False`` for none;
``redis_url=`` is the shortcut for ``Redis(url)``; the default is SQLite at ``path``), who
asks (``namespace``, ``tenant``) and what may be cached (``cacheable``,
``volatile_context``) stay arguments of ``Cache`` itself.  Every default is written here,
once: the tiers take these objects.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .exact.policy import TtlPolicy
from .semantic.guards.checks import DEFAULT_GUARDS, Guard
from .stores.base import L2Store

# A re-ranker scores (question, candidate questions); a candidate under
# ``Semantic(rerank_threshold=...)`` is refused (a cross-encoder, say).
Reranker = Callable[[str, Sequence[str]], Sequence[float]]

__all__ = [
    "Exact",
    "Faq",
    "Learn",
    "Qdrant",
    "Redis",
    "Reranker",
    "Resolved",
    "Semantic",
    "resolve",
]


def _number(owner: str, name: str, value: Any, low: float, high: float, *,
            low_open: bool = True, high_open: bool = False) -> None:  # fmt: skip
    """``value`` must be a real number within (``low``, ``high``] (ends as told): a
    ``TypeError`` or ``ValueError`` that names the setting and says what it takes."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}({name}=...) takes a number, not {value!r}")
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not math.isfinite(value) or too_low or too_high:
        raise ValueError(f"{owner}({name}={value!r}) must be in {left}{low:g}, {high:g}{right}")


def _count(owner: str, name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}({name}=...) takes a whole number, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{owner}({name}={value!r}) must be from {low} to {high}")


def _flag(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{owner}({name}=...) takes True or False, not {value!r}")


def _optional(owner: str, name: str, value: Any, kind: type | tuple[type, ...]) -> None:
    if value is not None and not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{owner}({name}=...) takes {names} or None, not {value!r}")


@dataclass(frozen=True, slots=True)
class Redis:
    """L2 in Redis (``cluster=True``: Redis Cluster), shared by every process that uses it.
    ``timeout``: seconds a store call may take before it counts as a miss."""

    url: str
    cluster: bool = False
    timeout: float = 0.05

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise TypeError("Redis(url) takes a redis:// or rediss:// URL")
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"Redis(url={self.url!r}) is not a redis://, rediss:// or unix:// URL")
        _flag("Redis", "cluster", self.cluster)
        _number("Redis", "timeout", self.timeout, 0, 60)


@dataclass(frozen=True, slots=True)
class Qdrant:
    """The semantic tier's vectors in a Qdrant server or cluster (``url``), or through a
    ``qdrant_client.QdrantClient`` the app made (``client``, used when both are given)."""

    url: str | None = None
    client: Any = None

    def __post_init__(self) -> None:
        if not self.url and self.client is None:
            raise TypeError("Qdrant() takes a url or a client")


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
    # the embedded SQLite file's bound, least recently used entries evicted beyond it (a
    # Redis is bounded by its own maxmemory, with a volatile-* policy: entries carry a TTL,
    # the versions that keep them fresh do not and must never be evicted)
    max_entries: int | None = None
    max_bytes: int | None = None  # of stored answers (the file keeps its pages for reuse)

    def __post_init__(self) -> None:
        _optional("Exact", "ttl", self.ttl, TtlPolicy)
        for name in ("max_entries", "max_bytes"):
            if getattr(self, name) is not None:
                _count("Exact", name, getattr(self, name), 1, 2**62)
        _count("Exact", "l1_max_items", self.l1_max_items, 0, 10**9)
        _count("Exact", "l1_max_bytes", self.l1_max_bytes, 0, 2**50)
        _flag("Exact", "bloom", self.bloom)
        _number("Exact", "refresh_s", self.refresh_s, 0, 3600)
        if not isinstance(self.cache_version, str) or not self.cache_version:
            raise TypeError(
                f"Exact(cache_version=...) takes a non-empty str, not {self.cache_version!r}"
            )
        _flag("Exact", "cache_time_dependent", self.cache_time_dependent)


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
        _number("Learn", "error_bound", self.error_bound, 0, 1, high_open=True)
        _number("Learn", "explore", self.explore, 0, 0.5)  # unexplored hits go unchecked
        _number("Learn", "floor", self.floor, 0, 1, high_open=True)
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
    audit: bool = True  # record every decision for calibration and review
    audit_questions: bool = True  # the questions in full (tricache review); False: hashes only
    # how long the audit log keeps rows, and its size at most (None: TRICACHE_AUDIT_KEEP_DAYS
    # and TRICACHE_AUDIT_KEEP_MB, else 30 days and 100 MB)
    audit_keep_days: float | None = None
    audit_keep_mb: float | None = None
    vector_path: str | Path | None = None  # where this machine's replicas of the index live
    learn: Learn | None = None  # learn decisions from the app's traffic (off: the threshold)
    # stored neighbours that got the same answer raise a candidate's score (``decision.py``);
    # False: the cosine and the guards alone
    agreement: bool = True
    # where the vectors are searched: "auto" (the Redis query engine when the store is a Redis
    # that has it, else each process's replica), "replica", "redis-search", or Qdrant(...)
    index: str | Qdrant = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.index, Qdrant) and self.index not in _INDEXES:
            raise ValueError(
                "Semantic(index=...) is 'auto', 'replica', 'redis-search' or Qdrant(url)"
            )
        if self.threshold is not None:  # a cosine similarity
            _number("Semantic", "threshold", self.threshold, 0, 1)
        _count("Semantic", "top_k", self.top_k, 1, 100)
        if isinstance(self.guards, str | bytes) or not all(callable(g) for g in self.guards):
            raise TypeError("Semantic(guards=...) takes a sequence of guard functions")
        if self.reranker is not None and not callable(self.reranker):
            raise TypeError("Semantic(reranker=...) takes (question, candidates) -> scores")
        _number("Semantic", "rerank_threshold", self.rerank_threshold, -1e9, 1e9)
        _flag("Semantic", "audit", self.audit)
        _flag("Semantic", "agreement", self.agreement)
        _flag("Semantic", "audit_questions", self.audit_questions)
        for name in ("audit_keep_days", "audit_keep_mb"):
            if (value := getattr(self, name)) is not None:
                _number("Semantic", name, value, 0, 1e9)
        _optional("Semantic", "vector_path", self.vector_path, (str, Path))
        _optional("Semantic", "learn", self.learn, Learn)


_INDEXES = ("auto", "replica", "redis-search")


@dataclass(frozen=True, slots=True)
class Faq:
    """The curated FAQ fallback (``learn``: its threshold learned from the app's traffic,
    as the semantic tier's).

    Curated answers are written for the question alone, so they answer only a first question
    asked bare: no conversation, no context around it (a template's retrieved passages), no
    tools or answer format asked for, and no system prompt but those in ``systems`` (the
    app's own, as it sends them: "Reply only in French" may not get an English answer)."""

    path: str | Path | None = None  # None: beside the L2 file, or in the data directory
    threshold: float = 0.80
    learn: Learn | None = None
    systems: tuple[str, ...] = ()  # the system prompts the curated answers are right under

    def __post_init__(self) -> None:
        _optional("Faq", "path", self.path, (str, Path))
        _number("Faq", "threshold", self.threshold, 0, 1)
        _optional("Faq", "learn", self.learn, Learn)
        if isinstance(self.systems, str) or not all(isinstance(s, str) for s in self.systems):
            raise TypeError("Faq(systems=) takes a sequence of system prompts (str)")
        object.__setattr__(self, "systems", tuple(self.systems))


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a ``Cache`` was given, worked out: where L2 is and each tier's options."""

    store: Redis | L2Store | None  # None: SQLite at ``path`` (when ``l2``)
    l2: bool  # False: L1 only
    path: str | Path | None  # the SQLite file, with the FAQ and the vector replicas beside it
    exact: Exact
    semantic: Semantic | None  # None: off
    faq: Faq | None


def resolve(
    *,
    store: Redis | L2Store | bool | None,
    redis_url: str | None,
    path: str | Path | None,
    exact: Exact | None,
    semantic: Semantic | bool,
    faq: Faq | bool,
    legacy: Mapping[str, Any],
) -> Resolved:
    """The settings of one ``Cache``, with the keywords of earlier releases folded in (one
    ``DeprecationWarning`` naming their new home); an unknown keyword is a ``TypeError``."""
    unknown = sorted(set(legacy) - set(_LEGACY) - set(_LEGACY_STORE) - {"history_turns"})
    if unknown:
        raise TypeError(f"Cache() got unexpected keyword arguments: {', '.join(unknown)}")
    if legacy.get("history_turns") is not None:
        warnings.warn(
            "history_turns is ignored: keys cover the whole conversation",
            DeprecationWarning,
            stacklevel=3,
        )
    old = {k: v for k, v in legacy.items() if k != "history_turns"}
    if old:
        warnings.warn(
            "pass the tiers' options as settings objects ("
            + ", ".join(f"{k}= → {_moved_to(k)}" for k in sorted(old))
            + "); the old keywords go in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
    exact_ = _setting(exact, Exact, "exact") or Exact()
    semantic_ = _setting(semantic, Semantic, "semantic")
    faq_ = _setting(faq, Faq, "faq")
    by_kind: dict[type, dict[str, Any]] = {Exact: {}, Semantic: {}, Faq: {}}
    for name, value in old.items():
        if name in _LEGACY:
            kind, field = _LEGACY[name]
            by_kind[kind][field] = value
    if old.get("qdrant_url") or old.get("qdrant_client") is not None:
        by_kind[Semantic]["index"] = Qdrant(old.get("qdrant_url"), old.get("qdrant_client"))
    if faq_ is not None and faq_.learn is not None and semantic_ is None:
        raise ValueError("Faq(learn=...) learns through the semantic tier: keep it on")
    l2 = store is not False and old.get("l2", True) is not False
    where = _store(store, redis_url, old) if l2 else None
    exact_ = replace(exact_, **by_kind[Exact])
    if where is not None and (exact_.max_entries or exact_.max_bytes):
        raise ValueError(
            "Exact(max_entries=, max_bytes=) bound the embedded SQLite store; bound a Redis with"
            " its maxmemory and maxmemory-policy volatile-lru (never allkeys-*: it would evict"
            " the versions), a store object with its own options"
        )
    return Resolved(
        where,
        l2,
        path,
        exact_,
        replace(semantic_, **by_kind[Semantic]) if semantic_ is not None else None,
        replace(faq_, **by_kind[Faq]) if faq_ is not None else None,
    )


def _store(
    store: Redis | L2Store | bool | None, redis_url: str | None, old: Mapping[str, Any]
) -> Redis | L2Store | None:
    if redis_url:
        if store not in (None, True):
            raise TypeError("Cache() takes store= or redis_url=, not both")
        options = {k: old[k] for k in ("cluster", "timeout") if k in old}
        return Redis(redis_url, **options)
    return None if isinstance(store, bool) else store  # True: the default, SQLite


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


def _moved_to(name: str) -> str:
    if name in _LEGACY:
        return f"{_LEGACY[name][0].__name__}(...)"
    return _LEGACY_STORE[name]


# The defaults, for the tiers' own constructors (one place: the settings objects).
DEFAULT_SEMANTIC = Semantic()
DEFAULT_FAQ = Faq()

# Keyword arguments ``Cache`` took before the settings objects: kept for one release.
_LEGACY: dict[str, tuple[type, str]] = {
    **{f.name: (Exact, f.name) for f in fields(Exact)},
    **{f.name: (Semantic, f.name) for f in fields(Semantic)},
    "faq_path": (Faq, "path"),
    "faq_threshold": (Faq, "threshold"),
}
del _LEGACY["learn"], _LEGACY["index"]  # new: never keywords of Cache
_LEGACY_STORE = {
    "cluster": "store=Redis(url, cluster=...)",
    "timeout": "store=Redis(url, timeout=...)",
    "l2": "store=False",
    "qdrant_url": "Semantic(index=Qdrant(url))",
    "qdrant_client": "Semantic(index=Qdrant(client=...))",
}
