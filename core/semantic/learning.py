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
- an entry's own labels (in its pool) only ever raise its threshold: above the best score at
  which a question got another answer than it holds.  A few questions that got its answer
  bound nothing about the next one (three paraphrases of "the maximum dose of ibuprofen" say
  nothing of "its side effects" at the same score), so they never lower it;
- without such evidence the decision is the calibrated threshold: the worst case is today's.

The guards stay vetoes: only candidates they accept come here.  A label never comes from an
answer the cache itself served.  Labels count for the version of the entry they were made on
(an entry written again is judged afresh), die with ``clear()``, and never leave their tenant's
pool.  A flood of look-alike questions that all get one answer teaches little: a positive label
weighs less the more often its answer recurs in the pool, and a pool needs positives from many
different answers before it moves.  Agreement between answers that refuse, report an error,
or that many entries hold alike ("please contact support") is no evidence at all
(``answers.py``): such positive labels are not made.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack
import numpy as np

from ..key.canonical import canonical
from ..key.forms import folded, same_question
from ..key.normalize import normalize
from ..ops.metrics import Metrics
from ..runtime.forks import on_fork
from ..stores.base import LabelLog
from .answers import Families, uninformative, wrapped_alike
from .decision import CLASSES, learned_thresholds, prior
from .guards.analysis import analyze
from .guards.checks import check
from .points import answer_digest

__all__ = ["Alias", "Judge", "Label", "Learning", "Pending", "same_answer"]

log = logging.getLogger(__name__)

# A user's judge: (cached question, cached answer, new question, new answer) -> the same answer?
Judge = Callable[[str, str, str, str], bool]

CLOSE_ANSWERS = 0.97  # cosine of two answers' embeddings that may count as the same


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
    cls: str = "alone"  # the candidate's class (``decision.py``): which rules fired, its neighbours
    words: str = ""  # the words the two questions differ in, when only word rules refused

    def encode(self) -> bytes:
        fields = [self.pool, self.point, self.version, self.score, self.same, self.weight]
        return bytes(msgpack.packb([2, *fields, self.answer, self.cls, self.words]))

    @classmethod
    def decode(cls, data: bytes) -> Label | None:
        """The label ``data`` holds, or ``None`` for anything else (a hostile or old value).
        A label of the first format (candidates no rule refused) is of class ``alone``."""
        try:
            fields = msgpack.unpackb(data, raw=False)
        except Exception:
            return None
        if not isinstance(fields, list) or (fields[:1], len(fields)) not in (([1], 8), ([2], 10)):
            return None
        _, pool, point, version, score, same, weight, answer, *rest = fields
        kind, words = rest if rest else ("alone", "")
        if not all(isinstance(x, str) for x in (pool, point, answer, kind, words)):
            return None
        if kind not in CLASSES or len(words) > 1000:
            return None
        numbers = (version, score, weight)
        if isinstance(same, bool) and all(_finite(x) for x in numbers) and 0 < weight <= 1000:
            return cls(pool, point, float(version), float(score), same, float(weight), answer,
                       kind, words)  # fmt: skip
        return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


Hits = dict[str, Counter[int]]  # by class, by score (hundredths)


def encode_lookups(pool: str, lookups: int, hits: Mapping[int, int] | Hits) -> bytes:
    """A log record: ``lookups`` lookups of ``pool`` reached a decision; ``hits`` counts the
    ones served by a threshold, by class and score (hundredths; a plain ``Counter``: class
    ``alone``).  The bound counts the share of lookups answered wrongly, and the decisions of
    every score, served or not."""
    if all(isinstance(k, int) for k in hits):  # by score only: class "alone"
        by_class = {"alone": dict(hits)}
    else:
        by_class = {str(cls): dict(counts) for cls, counts in hits.items()}  # type: ignore[arg-type, call-overload]
    return bytes(msgpack.packb([3, pool, lookups, by_class]))


