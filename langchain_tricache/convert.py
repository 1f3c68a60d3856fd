"""LangChain ⇄ TriCache: prompts to requests, generations to stored payloads and back.

Nothing here unpickles or imports classes named by stored data: messages come back through
``messages_from_dict``, which only knows LangChain's own message types.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, message_to_dict, messages_from_dict
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, Generation

from tricache.flow import FINISHED, SHAPING_OPTIONS, Answer
from tricache.flow import finish_reason as provider_finish
from tricache.hit import fresh
from tricache.key.conversation import (
    Conversation,
    canonical_calls,
    canonical_meta,
    holds_objects,
    plain,
    split_conversation,
)
from tricache.key.entry import CacheEntry
from tricache.runtime.memo import ENTRY_BYTES, Memo, text_size

__all__ = [
    "answer_of",
    "finish_reason",
    "generations_from_payload",
    "generations_of",
    "llm_key",
    "model_name",
    "parse_memo_bytes",
    "parse_messages",
    "parse_prompt",
    "payload_from_generations",
    "usage_tokens",
]

_ROLES = {
    "SystemMessage": "system",
    "HumanMessage": "human",
    "AIMessage": "ai",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
    "ChatMessage": "chat",
}
# Message fields that never change the answer: role and text (keyed on their own), run ids,
# what the provider reported about its own run, and tool results' ids and raw artifacts.
_NOT_META = frozenset(
    {"content", "type", "role", "id", "response_metadata", "usage_metadata", "tool_call_id",
     "artifact"}
)  # fmt: skip
_CALL_FIELDS = ("tool_calls", "invalid_tool_calls", "tool_call_chunks")


def parse_prompt(prompt: str) -> Conversation:
    """Read the string LangChain hands a cache: a plain prompt (LLMs) or the JSON of a message
    list (chat models).  Anything unexpected becomes a plain prompt, keyed on its full text.
    Memoized for prompts up to 16 KB (repeats are what a cache sees), within 16 MiB."""
    if len(prompt) > 16_384:
        return _parse(prompt)
    key = hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    parsed = _PARSED.get(key)
    if parsed is None:
        parsed = _parse(prompt)
        _PARSED.put(key, parsed, ENTRY_BYTES + _size(parsed))
    return parsed


_PARSED: Memo[Conversation] = Memo(16 * 2**20)  # digest of a prompt -> its conversation


def parse_memo_bytes() -> int:
    """Bytes held by the memo of parsed prompts (``Cache.stats()``)."""
    return _PARSED.bytes


def _size(conversation: Conversation) -> int:
    """Bytes of a parsed prompt: its texts, and each turn's object."""
    c = conversation
    turns = sum(text_size(t.role, t.content, t.meta) + 80 for t in c.history)
    return text_size(c.query, c.system, c.query_meta) + turns + 100


def _parse(prompt: str) -> Conversation:
    if prompt[:1] != "[":
        return Conversation(prompt)
    try:
        items = json.loads(prompt)
        calls = _call_positions(item["kwargs"] for item in items)
        messages = [_message_from_serialized(item, calls) for item in items]
    except (ValueError, TypeError, KeyError, RecursionError, AttributeError):
        return Conversation(prompt, semantic=False)
    return split_conversation(messages)


def parse_messages(messages: Sequence[BaseMessage]) -> Conversation:
    """The same view, from message objects (the chat-model wrapper has them at hand)."""
    fields = [dict(m) for m in messages]
    calls = _call_positions(fields)
    said = zip(messages, fields, strict=True)
    return split_conversation([(_role(m), _text(m.content), _meta(f, calls)) for m, f in said])


