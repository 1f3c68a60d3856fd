"""L1: a thread-safe TTL-LRU bounded by entry count and by bytes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..runtime.forks import on_fork

__all__ = ["TTLLRU"]

V = TypeVar("V")


@dataclass(slots=True)
class _Slot(Generic[V]):
    value: V
    expires_at: float
    size: int


class TTLLRU(Generic[V]):
    """Least-recently-used map whose items also expire.

    ``get`` refreshes recency; expired items are dropped when met.  Inserting evicts the least
    recently used items until both ``max_items`` and ``max_bytes`` hold (``size`` is what the
    caller says an item weighs, e.g. its encoded length).
    """

    def __init__(
        self,
        max_items: int = 10_000,
        max_bytes: int = 64 * 2**20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_items < 1 or max_bytes < 1:
            raise ValueError("max_items and max_bytes must be positive")
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._clock = clock
        self._data: OrderedDict[str, _Slot[V]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a parent thread may have held it at the fork

    def get(self, key: str) -> V | None:
        with self._lock:
            slot = self._data.get(key)
            if slot is None:
                return None
            if slot.expires_at <= self._clock():
                self._drop(key)
                return None
            self._data.move_to_end(key)
            return slot.value

    def set(self, key: str, value: V, ttl: float, size: int = 1) -> None:
        if ttl <= 0 or size > self.max_bytes:
            self.pop(key)
            return
        with self._lock:
            if key in self._data:
                self._drop(key)
            self._data[key] = _Slot(value, self._clock() + ttl, size)
            self._bytes += size
            while len(self._data) > self.max_items or self._bytes > self.max_bytes:
                self._drop(next(iter(self._data)))

    def pop(self, key: str) -> V | None:
        with self._lock:
            slot = self._data.get(key)
            if slot is None:
                return None
            self._drop(key)
            return slot.value

    def remove_if(self, predicate: Callable[[V], bool]) -> int:
        """Drop every item whose value matches ``predicate``; return how many."""
        with self._lock:
            doomed = [k for k, slot in self._data.items() if predicate(slot.value)]
            for key in doomed:
                self._drop(key)
            return len(doomed)

    def items(self) -> list[tuple[str, V]]:
        """The items not expired, least recently used first (a copy)."""
        now = self._clock()
        with self._lock:
            return [(k, slot.value) for k, slot in self._data.items() if slot.expires_at > now]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def bytes(self) -> int:
        return self._bytes

    def _drop(self, key: str) -> None:
        self._bytes -= self._data.pop(key).size
