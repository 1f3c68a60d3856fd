"""Decisions verified on the app's own traffic: labels, a learned bound, exploration.

When a lookup's best candidate — one the guards accept — is not served and the LLM then
answers, the new answer and the candidate's cached answer tell whether serving it would have
been right: a *label* (score, same?), at no extra cost.  Now and then a candidate that would be
served is not (``explore``): the LLM answers and labels it, so the region already served keeps
being checked.  Labels live in the L2 store (a log every process follows), so every worker
learns from every other.

The decision (after vCache, Schroeder et al. 2025: observations per entry and pooled, a bound
on the error the user sets), made deterministic:

- a *pool* is one namespace, tenant and language.  Its labels estimate, for each similarity
  ``t``, the share of its decisions that serving every candidate scoring ``t`` or more would
  answer wrongly, bounded above with 95 % confidence (Wilson, on the effective number of
  labels); the *learned threshold* is the lowest ``t`` whose bound stays under ``error_bound``
  once the pool has ``MIN_LABELS`` labels there, from ``MIN_ANSWERS`` different answers;
- an entry's own labels move its threshold: above the best score at which a question got
  another answer than it holds, or down to the lowest of ``MIN_ENTRY_LABELS`` questions that got
  its very answer (and none another) — never below ``floor``;
- without such evidence the decision is the calibrated threshold: the worst case is today's.

The guards stay vetoes: only candidates they accept come here.  A label never comes from an
answer the cache itself served.  Labels count for the version of the entry they were made on
(an entry written again is judged afresh), die with ``clear()``, and never leave their tenant's
pool.  A flood of look-alike questions that all get one answer teaches little: a positive label
weighs less the more often its answer recurs in the pool, and a pool needs positives from many
different answers before it moves.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import queue
import random
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack
import numpy as np

from ..key.forms import folded
from ..key.normalize import normalize
from ..ops.metrics import Metrics
from ..runtime.forks import on_fork
from ..stores.base import LabelLog
from .guards.checks import analyze

__all__ = ["Judge", "Label", "Learning", "Pending", "same_answer"]

log = logging.getLogger(__name__)

# A user's judge: (cached question, cached answer, new question, new answer) -> the same answer?
Judge = Callable[[str, str, str, str], bool]

MIN_LABELS = 30  # effective labels at or above a learned threshold
MIN_ANSWERS = 10  # different answers among its positive labels
MIN_ENTRY_LABELS = 3  # positive labels of one entry (and no negative) that lower its threshold
ANSWER_WEIGHT = 10.0  # the positive labels of one answer weigh this much in all, at most
CLOSE_ANSWERS = 0.97  # cosine of two answers' embeddings that may count as the same
_Z = 1.645  # one-sided 95 %
_GRID = [round(1.0 - i / 100, 2) for i in range(1, 51)]  # 0.99 … 0.50


@dataclass(frozen=True, slots=True)
class Label:
    """What one answered miss taught: serving ``point`` (at ``score``) would have been right
    (``same``) or not.  ``weight`` is 1 for a miss and 1 / the exploration rate for an
    exploration (served candidates are labelled that much less often); ``answer`` is a digest
    of the candidate's cached answer."""

    pool: str
    point: str
    version: float  # the entry's watermark: its labels count for that version only
    score: float
    same: bool
    weight: float
    answer: str

    def encode(self) -> bytes:
        fields = [self.pool, self.point, self.version, self.score, self.same, self.weight]
        return bytes(msgpack.packb([1, *fields, self.answer]))

    @classmethod
    def decode(cls, data: bytes) -> Label | None:
        """The label ``data`` holds, or ``None`` for anything else (a hostile or old value)."""
        try:
            fields = msgpack.unpackb(data, raw=False)
        except Exception:
            return None
        if not (isinstance(fields, list) and len(fields) == 8 and fields[0] == 1):
            return None
        _, pool, point, version, score, same, weight, answer = fields
        if not (isinstance(pool, str) and isinstance(point, str) and isinstance(answer, str)):
            return None
        numbers = (version, score, weight)
        if isinstance(same, bool) and all(_finite(x) for x in numbers) and 0 < weight <= 1000:
            return cls(pool, point, float(version), float(score), same, float(weight), answer)
        return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Pending(NamedTuple):
    """A miss whose answer, once the LLM gives it, labels a candidate."""

    pool: str
    point: str
    ref: str  # the candidate's exact-tier key: its answer is read when the label is made
    score: float
    question: str  # the candidate's question (for a judge)
    asked: str  # the question asked
    weight: float
    at: float  # monotonic time of the miss
    answer: str | None = None  # a curated answer (the FAQ's), known already


