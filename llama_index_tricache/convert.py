"""LlamaIndex ⇄ TriCache: messages to requests, responses to stored payloads and back.

Stored messages come back through ``ChatMessage.model_validate`` on plain data: nothing is
unpickled and no class named by stored data is imported.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from pydantic import BaseModel

from tricache.flow import finish_reason as provider_finish
from tricache.flow import provider_field
from tricache.key.conversation import (
    Conversation,
    canonical_calls,
    canonical_meta,
    holds_objects,
    plain,
    split_conversation,
)
from tricache.key.request import context_token

__all__ = [
    "chat_from_payload",
    "chat_payload",
    "chat_turns",
    "completion_from_payload",
    "completion_payload",
    "condenses_a_follow_up",
    "finish_reason",
    "has_tool_calls",
    "llm_key",
    "parse_chat",
    "role_of",
    "templated_conversation",
    "usage_tokens",
]

_SYSTEM_ROLES = {MessageRole.SYSTEM.value, MessageRole.DEVELOPER.value}
# Settings that say who the caller is or how the call travels, not what the model answers:
# kept out of the key, by exact name (``max_tokens``, ``base_url`` … stay in).
_NOT_IN_KEY = frozenset(
    {
        "api_key", "api_secret", "secret_key", "access_token", "auth_token", "token",
        "password", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
        "azure_ad_token", "azure_ad_token_provider", "callback_manager", "http_client",
        "async_http_client", "timeout", "request_timeout", "max_retries", "retries",
    }
)  # fmt: skip
# Message fields that differ on every run without changing the answer: ids and usage counts.
_RUN_SPECIFIC = frozenset(
    {"id", "run_id", "tool_call_id", "usage", "prompt_tokens", "completion_tokens",
     "total_tokens", "tool_calls"}  # tool calls go in canonically, ids stripped
)  # fmt: skip
# Where a templated prompt's question was, in the digest of the rest.
_CUT = "\x00tricache:question\x00"
_OBSERVATION = re.compile(r"^\s*Observation\s*:")

Turns = list[tuple[str, str, str]]


def parse_chat(messages: Sequence[ChatMessage]) -> Conversation:
    """System and developer messages → system; the last user message → the question; every
    other field of every message in the request.  A prompt that does not end with a user
    question (a tool result, a ReAct observation) is served to the very same prompt only."""
    turns = chat_turns(messages)
    conversation = split_conversation(turns)
    if conversation.semantic and _observation(turns):
        return replace(conversation, semantic=False)
    return conversation


def condenses_a_follow_up(prompt: str) -> bool:
    """True for a prompt made from LlamaIndex's own condense-question templates, which chat
    engines fill in themselves (``condense_plus_context`` calls ``complete`` on the result):
    every follow-up must get its own standalone question, so such a prompt is exact only."""
    return any(
        prompt.startswith(head) and pattern.fullmatch(prompt) is not None
        for head, pattern in _condense_templates()
    )


@functools.cache
def _condense_templates() -> tuple[tuple[str, re.Pattern[str]], ...]:
    from llama_index.core.chat_engine import condense_plus_context, condense_question

    templates = (condense_plus_context.DEFAULT_CONDENSE_PROMPT_TEMPLATE,
                 condense_question.DEFAULT_TEMPLATE)  # fmt: skip
    parts = [re.split(r"\{\w+\}", t) for t in templates]
    return tuple((p[0], re.compile("(.*)".join(map(re.escape, p)), re.DOTALL)) for p in parts)


def templated_conversation(question: str, turns: Turns) -> Conversation | None:
    """A call made to answer a prompt template whose question (``query_str``) is ``question``:
    keyed on the question and a digest of the whole prompt with the question cut out, so two
    calls share a key only when their prompts differ in the question alone.  ``None`` when the
    question cannot be cut out cleanly."""
    if not question.strip() or any(_CUT in part for turn in turns for part in turn):
        return None
    cut = [[part.replace(question, _CUT) for part in turn] for turn in turns]
    return Conversation(question, f"[prompt template] {_digest(cut)}")


def chat_turns(messages: Sequence[ChatMessage]) -> Turns:
    """``(role, text, meta)`` for each message, as :func:`split_conversation` takes them."""
    answered = _call_names(messages)
    return [(role_of(m), _text(m), _meta(m, answered)) for m in messages]


def role_of(message: ChatMessage) -> str:
    """The message's role as plain text, developer messages counted as system ones."""
    role = message.role
    name = role.value if isinstance(role, MessageRole) else str(role)
    return "system" if name in _SYSTEM_ROLES else name


