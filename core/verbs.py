"""One face for every framework: the admin verbs (``admin.py``) on the object a user holds.

``Cache`` itself, LangChain's ``TriCache`` and ``CachedChatModel``, LlamaIndex's ``TriCacheLLM``
and ``CachedQueryEngine`` take this mixin: what a user reaches for — invalidating a tag, a new
knowledge-base version, feedback, the FAQ, the entries, the counters — is on the object they
hold, so nobody has to know that ``.tricache`` exists.  The adapters hold their ``Cache`` as
``.tricache``; every verb is ``Admin``'s, written once.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .admin import Admin, Entry
    from .faq.store import FaqEntry

__all__ = ["CacheVerbs", "HasAdmin"]


class HasAdmin(Protocol):
    """What holds the admin verbs: a ``Cache``."""

    @property
    def admin(self) -> Admin: ...


class CacheVerbs:
    """The admin verbs, delegated to ``self.admin`` (for an adapter: its cache's)."""

    if TYPE_CHECKING:  # (a plain attribute, a property or a pydantic field of the class)
        tricache: HasAdmin

    @property
    def admin(self) -> Admin:
        """The admin verbs of the cache this object uses."""
        return self.tricache.admin

    def invalidate(self, tag: str) -> int:
        """Entries written under ``tag`` become unreachable everywhere; returns its new version.
        Raises when the shared store cannot be reached (a lost invalidation would leave stale
        answers in other processes)."""
        return self.admin.invalidate(tag)

    def bump_kb_version(self) -> int:
        """The knowledge base changed: every existing entry of the namespace becomes stale."""
        return self.admin.bump_kb_version()

    def set_min_watermark(self, watermark: float | None = None) -> float:
        """Entries whose requests began before ``watermark`` (the store's clock; default: now)
        become stale, in every process.  Returns the floor set."""
        return self.admin.set_min_watermark(watermark)

    def evict(self) -> dict[str, int]:
        """Delete stale and corrupt entries (and expired semantic points); returns the counts."""
        return self.admin.evict()

    def clear(self) -> None:
        """Drop every entry of the namespace, and its semantic points, in every process."""
        self.admin.clear()

    def feedback(self, entry_id: str, *, correct: bool) -> None:
        """Report whether a served answer (its ``Hit.entry_id``) was right (``Admin.feedback``)."""
        self.admin.feedback(entry_id, correct=correct)

    def add_faq(self, entries: Iterable[FaqEntry | dict[str, Any] | tuple[str, str]]) -> int:
        """Add curated entries to the FAQ (``Admin.add_faq``); returns how many."""
        return self.admin.add_faq(entries)

    def import_faq(self, path: str | Path) -> int:
        """Import curated Q/A from a CSV or JSONL file; returns how many."""
        return self.admin.import_faq(path)

    def faq_entries(self) -> list[tuple[int, FaqEntry]]:
        """The FAQ's entries with their ids."""
        return self.admin.faq_entries()

    def delete_faq(self, faq_ids: Iterable[int]) -> int:
        """Delete FAQ entries by id; returns how many were deleted."""
        return self.admin.delete_faq(faq_ids)

    def entries(
        self,
        *,
        tag: str | None = None,
        prefix: str | None = None,
        category: str | None = None,
        limit: int | None = None,
    ) -> list[Entry]:
        """What the cache holds, filtered (``Admin.entries``)."""
        return self.admin.entries(tag=tag, prefix=prefix, category=category, limit=limit)

    def entry(self, entry_id: str) -> Entry | None:
        """One entry by its id, or ``None`` (``Admin.entry``)."""
        return self.admin.entry(entry_id)

    def delete(self, entry_id: str) -> None:
        """Delete one entry from every tier (``Admin.delete``)."""
        self.admin.delete(entry_id)

    def stats(self) -> dict[str, Any]:
        """Counters and latency percentiles per tier, as a plain dict."""
        return self.admin.stats()

    def shared_stats(self, window_s: float = 3600.0) -> dict[str, Any]:
        """What every process of this namespace did over the last ``window_s`` seconds."""
        return self.admin.shared_stats(window_s)
