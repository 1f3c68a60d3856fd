"""The tenant of the calls made in the current context (thread or asyncio task), and a call's
scope: its tenant and entry options as they were when the call was made."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import NamedTuple

from .options import EntryOptions, current_entry_options, exactly

__all__ = ["CallScope", "call_scope", "current_tenant", "in_scope", "tenant"]

_tenant: ContextVar[str | None] = ContextVar("tricache_tenant", default=None)


@contextlib.contextmanager
def tenant(name: str) -> Iterator[None]:
    """Calls made inside ``with tenant("acme"):`` read and write only acme's entries."""
    if not isinstance(name, str):
        raise TypeError("tenant must be a str")
    token = _tenant.set(name)
    try:
        yield
    finally:
        _tenant.reset(token)


def current_tenant() -> str | None:
    """The tenant set by the innermost :func:`tenant` block, or ``None`` (the cache's default)."""
    return _tenant.get()


class CallScope(NamedTuple):
    """Whom a call is made for (``tenant``) and what its entries get (``entry_options``)."""

    tenant: str | None
    options: EntryOptions


def call_scope() -> CallScope:
    """The scope in force now: read when a call is made, for a stream or a coroutine that
    runs later (a web handler returns the stream made inside its ``with tenant(...)``)."""
    return CallScope(_tenant.get(), current_entry_options())


@contextlib.contextmanager
def in_scope(scope: CallScope) -> Iterator[None]:
    """Inside the block, the tenant and the entry options are ``scope``'s, whatever the
    context it runs in says."""
    token = _tenant.set(scope.tenant)
    try:
        with exactly(scope.options):
            yield
    finally:
        _tenant.reset(token)
