"""A cached answer, where it came from, and what it says about itself to the adapters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .key.entry import CacheEntry

__all__ = ["Hit"]


@dataclass(slots=True, kw_only=True)
class Hit:
    """A cached answer and where it came from."""

    text: str
    payload: Any  # the caller's own copy
    tier: str  # "exact", "semantic" or "faq"
    level: str  # where inside the tier: "l1", "l2", the vector index's name, or "sqlite" (FAQ)
    key: str  # the request's exact-tier key (what coalescing locks); for the FAQ, its entry id
    entry: CacheEntry  # shared with the cache: read it, do not change it
    score: float | None = None  # similarity, for semantic hits
    entry_id: str = ""  # what to pass to Cache.feedback()
    matched_question: str | None = None  # the cached question a semantic hit matched

    def metadata(self) -> dict[str, Any]:
        """What an answer says about the hit that served it (the adapters put it under
        ``"tricache"``): the tier, where inside it (``level``), the similarity (``score``,
        ``None`` for an exact hit), the entry (``entry_id``, for ``Cache.feedback``) and, for a
        semantic or FAQ hit, the cached question it matched (``matched``)."""
        info = {"tier": self.tier, "level": self.level, "score": self.score,
                "entry_id": self.entry_id}  # fmt: skip
        if self.matched_question is not None:
            info["matched"] = self.matched_question
        return info
