"""How long entries live: per-category TTLs with random jitter."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..key.options import checked_ttl

__all__ = ["DEFAULT_CATEGORY_TTLS", "TtlPolicy"]

DEFAULT_CATEGORY_TTLS: Mapping[str, float] = {
    "chitchat": 10 * 60,
    "knowledge": 2 * 60 * 60,
    "realtime": 2 * 60,
}


@dataclass(slots=True)
class TtlPolicy:
    """TTL in seconds for an entry of a category, stretched by 0..``jitter`` of itself.

    Jitter keeps entries written together from expiring together.  ``negative`` is the TTL of
    negative entries ("this request has no cacheable answer"); ``error`` the longest an answer
    that reports an error ("temporarily unavailable", "rate limit exceeded") is kept, for its
    own request only; ``l1`` the longest an entry stays in a process's memory.
    """

    default: float = 60 * 60
    categories: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CATEGORY_TTLS))
    jitter: float = 0.2
    negative: float = 30.0
    l1: float = 60.0
    error: float = 30.0

    def __post_init__(self) -> None:
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")
        for ttl in (self.default, self.negative, self.l1, self.error, *self.categories.values()):
            checked_ttl(ttl)  # positive, finite, at most MAX_TTL_S: a ValueError that says so

    def base_ttl(self, category: str | None, *, negative: bool = False) -> float:
        if negative:
            return self.negative
        return self.categories.get(category, self.default) if category else self.default

    def ttl(self, category: str | None, *, negative: bool = False) -> float:
        base = self.base_ttl(category, negative=negative)
        return base * (1 + random.uniform(0, self.jitter))
