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


def split_conversation(messages: Sequence[tuple[str, str, str]]) -> Conversation:
    """System messages → ``system``; the last message → ``query``; the rest → ``history``.

    Each message is ``(role, text, tool_calls)`` with ``tool_calls`` from
    :func:`canonical_calls` ("" when none).
    """
    system = "\n".join(text for role, text, _ in messages if role == "system")
    rest = [m for m in messages if m[0] != "system"]
    if not rest:
        return Conversation(system, semantic=False)
    *earlier, (role, text, calls) = rest
    history = tuple(Turn(r, t + (f"\n[tool calls] {c}" if c else "")) for r, t, c in earlier)
    if role not in USER_ROLES:  # the model continues after a tool result or its own turn
        return Conversation(f"[{role}] {text}{calls}", system, history, semantic=False)
    return Conversation(text, system, history)


def canonical_calls(calls: Iterable[Mapping[str, Any]]) -> str:
    """Tool calls as stable text, without their ids (which differ on every run)."""
    stripped = [{k: v for k, v in c.items() if k != "id"} for c in calls]
    return json.dumps(stripped, sort_keys=True, default=str) if stripped else ""


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
