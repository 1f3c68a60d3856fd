"""LlamaIndex adapter for TriCache.

- ``TriCacheLLM(llm=...)`` caches any LlamaIndex LLM (``Settings.llm``, query and chat engines);
- ``CachedQueryEngine(engine, cache, index=index)`` caches whole query responses and forgets
  them when the index changes;
- ``LocalPrefixLLM(backend)`` runs a local model that reuses the system prompt's KV;
- ``TriCacheEmbedding()`` embeds with the cache's packaged model (nothing downloaded);
- ``tenant("acme")`` scopes the calls made inside it.
"""

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # the adapter is an extra: name it
    raise ImportError(
        "llama_index_tricache needs llama-index-core: pip install 'tricache[llama-index]'"
    ) from exc

from tricache import Cache
from tricache.key.tenancy import current_tenant, tenant

from .embedding import TriCacheEmbedding
from .llm import TriCacheLLM
from .local import LocalPrefixLLM
from .query_engine import CachedQueryEngine, watch_index

__all__ = [
    "Cache",
    "CachedQueryEngine",
    "LocalPrefixLLM",
    "TriCacheEmbedding",
    "TriCacheLLM",
    "current_tenant",
    "tenant",
    "watch_index",
]
