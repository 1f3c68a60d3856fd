"""How long entries live: per-category TTLs with random jitter."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    negative entries ("this request has no cacheable answer").
    """

    default: float = 60 * 60
    categories: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CATEGORY_TTLS))
    jitter: float = 0.2
    negative: float = 30.0
    l1: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")
        if self.default <= 0 or self.negative <= 0 or self.l1 <= 0:
            raise ValueError("TTLs must be positive")

    def base_ttl(self, category: str | None, *, negative: bool = False) -> float:
        if negative:
            return self.negative
        return self.categories.get(category, self.default) if category else self.default

    def ttl(self, category: str | None, *, negative: bool = False) -> float:
        base = self.base_ttl(category, negative=negative)
        return base * (1 + random.uniform(0, self.jitter))
