"""The interface every L2 store (Redis, SQLite) offers the exact tier.

Keys are full strings (``tricache:<namespace>:x:<digest>``); values are opaque bytes.  Besides
entries a store keeps each namespace's *version state* (``VersionState``) and a write log that
lets each process's Bloom filter learn the keys other processes wrote.

The version state is an **epoch** (a random id) plus numbers that only grow inside it: the
knowledge-base version ``kb``, one version per tag ``tag:<name>``, the floor ``min_wm`` (a time
on the store's clock), and ``seq``, which counts changes.  Every change records its name with
the new ``seq``, so a reader asks for "what changed after the ``seq`` I have seen" and pays for
the changes, not for the number of tags.  When the state is missing or damaged (evicted, the
server restarted empty, deleted by hand) the store starts a new epoch: every entry written
under the old one is stale, in every process.

A store that can also be the semantic tier's source of truth offers a ``PointLog``: the vector
points of a namespace (opaque bytes) and a log of the ids that changed, which every process's
in-process replica of the vector index follows; and a ``LabelLog``: the labels the semantic
tier learns its decisions from (``semantic.learning``), which every process reads.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

__all__ = [
    "AsyncInThreads",
    "Bus",
    "DamagedState",
    "EntryStore",
    "L2Store",
    "LabelBatch",
    "LabelLog",
    "LockStore",
    "PointChanges",
    "PointLog",
    "Record",
    "VersionState",
    "VersionStore",
    "WrittenKeys",
    "batched",
    "point_id_for",
]

T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of ``size`` items (the last one shorter), as ``itertools.batched`` (3.12) does."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def point_id_for(ref: str) -> str:
    """The id of the semantic point that indexes the exact entry ``ref`` (one per entry, stable:
    rewriting an answer replaces its point; a store evicting an entry deletes its point)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, ref))


class Record(NamedTuple):
    value: bytes
    watermark: float  # the store's clock when the value was written, seconds since the epoch


class VersionState(NamedTuple):
    """What a store said about a namespace's versions, in one atomic read or change."""

    epoch: str  # the current epoch (a new one was made if the state was missing)
    clock: float  # the store's clock at that moment, seconds since the Unix epoch
    seq: int  # changes made in this epoch so far
    upto: int  # ``values`` hold every change up to this seq (< seq: ask again from here)
    values: dict[str, float]  # changed (or asked) names -> current value; absent names are 0


class DamagedState(ValueError):
    """The store holds a version that is not a number: the epoch cannot be trusted."""

    def __init__(self, epoch: str, detail: str) -> None:
        super().__init__(f"damaged version state in epoch {epoch}: {detail}")
        self.epoch = epoch


class WrittenKeys(NamedTuple):
    keys: list[str]
    cursor: str
    complete: bool  # False when the log lost entries since the cursor: rebuild from a full scan
    skipped: int = 0  # records read past that name no key (written by hand, not UTF-8)


class PointChanges(NamedTuple):
    points: list[tuple[str, bytes | None]]  # (id, its current value, or None: gone)
    cursor: str
    complete: bool  # False when the log cannot vouch for every change since the cursor


@runtime_checkable
class PointLog(Protocol):
    """The vector points of each namespace, and a log of which ids changed.

    A cursor belongs to one log: when the log was cleared, trimmed past it, lost or replaced
    (the store restarted empty), ``points_since`` says ``complete=False`` and the reader rebuilds
    from ``point_head`` + ``scan_points``.  Every change is logged, deletions included, so a
    reader that follows the log never keeps a point another process deleted."""

    def put_point(self, namespace: str, point_id: str, data: bytes, ttl: float) -> None: ...
    def delete_points(self, namespace: str, point_ids: Sequence[str]) -> None: ...
    def clear_points(self, namespace: str) -> None: ...
    def point_head(self, namespace: str) -> str:
        """A cursor at the log's end now (read it before ``scan_points``)."""
        ...

    def scan_points(self, namespace: str) -> Iterator[tuple[str, bytes]]: ...
    def points_since(self, namespace: str, cursor: str) -> PointChanges:
        """The next changes after ``cursor`` (a bounded batch: ask again until none)."""
        ...


class LabelBatch(NamedTuple):
    labels: list[bytes]  # in the order they were logged
    cursor: str
    reset: bool  # the log is not the one the cursor was read from (cleared, lost): start over
    more: bool  # a full batch: ask again


@runtime_checkable
class WriteJournal(Protocol):
    """Questions waiting to be indexed by the semantic tier (answers stored while it was
    opening, or its index down), kept per namespace (opaque bytes, capped: the oldest go
    first) for whichever process has the tier open; emptied by ``clear``."""

    def journal(self, namespace: str, records: Sequence[bytes]) -> int:
        """Append ``records``; returns how many old ones the cap dropped."""
        ...

    def take_journal(self, namespace: str, limit: int) -> list[bytes]:
        """Up to ``limit`` records, oldest first, removed from the journal as they are read."""
        ...