@dataclass(slots=True)
class _Entry:
    """One entry's labels, newest last."""

    labels: deque[Label]


class Evidence:
    """The labels of one namespace, as one process knows them: by pool and by entry, bounded
    (the oldest go first); learned thresholds computed from them, at most once a second."""

    def __init__(self, *, per_pool: int = 20_000, entries: int = 50_000) -> None:
        self._per_pool = per_pool
        self._max_entries = entries
        self._pools: dict[str, deque[Label]] = {}
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._learned: dict[tuple[str, float, float], tuple[float, float | None]] = {}
        self._lock = threading.Lock()

    def add(self, labels: Iterable[Label]) -> None:
        with self._lock:
            for label in labels:
                pool = self._pools.setdefault(label.pool, deque(maxlen=self._per_pool))
                pool.append(label)
                entry = self._entries.get(label.point)
                if entry is None:
                    entry = self._entries[label.point] = _Entry(deque(maxlen=16))
                    while len(self._entries) > self._max_entries:
                        self._entries.popitem(last=False)
                self._entries.move_to_end(label.point)
                entry.labels.append(label)

    def reset(self) -> None:
        with self._lock:
            self._pools.clear()
            self._entries.clear()
            self._learned.clear()

    def labels(self, pool: str) -> list[Label]:
        with self._lock:
            return list(self._pools.get(pool, ()))

    def pools(self) -> list[str]:
        with self._lock:
            return list(self._pools)

    def of_entry(self, point: str) -> list[Label]:
        with self._lock:
            entry = self._entries.get(point)
            return list(entry.labels) if entry is not None else []

    def threshold(self, pool: str, error_bound: float, floor: float) -> float | None:
        """The pool's learned threshold (``None``: not enough evidence), recomputed from its
        labels at most once a second."""
        now = time.monotonic()
        key = (pool, error_bound, floor)
        with self._lock:
            cached = self._learned.get(key)
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        learned = learned_threshold(self.labels(pool), error_bound, floor)
        with self._lock:
            self._learned[key] = (now, learned)
        return learned


def learned_threshold(labels: Sequence[Label], error_bound: float, floor: float) -> float | None:
    """The lowest similarity ``t`` (a multiple of 0.01, at least ``floor``) such that, for
    ``t`` and every higher one, the 95 % upper bound of the share of decisions answered wrongly
    by serving every candidate scoring that much or more stays under ``error_bound``; and at
    ``t`` the labels are enough (``MIN_LABELS`` effective, positives of ``MIN_ANSWERS``
    answers).  ``None`` when no such ``t`` is."""
    usable = [x for x in labels if x.score >= floor]
    if not usable:
        return None
    recurring = Counter(x.answer for x in usable if x.same)
    weights = np.array(
        [x.weight * (min(1.0, ANSWER_WEIGHT / recurring[x.answer]) if x.same else 1.0)
         for x in usable]
    )  # fmt: skip
    scores = np.array([x.score for x in usable])
    wrong = np.array([not x.same for x in usable])
    total = weights.sum()
    learned = None
    for t in _GRID:
        if t < floor:
            break
        above = scores >= t
        w = weights[above]
        if not len(w):
            continue
        n = w.sum()
        n_eff = n * n / float((w * w).sum())
        p = float(w[wrong[above]].sum() / n)
        bound = (n / total) * _wilson_upper(p, n_eff)
        if bound > error_bound:
            break
        answers = {x.answer for x, keep in zip(usable, above, strict=True) if keep and x.same}
        if n_eff >= MIN_LABELS and len(answers) >= MIN_ANSWERS:
            learned = t
    return learned


def _wilson_upper(p: float, n: float) -> float:
    if n <= 0:
        return 1.0
    centre = p + _Z * _Z / (2 * n)
    spread = _Z * math.sqrt(p * (1 - p) / n + _Z * _Z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + _Z * _Z / n))


def entry_threshold(labels: Sequence[Label], version: float, base: float, floor: float) -> float:
    """``base`` moved by the entry's own labels on its current ``version``: above the best
    score of a question that got another answer; down to the lowest score of
    ``MIN_ENTRY_LABELS`` or more that got its answer (and none another)."""
    mine = [x for x in labels if x.version == version]
    wrong = [x.score for x in mine if not x.same]
    if wrong:
        return max(base, max(wrong) + 0.005)
    right = [x.score for x in mine if x.same]
    if len(right) >= MIN_ENTRY_LABELS:
        return max(floor, min(base, min(right)))
    return base


