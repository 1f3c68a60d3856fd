"""The tenant of the calls made in the current context (thread or asyncio task)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["current_tenant", "tenant"]

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