def _call_positions(messages: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Tool call id → ``[tool name, position among the conversation's calls]``: which call a
    tool result answers, without the id (run-specific).  Parallel results that come back in
    another order answer other calls: a model pairs them by id."""
    positions: dict[str, list[Any]] = {}
    for fields in messages:
        for call in fields.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("id") is not None:
                positions.setdefault(str(call["id"]), [call.get("name"), len(positions)])
    return positions


def _role(message: BaseMessage) -> str:
    return str(getattr(message, "role", message.type)) if message.type == "chat" else message.type


def _message_from_serialized(
    item: dict[str, Any], calls: Mapping[str, list[Any]]
) -> tuple[str, str, str]:
    kwargs = item["kwargs"]
    role = _ROLES.get(item["id"][-1], kwargs.get("type", "chat"))
    if role == "chat":
        role = str(kwargs.get("role", "chat"))
    return role, _text(kwargs.get("content", "")), _meta(kwargs, calls)


def _meta(fields: Mapping[str, Any], calls: Mapping[str, list[Any]]) -> str:
    """Every field of a message that can change the answer (name, tool calls without their
    ids, which call a tool result answers, its name and status, provider extras …) as
    canonical text.  A result whose call is not in the conversation keeps its id."""
    kept = {k: v for k, v in fields.items() if k not in _NOT_META}
    answers = fields.get("tool_call_id")
    if answers is not None:
        kept["answers"] = calls.get(str(answers), ["id", str(answers)])
    for name in _CALL_FIELDS:
        if kept.get(name):
            kept[name] = canonical_calls(kept[name])
    if kept.get("status") == "success":  # a tool result's default: absent when serialized
        del kept["status"]
    content = fields.get("content")
    if isinstance(content, list) and len(content) > 1:  # blocks are joined in the text
        kept["parts"] = len(content)
    return canonical_meta(kept)


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:  # images, files: not text, but they change the question
                parts.append(json.dumps(block, sort_keys=True, default=str))
        return "\n".join(parts)
    return json.dumps(content, sort_keys=True, default=str)


@lru_cache(maxsize=1024)
def llm_key(llm_string: str) -> str:
    """A digest of LangChain's llm_string (model, temperature, stop, tools, response format…)."""
    return hashlib.blake2b(llm_string.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


# generations ⇄ payload --------------------------------------------------------------------
_USAGE = frozenset({"input_tokens", "output_tokens", "total_tokens"})  # what AIMessage requires


def readable_usage(usage: Mapping[str, Any] | None) -> UsageMetadata | None:
    """``usage`` when an AI message or chunk can be built with it, else ``None``: LangChain
    marks what its own cache served ``{"total_cost": 0}``, which neither validates."""
    return cast(UsageMetadata, usage) if usage is not None and usage.keys() >= _USAGE else None


def payload_from_generations(generations: Sequence[Generation]) -> dict[str, Any]:
    """Plain data for the store: kind, text, generation info and, for chat, the message.
    Shares nothing with ``generations`` (the store keeps it; the caller keeps those).
    ``ValueError`` for a message whose fields or tool arguments hold objects (``parsed``):
    a hit would give them back as dicts, which the app's code would read as the objects."""
    out = []
    for generation in generations:
        item: dict[str, Any] = {"text": generation.text, "info": generation.generation_info}
        if isinstance(generation, ChatGeneration):
            said = generation.message
            calls = [c.get("args") for c in getattr(said, "tool_calls", None) or ()]
            if holds_objects(said.additional_kwargs) or holds_objects(calls):
                raise ValueError("the answer holds objects a hit would give back as plain data")
            message = message_to_dict(said)
            message["data"].pop("id", None)  # a run id: meaningless on a replay
            if readable_usage(message["data"].get("usage_metadata")) is None:
                message["data"].pop("usage_metadata", None)
            item |= {"kind": "chat", "message": message}
        else:
            item["kind"] = "text"
        out.append(item)
    return _detached({"v": 1, "generations": out})


def generations_from_payload(payload: Any, tier: dict[str, Any] | None = None) -> list[Generation]:
    """Generations rebuilt from ``payload`` (a hit's payload is the caller's own copy, so
    they share nothing with the cache), with ``tier`` under ``"tricache"`` in each message's
    response metadata (chat) or generation info (text).  Raises for anything that is not a
    payload this adapter wrote."""
    if not isinstance(payload, dict) or payload.get("v") != 1:
        raise ValueError("not a TriCache LangChain payload")
    generations: list[Generation] = []
    for item in payload["generations"]:
        info = item["info"]
        if tier is not None and item["kind"] == "text":
            info = {**(info or {}), "tricache": tier}
        if item["kind"] == "chat":
            message = _ai_message(item["message"], tier)
            generations.append(ChatGeneration(message=message, generation_info=info))
        elif item["kind"] == "text" and isinstance(item["text"], str):
            generations.append(Generation(text=item["text"], generation_info=info))
        else:
            raise ValueError(f"unknown generation kind {item['kind']!r}")
    if not generations:
        raise ValueError("a cached answer without generations")
    return generations


def generations_of(entry: CacheEntry, tier: dict[str, Any] | None = None) -> list[Generation]:
    """``generations_from_payload`` of a copy of ``entry``'s payload, for an exact or semantic
    hit on ``entry`` (shared with the cache: read, never changed).  Validated once per entry
    (``generations_from_payload``, on a copy of the payload); each hit gets new objects built
    from those (``_Shape``) whose every dict and list is new, so what a caller is served
    shares nothing with the cache or with another hit.  Raises as ``generations_from_payload``."""
    key = id(entry)  # (the memo holds the entry: no other object takes its id meanwhile)
    found = _SERVED.get(key)
    if found is None or found[0] is not entry:
        payload = fresh(entry.payload)  # (``generations_from_payload`` edits what it is given)
        weight = 2 * ENTRY_BYTES + text_size(entry.text) + 2 * _weight(payload)  # entry, shapes
        found = (entry, [_shapes(g) for g in generations_from_payload(payload, None)])
        _SERVED.put(key, found, weight + _SHAPE_BYTES * len(found[1]))
    try:
        return [_served(generation, message, tier) for generation, message in found[1]]
    except RecursionError:  # data nested deeper than a copy by recursion goes: rebuilt whole
        return generations_from_payload(fresh(entry.payload), tier)


_SHAPE_BYTES = 3000  # a generation's and its message's shapes besides their data (tracemalloc)


def _weight(value: Any) -> int:
    """Bytes held by plain data (``sys.getsizeof`` of each dict, list and scalar in it), at
    any depth (no recursion)."""
    total, left = 0, [value]
    while left:
        item = left.pop()
        total += sys.getsizeof(item)
        if type(item) is dict:
            left.extend(item.keys())
            left.extend(item.values())
        elif type(item) is list:
            left.extend(item)
    return total


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})


class _Shape:
    """A pydantic model as validated once, never handed out; ``state()`` is a copy of its
    state (``__getstate__``: fields, extras, fields set, private attributes) with every
    field that is not an immutable scalar deep-copied (``_copied``), ``build`` a new model
    of it (``__setstate__``, as pickle and ``copy`` rebuild a model: no validation)."""

    __slots__ = ("cls", "empty_dicts", "empty_lists", "extra", "fields", "fields_set", "mutable",
                 "private")  # fmt: skip

    def __init__(self, model: Any, *, kept: tuple[str, ...] = ()) -> None:
        state = model.__getstate__()
        self.cls: Any = type(model)
        self.fields: dict[str, Any] = state["__dict__"]
        self.extra: dict[str, Any] | None = state["__pydantic_extra__"]
        self.fields_set: set[str] = state["__pydantic_fields_set__"]
        self.private: dict[str, Any] | None = state["__pydantic_private__"]
        # (``kept``: fields the caller replaces with a new object of its own)
        mutable = [(name, value) for name, value in self.fields.items()
                   if not _immutable(value) and name not in kept]  # fmt: skip
        self.empty_dicts = tuple(n for n, v in mutable if type(v) is dict and not v)
        self.empty_lists = tuple(n for n, v in mutable if type(v) is list and not v)
        self.mutable = tuple(n for n, v in mutable if v or type(v) not in (dict, list))

    def state(self) -> dict[str, Any]:
        fields = self.fields.copy()
        for name in self.empty_dicts:  # (most fields: one new {} or [] each, no call)
            fields[name] = {}
        for name in self.empty_lists:
            fields[name] = []
        for name in self.mutable:
            fields[name] = _copied(fields[name])
        return {
            "__dict__": fields,
            "__pydantic_extra__": None if self.extra is None else _copied(self.extra),
            "__pydantic_fields_set__": self.fields_set.copy(),
            "__pydantic_private__": _copied(self.private) if self.private else self.private,
        }

    def build(self, state: dict[str, Any]) -> Any:
        model = self.cls.__new__(self.cls)
        model.__setstate__(state)
        return model


# id of an entry -> (the entry, its generations' and messages' shapes)
_SERVED: Memo[tuple[CacheEntry, list[tuple[_Shape, _Shape | None]]]] = Memo(16 * 2**20)


def _shapes(generation: Generation) -> tuple[_Shape, _Shape | None]:
    if isinstance(generation, ChatGeneration):
        return _Shape(generation, kept=("message",)), _Shape(generation.message)
    return _Shape(generation), None


def _served(generation: _Shape, message: _Shape | None, tier: dict[str, Any] | None) -> Any:
    """A new generation equal to what ``generations_from_payload(payload, tier)`` builds,
    fields set included: ``tier`` in a chat message's response metadata (as a new key, or in
    place of the old one: as ``{**meta, "tricache": tier}``), else in the generation info."""
    state = generation.state()
    fields = state["__dict__"]
    if message is not None:
        said = message.state()
        if tier is not None:
            said["__dict__"]["response_metadata"]["tricache"] = tier
            said["__pydantic_fields_set__"].add("response_metadata")
        fields["message"] = message.build(said)
    elif tier is not None:
        fields["generation_info"] = {**(fields["generation_info"] or {}), "tricache": tier}
    return generation.build(state)


def _copied(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, scalars: what MessagePack gives back and
    pydantic keeps), anything else through ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()} if value else {}
    if kind is list:
        return [_copied(v) for v in value] if value else []
    return value if _immutable(value) else copy.deepcopy(value)


