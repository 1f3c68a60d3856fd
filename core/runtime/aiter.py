"""A blocking iterator as an asynchronous one: a replayed hit is already in memory, so an
adapter's async stream hands it on without awaiting anything."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

__all__ = ["async_iter"]

T = TypeVar("T")


async def async_iter(items: Iterable[T]) -> AsyncIterator[T]:
    """``items``, one by one, to ``async for``."""
    for item in items:
        yield item
