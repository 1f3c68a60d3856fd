"""The process's view of a namespace's shared versions, and the staleness rule.

Shared numbers live in the L2 store's meta: the knowledge-base version (``kb``), one version per
tag (``tag:<name>``) and the minimum acceptable watermark (``min_wm``).  Every entry records the
versions it was written under; an entry is stale when any of them is older than the view.
"""

from __future__ import annotations

import threading

from .entry import CacheEntry
from .stores.base import L2Store

__all__ = ["KB", "MIN_WATERMARK", "VersionView", "tag_meta"]

KB = "kb"
MIN_WATERMARK = "min_wm"
_MAX_TRACKED_TAGS = 10_000


def tag_meta(tag: str) -> str:
    return f"tag:{tag}"


class VersionView:
    """Local copy of the shared versions, refreshed from the store and by pub/sub events."""

    def __init__(self) -> None:
        self._values: dict[str, float] = {KB: 0, MIN_WATERMARK: 0.0}
        self._lock = threading.Lock()

    @property
    def kb(self) -> int:
        return int(self._values[KB])

    @property
    def min_watermark(self) -> float:
        return self._values[MIN_WATERMARK]

    def tag(self, tag: str) -> int:
        return int(self._values.get(tag_meta(tag), 0))

    def get(self, name: str) -> float:
        return self._values.get(name, 0)

    def observe(self, name: str, value: float) -> None:
        """Take a version learned from the store or an event.  Versions only move forward;
        the minimum watermark is set as given (an operator may lower it)."""
        with self._lock:
            tracked = name in self._values or len(self._values) < _MAX_TRACKED_TAGS
            if name == MIN_WATERMARK or (tracked and value >= self._values.get(name, 0)):
                self._values[name] = value

    def refresh(self, store: L2Store, namespace: str, tags: tuple[str, ...] = ()) -> None:
        """Read every tracked number (plus ``tags``) from the store in one call."""
        names = list(dict.fromkeys([*self._values, *map(tag_meta, tags)]))
        for name, value in store.read_meta(namespace, names).items():
            self.observe(name, value)

    def knows(self, tags: tuple[str, ...]) -> bool:
        return all(tag_meta(t) in self._values for t in tags)

    def stamp(self, tags: tuple[str, ...]) -> tuple[int, dict[str, int]]:
        """The (kb version, tag versions) a new entry is written under."""
        return self.kb, {t: self.tag(t) for t in tags}

    def stale_reason(self, entry: CacheEntry) -> str | None:
        """Why ``entry`` may no longer be served, or ``None`` when it is current."""
        if entry.kb_version < self.kb:
            return "kb_version"
        if entry.watermark < self.min_watermark:
            return "watermark"
        for tag, version in entry.tag_versions.items():
            if version < self.tag(tag):
                return "tag"
        return None
