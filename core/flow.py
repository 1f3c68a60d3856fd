"""The flow around a model call, written once for every adapter.

    out = cache.answer(request, ask, convert, served)  # out.answer; out.hit (None: the model)

looks the request up (``served`` turns a hit into the framework's answer); on a miss takes the
coalescing turn (one call for concurrent identical misses: threads, coroutines, other
processes), asks the model, judges whether its answer may be reused (``reuse``: one rule for
every framework) and stores it under the versions its miss began with.  ``cache.stream(request,
open_stream, combine, replay)`` does the same for a stream: a hit replayed, or the model's
chunks passed through and the whole stored once the stream completed.

The flow is steps (``runtime/steps.py``): ``Cache.answer`` and ``Cache.aanswer`` run the same
body, blocking or awaited.  An adapter only converts — its framework's call into a
``CacheRequest``, the model's answer into an ``Answer``, a ``Hit`` into its framework's
answer — and says which tier answered.
"""

from __future__ import annotations

import enum
import logging
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from .exact.coalesce import NOTHING, Coalescer, Flight, LeaderLeft
from .exact.versions import Stamp
from .hit import Hit
from .key.asked import Asked
from .ops.requests import asking
from .runtime.steps import Call, Enter, Steps, arun, run

if TYPE_CHECKING:
    from .pipeline import Pipeline

