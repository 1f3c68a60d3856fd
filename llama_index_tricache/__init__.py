"""LlamaIndex adapter for TriCache.

- ``TriCacheLLM(llm=...)`` caches any LlamaIndex LLM (``Settings.llm``, query and chat engines);
- ``CachedQueryEngine(engine, cache, index=index)`` caches whole query responses and forgets
  them when the index changes;
- ``LocalPrefixLLM(backend)`` runs a local model that reuses the system prompt's KV;
- ``TriCacheEmbedding()`` embeds with the cache's packaged model (nothing downloaded);
- ``tenant("acme")`` scopes the calls made inside it.

Which tier answered is on every response: ``additional_kwargs["tricache"]`` of an LLM's
responses, ``metadata["tricache"]`` of a query engine's; ``.stats()`` on either gives the
cache's counters.

Importing the package loads nothing but itself: each name is imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

try:
    _FOUND = find_spec("llama_index.core") is not None
except ModuleNotFoundError:  # no ``llama_index`` package at all
    _FOUND = False
if not _FOUND:  # the adapter is an extra: name it
    raise ImportError(
        "llama_index_tricache needs llama-index-core: pip install 'tricache[llama-index]'"
    )

if TYPE_CHECKING:
    from tricache import Cache
    from tricache.key.tenancy import current_tenant, tenant

    from .embedding import TriCacheEmbedding
    from .llm import TriCacheLLM
    from .local import LocalPrefixLLM
    from .query_engine import CachedQueryEngine, watch_index

# name -> the module that defines it, imported on first use
_EXPORTS = {
    "Cache": "tricache",
    "CachedQueryEngine": ".query_engine",
    "LocalPrefixLLM": ".local",
    "TriCacheEmbedding": ".embedding",
    "TriCacheLLM": ".llm",
    "current_tenant": "tricache.key.tenancy",
    "tenant": "tricache.key.tenancy",
    "watch_index": ".query_engine",
}

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


if not TYPE_CHECKING:  # type checkers see the imports above: a misspelt name is an error

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # found here from now on, without this function
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