# comparing two answers -------------------------------------------------------------------------
def same_answer(a: str, b: str, embed: Callable[[list[str]], np.ndarray] | None = None) -> bool:
    """Conservatively, whether two answers say the same: equal in form, or with the same
    numbers, negations, names and literals and embeddings very close (``CLOSE_ANSWERS``)."""
    if a == b or normalize(folded(a)) == normalize(folded(b)):
        return True
    if embed is None or not a.strip() or not b.strip():
        return False
    x, y = analyze(a[:2000]), analyze(b[:2000])
    if (x.numbers, x.negations, x.entities, x.literals) != (
        y.numbers,
        y.negations,
        y.entities,
        y.literals,
    ):
        return False
    va, vb = embed([a[:2000], b[:2000]])
    return float(np.dot(va, vb)) >= CLOSE_ANSWERS


def answer_digest(text: str) -> str:
    return hashlib.blake2b(normalize(folded(text)).encode("utf-8", "surrogatepass"),
                           digest_size=8).hexdigest()  # fmt: skip


def pool_of(namespace: str, tenant: str, lang: str, kind: str = "s") -> str:
    """The pool of a namespace, tenant (any string: digested) and language."""
    material = "\x1f".join((kind, namespace, tenant, lang)).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(material, digest_size=12).hexdigest()


