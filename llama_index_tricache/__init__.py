"""LlamaIndex adapter for TriCache (a caching ``LLM`` and query engine): not built yet.

The core is usable today through :class:`tricache.Cache`.
"""

from tricache import Cache

__all__ = ["Cache"]
