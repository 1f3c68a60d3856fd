"""LangChain adapter for TriCache.

from langchain_core.globals import set_llm_cache
from langchain_tricache import TriCache

set_llm_cache(TriCache())                        # embedded, no server
set_llm_cache(TriCache(redis_url="redis://cache:6379/0"))  # shared by every app instance

model = CachedChatModel(inner=ChatOpenAI(...))   # + streaming, coalescing, tier metadata

with tricache_tiers() as tiers:                  # which tier answered, through any chain
    chain.invoke({...})
tiers.last                                       # {"tier": "semantic", "score": …} or None

Importing the package loads nothing but itself: each name is imported on first use
(PEP 562), so ``import langchain_tricache`` costs next to nothing and
``from langchain_tricache import TriCache`` loads the cache alone, not the chat-model and
chain wrappers (and langchain-core's runnables and tracers behind them).
"""

from __future__ import annotations

import importlib
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if find_spec("langchain_core") is None:  # the adapter is an extra: name it
    raise ImportError("langchain_tricache needs langchain-core: pip install 'tricache[langchain]'")

if TYPE_CHECKING:
    from .cache import TriCache, current_tenant, tenant
    from .chain import CachedRunnable, with_tricache
    from .chat_model import CachedChatModel
    from .local import LocalPrefixChatModel
    from .tiers import TierCallbackHandler, tricache_tiers

# name -> the module that defines it, imported on first use
_EXPORTS = {
    "CachedChatModel": ".chat_model",
    "CachedRunnable": ".chain",
    "LocalPrefixChatModel": ".local",
    "TierCallbackHandler": ".tiers",
    "TriCache": ".cache",
    "current_tenant": ".cache",
    "tenant": ".cache",
    "tricache_tiers": ".tiers",
    "with_tricache": ".chain",
}

__all__ = [
    "CachedChatModel",
    "CachedRunnable",
    "LocalPrefixChatModel",
    "TierCallbackHandler",
    "TriCache",
    "current_tenant",
    "tenant",
    "tricache_tiers",
    "with_tricache",
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
