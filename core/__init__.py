"""TriCache: a three-tier cache for the LLM calls of LangChain and LlamaIndex apps.

The public surface::

    from tricache import Cache
    cache = Cache()                                  # embedded: memory + SQLite
    cache = Cache(redis_url="redis://cache:6379/0", semantic=Semantic(threshold=0.95))
    req = cache.request("How do I reset my password?", system="You are a helpdesk bot.")
    if (hit := cache.lookup(req)) is None:
        cache.update(req, call_the_llm(req))
"""

from .exact.policy import TtlPolicy
from .exact.tier import ExactTier, StoreUnavailable
from .exact.versions import Stamp
from .key.entry import CacheEntry, CorruptEntry
from .key.forms import same_question
from .key.normalize import normalize
from .key.request import CacheRequest, Turn, context_fingerprint, exact_key
from .ops.breaker import CircuitBreaker
from .ops.metrics import Metrics
from .runtime.home import data_dir
from .settings import Exact, Faq, Learn, Semantic
from .stack import Cache, Hit

__version__ = "0.1.0"

__all__ = [
    "Cache",
    "CacheEntry",
    "CacheRequest",
    "CircuitBreaker",
    "CorruptEntry",
    "Exact",
    "ExactTier",
    "Faq",
    "Hit",
    "Learn",
    "Metrics",
    "Semantic",
    "Stamp",
    "StoreUnavailable",
    "TtlPolicy",
    "Turn",
    "__version__",
    "context_fingerprint",
    "data_dir",
    "exact_key",
    "normalize",
    "same_question",
]