__all__ = [
    "SHAPING_OPTIONS",
    "Answer",
    "Outcome",
    "Reuse",
    "finish_reason",
    "provider_field",
    "reuse",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Answer:
    """A model's answer as the cache keeps it: what an adapter makes of its framework's."""

    text: str
    payload: Any = None  # what a hit gives back to the adapter (MessagePack-able)
    finish: str | None = None  # the provider's finish or stop reason, as it reported it
    tool_calls: bool = False  # it asks for tools to be called
    tokens: int = 0  # what it cost
    model: str = ""


class Outcome(NamedTuple, Generic[T]):
    """What a call got: the framework's answer, and the hit that served it (``None``: the
    model answered)."""

    answer: T
    hit: Hit | None


class Reuse(enum.Enum):
    """Who may be served an answer."""

    NEVER = "never"  # not stored: asked again next time
    BRIEFLY = "briefly"  # that very request, for ``TtlPolicy.error`` seconds at most
    SAME_REQUEST = "same request"  # that very request only
    LOOK_ALIKES = "look-alikes"  # also questions the semantic tier finds the same


# Finish reasons, as providers spell them (OpenAI, Anthropic, Gemini, Bedrock, Cohere, Mistral,
# Ollama, vLLM, llama.cpp): a complete answer; one cut short; one the provider withheld or
# failed.  Any other reason is unknown: served to the same request only.
FINISHED = frozenset({None, "", "stop", "end_turn", "stop_sequence", "STOP", "eos", "COMPLETE",
                      "complete", "FINISH_REASON_STOP", "end"})  # fmt: skip
CUT_OFF = frozenset({"length", "max_tokens", "MAX_TOKENS", "model_length", "LENGTH"})
FAILED = frozenset({"content_filter", "safety", "SAFETY", "recitation", "RECITATION", "error",
                    "ERROR", "blocklist", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "refusal",
                    "guardrail_intervened", "MALFORMED_FUNCTION_CALL", "ERROR_TOXIC",
                    "content_filtered"})  # fmt: skip


# Where providers put that reason: LangChain's response_metadata and generation_info, raw
# responses (OpenAI's choices, Gemini's candidates, Ollama's done_reason, Bedrock's stopReason).
_FINISH_FIELDS = ("finish_reason", "stop_reason", "done_reason", "stopReason", "finishReason")
_ALTERNATIVES = ("choices", "candidates")


def finish_reason(response: Any) -> Any:
    """The finish or stop reason a provider reported in ``response`` (a mapping or an SDK
    object: metadata, a raw response), at its top level or in its first choice or candidate;
    ``None`` when it reported none."""
    for name in _FINISH_FIELDS:
        if (reason := provider_field(response, name)) is not None:
            return reason
    for name in _ALTERNATIVES:
        found = provider_field(response, name)
        if isinstance(found, Sequence) and not isinstance(found, str | bytes) and found:
            for field in _FINISH_FIELDS:
                if (reason := provider_field(found[0], field)) is not None:
                    return reason
    return None


# The options with which a call asks for tools to be called or for an answer in a format
# (OpenAI, Anthropic, Gemini, Ollama, vLLM, LangChain's structured output, LlamaIndex's
# programs): a curated text answer is not what such a call wants.
SHAPING_OPTIONS = frozenset({"tools", "functions", "tool_choice", "function_call",
                             "response_format", "ls_structured_output_format", "format",
                             "response_schema", "response_mime_type", "guided_json",
                             "guided_regex", "guided_choice", "guided_grammar", "json_schema",
                             "output_cls", "structured_output"})  # fmt: skip


def provider_field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, ``obj.name`` of an SDK object; ``None`` when absent (or
    when reading it fails: a provider object with odd properties)."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    try:
        return getattr(obj, name, None)
    except Exception:  # a provider object with odd properties
        return None


def reuse(answer: Answer) -> Reuse:
    """Who may be served ``answer``: the one rule, for every adapter.

    Never stored: an empty answer (no text, no tool call), one the provider withheld or that
    failed (a content filter, a safety stop, an error), one that is not a string.  The same
    request only: tool calls (they act on this very conversation), answers cut short by a
    token limit (the same limit cuts them the same way), an unknown finish reason, and
    refusals in the text (right for that question, not for its look-alikes).  The same
    request, briefly: a text that reports an error ("temporarily unavailable (HTTP 503)",
    "Rate limit exceeded"): the model may have recovered a minute later.  Everything else may
    also answer look-alikes."""
    from .semantic.answers import boilerplate, failure  # (numpy: loaded with the first answer)

    if not isinstance(answer.text, str):
        return Reuse.NEVER
    finish = answer.finish if isinstance(answer.finish, str) or answer.finish is None else "?"
    if finish in FAILED or (not answer.text.strip() and not answer.tool_calls):
        return Reuse.NEVER
    if not answer.tool_calls and failure(answer.text):
        return Reuse.BRIEFLY
    if answer.tool_calls or finish not in FINISHED or boilerplate(answer.text):
        return Reuse.SAME_REQUEST
    return Reuse.LOOK_ALIKES


# the flow, once ---------------------------------------------------------------------------------
def answer_steps(
    pipeline: Pipeline,
    request: Any,
    ask: Call[T],
    convert: Callable[[T], Answer],
    served: Callable[[Hit], T | None],
    *,
    semantic: bool,
    faq: bool = True,
    coalescer: Coalescer | None,
    ttl: float | None,
    category: str | None = None,
    curated: Callable[[Any], str | None] | None = None,
) -> Steps[Outcome[T]]:
    """A hit, else the model's answer (``ask``), stored as ``reuse`` allows.  ``curated``:
    the app's own curated answers, asked when every tier missed (``Asked.curated``)."""
    asked = pipeline.asked(request)
    asked.curated = curated
    found = yield from cached_steps(pipeline, asked, served, semantic, faq)
    if found is not None:
        return found
    began = pipeline.exact.began(asked.key)
    flight: Flight | None = None
    view, storable = (yield from view_steps(pipeline, asked)), pipeline.may_store(asked)
    if coalescer is not None and (view is not None or storable):
        flight = yield Enter(coalescer.flight, coalescer.aflight, asked.key, "answer", view,
                             not storable)  # fmt: skip
        if not flight.leader:  # another caller answered meanwhile, or gave up
            handed = flight.handed()
            if handed is not NOTHING:  # the same request's answer, a moment ago
                pipeline.metrics.incr("requests", "coalesced")
                return Outcome(handed, None)
            pipeline.exact.expect(asked.key)  # (another process may have written it)
            found = yield from cached_steps(pipeline, asked, served, semantic, faq)
            if found is not None:
                return found
            began = pipeline.exact.began(asked.key)
    with asking(pipeline.metrics):  # what reached the model (a coalesced wait did not)
        produced = yield ask
    answer = converted(produced, convert)
    allowed = Reuse.NEVER if answer is None else reuse(answer)
    stored = answer is not None and (
        yield from stored_steps(pipeline, asked, answer, allowed, semantic=semantic, began=began,
                                ttl=ttl, category=category)
    )  # fmt: skip
    # not stored (a time-dependent question, a store that refused it): handed to the callers
    # waiting for it, when the rule lets the same request have it and no version moved
    shareable = not stored and view is not None and allowed is not Reuse.NEVER
    if flight is not None and shareable and versions_view(pipeline, asked) == view:
        flight.hand(produced)
    return Outcome(produced, None)


def versions_view(pipeline: Pipeline, asked: Asked) -> Hashable:
    """The versions ``asked`` begins under, as this process knows them now: callers that
    began under the same ones may share one answer.  ``None`` when it cannot vouch for them
    (not verified with the store, or a tag of the request not read yet)."""
    exact = pipeline.exact
    versions = exact.versions
    if exact.store is not None and (versions.unknown(asked.tags) or not versions.verified()):
        return None
    stamp = versions.stamp(asked.tags)
    return (stamp.epoch, stamp.kb, stamp.floor, tuple(sorted(stamp.tags.items())))


def view_steps(pipeline: Pipeline, asked: Asked) -> Steps[Hashable]:
    """``versions_view``, after one poll of the store when this process cannot vouch for the
    versions yet (a time-dependent question does not look the exact tier up)."""
    if versions_view(pipeline, asked) is None:
        yield from pipeline.exact.sync.ready_steps(asked.tags)
    return versions_view(pipeline, asked)


def cached_steps(
    pipeline: Pipeline,
    asked: Asked,
    served: Callable[[Hit], T | None],
    semantic: bool,
    faq: bool = True,
) -> Steps[Outcome[T] | None]:
    """The framework's answer from the cache, or ``None``: a miss, a hit that does not fit
    (``served`` returned ``None``), or one the adapter cannot read (``served`` raised: valid
    MessagePack, not a payload of its own; counted as corrupt)."""
    hit = yield from pipeline.lookup_steps(asked, semantic, faq)
    if hit is None:
        return None
    try:
        answer = served(hit)
    except Exception as exc:  # never an error in the app: the model answers instead
        log.warning("tricache: cached value unreadable (%s: %s)", type(exc).__name__, exc)
        pipeline.metrics.incr("exact", "corrupt")
        return None
    return Outcome(answer, hit) if answer is not None else None


def store_steps(
    pipeline: Pipeline,
    asked: Asked,
    produced: T,
    convert: Callable[[T], Answer],
    *,
    semantic: bool,
    began: Stamp | None,
    ttl: float | None,
    category: str | None = None,
    rule: Callable[[Answer], Reuse] = reuse,
) -> Steps[bool]:
    """Store what the model answered, as ``rule`` allows; ``False`` when not stored."""
    answer = converted(produced, convert)
    if answer is None:
        return False
    return (yield from stored_steps(pipeline, asked, answer, rule(answer), semantic=semantic,
                                    began=began, ttl=ttl, category=category))  # fmt: skip


def converted(produced: T, convert: Callable[[T], Answer]) -> Answer | None:
    """What the model answered as an ``Answer``; ``None`` when the adapter cannot read it
    (it is passed on, never stored nor shared)."""
    try:
        return convert(produced)
    except Exception as exc:
        log.warning("tricache: answer not stored (%s: %s)", type(exc).__name__, exc)
        return None


def stored_steps(
    pipeline: Pipeline,
    asked: Asked,
    answer: Answer,
    allowed: Reuse,
    *,
    semantic: bool,
    began: Stamp | None,
    ttl: float | None,
    category: str | None = None,
) -> Steps[bool]:
    """Store ``answer`` as ``allowed``; ``False`` when not stored (a model's answer the store
    cannot hold is the app's all the same: never an error)."""
    if allowed is Reuse.NEVER:
        pipeline.metrics.incr("exact", "not_reusable")
        return False
    if allowed is Reuse.BRIEFLY:  # an error text: kept no longer than the policy's ``error``
        pipeline.metrics.incr("exact", "brief_writes")
        limit = pipeline.exact.policy.error
        ttl = limit if ttl is None else min(ttl, limit)
    shared = semantic and allowed is Reuse.LOOK_ALIKES
    fields = dict(category=category, negative=False, tokens=answer.tokens, model=answer.model,
                  stamp=began, shared=shared, ttl=ttl)  # fmt: skip
    try:
        return (yield from pipeline.update_steps(asked, answer.text, answer.payload, shared,
                                                 fields))  # fmt: skip
    except TypeError as exc:  # not plain data (an int past 64 bits): passed on, never stored
        pipeline.metrics.incr("exact", "unstorable")
        log.warning("tricache: answer not stored (%s)", exc)
        return False


# streams -----------------------------------------------------------------------------------------
_TURNS = 3  # a stream's follower whose head left before it began: turns it takes again


def stream_outcome(
    pipeline: Pipeline,
    asked: Asked,
    open_stream: Callable[[], Iterable[C]],
    combine: Callable[[Sequence[C]], Answer],
    replay: Callable[[Hit], Iterator[C] | None],
    options: dict[str, Any],
    *,
    faq: bool,
    coalescer: Coalescer | None,
    turns: int = _TURNS,
) -> Outcome[Iterator[C]]:
    """A hit replayed, else the model's stream passed through and stored once complete.  With
    a ``coalescer``, the callers of this process that ask the same meanwhile replay the first
    one's stream as it comes (``Flight.replay``), and other processes wait for its lock.  A
    follower whose head left before it passed anything on takes a new turn (``turns`` at
    most, then it streams on its own)."""
    semantic = options["semantic"]
    found = run(cached_steps(pipeline, asked, replay, semantic, faq))
    if found is not None:
        return found
    options = {**options, "began": pipeline.exact.began(asked.key)}
    view = run(view_steps(pipeline, asked)) if coalescer is not None else None
    while coalescer is not None and view is not None and turns > 0:
        turns -= 1
        flight = coalescer.join(asked.key, "stream", view, not pipeline.may_store(asked))
        if flight.head:
            return _head(pipeline, asked, flight, open_stream, combine, replay, options, faq)
        hit = flight.follow()  # (raises the head's error)
        if hit is not NOTHING:
            pipeline.metrics.incr("requests", "coalesced")
            again = partial(stream_outcome, pipeline, asked, open_stream, combine, replay, options,
                            faq=faq, coalescer=coalescer, turns=turns)  # fmt: skip
            return Outcome(_following(flight, again), hit)
    with asking(pipeline.metrics):
        chunks = open_stream()
    return Outcome(recording(pipeline, asked, chunks, combine, options), None)


def _following(flight: Flight, again: Callable[[], Outcome[Iterator[C]]]) -> Iterator[C]:
    """The head's stream, replayed; when its head left before anything came, a new turn."""
    passed = False
    try:
        for chunk in flight.replay():
            passed = True
            yield chunk
    except LeaderLeft:
        if passed:
            raise
        yield from again().answer


def _head(
    pipeline: Pipeline,
    asked: Asked,
    flight: Flight,
    open_stream: Callable[[], Iterable[C]],
    combine: Callable[[Sequence[C]], Answer],
    replay: Callable[[Hit], Iterator[C] | None],
    options: dict[str, Any],
    faq: bool,
) -> Outcome[Iterator[C]]:
    """The first caller of its process: its stream (a hit another process stored meanwhile,
    else the model's), published to its followers as it passes it on."""
    try:
        if not flight.leader:  # another process led: its answer may be stored now
            pipeline.exact.expect(asked.key)
            found = run(cached_steps(pipeline, asked, replay, options["semantic"], faq))
            if found is not None:
                flight.opened(found.hit)
                return Outcome(_shared(flight, iter(found.answer)), found.hit)
            options = {**options, "began": pipeline.exact.began(asked.key)}
        flight.pulling(True)
        with asking(pipeline.metrics):
            chunks = iter(open_stream())
    except BaseException as exc:
        flight.leave(exc)
        raise
    flight.pulling(False)
    flight.opened(None)
    return Outcome(_shared(flight, recording(pipeline, asked, chunks, combine, options)), None)


def _shared(flight: Flight, chunks: Iterator[C]) -> Iterator[C]:
    stream = _publishing(flight, chunks)
    weakref.finalize(stream, flight.abandon).atexit = False  # never read: collected
    return stream


def _publishing(flight: Flight, chunks: Iterator[C]) -> Iterator[C]:
    """``chunks`` passed on, each published to ``flight`` first; the flight left as the
    stream ends: complete, failed (its error), or left unfinished."""
    try:
        while True:
            flight.pulling(True)
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            finally:
                flight.pulling(False)
            flight.publish(chunk)
            yield chunk
    except BaseException as exc:
        flight.leave(exc)
        raise
    flight.leave(complete=True)


async def astream_outcome(
    pipeline: Pipeline,
    asked: Asked,
    open_stream: Callable[[], Awaitable[AsyncIterator[C]] | AsyncIterator[C]],
    combine: Callable[[Sequence[C]], Answer],
    replay: Callable[[Hit], AsyncIterator[C] | None],
    options: dict[str, Any],
    *,
    faq: bool,
    coalescer: Coalescer | None,
    turns: int = _TURNS,
) -> Outcome[AsyncIterator[C]]:
    """``stream_outcome`` for async code: the coroutines of one event loop share a stream."""
    semantic = options["semantic"]
    found = await arun(cached_steps(pipeline, asked, replay, semantic, faq))
    if found is not None:
        return found
    options = {**options, "began": pipeline.exact.began(asked.key)}
    view = await arun(view_steps(pipeline, asked)) if coalescer is not None else None
    while coalescer is not None and view is not None and turns > 0:
        turns -= 1
        flight = await coalescer.ajoin(asked.key, "stream", view, not pipeline.may_store(asked))
        if flight.head:
            return await _ahead(pipeline, asked, flight, open_stream, combine, replay, options,
                                faq)  # fmt: skip
        hit = await flight.afollow()
        if hit is not NOTHING:
            pipeline.metrics.incr("requests", "coalesced")
            again = partial(astream_outcome, pipeline, asked, open_stream, combine, replay,
                            options, faq=faq, coalescer=coalescer, turns=turns)  # fmt: skip
            return Outcome(_afollowing(flight, again), hit)
    with asking(pipeline.metrics):
        stream = await opened(open_stream())
    return Outcome(arecording(pipeline, asked, stream, combine, options), None)


async def _ahead(
    pipeline: Pipeline,
    asked: Asked,
    flight: Flight,
    open_stream: Callable[[], Awaitable[AsyncIterator[C]] | AsyncIterator[C]],
    combine: Callable[[Sequence[C]], Answer],
    replay: Callable[[Hit], AsyncIterator[C] | None],
    options: dict[str, Any],
    faq: bool,
) -> Outcome[AsyncIterator[C]]:
    """``_head`` for async code."""
    try:
        if not flight.leader:
            pipeline.exact.expect(asked.key)
            found = await arun(cached_steps(pipeline, asked, replay, options["semantic"], faq))
            if found is not None:
                flight.opened(found.hit)
                return Outcome(_ashared(flight, found.answer), found.hit)
            options = {**options, "began": pipeline.exact.began(asked.key)}
        flight.pulling(True)
        with asking(pipeline.metrics):
            chunks = await opened(open_stream())
    except BaseException as exc:
        await flight.aleave(exc)
        raise
    flight.pulling(False)
    flight.opened(None)
    return Outcome(_ashared(flight, arecording(pipeline, asked, chunks, combine, options)), None)


async def _afollowing(
    flight: Flight, again: Callable[[], Awaitable[Outcome[AsyncIterator[C]]]]
) -> AsyncIterator[C]:
    """``_following`` for async code."""
    passed = False
    try:
        async for chunk in flight.areplay():
            passed = True
            yield chunk
    except LeaderLeft:
        if passed:
            raise
        async for chunk in (await again()).answer:
            yield chunk


def _ashared(flight: Flight, chunks: AsyncIterator[C]) -> AsyncIterator[C]:
    stream = _apublishing(flight, chunks)
    weakref.finalize(stream, flight.abandon).atexit = False
    return stream


async def _apublishing(flight: Flight, chunks: AsyncIterator[C]) -> AsyncIterator[C]:
    """``_publishing`` for an async stream."""
    try:
        while True:
            flight.pulling(True)
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            finally:
                flight.pulling(False)
            flight.publish(chunk)
            yield chunk
    except BaseException as exc:
        await flight.aleave(exc)
        raise
    await flight.aleave(complete=True)


def recording(
    pipeline: Pipeline,
    asked: Asked,
    chunks: Iterable[C],
    combine: Callable[[Sequence[C]], Answer],
    options: dict[str, Any],
) -> Iterator[C]:
    """The model's chunks, passed through as they come; once the stream completed (not when
    it raised or was left unfinished), ``combine(chunks)`` is stored."""
    seen: list[C] = []
    for chunk in chunks:
        seen.append(chunk)
        yield chunk
    if seen:
        run(store_steps(pipeline, asked, seen, combine, **options))


async def arecording(
    pipeline: Pipeline,
    asked: Asked,
    chunks: AsyncIterator[C],
    combine: Callable[[Sequence[C]], Answer],
    options: dict[str, Any],
) -> AsyncIterator[C]:
    """``recording`` for an async stream."""
    seen: list[C] = []
    async for chunk in chunks:
        seen.append(chunk)
        yield chunk
    if seen:
        await arun(store_steps(pipeline, asked, seen, combine, **options))


async def opened(stream: Awaitable[AsyncIterator[C]] | AsyncIterator[C]) -> AsyncIterator[C]:
    """An async stream, whether the framework returns it or a coroutine that makes it."""
    if isinstance(stream, Awaitable):
        return await stream
    return stream
