"""LlamaIndex ⇄ TriCache: messages to requests, responses to stored payloads and back.

Stored messages come back through ``ChatMessage.model_validate`` on plain data: nothing is
unpickled and no class named by stored data is imported.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)

from tricache.conversation import Conversation, canonical_calls, plain, split_conversation

__all__ = [
    "chat_from_payload",
    "chat_payload",
    "completion_from_payload",
    "completion_payload",
    "llm_key",
    "parse_chat",
    "role_of",
    "servable_to_look_alikes",
    "usage_tokens",
]

_SYSTEM_ROLES = {MessageRole.SYSTEM.value, MessageRole.DEVELOPER.value}
_CUT_OFF = {"length", "max_tokens", "MAX_TOKENS"}
# Settings that say who the caller is, not what the model does: kept out of the key.
_NOT_IN_KEY = ("key", "secret", "token", "password", "callback", "base_url", "timeout", "retries")


def parse_chat(messages: Sequence[ChatMessage]) -> Conversation:
    """System and developer messages → system; the last user message → the question."""
    return split_conversation([(role_of(m), _text(m), _calls(m)) for m in messages])


def role_of(message: ChatMessage) -> str:
    """The message's role as plain text, developer messages counted as system ones."""
    role = message.role
    name = role.value if isinstance(role, MessageRole) else str(role)
    return "system" if name in _SYSTEM_ROLES else name


def _text(message: ChatMessage) -> str:
    """Text blocks as text; other blocks (images, documents …) as their JSON, which changes the
    key without being compared by meaning."""
    parts = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif not isinstance(block, ToolCallBlock):
            parts.append(json.dumps(block.model_dump(mode="json"), sort_keys=True, default=str))
    return "\n".join(parts)


def _calls(message: ChatMessage) -> str:
    calls: list[Any] = [
        {"name": b.tool_name, "arguments": b.tool_kwargs}
        for b in message.blocks
        if isinstance(b, ToolCallBlock)
    ]
    calls += message.additional_kwargs.get("tool_calls") or []
    return canonical_calls(_as_dict(c) for c in calls)


def _as_dict(call: Any) -> Any:
    if isinstance(call, Mapping):
        return call
    dump = getattr(call, "model_dump", None)
    return dump(mode="json") if callable(dump) else {"call": str(call)}


def llm_key(llm: Any, mode: str, kwargs: Mapping[str, Any]) -> str:
    """A digest of what decides the answer: the model class and settings, chat or completion,
    and the call's own arguments (tools, temperature …).  Credentials stay out."""
    try:
        settings = llm.to_dict()
    except Exception:  # not a serializable component: its class and repr still separate models
        settings = {"repr": repr(llm)}
    described = {
        "class": f"{type(llm).__module__}.{type(llm).__qualname__}",
        "settings": {k: v for k, v in settings.items() if not _private(k)},
        "mode": mode,
        "call": {k: v for k, v in kwargs.items() if not _private(k)},
    }
    text = json.dumps(described, sort_keys=True, default=_describe)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _private(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _NOT_IN_KEY)


def _describe(value: Any) -> Any:
    """Tools and other objects in call arguments, as what identifies them."""
    metadata = getattr(value, "metadata", None)
    if metadata is not None and hasattr(metadata, "to_openai_tool"):
        return metadata.to_openai_tool()
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else repr(value)


# responses ⇄ payloads --------------------------------------------------------------------
def chat_payload(response: ChatResponse) -> dict[str, Any]:
    """Plain data for the store: the message (raw provider objects are not kept)."""
    return {"v": 1, "kind": "chat", "message": plain(response.message.model_dump(mode="json"))}


def chat_from_payload(payload: Any, info: dict[str, Any]) -> ChatResponse:
    """Rebuild a ``ChatResponse``; ``ValueError`` for anything this adapter did not write."""
    if not isinstance(payload, dict) or payload.get("v") != 1 or payload.get("kind") != "chat":
        raise ValueError("not a TriCache LlamaIndex chat payload")
    message = ChatMessage.model_validate(payload["message"])
    return ChatResponse(message=message, additional_kwargs={"tricache": info})


def completion_payload(response: CompletionResponse) -> dict[str, Any]:
    return {"v": 1, "kind": "completion", "text": response.text}


def completion_from_payload(payload: Any, info: dict[str, Any]) -> CompletionResponse:
    if (
        not isinstance(payload, dict)
        or payload.get("v") != 1
        or payload.get("kind") != "completion"
    ):
        raise ValueError("not a TriCache LlamaIndex completion payload")
    return CompletionResponse(text=str(payload["text"]), additional_kwargs={"tricache": info})


def servable_to_look_alikes(response: ChatResponse | CompletionResponse) -> bool:
    """False for answers that fit only the very same prompt: tool calls, cut-off answers."""
    if isinstance(response, ChatResponse) and _calls(response.message):
        return False
    return _finish_reason(response.raw) not in _CUT_OFF


def _finish_reason(raw: Any) -> Any:
    """The provider's finish/stop reason from a raw response (dict or SDK object), if any."""
    reason = _field(raw, "stop_reason") or _field(raw, "finish_reason")
    choices = _field(raw, "choices")
    if not reason and isinstance(choices, Sequence) and choices:
        reason = _field(choices[0], "finish_reason")
    return reason


def usage_tokens(response: ChatResponse | CompletionResponse) -> int:
    """Total tokens the answer cost: the counts providers put in ``additional_kwargs``, or the
    raw response's ``usage`` (``total_tokens``, or input + output)."""
    total = response.additional_kwargs.get("total_tokens")
    if total is None and (usage := _field(response.raw, "usage")) is not None:
        total = _field(usage, "total_tokens")
        if total is None:
            parts = (_field(usage, "input_tokens"), _field(usage, "output_tokens"))
            total = sum(p for p in parts if isinstance(p, int))
    return int(total) if isinstance(total, int | float) and total > 0 else 0


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    try:
        return getattr(obj, name, None)
    except Exception:  # a provider object with odd properties
        return None
