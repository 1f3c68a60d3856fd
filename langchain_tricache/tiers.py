"""Which tier answered each model call of a chain, even when a parser drops the message.

``prompt | model | StrOutputParser()`` returns a string: the ``response_metadata["tricache"]``
of the model's message never reaches the caller.  LangChain reports every model call's result
to the callback handlers (``on_llm_end``), cache hits included; this handler reads the tier
there::

    with tricache_tiers() as tiers:
        chain.invoke({"question": "How do I reset my password?"})
    tiers.last  # {"tier": "semantic", "score": 0.97, ...}, or None: the model answered

It works the way langchain-core's ``get_usage_metadata_callback`` does: a context variable
registered as a configure hook, so every run started inside the ``with`` block (threads and
tasks started from it included) gets the handler.  The handler can also be passed on its
own: ``chain.invoke(x, config={"callbacks": [TierCallbackHandler()]})``.

What it sees: chat models with ``set_llm_cache(TriCache())`` (sync and async; LangChain
skips its cache on ``stream()``) and :class:`CachedChatModel` (streams too).  Not seen: a
plain (completion) LLM's cache hits, which LangChain reports to no handler (their tier is in
``generation_info["tricache"]`` of ``llm.generate``), and :func:`with_tricache` chain hits,
which make no model call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, Generation, LLMResult

__all__ = ["TierCallbackHandler", "tier_of", "tricache_tiers"]

_INNER_TAG = "tricache:inner"  # chat_model.INNER_TAG, without importing that module


class TierCallbackHandler(BaseCallbackHandler):
    """Records, for each model call that ends, the tier that answered it.

    ``records`` holds one item per call (per prompt of a batched call), in the order they
    ended: the ``"tricache"`` metadata of a cache hit (``{"tier": "exact" | "semantic" |
    "faq", "level", "score", "entry_id", ...}``), or ``None`` when the model answered.
    ``last`` is the latest; ``hits`` and ``misses`` count them.  Safe to share between
    threads (a chain's ``batch``).
    """

    run_inline = True  # cheap and thread-safe: async runs call it in place, not in a thread

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.records: list[dict[str, Any] | None] = []
        self._outer: TierCallbackHandler | None = None  # an enclosing tricache_tiers() block

    @property
    def last(self) -> dict[str, Any] | None:
        """The tier that answered the latest call; ``None`` when the model answered it (or
        when no call has ended: see ``records``)."""
        with self._lock:
            return self.records[-1] if self.records else None

    @property
    def hits(self) -> int:
        """Calls the cache answered."""
        with self._lock:
            return sum(record is not None for record in self.records)

    @property
    def misses(self) -> int:
        """Calls the model answered."""
        with self._lock:
            return sum(record is None for record in self.records)

    def reset(self) -> None:
        """Forget what was recorded."""
        with self._lock:
            self.records.clear()

    def __repr__(self) -> str:
        return f"TierCallbackHandler(records={self.records!r})"

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """Record the tier of each prompt's answer (its first generation)."""
        if _INNER_TAG in (kwargs.get("tags") or ()):  # CachedChatModel's wrapped model: the
            return  # wrapper's own run reports this answer, as {"tier": "llm"}
        self._record([tier_of(gens[0]) for gens in response.generations if gens])

    def _record(self, found: list[dict[str, Any] | None]) -> None:
        with self._lock:
            self.records.extend(found)
        if self._outer is not None:
            self._outer._record([None if f is None else dict(f) for f in found])


def tier_of(generation: Generation) -> dict[str, Any] | None:
    """The ``"tricache"`` metadata of a cache hit's generation: the message's response
    metadata (chat models) or the generation info (plain LLMs).  ``None`` for an answer the
    model gave (no metadata, or ``{"tier": "llm"}`` from :class:`CachedChatModel`)."""
    info: Any = None
    if isinstance(generation, ChatGeneration):
        info = generation.message.response_metadata.get("tricache")
    if info is None:
        info = (generation.generation_info or {}).get("tricache")
    if not isinstance(info, Mapping) or info.get("tier") in (None, "llm"):
        return None
    return dict(info)


_handler: ContextVar[TierCallbackHandler | None] = ContextVar("tricache_tiers", default=None)
_registered = False
_register_lock = threading.Lock()


def _register() -> None:
    """Make every run started while ``_handler`` is set get it (once per process)."""
    global _registered
    with _register_lock:
        if not _registered:
            from langchain_core.tracers.context import register_configure_hook

            register_configure_hook(_handler, inheritable=True)
            _registered = True


@contextmanager
def tricache_tiers() -> Iterator[TierCallbackHandler]:
    """A :class:`TierCallbackHandler` given to every LangChain run started in the block::

        with tricache_tiers() as tiers:
            answer = (prompt | model | StrOutputParser()).invoke({"question": q})
        tiers.last        # {"tier": "semantic", "score": 0.97, ...} or None (the model)
        tiers.records     # one per model call, in order

    Blocks may be nested: a call is recorded by every block it is made in."""
    _register()
    handler = TierCallbackHandler()
    handler._outer = _handler.get()
    token = _handler.set(handler)
    try:
        yield handler
    finally:
        _handler.reset(token)
