"""LangChain adapter for TriCache (``BaseCache`` and a cached chat model): not built yet.

The core is usable today through :class:`tricache.Cache`.
"""

from tricache import Cache

__all__ = ["Cache"]