def decode_lookups(data: bytes) -> tuple[str, int, Hits] | None:
    """A record of ``encode_lookups`` (or of the first format: hits of class ``alone``)."""
    try:
        fields = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return None
    if not (isinstance(fields, list) and len(fields) == 4 and fields[0] in (2, 3)):
        return None
    _, pool, lookups, hits = fields
    if not (isinstance(pool, str) and _count(lookups) and isinstance(hits, dict)):
        return None
    out: Hits = {}
    for cls, counts in ({"alone": hits} if fields[0] == 2 else hits).items():
        if cls not in CLASSES or not isinstance(counts, dict):
            return None
        if not all(_count(c) for c in (*counts.keys(), *counts.values())):
            return None
        out[cls] = Counter({k: v for k, v in counts.items() if k <= 100})
    return pool, lookups, out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9


def encode_alias(pool: str, faq_id: int, question: str, answer: str) -> bytes:
    """A log record: the LLM answered ``question`` (asked in ``pool``) with the curated answer
    of ``faq_id`` (``answer``: its digest): the question is a verified paraphrase of that
    entry, for that pool, as long as the entry holds that answer."""
    return bytes(msgpack.packb([4, pool, faq_id, question, answer]))


def decode_alias(data: bytes) -> tuple[str, int, str, str] | None:
    try:
        fields = msgpack.unpackb(data, raw=False)
    except Exception:
        return None
    if isinstance(fields, list) and len(fields) == 5 and fields[0] == 4:
        _, pool, faq_id, question, answer = fields
        typed = all(isinstance(x, str) for x in (pool, question, answer))
        number = isinstance(faq_id, int) and not isinstance(faq_id, bool) and 0 < faq_id < 2**63
        if typed and number and 0 < len(question) <= 2000:
            return pool, faq_id, question, answer
    return None


class Alias(NamedTuple):
    """A question the LLM answered with a curated answer: asked again (or asked alike), the
    FAQ serves that answer to its pool while entry ``faq_id`` still holds it (``answer``: its
    digest; an FAQ imported anew may give the id to another entry)."""

    faq_id: int
    question: str
    vector: np.ndarray
    answer: str


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
    curated: tuple[tuple[int, str], ...] = ()  # FAQ entries (id, answer) near the question
    cls: str = "alone"  # the candidate's class (``decision.py``)
    words: str = ""  # the words it differs in, when only word rules refused it


