"""What the flow needs from LlamaIndex's answers, and back: one codec per kind of output.

A codec turns the model's answer into what the cache keeps (``answer``; ``last`` for a stream,
whose last response holds the whole), a hit back into the framework's answer (``served``;
``replay`` / ``areplay`` as a stream), and tags what the model answered with its tier
(``tagged``, ``said``).  ``CHAT`` and ``COMPLETION`` serve ``TriCacheLLM``, ``QUERY`` the
query engine wrapper.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    MessageRole,
)
from llama_index.core.base.response.schema import Response
from llama_index.core.schema import NodeWithScore, TextNode

from tricache import Answer, Hit, Outcome
from tricache.key.conversation import plain, stream_pieces
from tricache.runtime.aiter import async_iter

from .convert import (
    chat_from_payload,
    chat_payload,
    completion_from_payload,
    completion_payload,
    finish_reason,
    has_tool_calls,
    usage_tokens,
)

__all__ = ["CHAT", "COMPLETION", "QUERY", "LLMCodec", "QueryCodec"]

_LLM = {"tier": "llm"}


class LLMCodec:
    """An LLM's responses of one kind (chat or completion): ``payload_of`` writes one for the
    store, ``decode`` reads it back, ``curated`` makes one of a curated FAQ text, ``pieces``
    replays one as a stream."""

    def __init__(
        self,
        payload_of: Callable[[Any], Any],
        decode: Callable[[Any, dict[str, Any]], Any],
        curated: Callable[[str, dict[str, Any]], Any],
        pieces: Callable[[Any], Iterator[Any]],
    ) -> None:
        self.payload_of, self.decode, self.curated, self.pieces = (
            payload_of,
            decode,
            curated,
            pieces,
        )

    def answer(self, response: ChatResponse | CompletionResponse) -> Answer:
        """A response as the cache keeps it (``tricache.Answer``)."""
        return Answer(
            response.message.content or "" if isinstance(response, ChatResponse) else response.text,
            self.payload_of(response),
            finish=finish_reason(response.raw),
            tool_calls=isinstance(response, ChatResponse) and has_tool_calls(response.message),
            tokens=usage_tokens(response),
        )

    def last(self, responses: Sequence[Any]) -> Answer:
        """A stream's answer: its last response holds the whole (LlamaIndex streams
        accumulate)."""
        return self.answer(responses[-1])

    def served(self, hit: Hit) -> Any:
        """A hit as a response: a curated FAQ answer from its text, else decoded from its
        payload (``ValueError`` for a payload this adapter did not write)."""
        info = hit.metadata()
        return self.curated(hit.text, info) if hit.tier == "faq" else self.decode(hit.payload, info)

    def replay(self, hit: Hit) -> Iterator[Any]:
        return self.pieces(self.served(hit))

    def areplay(self, hit: Hit) -> AsyncIterator[Any]:
        return async_iter(self.replay(hit))

    def said(self, out: Outcome[Any]) -> Any:
        """The answer, saying who answered: the hit's tier (already in it), or the model (a
        copy: the caller's object is theirs)."""
        return out.answer if out.hit is not None else tagged(out.answer, _LLM)

    def said_stream(self, out: Outcome[Iterator[Any]]) -> Generator[Any, None, None]:
        """Every response of the stream says who answered.  The model's responses are the
        caller's copies (``owned``): the cache stores the stream once it ends, so an app that
        edits a response as it comes must not edit what is stored."""
        if out.hit is not None:
            yield from out.answer
            return
        for response in out.answer:
            yield tagged(owned(response), _LLM)

    async def asaid_stream(self, out: Outcome[AsyncIterator[Any]]) -> AsyncGenerator[Any, None]:
        async for response in out.answer:
            yield response if out.hit is not None else tagged(owned(response), _LLM)


def owned(response: Any) -> Any:
    """A copy of a streamed ``response`` whose message and fields are new; ``raw``, the
    provider's own object, which the cache does not keep, is shared."""
    fields = type(response).model_fields
    return response.model_copy(update={name: copy.deepcopy(getattr(response, name))
                                       for name in fields if name != "raw"})  # fmt: skip


def tagged(response: Any, info: dict[str, Any]) -> Any:
    """A copy of ``response`` with ``info`` under ``additional_kwargs["tricache"]``."""
    return response.model_copy(
        update={"additional_kwargs": {**response.additional_kwargs, "tricache": dict(info)}}
    )


def _faq_chat(text: str, info: dict[str, Any]) -> ChatResponse:
    message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
    return ChatResponse(message=message, additional_kwargs={"tricache": info})


def _faq_completion(text: str, info: dict[str, Any]) -> CompletionResponse:
    return CompletionResponse(text=text, additional_kwargs={"tricache": info})


