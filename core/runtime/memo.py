"""A memo bounded by bytes, for the caches of derived values (normalized text, digests,
parsed prompts): a count alone does not bound memory when one item can be a whole
conversation."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["ENTRY_BYTES", "Memo", "text_size"]

V = TypeVar("V")

# What one item costs besides its key and value: its links in the map, its (value, size) pair
# and its share of the map's tables (150-250 bytes by tracemalloc on CPython 3.11).
ENTRY_BYTES = 250


class Memo(Generic[V]):
    """A thread-safe least-recently-used map whose items weigh what ``put`` is told; the
    oldest go until the total is within ``max_bytes``.  ``bytes`` is the current total."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        item = self._items.get(key)  # no lock: one C call, atomic under the GIL
        if item is None:
            return None
        try:  # noqa: SIM105 (suppress() costs more than the rest of a hit)
            self._items.move_to_end(key)
        except KeyError:  # evicted meanwhile
            pass
        return item[0]

    def put(self, key: Hashable, value: V, size: int) -> None:
        """Keep ``value`` under ``key``; ``size``: its bytes, key and ``ENTRY_BYTES`` included."""
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes += size - (old[1] if old is not None else 0)
            self._items[key] = (value, size)
            while self._bytes > self.max_bytes:
                self._bytes -= self._items.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes


def text_size(*texts: str | bytes) -> int:
    """Bytes the given strings occupy (their objects, not their encoded length)."""
    return sum(sys.getsizeof(t) for t in texts)
