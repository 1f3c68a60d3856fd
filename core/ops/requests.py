"""One request of the app counted once, whichever layers of one cache it passes.

An app's call may go through the cache more than once: ``CachedQueryEngine`` looks the query
up, and on a miss its engine calls a ``TriCacheLLM`` on the same cache, which looks the prompt
up; a coalesced caller looks up again once the leader answered.  ``request(metrics)`` wraps
each call through the flow (``Cache.answer``, ``stream`` …); inside it, nested ones join the
outer one.  So ``requests.lookups`` is one per request, ``requests.model_calls`` one per call
that reached the model (the innermost ``ask``: an outer one whose work went through a nested
flow counted nothing itself), and ``requests.lookup_misses`` one per miss of a lookup the app
made itself (``Cache.lookup`` outside the flow: the app then asks its model).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from .metrics import Metrics

__all__ = ["asking", "count_declined", "count_lookup", "in_request", "request"]


@dataclass
class _Request:
    metrics: Metrics
    looked_up: bool = False
    declined: bool = False
    nested: int = 0  # flows run inside it (a layer below)


_open: ContextVar[tuple[_Request, ...]] = ContextVar("tricache_requests", default=())


def _current(metrics: Metrics) -> _Request | None:
    for open_request in _open.get():
        if open_request.metrics is metrics:
            return open_request
    return None


def in_request(metrics: Metrics) -> bool:
    """Whether a request through the flow of the cache counting into ``metrics`` is under way."""
    return _current(metrics) is not None


@contextlib.contextmanager
def request(metrics: Metrics) -> Iterator[None]:
    """One call through the flow: the outermost counts as the request; a nested one joins it."""
    outer = _current(metrics)
    if outer is not None:
        outer.nested += 1
        yield
        return
    token = _open.set((*_open.get(), _Request(metrics)))
    try:
        yield
    finally:
        _open.reset(token)


def count_lookup(metrics: Metrics) -> None:
    """A lookup: ``requests.lookups`` once per request (every lookup outside one)."""
    current = _current(metrics)
    if current is None or not current.looked_up:
        metrics.incr("requests", "lookups")
        if current is not None:
            current.looked_up = True


def count_declined(metrics: Metrics) -> None:
    """A time-dependent question the cache neither serves from nor stores in its tiers:
    ``requests.skipped_time_dependent`` once per request (``exact.skipped_time_dependent``
    counts every read and write it refused)."""
    current = _current(metrics)
    if current is None or not current.declined:
        metrics.incr("requests", "skipped_time_dependent")
        if current is not None:
            current.declined = True


@contextlib.contextmanager
def asking(metrics: Metrics) -> Iterator[None]:
    """The flow asks the model: a model call, unless the work went through a nested flow of
    the same cache (which counted its own model calls, or was served)."""
    current = _current(metrics)
    before = current.nested if current is not None else 0
    try:
        yield
    finally:
        if current is None or current.nested == before:
            metrics.incr("requests", "model_calls")
