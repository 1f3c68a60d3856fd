"""The per-call options of a LangChain run, wherever the run was started.

``config={"metadata": {"tricache_ttl": 600, "tricache_tags": ["prices"]}}`` may be given to a
chain, to ``model.invoke``, to ``model.with_config(...)`` or to a model's own ``metadata``.
LangChain hands a model's cache (``BaseCache.lookup``/``update``) neither that config nor the
run, but it tells the run's callback handlers first: ``on_llm_start`` /
``on_chat_model_start`` get the run's merged metadata, in the context the lookup then runs
in.  ``RunOptions`` is such a handler, added to every run of the process through LangChain's
configure hook (``register_configure_hook``, as LangSmith's tracer is); it keeps the metadata
of the model run under way in a context variable, which ``run_options`` reads.

A plain LLM (``BaseLLM``) looks its prompts up *before* their runs start, each prompt with a
callback manager of its own (``llm.batch`` may give each its own metadata): there,
``run_options`` reads the manager of the prompt being looked up or stored from
``BaseLLM.generate``'s frame, found by its code object (a LangChain that moved it fails the
tests that pass options to a plain LLM, rather than dropping them).
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from types import FrameType
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from tricache.key.options import options_from

__all__ = ["RunOptions", "install", "run_options"]

# (run id, its metadata) of the model run under way in this context
_running: ContextVar[tuple[UUID, dict[str, Any]] | None] = ContextVar(
    "tricache_model_run", default=None
)


class RunOptions(BaseCallbackHandler):
    """Keeps the metadata of the model run under way (``run_options`` reads it)."""

    run_inline = True  # called in the caller's context (not a thread): the lookup sees it
    ignore_chain = ignore_agent = ignore_retriever = ignore_retry = True
    ignore_custom_event = True

    def on_llm_start(
        self, serialized: Any, prompts: Any, *, run_id: UUID, metadata: Any = None, **_: Any
    ) -> None:
        _running.set((run_id, dict(metadata or {})))

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, metadata: Any = None, **_: Any
    ) -> None:
        _running.set((run_id, dict(metadata or {})))

    def on_llm_end(self, response: Any, *, run_id: UUID, **_: Any) -> None:
        self._ended(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **_: Any) -> None:
        self._ended(run_id)

    @staticmethod
    def _ended(run_id: UUID) -> None:
        held = _running.get()
        if held is not None and held[0] == run_id:
            _running.set(None)


# A context variable whose value is always the handler: LangChain's configure hook adds it to
# every callback manager it configures (once; inherited by child runs).  The handler holds no
# state (what it keeps is in ``_running``): one for every context is what is meant.
_handler: ContextVar[RunOptions | None] = ContextVar(
    "tricache_run_options",
    default=RunOptions(),  # noqa: B039
)
_GENERATE: set[Any] = set()  # BaseLLM's entry points and the helpers that call the cache from
_LOOKUP: set[Any] = set()  # them, by their code objects (filled by ``install``)
_UPDATE: set[Any] = set()
_DEPTH = 12  # frames from the cache's method up to BaseLLM.generate, with room to spare


def install() -> None:
    """Add ``RunOptions`` to every LangChain run of this process (once; by the cache and the
    wrapper when they are made, not when imported: LangChain's tracers load langsmith, as
    the first model call does anyway)."""
    if _GENERATE:
        return
    from langchain_core.language_models import llms
    from langchain_core.tracers.context import register_configure_hook

    register_configure_hook(_handler, True)
    _LOOKUP.update({llms.get_prompts.__code__, llms.aget_prompts.__code__})
    _UPDATE.update({llms.update_cache.__code__, llms.aupdate_cache.__code__})
    _GENERATE.update({llms.BaseLLM.generate.__code__, llms.BaseLLM.agenerate.__code__})


def run_options(run_manager: Any = None) -> dict[str, Any]:
    """The ``entry_options`` keywords (``tricache_ttl``, ``tricache_tags``,
    ``tricache_category``) of the model run under way: its ``run_manager``'s metadata when
    given, else the run this context's model started last, else the enclosing chain step's
    config.  A bad value is raised when used (``entry_options``), never replaced by a
    default."""
    if run_manager is not None and isinstance(getattr(run_manager, "metadata", None), dict):
        return options_from(run_manager.metadata)
    plain = _plain_llm_metadata(sys._getframe(1))
    if plain is not None:
        return options_from(plain)
    held = _running.get()
    if held is not None:
        return options_from(held[1])
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get() or {}
    return options_from(config.get("metadata"))


def _plain_llm_metadata(frame: FrameType | None) -> dict[str, Any] | None:
    """The metadata of the prompt a plain LLM's ``generate`` is looking up or storing, when
    this call comes from there; ``None`` otherwise."""
    index = None
    for _ in range(_DEPTH):
        if frame is None:
            return None
        code, found = frame.f_code, frame.f_locals
        if code in _LOOKUP:
            index = found.get("i")
        elif code in _UPDATE:
            index = found["missing_prompt_idxs"][found["i"]]
        elif code in _GENERATE:
            managers = found.get("callback_managers")
            if index is None or not managers:
                return None
            metadata = getattr(managers[index], "metadata", None)
            return metadata if isinstance(metadata, dict) else None
        frame = frame.f_back
    return None