def _immutable(value: Any) -> bool:
    """A scalar, or a subclass of one without instance attributes (LangChain's
    ``TextAccessor``, the ``str`` a generation's ``text`` is): safe to share."""
    return type(value) in _SCALARS or (
        isinstance(value, str | bytes | int | float) and not hasattr(value, "__dict__")
    )


def _ai_message(stored: Any, tier: dict[str, Any] | None) -> AIMessage:
    """The AI message ``message_to_dict`` wrote, with ``tier`` in its response metadata.
    ``stored`` is the hit's own copy: the tier goes into its data before the one validation
    (as ``messages_from_dict`` builds it, without a second pass to set the field)."""
    if isinstance(stored, dict) and stored.get("type") == "ai" and isinstance(stored["data"], dict):
        data = stored["data"]
        if tier is not None:
            data["response_metadata"] = {**data.get("response_metadata", {}), "tricache": tier}
        return AIMessage(**data)
    (message,) = messages_from_dict([stored])
    if not isinstance(message, AIMessage):
        raise ValueError(f"a cached answer must be an AI message, not {message.type!r}")
    if tier is not None:  # (an AIMessageChunk)
        message.response_metadata = {**message.response_metadata, "tricache": tier}
    return message


def _detached(value: Any) -> Any:
    """A deep copy of ``value`` as plain data, for the store to keep (``fresh``: a MessagePack
    round trip, faster than ``copy.deepcopy``); what MessagePack cannot write goes through
    JSON."""
    try:
        return fresh(value)
    except (TypeError, ValueError, OverflowError):
        return plain(value)  # already a fresh copy


