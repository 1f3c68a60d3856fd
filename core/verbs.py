"""One face for every framework: the admin verbs of ``Cache`` on the object a framework holds.

LangChain's ``TriCache`` and ``CachedChatModel``, LlamaIndex's ``TriCacheLLM`` and
``CachedQueryEngine`` each hold their ``Cache`` as ``.tricache``; this mixin gives them what a
user of the framework object reaches for — invalidating a tag, a new knowledge-base version,
feedback, the FAQ, the entries, the counters — so nobody has to know that ``.tricache`` exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cache import Cache, Entry
    from .faq.store import FaqEntry

__all__ = ["CacheVerbs"]


class CacheVerbs:
    """``Cache``'s admin verbs, delegated to ``self.tricache``."""

    if TYPE_CHECKING:  # (a plain attribute, a property or a pydantic field of the class)
        tricache: Cache

    def invalidate(self, tag: str) -> int:
        """Entries written under ``tag`` become unreachable everywhere (``Cache.invalidate``)."""
        return self.tricache.invalidate(tag)

    def bump_kb_version(self) -> int:
        """The knowledge base changed: every entry of the namespace becomes stale."""
        return self.tricache.bump_kb_version()

    def set_min_watermark(self, watermark: float | None = None) -> float:
        """Entries whose requests began before ``watermark`` become stale."""
        return self.tricache.set_min_watermark(watermark)

    def evict(self) -> dict[str, int]:
        """Delete stale and corrupt entries; returns the counts."""
        return self.tricache.evict()

    def feedback(self, entry_id: str, *, correct: bool) -> None:
        """Report whether a served answer (its ``entry_id``) was right."""
        self.tricache.feedback(entry_id, correct=correct)

    def add_faq(self, entries: Iterable[FaqEntry | dict[str, Any] | tuple[str, str]]) -> int:
        """Add curated entries to the FAQ (``Cache.add_faq``)."""
        return self.tricache.add_faq(entries)

    def import_faq(self, path: str | Path) -> int:
        """Import curated Q/A from a CSV or JSONL file."""
        return self.tricache.import_faq(path)

    def faq_entries(self) -> list[tuple[int, FaqEntry]]:
        """The FAQ's entries with their ids."""
        return self.tricache.faq_entries()

    def delete_faq(self, faq_ids: Iterable[int]) -> int:
        """Delete FAQ entries by id."""
        return self.tricache.delete_faq(faq_ids)

    def entries(
        self,
        *,
        tag: str | None = None,
        prefix: str | None = None,
        category: str | None = None,
        limit: int | None = None,
    ) -> list[Entry]:
        """What the cache holds (``Cache.entries``)."""
        return self.tricache.entries(tag=tag, prefix=prefix, category=category, limit=limit)

    def delete(self, entry_id: str) -> None:
        """Delete one entry from every tier (``Cache.delete``)."""
        self.tricache.delete(entry_id)

    def stats(self) -> dict[str, Any]:
        """Counters and latency percentiles per tier."""
        return self.tricache.stats()
