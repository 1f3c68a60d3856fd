"""A chat prompt as the cache sees it: system text, earlier turns and the question asked.

Both adapters turn their framework's messages into ``(role, text, tool_calls)`` triples and
call :func:`split_conversation`; the result maps one-to-one onto :class:`CacheRequest` fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from .request import Turn

__all__ = [
    "USER_ROLES",
    "Conversation",
    "canonical_calls",
    "canonical_meta",
    "holds_objects",
    "plain",
    "split_conversation",
    "stream_pieces",
]

USER_ROLES = frozenset({"human", "user"})


@dataclass(frozen=True, slots=True)
class Conversation:
    query: str
    system: str = ""
    history: tuple[Turn, ...] = ()
    # False when the prompt does not end with a user question (e.g. a tool result in an agent
    # loop): such a call is only ever served to the very same prompt.
    semantic: bool = True
    query_meta: str = ""  # the question message's other fields (its author's name …)


def split_conversation(messages: Sequence[tuple[str, str, str]]) -> Conversation:
    """A first system message → ``system``; the last message → ``query`` (its role, when not
    the user's, in ``query_meta``); the rest, other system messages included → ``history``.

    Each message is ``(role, text, meta)``: ``meta`` is :func:`canonical_meta` of every other
    field that can change the answer ("" when none).  Nothing is dropped: every message, with
    every field, ends up in the request.
    """
    # the first message, when a system one, is the system prompt; every other system message
    # stays where it was said, in the history, and so does an empty one (a model is shown it:
    # it is not the same prompt as none)
    first_is_system = bool(messages) and messages[0][0] == "system" and any(messages[0][1:])
    system = _with_meta(*messages[0][1:]) if first_is_system else ""
    rest = messages[1:] if first_is_system else messages
    if not rest:
        return Conversation(system, semantic=False)
    *earlier, (role, text, meta) = rest
    history = tuple(Turn(r, t, m) for r, t, m in earlier)
    if role not in USER_ROLES:  # the model continues after a tool result or its own turn
        return Conversation(
            text, system, history, False, canonical_meta({"role": role, "meta": meta})
        )
    return Conversation(text, system, history, True, meta)


def _with_meta(text: str, meta: str) -> str:
    return f"{text}\n[meta] {meta}" if meta else text


def canonical_calls(calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool calls without their ids (which differ on every run), for :func:`canonical_meta`."""
    return [{k: v for k, v in c.items() if k != "id"} for c in calls]


def canonical_meta(fields: Mapping[str, Any]) -> str:
    """A message's fields other than role and text — name, tool calls, tool results' names and
    status, provider extras — as stable text.  Empty fields are left out, so a message without
    extras has ``""``; the caller leaves out run-specific ids (see :func:`canonical_calls`)."""
    kept = {k: v for k, v in fields.items() if v not in (None, "", [], {}, ())}
    return json.dumps(kept, sort_keys=True, default=str, ensure_ascii=False) if kept else ""


def holds_objects(value: Any) -> bool:
    """True when ``value`` holds anything but JSON's kinds (str keys, lists, str, int, float,
    bool, None): an object a hit could only give back as plain data (a pydantic ``parsed``, a
    provider's ``ToolCall``), which the app's code would then read as the object it was.
    Walked without recursion: an answer may nest deeper than Python recurses."""
    waiting = [value]
    while waiting:
        item = waiting.pop()
        kind = type(item)
        if kind is dict:
            if any(type(k) is not str for k in item):
                return True
            waiting.extend(item.values())
        elif kind is list:
            waiting.extend(item)
        elif not (item is None or kind in (str, int, float, bool)):
            return True
    return False


def plain(value: Any) -> Any:
    """``value`` as MessagePack-able plain data (non-plain leaves become strings)."""
    try:
        msgpack.packb(value, use_bin_type=True)
        return value
    except (TypeError, ValueError, OverflowError):
        return json.loads(json.dumps(value, default=str))


_PIECES = re.compile(r"\S+\s*|\s+")


def stream_pieces(text: str) -> list[str]:
    """``text`` cut into word-sized pieces (a word and the space after it), for replaying a
    cached answer as a stream; ``"".join`` gives ``text`` back."""
    return _PIECES.findall(text)
