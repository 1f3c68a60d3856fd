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

# The functions that call the cache, by the id of their code objects (a code object hashes
# and compares by its contents: a walk that looked each frame's up in sets spent about 2 µs
# of a 100 µs call hashing them); each value holds its code object, so the id stays its own.
_CALLERS: dict[int, tuple[str, CodeType]] = {}  # (filled by ``install``)
_DEPTH = 12  # frames from the cache's method up to LangChain's caller, with room to spare


def install() -> None:
    """Learn where LangChain calls a cache from (once; when the cache or the wrapper is made,
    not when imported: the model modules load LangChain's tracers)."""
    if _CALLERS:
        return
    from langchain_core.language_models import chat_models, llms

    chat = chat_models.BaseChatModel
    kinds = {
        "chat": (chat._generate_with_cache, chat._agenerate_with_cache, chat.stream, chat.astream),
        "lookup": (llms.get_prompts, llms.aget_prompts),
        "update": (llms.update_cache, llms.aupdate_cache),
        "generate": (llms.BaseLLM.generate, llms.BaseLLM.agenerate),
    }
    _CALLERS.update({id(f.__code__): (kind, f.__code__) for kind, fs in kinds.items() for f in fs})


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
        caller = _CALLERS.get(id(frame.f_code))  # (a frame's locals are read only where needed)
        if caller is not None:
            kind = caller[0]
            if kind == "chat":
                return frame.f_locals.get("run_manager")
            if kind == "lookup":
                index = frame.f_locals.get("i")
            elif kind == "update":
                found = frame.f_locals
                index = found["missing_prompt_idxs"][found["i"]]
            else:  # "generate"
                managers = frame.f_locals.get("callback_managers")
                return managers[index] if index is not None and managers else None
        frame = frame.f_back
    return None
