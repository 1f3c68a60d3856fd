"""Answer groups: the stored questions whose answers say the same thing share a group id.

A point's ``answer`` field names its group.  When a miss is answered, the candidates its lookup
found near (``Near``: what the semantic tier saw, kept by the request's exact key) are
compared with the fresh answer, nearest first: the first whose cached answer says the same
(``learning.same_answer``: equal in form, or the same numbers, negations, names and literals
and embeddings very close) lends its group; otherwise the answer's own digest starts one.  An
answer that says nothing about its question (a refusal, an error, an empty text, a bare
yes or no: ``answers.uninformative``) joins no group and starts none.

Groups live in the points, so every worker and every kind of index sees them, restarts keep
them, and a deleted or expired point leaves its group at once.  They never cross a scope: the
candidates a lookup finds are of the same namespace, tenant, model and conversation.  What
the decision reads of them is ``decision.agreeing``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..key.entry import CacheEntry
from .answers import uninformative
from .learning import same_answer

__all__ = ["JOIN_MIN_SCORE", "Near", "Neighbour", "joined_group"]

JOIN_MIN_SCORE = 0.80  # a candidate this near the question may lend its group
_COMPARED = 2  # candidates whose answers are read, nearest first
_KEPT = 10_000  # misses remembered
_KEPT_S = 600.0  # how long a miss waits for its answer


class Neighbour(NamedTuple):
    """A candidate a miss found: its exact entry, its group, its score."""

    ref: str
    group: str
    score: float


class Near:
    """The candidates each recent miss found, by request key, until its answer is indexed
    (bounded: the oldest go first)."""

    def __init__(self, size: int = _KEPT, keep_s: float = _KEPT_S) -> None:
        self.size, self.keep_s = size, keep_s
        self._items: OrderedDict[str, tuple[float, tuple[Neighbour, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, key: str, found: Sequence[Neighbour]) -> None:
        if not key:
            return
        kept = tuple(n for n in found if n.score >= JOIN_MIN_SCORE and n.group)
        with self._lock:
            self._items.pop(key, None)
            if kept:
                self._items[key] = (time.monotonic(), kept)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)

    def take(self, key: str) -> tuple[Neighbour, ...]:
        with self._lock:
            item = self._items.pop(key, None)
        if item is None or time.monotonic() - item[0] > self.keep_s:
            return ()
        return item[1]


def joined_group(
    answer: str,
    near: Sequence[Neighbour],
    resolve: Callable[[str], CacheEntry | None],
    embed: Callable[[list[str]], np.ndarray] | None,
) -> str | None:
    """The group ``answer`` joins: that of the nearest of ``near`` whose current answer says
    the same, or ``None`` (it starts its own).  A store that fails here only loses the join."""
    if uninformative(answer):
        return None
    for neighbour in sorted(near, key=lambda n: -n.score)[:_COMPARED]:
        try:
            entry = resolve(neighbour.ref)
        except Exception:  # (the store is away: the answer starts a group of its own)
            return None
        if entry is None or entry.negative or not entry.shared or uninformative(entry.text):
            continue
        if same_answer(entry.text, answer, embed):
            return neighbour.group
    return None
