"""LangChain adapter for TriCache.

from langchain_core.globals import set_llm_cache
from langchain_tricache import TriCache

set_llm_cache(TriCache())                        # embedded, no server
set_llm_cache(TriCache(redis_url="redis://cache:6379/0", qdrant_url="http://qdrant:6333"))

model = CachedChatModel(inner=ChatOpenAI(...))   # + streaming, coalescing, tier metadata
"""

try:
    import langchain_core  # noqa: F401
except ImportError as exc:  # the adapter is an extra: name it
    raise ImportError(
        "langchain_tricache needs langchain-core: pip install 'tricache[langchain]'"
    ) from exc

from .cache import TriCache, current_tenant, tenant
from .chain import CachedRunnable, with_tricache
from .chat_model import CachedChatModel
from .local import LocalPrefixChatModel

__all__ = [
    "CachedChatModel",
    "CachedRunnable",
    "LocalPrefixChatModel",
    "TriCache",
    "current_tenant",
    "tenant",
    "with_tricache",
]