def _chat_pieces(response: ChatResponse) -> Iterator[ChatResponse]:
    """A cached answer as a stream of word-sized deltas; the last carries the whole message."""
    whole, extra = response.message, response.additional_kwargs
    pieces = stream_pieces(whole.content or "") or [""]
    so_far = ""
    for i, piece in enumerate(pieces):
        so_far += piece
        message = whole if i == len(pieces) - 1 else ChatMessage(role=whole.role, content=so_far)
        yield ChatResponse(message=message, delta=piece, additional_kwargs=extra)


def _completion_pieces(response: CompletionResponse) -> Iterator[CompletionResponse]:
    so_far = ""
    for piece in stream_pieces(response.text) or [""]:
        so_far += piece
        yield CompletionResponse(
            text=so_far, delta=piece, additional_kwargs=response.additional_kwargs
        )


CHAT = LLMCodec(chat_payload, chat_from_payload, _faq_chat, _chat_pieces)
COMPLETION = LLMCodec(completion_payload, completion_from_payload, _faq_completion,
                      _completion_pieces)  # fmt: skip


class QueryCodec:
    """A query engine's responses: the text, its source nodes and metadata; a stream is its
    text's tokens."""

    def answer(self, response: Any) -> Answer:
        """A response as the cache keeps it: its text, source nodes and metadata (copied: the
        caller's objects stay theirs)."""
        text = response.response if isinstance(response, Response) else None
        return self.answer_of(response, text if isinstance(text, str) else "")

    def streamed(self, opened: list[Any]) -> Callable[[Sequence[str]], Answer]:
        """A streamed response (``opened[0]``, once asked) as the cache keeps it, once its
        tokens are all in."""
        return lambda tokens: self.answer_of(opened[0], "".join(tokens))

    def answer_of(self, response: Any, text: str) -> Answer:
        sources = [
            {
                "id": n.node.node_id,
                "text": n.node.get_content(),
                "metadata": plain(dict(n.node.metadata)),
                "score": n.score,
            }
            for n in getattr(response, "source_nodes", None) or []
        ]
        metadata = {k: v for k, v in (getattr(response, "metadata", None) or {}).items()
                    if k != "tricache"}  # fmt: skip
        payload = {"v": 1, "kind": "response", "sources": sources, "metadata": plain(metadata)}
        return Answer(text, copy.deepcopy(payload))

    def served(self, hit: Hit) -> Response:
        return Response(hit.text, *self.sources(hit))

    def sources(self, hit: Hit) -> tuple[list[NodeWithScore], dict[str, Any]]:
        """A hit's source nodes, and its metadata saying which tier served it."""
        sources, metadata = self.decode(hit)
        return sources, {**metadata, "tricache": hit.metadata()}

    def replay(self, hit: Hit) -> Iterator[str]:
        self.decode(hit)  # (a payload of another kind raises here: a miss, counted as corrupt)
        return iter(stream_pieces(hit.text))

    def areplay(self, hit: Hit) -> AsyncIterator[str]:
        self.decode(hit)
        return async_iter(stream_pieces(hit.text))

    def said(self, out: Outcome[Any]) -> Any:
        return out.answer if out.hit is not None else self.from_engine(out.answer)

    def said_stream(self, response: Any, tokens: Any) -> Any:
        """The engine's streaming response, its tokens recorded for the cache."""
        if hasattr(response, "response_gen"):
            response.response_gen = tokens
        else:  # it answered whole after all
            response = Response("".join(tokens), response.source_nodes, response.metadata)
        return self.from_engine(response)

    def from_engine(self, response: Any) -> Any:
        """The wrapped engine's response, marked as such (its metadata a new dict: the
        engine's own stays as it was)."""
        if hasattr(response, "metadata"):  # Response and the streaming ones (PydanticResponse …)
            response.metadata = {**(response.metadata or {}), "tricache": {"tier": "llm"}}
        return response

    def decode(self, hit: Hit) -> tuple[list[NodeWithScore], dict[str, Any]]:
        """Source nodes and metadata from a hit (whose payload is the caller's own copy);
        ``ValueError`` (or another error) for a value this adapter did not write."""
        if hit.tier == "faq":
            return [], {}
        payload = hit.payload
        if not isinstance(payload, dict) or payload.get("kind") != "response":
            raise ValueError("not a TriCache query-engine payload")
        sources = [
            NodeWithScore(
                node=TextNode(id_=s["id"], text=s["text"], metadata=s["metadata"]),
                score=s["score"],
            )
            for s in payload["sources"]
        ]
        metadata = payload["metadata"]
        if not isinstance(metadata, dict):
            raise ValueError("query-engine metadata is not a mapping")
        return sources, metadata


QUERY = QueryCodec()
