"""The miss ledger: the versions each miss began under, until its answer is written.

An answer is written under the versions its request *began* with (``exact.versions``).  A miss
records them here, in the caller's context (its thread or task); the write that follows takes
them back.  A miss answered another way (the semantic tier, the FAQ) is dropped: no write will
follow it.

Its four uses: a lookup's miss ``record``s (``ExactTier._settled``); ``Cache.began`` ``peek``s
(a stream drained in another thread passes the stamp back to ``update``); the write ``take``s
(``ExactTier._prepare``); a hit from another tier ``take``s and drops it (``ExactTier.settle``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType

from .versions import Stamp

__all__ = ["UNFIT", "MissLedger"]

UNFIT = Stamp("", 0, 0.0)  # never current: the answer of its request is not stored


class MissLedger:
    """One exact tier's misses in the caller's context, by exact key."""

    def __init__(self) -> None:
        self._id = next(_ledger_ids)  # names this tier's misses in a context shared by tiers

    def record(self, key: str, stamp: Stamp) -> None:
        """A miss of ``key`` began under ``stamp`` (``UNFIT``: its answer is not stored)."""
        entry = (self._id, key)
        misses = {k: v for k, v in _misses.get().items() if k != entry}
        misses[entry] = stamp
        if len(misses) > _KEPT:
            misses = dict(list(misses.items())[-_KEPT:])
        _misses.set(misses)  # a new dict: other contexts keep theirs

    def peek(self, key: str) -> Stamp | None:
        """The versions the last miss of ``key`` began under, left in the ledger."""
        return _misses.get().get((self._id, key))

    def take(self, key: str) -> Stamp | None:
        """The versions the last miss of ``key`` began under, taken out of the ledger."""
        entry, misses = (self._id, key), _misses.get()
        if entry not in misses:
            return None
        _misses.set({k: v for k, v in misses.items() if k != entry})
        return misses[entry]


_misses: ContextVar[Mapping[tuple[int, str], Stamp]] = ContextVar(
    "tricache_began", default=MappingProxyType({})
)
_ledger_ids = itertools.count()
_KEPT = 256  # misses remembered per context (a batch of prompts misses together)
