"""Options of the entries written in the current context (thread or asyncio task): a TTL,
tags and a category for calls whose code does not reach ``Cache.update`` itself (a LangChain
chain, a LlamaIndex engine).

    with entry_options(ttl=600, tags=["pricing"], category="knowledge"):
        chain.invoke(...)   # what it caches lives 10 minutes, under the tag "pricing"

Nested blocks add their tags and override the TTL and category.  The adapters also read them
from LangChain's ``config={"metadata": {"tricache_ttl": ..., "tricache_tags": [...],
"tricache_category": ...}}`` and LlamaIndex's ``tricache_ttl=`` … keyword arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .request import CacheRequest

__all__ = [
    "MAX_TTL_S",
    "EntryOptions",
    "checked_ttl",
    "current_entry_options",
    "entry_options",
    "exactly",
    "options_from",
]

# The longest lifetime an entry may ask for: ten years.  (Redis refuses an expiry that
# overflows its clock, sys.maxsize seconds for one; nothing a cache keeps needs longer.)
MAX_TTL_S = 10 * 365 * 24 * 3600


def checked_ttl(ttl: object) -> float:
    """``ttl`` as seconds, when it is a positive finite number no larger than ``MAX_TTL_S``;
    a ``ValueError`` that names the bound otherwise."""
    if (
        isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl)
        or not 0 < ttl <= MAX_TTL_S
    ):  # fmt: skip
        raise ValueError(
            f"ttl must be a positive number of seconds, at most {MAX_TTL_S} (10 years), "
            f"not {ttl!r:.40}"
        )
    return float(ttl)


@dataclass(frozen=True, slots=True)
class EntryOptions:
    ttl: float | None = None  # seconds (no jitter); None: the TtlPolicy's
    tags: tuple[str, ...] = ()
    category: str | None = None


_NONE = EntryOptions()
_options: ContextVar[EntryOptions | None] = ContextVar("tricache_entry_options", default=None)


@contextlib.contextmanager
def entry_options(
    *, ttl: float | None = None, tags: Iterable[str] = (), category: str | None = None
) -> Iterator[EntryOptions]:
    """Entries written inside the block get ``ttl``, ``tags`` and ``category``."""
    if ttl is not None:
        ttl = checked_ttl(ttl)
    if isinstance(tags, str | bytes):
        raise TypeError("tags must be a list of tags, not one string: tags=[tag]")
    tags = tuple(tags)
    if not all(isinstance(t, str) and t for t in tags):
        raise TypeError("tags must be non-empty strings")
    if category is not None and not isinstance(category, str):
        raise TypeError("category must be a str")
    outer = _options.get() or _NONE
    merged = EntryOptions(
        ttl if ttl is not None else outer.ttl,
        tuple(dict.fromkeys((*outer.tags, *tags))),
        category if category is not None else outer.category,
    )
    token = _options.set(merged)
    try:
        yield merged
    finally:
        _options.reset(token)


def current_entry_options() -> EntryOptions:
    return _options.get() or _NONE


def in_block(request: CacheRequest) -> CacheRequest:
    """``request`` with the tags and category of the ``entry_options`` block around the call
    added, as ``Cache.request`` adds them: a request made before the block and written inside
    it is written with them (else ``invalidate(tag)`` would not reach its answer)."""
    options = _options.get()
    if options is None or (not options.tags and options.category is None):
        return request
    tags = tuple(dict.fromkeys((*request.tags, *options.tags)))
    category = request.category if request.category is not None else options.category
    if tags == request.tags and category == request.category:
        return request
    return dataclasses.replace(request, tags=tags, category=category)


@contextlib.contextmanager
def exactly(options: EntryOptions) -> Iterator[None]:
    """Entries written inside the block get ``options``, not merged with the outer ones
    (``tenancy.in_scope``: a call's options as they were when it was made)."""
    token = _options.set(options)
    try:
        yield
    finally:
        _options.reset(token)


def options_from(fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """``entry_options`` keywords from a mapping's ``tricache_ttl``, ``tricache_tags`` and
    ``tricache_category`` (a LangChain config's metadata, LlamaIndex keyword arguments)."""
    found: dict[str, Any] = {}
    if fields:
        for name, key in _FIELDS:
            value = fields.get(key)
            if value is not None:
                found[name] = value
    return found


_FIELDS = (("ttl", "tricache_ttl"), ("tags", "tricache_tags"), ("category", "tricache_category"))
