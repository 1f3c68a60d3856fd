"""LlamaIndex adapter for TriCache.

``TriCacheLLM(llm=...)`` caches any LlamaIndex LLM (``Settings.llm``, query engines, chat
engines); ``CachedQueryEngine(engine, cache, index=index)`` caches whole query responses and
forgets them when the index changes; ``LocalPrefixLLM(backend)`` runs a local model
that reuses the system prompt's KV; ``tenant("acme")`` scopes the calls made inside it.
"""

from tricache import Cache
from tricache.tenancy import current_tenant, tenant

from .llm import TriCacheLLM
from .local import LocalPrefixLLM
from .query_engine import CachedQueryEngine, watch_index

__all__ = [
    "Cache",
    "CachedQueryEngine",
    "LocalPrefixLLM",
    "TriCacheLLM",
    "current_tenant",
    "tenant",
    "watch_index",
]