class Evidence:
    """The labels of one namespace, as one process knows them: by pool and by entry, bounded
    (the oldest labels go first, and the pools least recently labelled once there are more than
    ``pools``: one per tenant and language); learned thresholds computed from them, at most once
    a second."""

    def __init__(
        self, *, per_pool: int = 20_000, entries: int = 20_000, pools: int = 1_000
    ) -> None:
        self._per_pool = per_pool
        self._max_entries = entries
        self.max_pools = pools
        self._pools: OrderedDict[str, deque[Label]] = OrderedDict()
        self._lookups: Counter[str] = Counter()  # lookups that reached a decision, all time
        self._hits: dict[str, Hits] = {}  # of those, served by a threshold, by class and score
        self._labelled: Counter[str] = Counter()  # labels, all time
        self._entries: OrderedDict[str, list[Label]] = OrderedDict()  # the newest 16 of each
        self._aliases: dict[str, OrderedDict[str, Alias]] = {}
        # per pool, what labels said of a difference in words: its answers when harmless, and
        # how often it was not
        self._words: dict[str, OrderedDict[str, tuple[frozenset[str], int]]] = {}
        self._learned: dict[tuple[str, float, float, float], tuple[float, dict[str, float]]] = {}
        self._lock = threading.Lock()

    def add(self, labels: Iterable[Label]) -> None:
        with self._lock:
            for label in labels:
                self._pool(label.pool).append(label)
                if label.words:
                    self._word_label(label)
                self._labelled[label.pool] += 1
                key = _entry_key(label.pool, label.point)
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = []
                    while len(self._entries) > self._max_entries:
                        self._entries.popitem(last=False)
                self._entries.move_to_end(key)
                entry.append(label)
                del entry[:-16]

    def _word_label(self, label: Label) -> None:
        """(With the lock held.)"""
        known = self._words.setdefault(label.pool, OrderedDict())
        answers, wrong = known.get(label.words, (frozenset(), 0))
        if label.same:
            answers = answers | {label.answer} if len(answers) < 8 else answers
        else:
            wrong += 1
        known[label.words] = (answers, wrong)
        known.move_to_end(label.words)
        while len(known) > _WORDS_PER_POOL:
            known.popitem(last=False)

    def equivalent(self, pool: str, words: str) -> bool:
        """Whether the pool's labels show this difference in words harmless: right with
        ``EQUIVALENT_ANSWERS`` different answers, and never wrong."""
        with self._lock:
            known = self._words.get(pool)
            answers, wrong = known.get(words, (frozenset(), 0)) if known else (frozenset(), 0)
        return not wrong and len(answers) >= EQUIVALENT_ANSWERS

    def _pool(self, pool: str) -> deque[Label]:
        """The labels of ``pool``, made the most recent (the least recent one is forgotten,
        counts and all, past ``pools``).  Call with the lock held."""
        labels = self._pools.get(pool)
        if labels is None:
            labels = self._pools[pool] = deque(maxlen=self._per_pool)
            while len(self._pools) > self.max_pools:
                gone, _ = self._pools.popitem(last=False)
                self._lookups.pop(gone, None)
                self._hits.pop(gone, None)
                self._labelled.pop(gone, None)
                self._aliases.pop(gone, None)
                self._words.pop(gone, None)
                for key in [k for k in self._learned if k[0] == gone]:
                    del self._learned[key]
        self._pools.move_to_end(pool)
        return labels

    def looked(self, pool: str, lookups: int, hits: Hits) -> None:
        with self._lock:
            self._pool(pool)  # (bounded: the least recent pool goes, counts and all)
            self._lookups[pool] += lookups
            held = self._hits.setdefault(pool, {})
            for cls, counts in hits.items():
                held.setdefault(cls, Counter()).update(counts)

    def lookups(self, pool: str) -> tuple[float, dict[str, dict[int, float]]]:
        """The pool's lookups, and its hits by class and score, over the span its kept
        labels cover (they are the newest)."""
        with self._lock:
            kept, labelled = len(self._pools.get(pool, ())), self._labelled[pool]
            share = kept / labelled if labelled else 0.0
            hits = {
                cls: {b: n * share for b, n in counts.items()}
                for cls, counts in self._hits.get(pool, {}).items()
            }
            return self._lookups[pool] * share, hits

    def add_alias(self, pool: str, alias: Alias) -> None:
        with self._lock:
            self._pool(pool)
            aliases = self._aliases.setdefault(pool, OrderedDict())
            aliases[alias.question] = alias
            aliases.move_to_end(alias.question)
            while len(aliases) > _ALIASES_PER_POOL:
                aliases.popitem(last=False)

    def aliases(self, pool: str) -> list[Alias]:
        with self._lock:
            return list(self._aliases.get(pool, {}).values())

    def reset(self) -> None:
        with self._lock:
            self._aliases.clear()
            self._words.clear()
            self._pools.clear()
            self._lookups.clear()
            self._hits.clear()
            self._labelled.clear()
            self._entries.clear()
            self._learned.clear()

    def labels(self, pool: str) -> list[Label]:
        with self._lock:
            return list(self._pools.get(pool, ()))

    def pools(self) -> list[str]:
        with self._lock:
            return list(self._pools)

    def of_entry(self, pool: str, point: str) -> list[Label]:
        """The labels of the entry ``point`` made in ``pool`` (never another tenant's)."""
        with self._lock:
            return list(self._entries.get(_entry_key(pool, point), ()))

    def thresholds(
        self, pool: str, error_bound: float, floor: float, static: float
    ) -> dict[str, float]:
        """The pool's learned threshold of each class the evidence moves (``decision.py``),
        recomputed from its labels at most once a second."""
        now = time.monotonic()
        key = (pool, error_bound, floor, static)
        with self._lock:
            if pool not in self._pools:
                return {}  # no labels (most tenants): nothing to remember either
            cached = self._learned.get(key)
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        lookups, hits = self.lookups(pool)
        learned = learned_thresholds(
            self.labels(pool), error_bound=error_bound, floor=floor, static=static,
            lookups=lookups, hits=hits,
        )  # fmt: skip
        with self._lock:
            self._learned[key] = (now, learned)
        return learned

    def threshold(self, pool: str, error_bound: float, floor: float, static: float) -> float | None:
        """The learned threshold of class ``alone`` (no rule fired, no neighbour), or
        ``None``: what a decision of one candidate (the FAQ's) reads."""
        return self.thresholds(pool, error_bound, floor, static).get("alone")


