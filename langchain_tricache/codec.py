"""What the flow needs from LangChain's answers, and back: one codec per kind of output.

A codec turns the model's answer into what the cache keeps (``answer``; ``combine`` for a
streamed one), a hit back into the framework's answer (``served``; ``replay`` as a stream),
and tags what the model answered with its tier (``tagged``).  ``CHAT`` serves the chat-model
wrapper (AI messages and chunks), ``CHAIN`` the chain wrapper (any serializable output).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.documents import Document
from langchain_core.load import dumpd, load
from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from tricache import Answer, Hit, Outcome
from tricache.key.conversation import stream_pieces
from tricache.runtime.aiter import async_iter

from .convert import (
    finish_reason,
    generations_from_payload,
    generations_of,
    payload_from_generations,
    readable_usage,
    usage_tokens,
)

__all__ = ["CHAIN", "CHAT", "ChainCodec", "ChatCodec"]

_M = TypeVar("_M", AIMessage, AIMessageChunk)


class ChatCodec:
    """AI messages (``invoke``) and message chunks (``stream``) of a chat model."""

    def answer(self, message: AIMessage) -> Answer:
        """A message as the cache keeps it."""
        generation = ChatGeneration(message=message)
        meta = message.response_metadata
        model = meta.get("model_name") or meta.get("model") or ""
        return Answer(
            generation.text,
            payload_from_generations([generation]),
            finish=finish_reason(generation),
            tool_calls=bool(message.tool_calls),
            tokens=usage_tokens([generation]),
            model=model if isinstance(model, str) else "",
        )

    def combine(self, chunks: Sequence[AIMessageChunk]) -> Answer:
        """A streamed answer, once complete, as the cache keeps it."""
        total = chunks[0]
        for chunk in chunks[1:]:
            total = total + chunk
        return self.answer(from_chunk(total))

    def served(self, hit: Hit) -> AIMessage | None:
        """A hit as a message (``None``: a payload this adapter did not write)."""
        info = hit.metadata()
        if hit.tier == "faq":  # a curated answer from the cache's FAQ
            return AIMessage(hit.text, response_metadata={"tricache": info})
        if hit.tier in ("exact", "semantic"):  # (raises: not ours)
            generations = generations_of(hit.entry, info)  # (a hit's payload copies its entry's)
        else:
            generations = generations_from_payload(hit.payload, info)
        if isinstance(generations[0], ChatGeneration):
            return generations[0].message  # type: ignore[return-value]
        return None

    def replay(self, hit: Hit) -> Iterator[ChatGenerationChunk] | None:
        """A hit as a stream of chunks (``None``: as ``served``)."""
        message = self.served(hit)
        if message is None:
            return None
        return self.replayed(message, hit.metadata())

    def areplay(self, hit: Hit) -> AsyncIterator[ChatGenerationChunk] | None:
        stream = self.replay(hit)
        return None if stream is None else async_iter(stream)

    def tagged(self, message: _M) -> _M:
        """A copy of what the model answered, saying so (the caller's message is theirs)."""
        meta = {**message.response_metadata, "tricache": {"tier": "llm"}}
        return message.model_copy(update={"response_metadata": meta})

    def result(self, out: Outcome[AIMessage]) -> ChatResult:
        """The answer as LangChain's result, saying who answered: the hit's tier (already in
        its metadata), or the model."""
        message = out.answer if out.hit is not None else self.tagged(out.answer)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def said_stream(self, out: Outcome[Iterator[Any]]) -> Iterator[ChatGenerationChunk]:
        """A stream whose first chunk says who answered (a replay says it already).  The
        model's chunks are the caller's copies: the cache stores the stream once it ends, so
        an app that edits a chunk as it comes must not edit what is stored."""
        if out.hit is not None:
            yield from out.answer
            return
        for i, chunk in enumerate(out.answer):
            yield ChatGenerationChunk(message=self._own(chunk, first=i == 0))

    async def asaid_stream(
        self, out: Outcome[AsyncIterator[Any]]
    ) -> AsyncIterator[ChatGenerationChunk]:
        first = True
        async for chunk in out.answer:
            if out.hit is not None:
                yield chunk
            else:
                yield ChatGenerationChunk(message=self._own(chunk, first=first))
            first = False

    def _own(self, chunk: AIMessageChunk, *, first: bool) -> AIMessageChunk:
        """The caller's copy of a chunk the model streamed; the first says who answered."""
        mine = chunk.model_copy(deep=True)
        return self.tagged(mine) if first else mine

    def replayed(self, message: AIMessage, info: dict[str, Any]) -> Iterator[ChatGenerationChunk]:
        """A cached answer as a stream: word-sized chunks; the first says which tier served it
        (``info``), the last carries the answer's own metadata, usage and other fields
        (``additional_kwargs``: a reasoning text, a refusal …)."""
        if message.tool_calls or not isinstance(message.content, str) or not message.content:
            yield ChatGenerationChunk(message=to_chunk(message))
            return
        own = {k: v for k, v in message.response_metadata.items() if k != "tricache"}
        pieces = stream_pieces(message.content)
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            meta = {**(own if last else {}), **({"tricache": info} if i == 0 else {})}
            chunk = AIMessageChunk(
                content=piece,
                response_metadata=meta,
                usage_metadata=message.usage_metadata if last else None,
                additional_kwargs=message.additional_kwargs if last else {},
            )
            yield ChatGenerationChunk(message=chunk)


def to_chunk(message: AIMessage) -> AIMessageChunk:
    """A whole message as one chunk (tool calls as tool-call chunks; a usage no chunk can
    hold left out: ``readable_usage``)."""
    return AIMessageChunk(
        content=message.content,
        additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata,
        usage_metadata=readable_usage(message.usage_metadata),
        tool_call_chunks=[
            {"name": c["name"], "args": json.dumps(c["args"]), "id": c.get("id"), "index": i}
            for i, c in enumerate(message.tool_calls)
        ],
    )


def from_chunk(chunk: AIMessageChunk) -> AIMessage:
    """A complete stream's sum as a message."""
    return AIMessage(
        content=chunk.content,
        response_metadata=chunk.response_metadata,
        usage_metadata=chunk.usage_metadata,
        tool_calls=chunk.tool_calls,
        additional_kwargs=chunk.additional_kwargs,
    )


class ChainCodec:
    """A chain's output: plain JSON data, or LangChain's serialization of messages and
    documents (loaded back with the allowed classes only: never an import)."""

    def __init__(self, allowed: Any) -> None:
        self.allowed = allowed

    def answer(self, output: Any) -> Answer:
        """A chain's output as the cache keeps it; one that would not come back equal keeps
        nothing (an empty answer: not stored)."""
        encoded = self.encode(output) if output is not None else None
        if encoded is None:
            return Answer("")
        tool_calls = bool(getattr(output, "tool_calls", None))
        return Answer(_chain_text(output), encoded, tool_calls=tool_calls)

    def served(self, hit: Hit) -> Any:
        """A hit's output (``None``: a curated FAQ answer, whose text does not fit a chain —
        the FAQ is not asked, ``faq=False``); raises for a payload this adapter did not write."""
        return None if hit.tier == "faq" else self.decode(hit.payload)

    def encode(self, output: Any) -> dict[str, Any] | None:
        """Plain JSON data, or LangChain's own serialization of messages and documents;
        ``None`` for an output that would not come back equal (it is not cached)."""
        if isinstance(output, Serializable) or (
            isinstance(output, list) and output and all(isinstance(o, Serializable) for o in output)
        ):
            kind, data = "lc", dumpd(output)
        else:
            kind, data = "json", output
        try:
            encoded = {"v": 1, "kind": kind, "data": json.loads(json.dumps(data))}
            return encoded if self.decode(encoded) == output else None  # tuples, int keys, NaN …
        except Exception:
            return None

    def decode(self, payload: Any) -> Any:
        """The output in ``payload`` (a hit's payload is the caller's own copy); raises for a
        payload we did not write."""
        if not isinstance(payload, dict) or payload.get("v") != 1:
            raise ValueError("not a TriCache chain payload")
        data = payload["data"]
        if payload["kind"] == "json":
            return data
        if payload["kind"] == "lc":  # only the allowed classes: never an import
            output = load(data, allowed_objects=self.allowed)
            if isinstance(output, Serializable) or (
                isinstance(output, list) and all(isinstance(o, Serializable) for o in output)
            ):
                return output
        raise ValueError(f"not a chain output of kind {payload['kind']!r}")


def _chain_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    content = getattr(output, "content", None) or getattr(output, "page_content", None)
    return content if isinstance(content, str) else json.dumps(output, default=str)[:10_000]


CHAT = ChatCodec()
# What a cached chain output may be rebuilt into: never any other class.
CHAIN = ChainCodec([AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage, Document])
