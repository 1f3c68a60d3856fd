"""A LlamaIndex call as the cache sees it: its request, what may answer it, for how long.

``templated`` marks the calls made while a prompt template is answered (keyed on its
``query_str``); ``chat_call`` and ``completion_call`` build the ``Call`` of one LLM call, or
``None`` when it cannot be cached (it then goes to the LLM).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import LLM
from llama_index.core.llms.function_calling import FunctionCallingLLM

from tricache import Cache, CacheRequest, Coalescer
from tricache.flow import SHAPING_OPTIONS
from tricache.key.conversation import Conversation
from tricache.key.options import entry_options, options_from

from .convert import (
    chat_turns,
    condenses_a_follow_up,
    llm_key,
    parse_chat,
    templated_conversation,
)

__all__ = ["Call", "chat_call", "completion_call", "templated", "tool_llm"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Template:
    """Set while a prompt template is answered: its ``query_str`` (``None`` when it has none)."""

    question: str | None


_templated: ContextVar[_Template | None] = ContextVar("tricache_templated", default=None)


@contextlib.contextmanager
def templated(prompt: Any, args: dict[str, Any]) -> Iterator[None]:
    """Mark the calls made inside as answering ``prompt``: keyed on its ``query_str`` (which
    synthesizers fill in early, with ``partial_format``: it may be in ``prompt.kwargs``)
    and the rest of the prompt; without a ``query_str``, exact only."""
    filled = {**(getattr(prompt, "kwargs", None) or {}), **args}
    question = filled.get("query_str")
    token = _templated.set(_Template(question if isinstance(question, str) else None))
    try:
        yield
    finally:
        _templated.reset(token)


@dataclass(frozen=True, slots=True)
class Call:
    request: CacheRequest
    semantic: bool  # may look-alikes be served (a template's question) or only this prompt
    faq: bool  # may a curated answer (not when the call asks for tools or a format)
    ttl: float | None = None  # the lifetime the call asked for (``tricache_ttl=``)

    def options(self, coalescer: Coalescer) -> dict[str, Any]:
        """How the flow treats this call: look-alikes or not, its lifetime, its coalescer."""
        return {"semantic": self.semantic, "faq": self.faq, "ttl": self.ttl,
                "coalescer": coalescer}  # fmt: skip


def chat_call(
    cache: Cache, llm: LLM, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
) -> Call | None:
    """The call of ``llm.chat(messages, **kwargs)`` (its ``tricache_*`` options taken out of
    ``kwargs``)."""
    options = _pop_options(kwargs)  # (before the inner LLM sees the keyword arguments)
    try:
        conversation = _keyed(parse_chat(messages), lambda: chat_turns(messages))
    except Exception as exc:  # an odd message is a miss, never an error in the app
        log.warning("tricache: call not cacheable (%s)", exc)
        return None
    return _call(cache, conversation, llm_key(llm, "chat", kwargs), kwargs, options)


def completion_call(
    cache: Cache, llm: LLM, prompt: str, formatted: bool, kwargs: dict[str, Any]
) -> Call | None:
    """The call of ``llm.complete(prompt, formatted, **kwargs)``."""
    options = _pop_options(kwargs)
    if not isinstance(prompt, str):
        raise TypeError("prompt must be a str")
    conversation = _keyed(Conversation(prompt), lambda: [("prompt", prompt, "")])
    key = llm_key(llm, f"complete:{formatted}", kwargs)
    return _call(cache, conversation, key, kwargs, options)


def tool_llm(llm: LLM) -> FunctionCallingLLM:
    """``llm``, which must call tools itself."""
    if not isinstance(llm, FunctionCallingLLM):
        raise NotImplementedError(f"{type(llm).__name__} does not call tools")
    return llm


def _call(
    cache: Cache,
    conversation: Conversation,
    key: str,
    kwargs: dict[str, Any],
    options: dict[str, Any],
) -> Call | None:
    """The request, or ``None`` when the call cannot be cached (it then goes to the LLM)."""
    with entry_options(**options):  # (a bad option is the caller's error: raised)
        try:
            request = cache.conversation_request(conversation, key)
            faq = SHAPING_OPTIONS.isdisjoint(kwargs)
            return Call(request, conversation.semantic, faq, ttl=options.get("ttl"))
        except Exception as exc:  # an odd prompt is a miss, never an error in the app
            log.warning("tricache: call not cacheable (%s)", exc)
            return None


def _pop_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``entry_options`` a call asks for (``tricache_ttl=``, ``tricache_tags=``,
    ``tricache_category=``), taken out of its keyword arguments."""
    found = options_from(kwargs)
    for name in ("ttl", "tags", "category"):
        kwargs.pop(f"tricache_{name}", None)
    return found


def _keyed(conversation: Conversation, turns: Any) -> Conversation:
    """What a call is keyed on: ``conversation`` outside prompt templates (exact only when it
    condenses a chat engine's follow-up).  Inside one, the template's question and a digest of
    the rest of the prompt (``turns()``); without a question, ``conversation``, exact only."""
    template = _templated.get()
    if template is None:
        if conversation.semantic and condenses_a_follow_up(conversation.query):
            return replace(conversation, semantic=False)
        return conversation
    if template.question is not None:
        keyed = templated_conversation(template.question, turns())
        if keyed is not None:
            return keyed
    return replace(conversation, semantic=False)