def finish_reason(generation: Generation) -> Any:
    """The provider's finish or stop reason for ``generation``, if it gave one."""
    finish = provider_finish(generation.generation_info)
    if finish is None and isinstance(generation, ChatGeneration):
        finish = provider_finish(generation.message.response_metadata)
    return finish


def answer_of(generations: Sequence[Generation], model: str = "") -> Answer:
    """LangChain's generations as the cache keeps them (``tricache.Answer``): the first
    unfinished reason among them speaks for all."""
    reasons = [finish_reason(g) for g in generations]
    return Answer(
        "".join(g.text for g in generations),
        payload_from_generations(generations),
        finish=next((r for r in reasons if not _finished(r)), None),
        tool_calls=any(
            isinstance(g, ChatGeneration) and getattr(g.message, "tool_calls", None)
            for g in generations
        ),
        tokens=usage_tokens(generations),
        model=model,
    )


@lru_cache(maxsize=1024)
def shapes_answer(llm_string: str) -> bool:
    """True when the call asks for tools or an answer format (``flow.SHAPING_OPTIONS``):
    LangChain's llm_string lists the call's options as ``('name', value)`` pairs."""
    return any(f"('{name}', " in llm_string for name in SHAPING_OPTIONS)


def _finished(reason: Any) -> bool:
    return (reason is None or isinstance(reason, str)) and reason in FINISHED


def usage_tokens(generations: Sequence[Generation]) -> int:
    """Total tokens the answer cost, from usage metadata or the provider's token_usage."""
    total = 0
    for generation in generations:
        usage = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
        tokens = usage.get("total_tokens")
        if tokens is None:
            info = generation.generation_info or {}
            tokens = (info.get("token_usage") or info.get("usage") or {}).get("total_tokens")
        total += int(tokens or 0) if isinstance(tokens, int | float) else 0
    return total


_MODEL = re.compile(
    r"""['"](?:model_name|model|model_id|deployment_name)['"]\s*[,:]\s*['"]([^'"]+)['"]"""
)


@lru_cache(maxsize=1024)
def model_name(llm_string: str) -> str:
    """The model's name as it appears in LangChain's llm_string ("" when absent)."""
    match = _MODEL.search(llm_string)
    return match.group(1) if match else ""