def learned_threshold(
    labels: Sequence[Label],
    *,
    error_bound: float,
    floor: float,
    static: float,
    lookups: float,
    hits: dict[int, float],
) -> float | None:
    """The learned threshold of class ``alone`` (``decision.learned_thresholds``), its hits
    ``hits`` by score: a decision with one kind of candidate."""
    found = learned_thresholds(
        labels, error_bound=error_bound, floor=floor, static=static, lookups=lookups,
        hits={"alone": hits},
    )  # fmt: skip
    return found.get("alone")


def entry_threshold(labels: Sequence[Label], version: float, base: float) -> float:
    """``base`` raised by the entry's own labels on its current ``version``: above the best
    score of a question that got another answer.  Never lowered (see the module)."""
    wrong = [x.score for x in labels if x.version == version and not x.same]
    return max(base, max(wrong) + 0.005) if wrong else base


def _entry_key(pool: str, point: str) -> str:
    return f"{pool}\x1f{point}"


# comparing two answers -------------------------------------------------------------------------
def same_answer(a: str, b: str, embed: Callable[[list[str]], np.ndarray] | None = None) -> bool:
    """Conservatively, whether two answers say the same: equal in form, one text in other
    courtesy wrappers (``answers.wrapped_alike``), or with the same numbers, negations, names
    and literals and embeddings very close (``CLOSE_ANSWERS``)."""
    if a == b or normalize(folded(a)).casefold() == normalize(folded(b)).casefold():
        return True
    if wrapped_alike(a, b):
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
        self.families = Families(embed)  # which cached answers many entries share
        self.rng = rng or random.Random()
        self._pending: OrderedDict[str, list[Pending]] = OrderedDict()
        # learned thresholds, by pool and class
        self._learned: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._pending_lock = threading.Lock()
        self._counts_lock = threading.Lock()
        self._queue: queue.Queue[tuple[Pending, str, str] | None] = queue.Queue(maxsize=10_000)
        self._cursor = ""
        self._looked: Counter[str] = Counter()  # lookups not yet logged, by pool
        self._hits: dict[str, Hits] = {}  # hits not yet logged, by pool, class and score
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start()
        on_fork(self._after_fork)

    # deciding ------------------------------------------------------------------------------
    def thresholds(
        self, pool: str, static: float, error_bound: float | None = None
    ) -> dict[str, float]:
        """The pool's learned thresholds, by class (``decision.py``; a class left out keeps
        its prior)."""
        bound = self.error_bound if error_bound is None else error_bound
        learned = self.evidence.thresholds(pool, bound, self.floor, static)
        with self._counts_lock:  # (for stats(); as many as the evidence has pools)
            if not learned:
                self._learned.pop(pool, None)
                return learned
            self._learned[pool] = learned
            self._learned.move_to_end(pool)
            while len(self._learned) > self.evidence.max_pools:
                self._learned.popitem(last=False)
        return learned

    def class_threshold(
        self, pool: str, cls: str, static: float, error_bound: float | None = None
    ) -> float | None:
        """The threshold of a class of candidates in ``pool``: learned, or its prior (the
        calibrated ``static`` one, or ``None``: refused)."""
        learned = self.thresholds(pool, static, error_bound).get(cls)
        return learned if learned is not None else prior(cls, static)

    def threshold(self, pool: str, static: float, error_bound: float | None = None) -> float:
        """The threshold of class ``alone`` (one candidate, no rule refusing it): learned when
        the evidence allows, else ``static`` (the FAQ's decision)."""
        return self.thresholds(pool, static, error_bound).get("alone", static)

    def equivalent(self, pool: str, words: str) -> bool:
        """A difference in words the pool's labels show harmless (``Evidence.equivalent``)."""
        return bool(words) and self.evidence.equivalent(pool, words)

    def entry_threshold(self, pool: str, point: str, version: float, threshold: float) -> float:
        """``threshold``, raised by what the entry ``point`` was taught in ``pool``."""
        return entry_threshold(self.evidence.of_entry(pool, point), version, threshold)

    def looked(self, pool: str) -> None:
        """One lookup of ``pool`` reached a decision (logged in batches)."""
        with self._counts_lock:
            self._looked[pool] += 1

    def served(self, pool: str, score: float, cls: str = "alone") -> None:
        """One of them was served by a threshold (the calibrated or a learned one), a
        candidate of class ``cls``."""
        with self._counts_lock:
            by_class = self._hits.setdefault(pool, {})
            by_class.setdefault(cls, Counter())[int(score * 100)] += 1

    def serves(
        self,
        key: str,
        pending: Pending,
        threshold: float,
        version: float = 0.0,
        explore: float | None = None,
    ) -> str:
        """The last word on a candidate at its pool's ``threshold``, for the semantic tier
        and the FAQ alike: ``"below"`` the threshold as raised by what its entry (written at
        ``version``) was taught; ``"explored"``, not served so that the LLM answers and labels
        it (``key``: the miss, pended here); else ``"served"`` (counted).  ``pending``: the
        candidate, as its miss would label it."""
        pool, score = pending.pool, pending.score
        if score < self.entry_threshold(pool, pending.point, version, threshold):
            return "below"
        rate = self.explore_rate if explore is None else explore
        if self.explores(rate):
            self.pend(key, pending._replace(weight=1 / rate))
            return "explored"
        self.served(pool, score, pending.cls)
        return "served"

    def explores(self, rate: float | None = None) -> bool:
        """Whether to skip serving this hit and let the LLM answer (and label it)."""
        return self.rng.random() < (self.explore_rate if rate is None else rate)

    # labelling -----------------------------------------------------------------------------
    def pend(self, key: str, pending: Pending) -> None:
        """A miss (``key``: its request's exact key) whose answer will label a candidate
        (one of the semantic tier's, one of the FAQ's)."""
        with self._pending_lock:
            waiting = [p for p in self._pending.get(key, ()) if p.pool != pending.pool]
            self._pending[key] = [*waiting, pending]
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
            waiting = self._pending.pop(key, ())
        for pending in waiting:
            if time.monotonic() - pending.at > _PENDING_S:
                continue
            try:
                self._queue.put_nowait((pending, answer, question))
            except queue.Full:
                self.metrics.incr("semantic", "labels_dropped")

    def label(self, pending: Pending, answer: str, question: str) -> Label | None:
        """The label ``answer`` gives ``pending``'s candidate (``None``: no candidate, or its
        entry is gone); and, when ``answer`` is a curated answer near the question, the
        question becomes that entry's verified paraphrase (an alias, for its pool)."""
        for faq_id, curated in pending.curated:
            if same_answer(curated, answer) or (
                self.judge is not None and self.judge(pending.question, curated, question, answer)
            ):
                self._log([encode_alias(pending.pool, faq_id, question, answer_digest(curated))])
                self.metrics.incr("faq", "aliases")
                break
        if not pending.point:
            return None
        if pending.answer is not None:  # a curated answer: no entry to read
            cached, version = pending.answer, 0.0
        else:
            entry = self.resolve(pending.ref)
            if entry is None or entry.negative or not entry.shared:
                return None
            cached, version = entry.text, float(entry.watermark)
        if same_answer(cached, answer):
            same = True
        elif self.judge is not None:
            same = bool(self.judge(pending.question, cached, question, answer))
        else:
            same = same_answer(cached, answer, self.embed)
        digest = answer_digest(cached)
        if same:  # agreement counts only where the answer says something about its question
            if uninformative(cached) or uninformative(answer):
                self.metrics.incr("semantic", "labels_boilerplate")
                return None
            digest, generic = self.families.family(
                pending.pool, pending.point, pending.question, cached
            )
            if generic:
                self.metrics.incr("semantic", "labels_generic")
                return None
        return Label(pending.pool, pending.point, version, pending.score, same, pending.weight,
                     digest, pending.cls, pending.words)  # fmt: skip

    def _log(self, records: list[bytes]) -> None:
        if self.store is not None:
            self.store.add_labels(self.namespace, records)
        else:
            self._read(records)

    def _read(self, records: Iterable[bytes]) -> int:
        """Apply log records: labels, lookup counts, aliases."""
        labels, counts = [], []
        for data in records:
            label = Label.decode(data)
            if label is not None:
                labels.append(label)
            elif (lookups := decode_lookups(data)) is not None:
                counts.append(lookups)
            elif (alias := decode_alias(data)) is not None and self.embed is not None:
                pool, faq_id, text, answer = alias
                vector = self.embed([canonical(folded(text))])[0]
                self.evidence.add_alias(pool, Alias(faq_id, text, vector, answer))
        self.evidence.add(labels)
        for pool, looked, hits in counts:
            self.evidence.looked(pool, looked, hits)
        return len(labels)

    def alias(self, pool: str, question: str, threshold: float) -> tuple[Alias, float] | None:
        """The pool's verified paraphrase nearest ``question``, when it scores ``threshold``
        or more and every guard passes (the same question in another form scores 1.0)."""
        aliases = self.evidence.aliases(pool)
        if not aliases or self.embed is None:
            return None
        for alias in aliases:
            if same_question(alias.question, question):
                return alias, 1.0
        vector = self.embed([canonical(folded(question))])[0]
        scores = np.stack([a.vector for a in aliases]) @ vector
        for i in np.argsort(-scores)[:5]:
            if scores[i] < threshold:
                break
            if check(aliases[i].question, question)[0] is None:
                return aliases[i], float(scores[i])
        return None

    def add(self, labels: Sequence[Label]) -> None:
        """Record labels: in the store (every process reads them from its log), and here."""
        if not labels:
            return
        self._log([x.encode() for x in labels])
        for x in labels:
            self.metrics.incr("semantic", "labels_same" if x.same else "labels_different")

    def sync(self) -> int:
        """Log this process's lookup counts; read what every process logged since the last
        read (labels and counts)."""
        with self._counts_lock:
            looked, self._looked = self._looked, Counter()
            hits, self._hits = self._hits, {}
        counts = [(pool, n, hits.get(pool, {})) for pool, n in looked.items()]
        if counts:
            self._log([encode_lookups(*c) for c in counts])
        if self.store is None:
            return 0
        read = 0
        while True:
            batch = self.store.labels_since(self.namespace, self._cursor)
            if batch.reset:
                self.evidence.reset()
            read += self._read(batch.labels)
            self._cursor = batch.cursor
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
        self.families.reset()
        with self._pending_lock:
            self._pending.clear()
        with self._counts_lock:
            self._learned.clear()

    def stats(self) -> dict[str, Any]:
        pools = self.evidence.pools()
        with self._counts_lock:
            learned = {pool[:8]: self._learned.get(pool) for pool in pools[:20]}
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
        self._counts_lock = threading.Lock()
        self._queue = queue.Queue(maxsize=10_000)
        self._stop = threading.Event()
        self._start()


_PENDING_S = 900.0  # a miss answered later than this labels nothing
_WORDS_PER_POOL = 20_000  # differences in words remembered per pool
EQUIVALENT_ANSWERS = 2  # different answers a difference in words was harmless for
_ALIASES_PER_POOL = 5000


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