# the component -------------------------------------------------------------------------------
class Learning:
    """Labels in, decisions out, for one namespace (see the module).

    ``resolve`` turns a candidate's exact-tier key into its current entry (for its answer and
    version); ``store`` (a ``LabelLog``) shares the labels, ``None`` keeps them here.  A
    background thread makes the labels (comparing answers may embed them or ask ``judge``) and
    follows the store's log."""

    def __init__(
        self,
        *,
        namespace: str,
        store: LabelLog | None,
        resolve: Callable[[str], Any],
        embed: Callable[[list[str]], np.ndarray] | None,
        error_bound: float = 0.01,
        explore: float = 0.05,
        judge: Judge | None = None,
        floor: float = 0.77,
        metrics: Metrics | None = None,
        sync_s: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < error_bound < 1:
            raise ValueError("error_bound must be in (0, 1)")
        if not 0 < explore <= 0.5:
            raise ValueError("explore must be in (0, 0.5]: without it served hits go unchecked")
        self.namespace = namespace
        self.store = store
        self.resolve = resolve
        self.embed = embed
        self.error_bound = error_bound
        self.explore_rate = explore
        self.judge = judge
        self.floor = floor
        self.metrics = metrics or Metrics()
        self.sync_s = sync_s
        self.evidence = Evidence()
        self.rng = rng or random.Random()
        self._pending: OrderedDict[str, Pending] = OrderedDict()
        self._pending_lock = threading.Lock()
        self._queue: queue.Queue[tuple[Pending, str, str] | None] = queue.Queue(maxsize=10_000)
        self._cursor = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start()
        on_fork(self._after_fork)

    # deciding ------------------------------------------------------------------------------
    def threshold(self, pool: str, static: float) -> float:
        """The pool's threshold: learned when the evidence allows, else ``static``."""
        learned = self.evidence.threshold(pool, self.error_bound, self.floor)
        return static if learned is None else learned

    def lowest(self, point: str, threshold: float) -> float:
        """The lowest threshold the entry ``point`` can have, whatever its version (a score
        under it is refused without reading the entry)."""
        labels = self.evidence.of_entry(point)
        if sum(x.same for x in labels) < MIN_ENTRY_LABELS:
            return threshold
        return max(self.floor, min([threshold, *(x.score for x in labels if x.same)]))

    def entry_threshold(self, point: str, version: float, threshold: float) -> float:
        return entry_threshold(self.evidence.of_entry(point), version, threshold, self.floor)

    def explores(self) -> bool:
        """Whether to skip serving this hit and let the LLM answer (and label it)."""
        return self.rng.random() < self.explore_rate

    # labelling -----------------------------------------------------------------------------
    def pend(self, key: str, pending: Pending) -> None:
        """A miss (``key``: its request's exact key) whose answer will label a candidate."""
        with self._pending_lock:
            self._pending[key] = pending
            self._pending.move_to_end(key)
            while len(self._pending) > 10_000:
                self._pending.popitem(last=False)

    def forget(self, key: str) -> None:
        """The request was answered from the cache after all: nothing to label."""
        with self._pending_lock:
            self._pending.pop(key, None)

    def answered(self, key: str, answer: str, question: str) -> None:
        """The LLM answered the request ``key``: label its pending candidate (off the request
        path)."""
        with self._pending_lock:
            pending = self._pending.pop(key, None)
        if pending is None or time.monotonic() - pending.at > _PENDING_S:
            return
        try:
            self._queue.put_nowait((pending, answer, question))
        except queue.Full:
            self.metrics.incr("semantic", "labels_dropped")

    def label(self, pending: Pending, answer: str, question: str) -> Label | None:
        """The label ``answer`` gives ``pending``'s candidate (``None``: its entry is gone)."""
        if pending.answer is not None:  # a curated answer: no entry to read
            cached, version = pending.answer, 0.0
        else:
            entry = self.resolve(pending.ref)
            if entry is None or entry.negative:
                return None
            cached, version = entry.text, float(entry.watermark)
        if same_answer(cached, answer):
            same = True
        elif self.judge is not None:
            same = bool(self.judge(pending.question, cached, question, answer))
        else:
            same = same_answer(cached, answer, self.embed)
        return Label(pending.pool, pending.point, version, pending.score, same, pending.weight,
                     answer_digest(cached))  # fmt: skip

    def add(self, labels: Sequence[Label]) -> None:
        """Record labels: in the store (every process reads them from its log), and here."""
        if not labels:
            return
        if self.store is not None:
            self.store.add_labels(self.namespace, [x.encode() for x in labels])
        else:
            self.evidence.add(labels)
        for x in labels:
            self.metrics.incr("semantic", "labels_same" if x.same else "labels_different")

    def sync(self) -> int:
        """Read the labels other processes (and this one) logged since the last read."""
        if self.store is None:
            return 0
        read = 0
        while True:
            batch = self.store.labels_since(self.namespace, self._cursor)
            if batch.reset:
                self.evidence.reset()
            labels = [x for x in map(Label.decode, batch.labels) if x is not None]
            self.evidence.add(labels)
            self._cursor = batch.cursor
            read += len(labels)
            if not batch.more:
                return read

    def drain(self, timeout: float = 10.0) -> None:
        """Wait until every answer given so far is labelled and the log read (tests and
        benchmarks; an app never needs to)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.001)
        self.sync()

    def reset(self) -> None:
        """Forget every label (``clear()``); the store's log is cleared by the store."""
        self.evidence.reset()
        with self._pending_lock:
            self._pending.clear()

    def stats(self) -> dict[str, Any]:
        pools = self.evidence.pools()
        learned = {
            pool[:8]: self.evidence.threshold(pool, self.error_bound, self.floor)
            for pool in pools[:20]
        }
        return {
            "error_bound": self.error_bound,
            "explore": self.explore_rate,
            "pools": len(pools),
            "learned_thresholds": learned,
            "pending": len(self._pending),
        }

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    # the background thread -----------------------------------------------------------------
    def _start(self) -> None:
        self._thread = threading.Thread(
            target=_work, args=(weakref.ref(self), self._stop, self._queue), daemon=True,
            name="tricache-learning",
        )  # fmt: skip
        self._thread.start()

    def _after_fork(self) -> None:
        self._pending_lock = threading.Lock()
        self._queue = queue.Queue(maxsize=10_000)
        self._stop = threading.Event()
        self._start()


_PENDING_S = 900.0  # a miss answered later than this labels nothing


def _work(
    ref: weakref.ref[Learning],
    stop: threading.Event,
    jobs: queue.Queue[tuple[Pending, str, str] | None],
) -> None:
    """Make labels as answers come, and follow the store's log, until stopped."""
    synced = 0.0
    while not stop.is_set():
        learning = ref()
        if learning is None:
            return
        every = learning.sync_s
        del learning
        try:
            job = jobs.get(timeout=every)
        except queue.Empty:
            job = None
        learning = ref()
        if learning is None or stop.is_set():
            return
        try:
            if job is not None:
                made = learning.label(*job)
                if made is not None:
                    learning.add([made])
            if time.monotonic() - synced >= every:
                synced = time.monotonic()
                learning.sync()
        except Exception as exc:  # a store down, a judge that raised: the next job goes on
            learning.metrics.incr("semantic", "learning_errors")
            log.debug("tricache: learning step failed: %s", exc)
        finally:
            if job is not None:
                jobs.task_done()
        del learning
