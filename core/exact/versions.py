"""The process's view of a namespace's shared versions, and the staleness rule.

The store holds the truth (``stores.base.VersionState``): an epoch, the knowledge-base version
``kb``, one version per tag, the floor ``min_wm`` and a change counter ``seq``.  A process keeps
a copy, brought up to date by polling "what changed after the seq I have seen" and by pub/sub
events.  Every entry records the epoch and versions current when its request *began* (a
``Stamp``); it is stale when the epoch differs or any version has moved past it.

A view that has not heard from the store for ``max_lag`` seconds is not *verified*: the exact
tier then serves nothing, since an invalidation may have happened that it cannot know about.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from ..key.entry import CacheEntry
from ..runtime.forks import on_fork
from ..stores.base import VersionState

__all__ = ["DELETES", "KB", "MIN_WATERMARK", "Stamp", "VersionView", "tag_meta"]

KB = "kb"
MIN_WATERMARK = "min_wm"
DELETES = "deletes"  # counts entries deleted one by one (an admin verb, feedback)
_MAX_TAGS = 100_000  # tag versions kept; a forgotten one is read again when needed


def tag_meta(tag: str) -> str:
    return f"tag:{tag}"


@dataclass(frozen=True, slots=True)
class Stamp:
    """The versions a request began under: what its answer is written with."""

    epoch: str
    kb: int
    floor: float
    tags: dict[str, int] = field(default_factory=dict)
    started: float = 0.0  # the store's clock when the request began (estimated)
    seq: int = -1  # the changes of its epoch polled when it began (-1: unknown)
    heard: int = -1  # the changes heard (events, this process's own) when it began


class VersionView:
    """Local copy of one namespace's versions.  Thread-safe."""

    def __init__(self, *, max_lag: float = 2.0, local: bool = False) -> None:
        self.max_lag = max_lag
        self._local = local  # no store: this process holds the only copy
        self.epoch = secrets.token_hex(8) if local else ""  # "" = never heard from the store
        self.seq = 0  # changes seen in this epoch
        self.heard = 0  # changes heard as events or made here (a poll counts in ``seq``)
        self._kb = 0
        self._floor = 0.0
        self._deletes = 0
        self._tags: OrderedDict[str, int] = OrderedDict()
        self._offset = 0.0  # the store's clock minus ours
        self.verified_clock = float("-inf")  # the store's clock at the last full poll
        self._verified_at = float("inf") if local else float("-inf")
        self._retired: deque[str] = deque(maxlen=64)
        self._lock = threading.Lock()
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    # what the store said -------------------------------------------------------------------
    def apply(self, state: VersionState, *, asked: tuple[float, float] | None = None) -> bool:
        """Take a poll's (or a change's) answer; ``True`` when it started a new epoch here.
        ``asked`` — (wall clock, monotonic clock) when the poll was sent — marks the view
        verified, once the answer holds every change (``upto == seq``)."""
        with self._lock:
            if state.epoch in self._retired:  # an answer older than one already taken
                return False
            renewed = state.epoch != self.epoch
            if renewed:
                if self.epoch:
                    self._retired.append(self.epoch)  # epochs only move forward
                self.epoch, self.seq = state.epoch, 0
                self.verified_clock = float("-inf")
                if not self._local:  # only a whole poll of the new epoch verifies the view
                    self._verified_at = float("-inf")
                self._kb, self._floor, self._deletes = 0, 0.0, 0
                self._tags.clear()
            for name, value in state.values.items():
                self._observe(name, value)
            if asked is None:
                self.heard += 1
            else:
                wall, monotonic = asked
                self.seq = max(self.seq, state.upto)
                self._offset = state.clock - (wall + time.time()) / 2
                if state.upto >= state.seq:
                    self._verified_at = max(self._verified_at, monotonic)
                    self.verified_clock = max(self.verified_clock, state.clock)
        return renewed

    def retired(self, epoch: str) -> bool:
        """True when this view has left ``epoch`` behind (a store back on it was restored)."""
        return epoch in self._retired

    def position(self) -> tuple[str, int]:
        """(epoch, changes seen): where the next poll starts."""
        with self._lock:
            return self.epoch, self.seq

    def observe(self, epoch: str, name: str, value: float) -> bool:
        """Take one change heard as an event; ``False`` when it is of another epoch (poll)."""
        with self._lock:
            if epoch != self.epoch:
                return False
            self._observe(name, value)
            self.heard += 1
            return True

    def went_back(self, state: VersionState, after: int) -> bool:
        """True when the store answered a poll sent after this view had seen ``after`` changes
        with fewer, in the same epoch: it lost data (restored from an older snapshot) and its
        versions cannot be trusted."""
        return state.epoch == self.epoch and state.seq < after

    def _observe(self, name: str, value: float) -> None:
        """Versions only move forward inside an epoch."""
        if name == KB:
            self._kb = max(self._kb, int(value))
        elif name == MIN_WATERMARK:
            self._floor = max(self._floor, value)
        elif name == DELETES:
            self._deletes = max(self._deletes, int(value))
        elif name.startswith("tag:"):
            tag = name[4:]
            self._tags[tag] = max(self._tags.get(tag, 0), int(value))
            self._tags.move_to_end(tag)
            while len(self._tags) > _MAX_TAGS:
                self._tags.popitem(last=False)

    # what the tiers ask --------------------------------------------------------------------
    @property
    def kb(self) -> int:
        return self._kb

    @property
    def min_watermark(self) -> float:
        return self._floor

    @property
    def deletes(self) -> int:
        """Entries of this epoch deleted one by one, as far as this view knows."""
        return self._deletes

    def tag(self, tag: str) -> int:
        return self._tags.get(tag, 0)

    def verified(self) -> bool:
        """True when the store was heard from within ``max_lag`` seconds."""
        return time.monotonic() - self._verified_at <= self.max_lag

    def unknown(self, tags: tuple[str, ...] | list[str]) -> list[str]:
        """The tags whose versions this view does not hold (to read before use).  Asked by
        every lookup, so it takes no lock (a membership test is atomic): 8 threads spinning
        on misses against a paused store kept one waiting on the lock for 1.5 s."""
        if self._local or not tags:
            return []
        return [t for t in tags if t not in self._tags]

    def next_local(self, name: str, value: float | None) -> float:
        """The next value of ``name`` when this process holds the only copy (no store)."""
        if name == MIN_WATERMARK:
            return time.time() if value is None else float(value)
        return (self._kb if name == KB else self._tags.get(name[4:], 0)) + 1

    def store_now(self) -> float:
        """The store's clock now, as well as this view knows it."""
        return time.time() + self._offset

    def stamp(self, tags: tuple[str, ...]) -> Stamp:
        """The versions a request beginning now is written under (its tags must be known)."""
        with self._lock:
            versions = {t: self._tags.get(t, 0) for t in tags}
            return Stamp(self.epoch, self._kb, self._floor, versions, self.store_now(), self.seq,
                         self.heard)  # fmt: skip

    def current(self, stamp: Stamp) -> bool:
        """True when nothing the stamp recorded has changed since."""
        with self._lock:
            return (
                stamp.epoch == self.epoch
                and stamp.kb == self._kb
                and stamp.floor == self._floor
                and all(self._tags.get(t, 0) == v for t, v in stamp.tags.items())
            )

    def stale_reason(self, entry: CacheEntry) -> str | None:
        """Why ``entry`` may no longer be served, or ``None`` when it is current.  An unknown
        tag is a reason too ("unknown_tag": read it, then ask again)."""
        with self._lock:
            if entry.epoch != self.epoch:
                return "epoch"
            if entry.kb_version < self._kb:
                return "kb_version"
            if entry.watermark < self._floor:
                return "watermark"
            for tag, version in entry.tag_versions.items():
                known = self._tags.get(tag, 0 if self._local else None)
                if known is None:
                    return "unknown_tag"
                if version < known:
                    return "tag"
        return None
