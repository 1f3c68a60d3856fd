"""TriCache: a three-tier cache for the LLM calls of LangChain and LlamaIndex apps.

The public surface::

    from tricache import Cache
    cache = Cache()                                  # embedded: memory + SQLite
    cache = Cache(redis_url="redis://cache:6379/0", semantic=Semantic(threshold=0.95))
    req = cache.request("How do I reset my password?", system="You are a helpdesk bot.")
    if (hit := cache.lookup(req)) is None:
        cache.update(req, call_the_llm(req))
    # or the whole flow (coalescing, the reuse rule, streams): flow.py, cache.answer(...)

Where to look: ``cache.py`` (the lookup order and the admin verbs), ``flow.py`` (the flow
around a model call every adapter runs), ``tiers.py`` (opening the
semantic tier and the FAQ), ``key/`` (what makes a key), ``exact/``, ``semantic/``, ``faq/``,
``kv/`` (the tiers), ``stores/`` (SQLite, Redis), ``settings.py`` (every option and default).
"""

from typing import TYPE_CHECKING, Any

from .cache import Cache, Entry
from .exact.coalesce import Coalescer, LeaderLeft
from .exact.link import StoreUnavailable
from .exact.policy import TtlPolicy
from .exact.versions import Stamp
from .flow import Answer, Outcome, Reuse
from .hit import Hit
from .key.entry import CacheEntry
from .key.options import entry_options
from .key.request import CacheRequest, Turn
from .ops.metrics import Metrics
from .semantic.guards.checks import Guard
from .settings import Exact, Faq, Learn, Qdrant, Redis, Reranker, Semantic

if TYPE_CHECKING:
    from .faq.store import FaqEntry

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "Cache",
    "CacheEntry",
    "CacheRequest",
    "Coalescer",
    "Entry",
    "Exact",
    "Faq",
    "FaqEntry",
    "Guard",
    "Hit",
    "LeaderLeft",
    "Learn",
    "Metrics",
    "Outcome",
    "Qdrant",
    "Redis",
    "Reranker",
    "Reuse",
    "Semantic",
    "Stamp",
    "StoreUnavailable",
    "TtlPolicy",
    "Turn",
    "__version__",
    "entry_options",
]


def __getattr__(name: str) -> Any:
    if name == "FaqEntry":  # (numpy loads with the FAQ, not with ``import tricache``)
        from .faq.store import FaqEntry

        return FaqEntry
    if name in _MOVED:  # internals this module used to export: importable one more release
        import importlib
        import warnings

        module = _MOVED[name]
        warnings.warn(
            f"tricache.{name} is internal: import it from {module}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'tricache' has no attribute {name!r}")


_MOVED = {
    "CircuitBreaker": "tricache.ops.breaker",
    "CorruptEntry": "tricache.key.entry",
    "ExactTier": "tricache.exact.tier",
    "context_fingerprint": "tricache.key.request",
    "data_dir": "tricache.runtime.home",
    "exact_key": "tricache.key.request",
    "normalize": "tricache.key.normalize",
    "same_question": "tricache.key.forms",
}