@runtime_checkable
class LabelLog(Protocol):
    """An append-only log of labels per namespace (opaque bytes), capped (the oldest go
    first) and emptied by ``clear``; a reader that finds another log than its cursor's (the
    namespace was cleared, the store lost it) is told to start over."""

    def add_labels(self, namespace: str, labels: Sequence[bytes]) -> None: ...
    def labels_since(self, namespace: str, cursor: str) -> LabelBatch:
        """The next labels after ``cursor`` ("" for the log's start), a bounded batch."""
        ...


@runtime_checkable
class StatsLog(Protocol):
    """Every process's counters, added up per namespace in buckets of ``STATS_BUCKET_S``
    seconds (kept ``STATS_KEPT_S``): what ``tricache stats`` reads."""

    def add_stats(self, namespace: str, bucket: int, counts: dict[str, int]) -> None:
        """Add ``counts`` (``"tier.event"`` → n) to the bucket ``bucket`` (its start // the
        bucket's length)."""
        ...

    def read_stats(self, namespace: str, since: int) -> dict[str, int]:
        """The counts of every bucket from ``since`` on, added up."""
        ...


STATS_BUCKET_S = 300
STATS_KEPT_S = 8 * 24 * 3600


@runtime_checkable
class EntryStore(Protocol):
    """Entries: opaque values under full keys, each with its watermark and TTL."""

    def get(self, key: str) -> Record | None: ...
    def set(self, key: str, value: bytes, ttl: float) -> float: ...
    def delete(self, keys: Sequence[str]) -> None: ...
    async def aget(self, key: str) -> Record | None: ...
    async def aset(self, key: str, value: bytes, ttl: float) -> float: ...
    async def adelete(self, keys: Sequence[str]) -> None: ...
    def keys(self, namespace: str) -> Iterator[str]: ...
    def scan(self, namespace: str) -> Iterator[tuple[str, Record]]: ...
    def written_since(self, namespace: str, cursor: str) -> WrittenKeys: ...
    def clear(self, namespace: str) -> int: ...


@runtime_checkable
class VersionStore(Protocol):
    """Each namespace's version state (``VersionState``): epoch, kb, tags, floor, seq."""

    def poll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        """Names changed after seq ``after`` of ``epoch`` (all of them when the epoch is not
        the current one), plus ``names``, with their current values."""
        ...

    async def apoll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState: ...
    def bump(self, namespace: str, name: str) -> VersionState:
        """Add 1 to ``name``; ``values`` holds its new value."""
        ...

    def set_floor(self, namespace: str, value: float | None) -> VersionState:
        """Set ``min_wm`` to ``value`` (``None``: the store's clock now)."""
        ...

    def new_epoch(self, namespace: str, replacing: str | None) -> str:
        """Start a new epoch (only if the current one is still ``replacing``, when given)."""
        ...

    def eviction_policy(self) -> str | None:
        """The store's eviction policy when it has one and says so (Redis ``maxmemory-policy``)."""
        ...


@runtime_checkable
class LockStore(Protocol):
    """Locks with a TTL, shared by the processes (request coalescing)."""

    def try_lock(self, name: str, ttl: float) -> bool: ...
    def unlock(self, name: str) -> None: ...
    def is_locked(self, name: str) -> bool: ...


@runtime_checkable
class Bus(Protocol):
    """Messages to every process of a namespace (``has_pubsub``: whether they arrive; without
    it, processes poll the versions)."""

    has_pubsub: bool

    def publish(self, namespace: str, message: bytes) -> None: ...
    def subscribe(self, namespace: str, callback: Callable[[bytes], None]) -> None: ...
    def unsubscribe(self) -> None:
        """Stop calling the callback given to ``subscribe`` (its listener ends)."""
        ...


@runtime_checkable
class L2Store(EntryStore, VersionStore, LockStore, Bus, Protocol):
    """Shared second level of the exact tier: every capability together; every method may
    raise on a store failure."""

    name: str

    def close(self) -> None: ...
    async def aclose(self) -> None:
        """Close what belongs to the running event loop (then ``close`` the rest)."""
        ...


class AsyncInThreads:
    """The async twins a store without an async client gets (as langchain-core's
    ``BaseCache`` gives them): each runs its sync method in a thread."""

    async def aget(self: EntryStore, key: str) -> Record | None:
        return await asyncio.to_thread(self.get, key)

    async def aset(self: EntryStore, key: str, value: bytes, ttl: float) -> float:
        return await asyncio.to_thread(self.set, key, value, ttl)

    async def adelete(self: EntryStore, keys: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete, keys)

    async def apoll(
        self: VersionStore, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        return await asyncio.to_thread(self.poll, namespace, epoch, after, names)

    async def aclose(self) -> None:
        return None  # nothing of the event loop's: its calls run in threads