def _digest(turns: Any) -> str:
    return context_token(json.dumps(turns, ensure_ascii=False))


def _observation(turns: Turns) -> bool:
    """True when the prompt ends with a ReAct observation (a tool result in a user message)."""
    rest = [t for t in turns if t[0] != "system"]
    return len(rest) > 1 and rest[-2][0] == "assistant" and bool(_OBSERVATION.match(rest[-1][1]))


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


def _meta(message: ChatMessage, answered: Mapping[str, Any]) -> str:
    """Every field of ``message`` but its role and text that can change the answer: its tool
    calls, which call a tool result answers, its ``name`` and other provider fields."""
    extra = message.additional_kwargs
    answers = extra.get("tool_call_id")
    return canonical_meta(
        {
            "calls": canonical_calls(_calls(message)),
            "answers": answered.get(str(answers)) if answers is not None else None,
            "name": getattr(message, "name", None),
            "fields": {k: v for k, v in extra.items() if k not in _RUN_SPECIFIC},
            "parts": len(message.blocks) if len(message.blocks) > 1 else None,  # joined in text
        }
    )


def _calls(message: ChatMessage) -> list[dict[str, Any]]:
    """The message's tool calls (blocks and provider ``tool_calls``), as plain dicts."""
    calls: list[Any] = [
        {"id": b.tool_call_id, "name": b.tool_name, "arguments": b.tool_kwargs}
        for b in message.blocks
        if isinstance(b, ToolCallBlock)
    ]
    calls += message.additional_kwargs.get("tool_calls") or []
    return [_as_dict(c) for c in calls]


def _call_names(messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """Tool call id → ``[tool name, position among the conversation's calls]``: what a tool
    result answers, without the run-specific id."""
    names: dict[str, Any] = {}
    for message in messages:
        for call in _calls(message):
            call_id = call.get("id")
            function = call.get("function")
            name = call.get("name") or (
                function.get("name") if isinstance(function, Mapping) else None
            )
            if call_id is not None:
                names.setdefault(str(call_id), [name, len(names)])
    return names


def _as_dict(call: Any) -> dict[str, Any]:
    if isinstance(call, Mapping):
        return dict(call)
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
        # how it formats prompts (left out of to_dict(): a local model's template)
        "prompts": [_formatter(getattr(llm, name, None)) for name in _FORMATTERS],
        "mode": mode,
        "call": {k: v for k, v in kwargs.items() if not _private(k)},
    }
    text = json.dumps(described, sort_keys=True, default=_describe)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


_FORMATTERS = ("messages_to_prompt", "completion_to_prompt")


def _formatter(function: Any) -> Any:
    """A prompt formatter: a named function by its name, another by its code, defaults and
    what it closes over (as reprs: an object there makes it a miss, never a wrong hit)."""
    if function is None or _named(function):
        return _describe(function) if function is not None else None
    code = getattr(function, "__code__", None)
    if code is None:
        return repr(function)
    cells = [repr(c.cell_contents) for c in getattr(function, "__closure__", None) or ()]
    return [code.co_code.hex(), repr(code.co_consts), list(code.co_names), cells,
            repr(getattr(function, "__defaults__", None))]  # fmt: skip


def _private(name: str) -> bool:
    return name.lower() in _NOT_IN_KEY


def _describe(value: Any) -> Any:
    """Tools, functions and other objects in settings and call arguments, as what identifies
    them: a tool by its schema, an output class by its name and JSON schema, a module-level
    function or another class by its name, a model by its dump, anything else by its repr
    (which may then differ from process to process: a miss)."""
    metadata = getattr(value, "metadata", None)
    if metadata is not None and hasattr(metadata, "to_openai_tool"):
        return metadata.to_openai_tool()
    if isinstance(value, type) and issubclass(value, BaseModel):  # an output schema: its fields
        return [f"{value.__module__}.{value.__qualname__}", value.model_json_schema()]
    if _named(value):
        return f"{value.__module__}.{value.__qualname__}"
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) and not isinstance(value, type) else repr(value)


