"""The per-call options of a LangChain run, wherever the run was started.

``config={"metadata": {"tricache_ttl": 600, "tricache_tags": ["prices"]}}`` may be given to a
chain, to ``model.invoke``, to ``model.with_config(...)`` or to a model's own ``metadata``.
LangChain hands a model's cache (``BaseCache.lookup``/``update``) neither that config nor the
run; the run's callback manager, which holds the run's merged metadata, is a local variable of
the LangChain function that calls the cache:

- a chat model: ``BaseChatModel._generate_with_cache``, ``stream`` (and their async twins),
  ``run_manager``;
- a plain LLM, which looks its prompts up *before* their runs start, each prompt with a
  callback manager of its own (``llm.batch`` may give each its own metadata):
  ``BaseLLM.generate``'s ``callback_managers``, at the index of the prompt that
  ``get_prompts`` / ``update_cache`` is at.

``run_options`` reads it from there, finding those frames by their code objects.  (A callback
handler added to every run would see the metadata too, but LangChain's async callback manager
then stops calling the app's other handlers' ``on_llm_start``: it is not an option.)  A
LangChain that moved these functions fails the tests that pass options to each kind of model
rather than dropping them.
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config

from tricache.key.options import options_from

__all__ = ["install", "run_options"]

_CHAT: set[CodeType] = set()  # the functions that call the cache, by their code objects
_GENERATE: set[CodeType] = set()  # (filled by ``install``)
_LOOKUP: set[CodeType] = set()
_UPDATE: set[CodeType] = set()
_DEPTH = 12  # frames from the cache's method up to LangChain's caller, with room to spare


def install() -> None:
    """Learn where LangChain calls a cache from (once; when the cache or the wrapper is made,
    not when imported: the model modules load LangChain's tracers)."""
    if _GENERATE:
        return
    from langchain_core.language_models import chat_models, llms

    chat = chat_models.BaseChatModel
    _CHAT.update({chat._generate_with_cache.__code__, chat._agenerate_with_cache.__code__,
                  chat.stream.__code__, chat.astream.__code__})  # fmt: skip
    _LOOKUP.update({llms.get_prompts.__code__, llms.aget_prompts.__code__})
    _UPDATE.update({llms.update_cache.__code__, llms.aupdate_cache.__code__})
    _GENERATE.update({llms.BaseLLM.generate.__code__, llms.BaseLLM.agenerate.__code__})


def run_options(run_manager: Any = None) -> dict[str, Any]:
    """The ``entry_options`` keywords (``tricache_ttl``, ``tricache_tags``,
    ``tricache_category``) of the model run under way: its ``run_manager``'s metadata when
    given, else that of the LangChain call this cache was called from, else the enclosing
    chain step's config.  A bad value is raised when used (``entry_options``), never
    replaced by a default."""
    if run_manager is None:
        run_manager = _calling_run(sys._getframe(1))
    if run_manager is not None and isinstance(getattr(run_manager, "metadata", None), dict):
        return options_from(run_manager.metadata)
    config = var_child_runnable_config.get() or {}
    return options_from(config.get("metadata"))


def _calling_run(frame: FrameType | None) -> Any:
    """The callback manager of the model run that called the cache from a frame above
    ``frame``; ``None`` when the cache was not called by a LangChain model."""
    index = None
    for _ in range(_DEPTH):
        if frame is None:
            return None
        code = frame.f_code  # (a frame's locals are read only where they are needed)
        if code in _CHAT:
            return frame.f_locals.get("run_manager")
        if code in _LOOKUP:
            index = frame.f_locals.get("i")
        elif code in _UPDATE:
            found = frame.f_locals
            index = found["missing_prompt_idxs"][found["i"]]
        elif code in _GENERATE:
            managers = frame.f_locals.get("callback_managers")
            return managers[index] if index is not None and managers else None
        frame = frame.f_back
    return None