def _named(value: Any) -> bool:
    """True for a class or a function its name identifies (not a lambda, local or closure)."""
    named = isinstance(value, type) or (inspect.isfunction(value) and value.__closure__ is None)
    return named and "<" not in value.__qualname__


# responses ⇄ payloads --------------------------------------------------------------------
def chat_payload(response: ChatResponse) -> dict[str, Any]:
    """Plain data for the store: the message, the response's own fields and log
    probabilities (raw provider objects are not kept).  ``ValueError`` for a message whose
    fields hold objects (a provider's ``ToolCall``): a hit would give them back as dicts,
    which the app's code would read as the objects."""
    if holds_objects(response.message.additional_kwargs):
        raise ValueError("the answer holds objects a hit would give back as plain data")
    message = plain(response.message.model_dump(mode="json"))
    return {"v": 1, "kind": "chat", "message": message, **_response_fields(response)}


def chat_from_payload(payload: Any, info: dict[str, Any]) -> ChatResponse:
    """Rebuild a ``ChatResponse``; ``ValueError`` for anything this adapter did not write."""
    if not isinstance(payload, dict) or payload.get("v") != 1 or payload.get("kind") != "chat":
        raise ValueError("not a TriCache LlamaIndex chat payload")
    message = ChatMessage.model_validate(payload["message"])  # the hit's payload is a copy
    return ChatResponse(message=message, **_fields_from(payload, info))


def completion_payload(response: CompletionResponse) -> dict[str, Any]:
    """Plain data for the store: the text, the response's own fields, log probabilities."""
    return {"v": 1, "kind": "completion", "text": response.text, **_response_fields(response)}


def _response_fields(response: ChatResponse | CompletionResponse) -> dict[str, Any]:
    """A response's own fields (token counts …; kept when plain data) and log probabilities."""
    fields: dict[str, Any] = {}
    extra = {k: v for k, v in response.additional_kwargs.items() if k != "tricache"}
    if extra and not holds_objects(extra):
        fields["extra"] = plain(extra)
    if response.logprobs:
        fields["logprobs"] = plain([[p.model_dump(mode="json") for p in row]
                                    for row in response.logprobs])  # fmt: skip
    return fields


def _fields_from(payload: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """``_response_fields`` read back, with ``info`` under ``additional_kwargs["tricache"]``."""
    extra = payload.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError("a payload whose response fields are not a mapping")
    return {"additional_kwargs": {**extra, "tricache": info}, "logprobs": payload.get("logprobs")}


def completion_from_payload(payload: Any, info: dict[str, Any]) -> CompletionResponse:
    """Rebuild a ``CompletionResponse``; ``ValueError`` for anything this adapter did not write."""
    if (
        not isinstance(payload, dict)
        or payload.get("v") != 1
        or payload.get("kind") != "completion"
    ):
        raise ValueError("not a TriCache LlamaIndex completion payload")
    if not isinstance(payload.get("text"), str):
        raise ValueError("a completion payload without text")
    return CompletionResponse(text=payload["text"], **_fields_from(payload, info))


def has_tool_calls(message: ChatMessage) -> bool:
    """The message asks for tools to be called."""
    return bool(_calls(message))


def finish_reason(raw: Any) -> Any:
    """The provider's finish/stop reason from a raw response (dict or SDK object), if any."""
    return provider_finish(raw)


def usage_tokens(response: ChatResponse | CompletionResponse) -> int:
    """Total tokens the answer cost: the counts providers put in ``additional_kwargs``, or the
    raw response's ``usage`` (``total_tokens``, or input + output)."""
    total = response.additional_kwargs.get("total_tokens")
    if total is None and (usage := provider_field(response.raw, "usage")) is not None:
        total = provider_field(usage, "total_tokens")
        if total is None:
            parts = (provider_field(usage, "input_tokens"), provider_field(usage, "output_tokens"))
            total = sum(p for p in parts if isinstance(p, int))
    return int(total) if isinstance(total, int | float) and total > 0 else 0
