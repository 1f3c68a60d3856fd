"""The semantic tier: embed the question, search the index, and serve only what the guards pass.

The decision, in order:

1. the question is located in the last message (``question.locate``: the message itself, or
   the slot of a template that also holds instructions and retrieved context); when it cannot
   be isolated, the tier stays out;
2. cacheability — questions whose answer depends on time or on the asker skip the tier;
3. top-k candidates above the threshold, searched only among entries whose everything-else is
   identical: namespace, tenant, LLM and its settings, the whole conversation (system prompt,
   every earlier turn) and the frame of the question's own message (template, context); the
   embedder sees the canonical question (``canonical``: greetings, fillers and thanks
   removed), which never reaches the exact key;
4. the guards, each able to refuse a candidate with a reason; the first candidate that passes
   and whose stored response is still current (the exact tier resolves it) is the hit;
5. an optional re-ranker (e.g. a cross-encoder) that reorders and may refuse candidates.

Every decision can be audited: the matched entry, its score and the guards that ran for a hit;
the top scores and each refusal's reason for a miss.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..exact.link import StoreUnavailable
from ..key.asked import Asked
from ..key.canonical import canonical
from ..key.entry import CacheEntry
from ..key.forms import folded, form_key, literals, same_question, unify
from ..key.question import Located, locate
from ..key.request import CacheRequest
from ..key.script import has_cjk, writing
from ..ops.metrics import Metrics
from ..settings import DEFAULT_SEMANTIC, Reranker
from .audit import AuditLog
from .decision import (
    AGREE_BONUS,
    AGREE_MARGIN,
    NEIGHBOUR_FLOOR,
    agreed_score,
    agreeing,
    agreement,
    classify,
)
from .embed import Embedder
from .groups import Near, Neighbour, joined_group
from .guards.cacheable import is_cacheable
from .guards.checks import (
    HARD_RULES,
    WORD_RULES,
    Guard,
    check,
    differing_words,
    group_explains,
    rule_id,
    verdicts,
    warm_up,
    words_covered,
)
from .index.vectors import Candidate, VectorIndex
from .learning import Learning, Pending, pool_of
from .points import (
    MAX_STORED_QUESTION,
    Draft,
    comparable,
    digest,
    draft,
    point_id_for,
    scope,
    skip_reason,
)

__all__ = [
    "CALIBRATED_THRESHOLDS",
    "SemanticHit",
    "SemanticTier",
    "embedded_text",
    "point_id_for",
]

log = logging.getLogger(__name__)
TIER = "semantic"

# Cosine thresholds per embedding model (their similarity scales differ), from
# `tricache calibrate` with the guards on over 1,200-2,000 pairs of qqp, mrpc and lcqmc: the
# lowest threshold where precision reached about 0.95 on the query-like sets that allow it.
# use-m @0.92: qqp 0.94, lcqmc 0.95, mrpc 0.96.  MiniLM @0.92: qqp 0.96, mrpc 0.95 (English
# only).  e5-small-q4 packs its scores near 1: @0.97 qqp 0.91, lcqmc 0.86, hence 0.98.
CALIBRATED_THRESHOLDS: dict[str, float] = {
    "use-m": 0.92,
    "all-MiniLM-L6-v2": 0.92,
    "e5-small-q4": 0.98,
}
UNCALIBRATED_THRESHOLD = 0.92
# Raise the bar for high-risk domains, lower it for chit-chat.
CATEGORY_OFFSETS: dict[str, float] = {
    "medical": 0.03,
    "finance": 0.03,
    "legal": 0.03,
    "chitchat": -0.03,
}


@dataclass(slots=True)
class SemanticHit:
    entry: CacheEntry
    point_id: str
    score: float
    question: str  # the cached question it matched
    ref: str  # the exact-tier key of the matched question's answer


@dataclass(slots=True)
class Decision:
    """What the tier decided for one lookup (the audit record)."""

    query_hash: str
    hit: str | None = None
    score: float | None = None
    guards: tuple[str, ...] = ()
    top: list[float] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    skipped: str | None = None
    by: str | None = None  # what served the hit: "form" (the same question), "threshold" or
    # "learned" (a threshold the app's own labels taught, under the calibrated one)
    threshold: float | None = None  # the threshold in force (learned or calibrated)
    # for a person reviewing it (``tricache review``): where, the question as compared, and
    # each candidate (point id, the entry it names, its question, score, class)
    namespace: str = ""
    pool: str = ""
    question: str = ""
    candidates: list[dict[str, object]] = field(default_factory=list)


class _Unset:
    """``located`` not given: the tier locates the question itself."""


_UNSET = _Unset()


class SemanticTier:
    """Semantic matching over one vector index, one embedder and the guards."""

    def __init__(
        self,
        index: VectorIndex,
        embedder: Embedder,
        *,
        threshold: float | None = None,
        top_k: int = DEFAULT_SEMANTIC.top_k,
        guards: Sequence[Guard] = DEFAULT_SEMANTIC.guards,
        cacheable: Callable[[str], bool] = is_cacheable,
        category_offsets: Mapping[str, float] | None = None,
        reranker: Reranker | None = None,
        rerank_threshold: float = DEFAULT_SEMANTIC.rerank_threshold,
        volatile_context: bool = False,
        max_chars: int = 2000,
        metrics: Metrics | None = None,
        audit: AuditLog | None = None,
        learning: Learning | None = None,
        learns: bool = True,
        agreement: bool = DEFAULT_SEMANTIC.agreement,
        index_on_store: bool = False,
        forget_elsewhere: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.index = index
        self.index_on_store = index_on_store  # the index lives on the exact tier's server
        # deletes points from the kinds of index other workers of the namespace may be on
        self.forget_elsewhere = forget_elsewhere
        self.embedder = embedder
        if threshold is None:
            threshold = CALIBRATED_THRESHOLDS.get(embedder.name)
            if threshold is None:
                log.warning(
                    "tricache: no calibrated threshold for embedder %r; using %.2f — run "
                    "`tricache calibrate` on your own labelled pairs",
                    embedder.name,
                    UNCALIBRATED_THRESHOLD,
                )
                threshold = UNCALIBRATED_THRESHOLD
        if not 0 < threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold
        self.top_k = top_k
        self.guards = tuple(guards)
        self.cacheable = cacheable
        self.category_offsets = dict(
            CATEGORY_OFFSETS if category_offsets is None else category_offsets
        )
        self.reranker = reranker
        self.rerank_threshold = rerank_threshold
        self.volatile_context = volatile_context
        self.max_chars = max_chars
        self.metrics = metrics or Metrics()
        self.audit = audit
        self.learning = learning  # shared with the FAQ (``Faq(learn=...)``)
        self.learns = learning is not None and learns  # this tier's decisions learn too
        self.agreement = agreement  # neighbours holding one answer raise its score
        self.near = Near()  # what each recent miss found, for its answer's group
        warm_up()

    # lookup --------------------------------------------------------------------------------
    def lookup(
        self, asked: Asked, resolve: Callable[[str], CacheEntry | None]
    ) -> SemanticHit | None:
        """The best guarded match for the request ``asked`` analysed; ``resolve`` turns a
        stored reference into the current entry (``None`` when it expired or went stale,
        ``StoreUnavailable`` when that cannot be known now).  A miss is labelled by the answer
        the LLM gives to ``asked.key`` (``learning``)."""
        request = asked.request
        decision = Decision(digest(request.query), namespace=request.namespace)
        if request.tags:
            resolve = _declaring(resolve, request.tags)
        try:
            return self._decide(asked, resolve, decision)
        finally:
            if self.audit is not None:
                self.audit.record(decision)

    def _decide(
        self,
        asked: Asked,
        resolve: Callable[[str], CacheEntry | None],
        decision: Decision,
    ) -> SemanticHit | None:
        request, located, key = asked.request, asked.located, asked.key
        skip = skip_reason(located, partial(asked.cacheable, self.cacheable))
        if skip is not None:
            decision.skipped = skip
            self.metrics.incr(TIER, f"skipped_{skip}")
            return None
        assert located is not None
        question = asked.folded  # the folded form: what every comparison sees
        where = {"scope": self._scope(request, located)["scope"]}
        pool = self.pool(asked)
        decision.pool, decision.question = pool, question  # (for a review of any outcome)
        found = self._plausible(self.index.find({**where, "form": form_key(question)}, self.top_k))
        for candidate in found:
            if same_question(str(candidate.payload.get("question", "")), question):
                entry = self._resolve(candidate, resolve, decision)
                if entry is not None:  # the same question in another form: no model asked
                    decision.candidates = [_reviewed(candidate)]
                    return self._hit(candidate, entry, decision, "form")
        static = self.threshold_for(request.category)
        learning = self.learning if self.learns else None
        decision.threshold = round(self.threshold_for(request.category, pool), 3)
        query = _embeddable(question)  # what the guards judge: as typed, bar capitals
        compared = _embeddable(asked.canonical)  # what the embedder sees (``embedded_text``)
        vector = self.embedder.embed([compared])[0]
        keep = min(static, learning.floor) if learning else static
        rescore_from = keep  # (a neighbour further down only counts: ``_candidates``)
        if self.agreement and learning is None:  # the neighbours that may agree with one
            keep = min(keep, NEIGHBOUR_FLOOR)
        if learning is not None:
            learning.looked(pool)
        candidates = self._candidates(query, vector, where, keep, decision,
                                      rescore_from=rescore_from)  # fmt: skip
        candidates = self._in_its_script(candidates, writing(question), decision)
        decision.top = [round(c.score, 4) for c in candidates[:3]]
        candidates = self._rerank(compared, candidates, decision)
        hit: SemanticHit | None
        if learning is None:
            hit = self._decide_static(candidates, query, resolve, decision, static)
        else:
            hit = self._decide_learned(candidates, query, resolve, decision, learning, pool,
                                       key, request.category, question)  # fmt: skip
        if hit is None:  # its answer may join the group of one of them (``groups.py``)
            self.near.remember(key, [Neighbour(str(c.payload.get("ref", "")), answer, c.score)
                                     for c in candidates if (answer := _answer_of(c))])  # fmt: skip
        return hit

    def _decide_static(
        self,
        candidates: list[Candidate],
        query: str,
        resolve: Callable[[str], CacheEntry | None],
        decision: Decision,
        threshold: float,
    ) -> SemanticHit | None:
        """The rules, then the neighbours: a candidate at the calibrated ``threshold`` that
        passes every guard is served, as it always was; one under it, or refused by a word
        rule, is served when stored neighbours got its answer and its group explains how it
        differs (``_Judged.agreed``).  Best first by cosine plus the neighbours' bonus."""
        groups: list[str | None] = [_answer_of(c) if self.agreement else None
                                    for c in candidates]  # fmt: skip
        agreed = [agreeing(groups, i) for i in range(len(candidates))]
        ranked = sorted(range(len(candidates)),
                        key=lambda i: -(candidates[i].score + AGREE_BONUS * agreed[i]))  # fmt: skip
        judged = _Judged(self, candidates, query)
        refused: set[str | None] = set()  # groups refused whichever member is asked
        for i in ranked:
            candidate = candidates[i]
            if candidate.score + AGREE_BONUS * agreed[i] < threshold:
                break
            reason: str | None = "threshold"
            by = "threshold"
            if candidate.score >= threshold:
                reason, decision.guards = check(str(candidate.payload.get("question", "")),
                                                query, self.guards)  # fmt: skip
            if reason is not None and agreed[i] and groups[i] not in refused:
                _note(decision, candidate.id, agreeing=agreed[i])
                reason, by = judged.agreed(i, groups, agreed[i], threshold), "agreement"
                if reason in judged.group_refusals:  # (so it is for every member)
                    refused.add(groups[i])
            if reason is not None:
                decision.rejected[candidate.id] = reason
                if reason != "threshold":
                    self.metrics.incr(TIER, f"guard_{reason}")
                continue
            entry = self._resolve(candidate, resolve, decision)
            if entry is not None:
                return self._hit(candidate, entry, decision, by)
        self.metrics.incr(TIER, "misses")
        return None

    def _decide_learned(
        self,
        candidates: list[Candidate],
        query: str,
        resolve: Callable[[str], CacheEntry | None],
        decision: Decision,
        learning: Learning,
        pool: str,
        key: str,
        category: str | None,
        question: str,
    ) -> SemanticHit | None:
        """The rules as priors (``decision.py``): each candidate's class — what the rules
        say of it, what its neighbours' answers say — has a threshold its pool's labels
        taught; the first candidate no hard rule refuses is labelled by the LLM's answer."""
        offset = self.category_offsets.get(category, 0.0) if category else 0.0
        answers = [_answer_of(c) for c in candidates]
        # no class serves under the lowest of its thresholds: once a candidate is labelled,
        # the ones scoring under it are not judged at all
        lowest = min([*learning.thresholds(pool, self.threshold).values(), self.threshold])
        judged = _Judged(self, candidates, query, learning, pool)
        decision.guards = tuple(rule_id(g) for g in self.guards)
        labelled = False
        for i, candidate in enumerate(candidates):
            if labelled and candidate.score < lowest + offset:
                break
            cached = str(candidate.payload.get("question", ""))
            fired, words, equivalent = judged.rules(i)
            agreed = agreement(answers, i)
            if agreed == "agree" and not judged.cluster_explains(i, answers):
                agreed = "alone"
            cls = classify(fired, agreed, equivalent=equivalent)
            _note(decision, candidate.id, cls=cls, rules=list(fired))
            if cls is None:  # a hard rule: whatever the labels say
                reason = next(f for f in fired if f in HARD_RULES)
                decision.rejected[candidate.id] = reason
                self.metrics.incr(TIER, f"guard_{reason}")
                continue
            threshold = learning.class_threshold(pool, cls, self.threshold)
            if threshold is not None:
                threshold = min(0.999, max(0.0, threshold + offset))
            pending = Pending(pool, candidate.id, str(candidate.payload.get("ref", "")),
                              candidate.score, cached, question, 1.0, time.monotonic(),
                              cls=cls, words=words)  # fmt: skip
            if threshold is None or candidate.score < threshold:
                reason = fired[0] if cls.endswith("+soft") and threshold is None else "threshold"
                decision.rejected[candidate.id] = reason
                if reason != "threshold":
                    self.metrics.incr(TIER, f"guard_{reason}")
            elif (entry := self._resolve(candidate, resolve, decision)) is None:
                continue
            elif (verdict := learning.serves(key, pending, threshold, entry.watermark)) == "served":
                learned = cls.endswith("+soft") or candidate.score < self.threshold + offset
                return self._hit(candidate, entry, decision, "learned" if learned else "threshold")
            elif verdict == "explored":  # not served: the LLM answers, and labels it
                decision.rejected[candidate.id] = "explored"
                self.metrics.incr(TIER, "explorations")
                return None
            else:  # below the threshold its entry was taught
                decision.rejected[candidate.id] = "entry_threshold"
            if not labelled and key:
                learning.pend(key, pending)
                labelled = True
        self.metrics.incr(TIER, "misses")
        return None

    def _resolve(
        self,
        candidate: Candidate,
        resolve: Callable[[str], CacheEntry | None],
        decision: Decision,
    ) -> CacheEntry | None:
        """The current entry ``candidate`` points at, or ``None`` (the point is discarded when
        the entry is known to be gone)."""
        try:
            entry = resolve(str(candidate.payload.get("ref", "")))
        except _Undeclared:  # current, but not written under the tags this request declares
            decision.rejected[candidate.id] = "undeclared_tags"
            self.metrics.incr(TIER, "undeclared_tags")
            return None
        except StoreUnavailable:  # not known to be gone: the point stays
            decision.rejected[candidate.id] = "unavailable"
            self.metrics.incr(TIER, "unresolved")
            return None
        if entry is None:  # the response expired or went stale: the point goes too
            decision.rejected[candidate.id] = "gone"
            self.index.discard([candidate.id])
            return None
        if entry.negative or not entry.shared:  # rewritten as "no answer", or for its own
            decision.rejected[candidate.id] = "not_shared"  # request only: never another's
            self.metrics.incr(TIER, "unshared")
            self.index.discard([candidate.id])
            return None
        return entry

    def _hit(
        self, candidate: Candidate, entry: CacheEntry, decision: Decision, by: str
    ) -> SemanticHit:
        decision.hit, decision.score, decision.by = candidate.id, round(candidate.score, 4), by
        self.metrics.incr(TIER, "hits")
        self.metrics.incr(TIER, f"hits_{by}")
        self.metrics.incr(TIER, f"hits_score_{_band(candidate.score)}")
        question = str(candidate.payload.get("question", ""))
        ref = str(candidate.payload.get("ref", ""))
        return SemanticHit(entry, candidate.id, candidate.score, question, ref)

    def pool(self, asked: Asked) -> str:
        """Whose labels decide for ``asked``: its namespace, tenant and language."""
        return pool_of(asked.request.namespace, asked.request.tenant, asked.lang)

    def _candidates(
        self,
        query: str,
        vector: np.ndarray,
        scope: dict[str, str],
        threshold: float,
        decision: Decision | None = None,
        *,
        rescore_from: float | None = None,
    ) -> list[Candidate]:
        """Candidates scoring ``threshold`` or more.  The search reaches ``_RESCORE_MARGIN``
        below it, on the texts as asked; a candidate is scored again only where the two
        questions differ in form, which the embedder would otherwise count against them (a
        compound one writes in parts and the other as one word: "Wi Fi" / "WiFi"; a question
        typed without case against one typed with case, compared lowered: the packaged
        embedders are case-sensitive, and lowering every question was measured to raise
        look-alike false hits).  Nothing that maps one word to another moves a score: a word
        one letter from another is another word ("lanoxin" / "lanolin") unless the traffic
        shows otherwise.  Only a candidate found ``_RESCORE_MARGIN`` under ``rescore_from``
        (default: ``threshold``) or nearer is scored again: the neighbours searched further
        down for their agreement keep the score they have."""
        floor = max(0.0, threshold - _RESCORE_MARGIN)
        rescored = max(0.0, (threshold if rescore_from is None else rescore_from) - _RESCORE_MARGIN)
        near = self._plausible(self.index.search(vector, scope, self.top_k, floor))
        new = canonical(query)
        pairs: dict[int, tuple[str, str]] = {}
        for i, candidate in enumerate(near):
            if candidate.score < rescored:
                continue
            cached = canonical(folded(str(candidate.payload.get("question", ""))))
            a, b = unify(cached, new)
            if _caseless(_embeddable(b)) and not _caseless(a):
                a = a.lower()
            if (a, b) != (cached, new):
                pairs[i] = (_embeddable(a), _embeddable(b))
        if pairs:
            texts = [t for pair in pairs.values() for t in pair]
            vectors = self.embedder.embed(texts)
            for n, i in enumerate(pairs):
                near[i].score = float(np.dot(vectors[2 * n], vectors[2 * n + 1]))
        if decision is not None:  # the near ones too, under the threshold: what a person
            decision.candidates = [  # reviewing the decision wants to see
                _reviewed(c) for c in sorted(near, key=lambda c: -c.score)[: self.top_k]
            ]
        kept = (c for c in near if c.score >= threshold)
        return sorted(kept, key=lambda c: -c.score)

    def _in_its_script(
        self, candidates: list[Candidate], script: str, decision: Decision
    ) -> list[Candidate]:
        """The candidates asked in ``script`` (``script.writing``): "Docker是什么" is answered
        in Chinese and "Что такое Linux?" in Russian, whatever "What is Docker?" or "What is
        Linux?" was answered."""
        kept = []
        for candidate in candidates:
            if writing(str(candidate.payload.get("question", ""))) == script:
                kept.append(candidate)
            else:
                decision.rejected[candidate.id] = "language"
                self.metrics.incr(TIER, "guard_language")
        return kept

    def _plausible(self, candidates: list[Candidate]) -> list[Candidate]:
        """``candidates`` without the points this tier could not have written (a question too
        long or not text, lone surrogates): a hostile point is skipped before a guard reads it,
        whatever index returned it."""
        kept = []
        for candidate in candidates:
            question = candidate.payload.get("question")
            if (
                isinstance(question, str)
                and len(question) <= MAX_STORED_QUESTION
                and comparable(question)
            ):
                kept.append(candidate)
            else:
                self.metrics.incr(TIER, "hostile_points")
        return kept

    def threshold_for(self, category: str | None, pool: str | None = None) -> float:
        """The threshold for a category: the calibrated one, or the one ``pool``'s labels
        taught (``learning``), moved by the category's offset."""
        base = self.threshold
        if pool is not None and self.learning is not None and self.learns:
            base = self.learning.threshold(pool, base)
        offset = self.category_offsets.get(category, 0.0) if category else 0.0
        return min(0.999, max(0.0, base + offset))

    def _rerank(
        self, query: str, candidates: list[Candidate], decision: Decision
    ) -> list[Candidate]:
        if self.reranker is None or not candidates:
            return candidates
        questions = [canonical(folded(str(c.payload.get("question", "")))) for c in candidates]
        scores = list(self.reranker(query, questions))
        ranked = sorted(zip(scores, candidates, strict=True), key=lambda sc: -sc[0])
        kept = []
        for score, candidate in ranked:
            if score < self.rerank_threshold:
                decision.rejected[candidate.id] = "rerank"
                self.metrics.incr(TIER, "guard_rerank")
            else:
                kept.append(candidate)
        return kept

    def _scope(self, request: CacheRequest, located: Located) -> dict[str, str]:
        return scope(request, located, volatile=self.volatile_context)

    # write ---------------------------------------------------------------------------------
    def add(
        self,
        request: CacheRequest,
        ref: str,
        entry: CacheEntry,
        ttl: float,
        *,
        located: Located | _Unset | None = _UNSET,
    ) -> str | None:
        """Index ``request``'s question as a pointer to the exact entry ``ref``; returns the
        point id, or ``None`` when the question is not one to match look-alikes against.
        ``located``: the question, when the caller located it already."""
        if isinstance(located, _Unset):
            located = locate(request.query, self.max_chars)
        payload = draft(Asked(request, ref, located), entry, ttl, judge=self.cacheable,
                        volatile=self.volatile_context)  # fmt: skip
        if payload is None:
            return None
        self.index_drafts([payload])
        return point_id_for(ref)

    def index_drafts(self, drafts: list[Draft]) -> None:
        """Embed the drafts' questions (in one batch) and write their points."""
        if not drafts:
            return
        vectors = self.embedder.embed([embedded_text(d["question"]) for d in drafts])
        points = [(point_id_for(d["ref"]), v, d) for d, v in zip(drafts, vectors, strict=True)]
        upsert_many = getattr(self.index, "upsert_many", None)
        if upsert_many is not None:
            upsert_many(points)
        else:
            for point in points:
                self.index.upsert(*point)
        self.metrics.incr(TIER, "writes", len(drafts))

    def grouped(
        self, draft: Draft, answer: str, resolve: Callable[[str], CacheEntry | None]
    ) -> Draft:
        """``draft`` (of a miss's answer) in the answer group of the nearest candidate its
        lookup found whose answer says the same, if any (``groups.py``)."""
        near = self.near.take(str(draft.get("ref", "")))
        try:
            group = joined_group(answer, near, resolve, self.embedder.embed) if near else None
        except Exception as exc:  # (comparing answers must never keep one from its index)
            log.debug("tricache: answer group not joined: %s", exc)
            return draft
        if group is None:
            return draft
        self.metrics.incr(TIER, "groups_joined")
        return {**draft, "answer": group}

    def forget(self, ref: str, namespace: str) -> None:
        """Remove the question indexed for the exact entry ``ref`` of ``namespace``, from
        every kind of index the namespace may have (``forget_elsewhere``)."""
        ids = [point_id_for(ref)]
        self.index.delete(ids)
        if self.forget_elsewhere is not None:
            self.forget_elsewhere(ids)

    def clear(self, namespace: str) -> None:
        self.index.delete_where({"namespace": namespace})


class _Undeclared(Exception):
    """The entry a candidate names was not written under every tag the request declares."""


def _declaring(
    resolve: Callable[[str], CacheEntry | None], tags: Sequence[str]
) -> Callable[[str], CacheEntry | None]:
    """``resolve`` for a request that declares ``tags``: an entry written without one of them
    is never served to it (``invalidate(tag)`` would not reach it); its point stays, for
    the requests that declare nothing more than the entry."""

    def resolved(ref: str) -> CacheEntry | None:
        entry = resolve(ref)
        if entry is not None and not all(tag in entry.tag_versions for tag in tags):
            raise _Undeclared(ref)
        return entry

    return resolved


class _Judged:
    """The rules' verdicts on one lookup's candidates, each computed once, and what the
    candidates holding one answer say together."""

    def __init__(
        self,
        tier: SemanticTier,
        candidates: list[Candidate],
        query: str,
        learning: Learning | None = None,
        pool: str = "",
    ) -> None:
        self.tier, self.candidates, self.query = tier, candidates, query
        self.learning, self.pool = learning, pool
        self._rules: dict[int, tuple[tuple[str, ...], str, bool]] = {}
        self._vetoes: dict[int, tuple[str, ...]] = {}
        self.group_refusals: set[str] = set()  # reasons that refuse a group, not a member

    def question(self, i: int) -> str:
        return str(self.candidates[i].payload.get("question", ""))

    def rules(self, i: int) -> tuple[tuple[str, ...], str, bool]:
        """(the rules that refuse candidate ``i``, the words it differs in where only word
        rules do, whether the pool showed those words harmless)."""
        if i not in self._rules:
            fired = verdicts(self.question(i), self.query, self.tier.guards)
            only_words = fired and set(fired) <= WORD_RULES
            words = differing_words(self.question(i), self.query) if only_words else ""
            equivalent = self.learning is not None and self.learning.equivalent(self.pool, words)
            self._rules[i] = (fired, words, equivalent)
        return self._rules[i]

    def agreed(
        self, i: int, groups: list[str | None], agreeing: int, threshold: float
    ) -> str | None:
        """Why candidate ``i``, which ``agreeing`` neighbours agree with, is refused: a rule
        other than the word rules (the hard ones, order, relation, mood, person, question
        form) against it or another of its group, content words its group does not show
        harmless (``group_explains``), or a score under the bar (``decision.agreed_score``);
        ``None``: served."""
        members = [j for j, group in enumerate(groups) if group == groups[i]]
        nearest = max(range(len(groups)), key=lambda j: self.candidates[j].score)
        if nearest not in members:  # a nearer question got another answer: its group would
            self.group_refusals.add("split")  # win by its size, not by its closeness
            return "split"
        if agreed_score(self.candidates[i].score, agreeing) < threshold + AGREE_MARGIN:
            return "threshold"  # (first: the rules cost more than the rest together)
        if structural := self.refusal(i):
            return structural
        others = [self.question(j) for j in members if j != i]
        if not group_explains(self.query, self.question(i), others):
            words = [g for g in self.tier.guards if rule_id(g) in WORD_RULES]
            return next(iter(self._verdicts(i, words, first=True)), "content.unexplained")
        for j in members:  # none of its group differs from the question provably or in order
            if j != i and (veto := self.vetoes(j)):
                self.group_refusals.add(f"group.{veto[0]}")
                return f"group.{veto[0]}"
        return None

    def refusal(self, i: int) -> str | None:
        """The first rule but the word rules that refuses candidate ``i`` (a hard one
        first): what the agreement path reads, without running every rule."""
        if i in self._rules:
            return next((r for r in self._rules[i][0] if r not in WORD_RULES), None)
        guards = [g for g in self.tier.guards if rule_id(g) not in WORD_RULES]
        return next(iter(self._verdicts(i, guards, first=True)), None)

    def _verdicts(self, i: int, guards: Sequence[Guard], *, first: bool) -> tuple[str, ...]:
        return verdicts(self.question(i), self.query, guards, first=first)

    def vetoes(self, j: int) -> tuple[str, ...]:
        """The rules of ``_GROUP_VETOES`` that refuse candidate ``j`` (only those run)."""
        if j in self._rules:
            return tuple(rule for rule in self._rules[j][0] if rule in _GROUP_VETOES)
        if j not in self._vetoes:
            guards = [g for g in self.tier.guards if rule_id(g) in _GROUP_VETOES]
            self._vetoes[j] = verdicts(self.question(j), self.query, guards, all_rules=True)
        return self._vetoes[j]

    def cluster_explains(self, i: int, answers: list[str | None]) -> bool:
        """Whether the candidates holding candidate ``i``'s answer — paraphrases the LLM
        answered alike — explain how the question differs from each of them: none differs
        from it provably or in order, relation, mood or person, and the words it has that one
        lacks are another's (or shown harmless in the pool).  A difference one of them shows
        and no other explains ("convert PDF to Word" / "convert Word to PDF"; "the second
        book" / "the third book") is the question's own."""
        group = [j for j, answer in enumerate(answers) if answer == answers[i]]
        for j in group:
            fired, _, equivalent = self.rules(j)
            if set(fired) & HARD_RULES or set(fired) - WORD_RULES:
                return False
            if (
                fired
                and not equivalent
                and not any(
                    words_covered(self.query, self.question(j), self.question(k))
                    for k in group
                    if k != j
                )
            ):
                return False
        return True


# what refuses a candidate when another question of its group shows it: a provable
# difference, or the order of its words (a direction swapped: "convert PDF to Word")
_GROUP_VETOES = HARD_RULES | {"structure.order"}


def _reviewed(candidate: Candidate) -> dict[str, object]:
    """What the audit record keeps of a candidate (``tricache review`` shows and acts on it)."""
    return {"id": candidate.id, "ref": str(candidate.payload.get("ref", "")),
            "score": round(candidate.score, 4),
            "question": str(candidate.payload.get("question", "")),
            "group": _answer_of(candidate) or ""}  # fmt: skip


def _note(decision: Decision, point: str, **fields: object) -> None:
    """What the learned decision read of a candidate, on its audit record."""
    for recorded in decision.candidates:
        if recorded["id"] == point:
            recorded.update(fields)


def _answer_of(candidate: Candidate) -> str | None:
    answer = candidate.payload.get("answer")
    return answer if isinstance(answer, str) and answer else None


def embedded_text(question: str) -> str:
    """What the embedder sees of a question: its canonical form without the discourse around
    it, made embeddable."""
    return _embeddable(canonical(folded(question)))


def _embeddable(text: str) -> str:
    """The text the embedder sees: a question typed in capitals only is lowered (the packaged
    embedders score "CAN I EXPORT TO CSV?" far from "Can I export to CSV?"; lowering every
    question instead raised PAWS-X false hits from 1.2 % to 2.1 %), and lone surrogates, which
    cannot be encoded for a model, are replaced.  Not a question whose capitals are a code or
    a name (``\\D``, "IT" inside Chinese text): only one typed in capitals throughout.  The
    guards see the question as typed."""
    if _shouted(text):
        text = text.lower()
    if text[-1:].isascii() and text[-1:].isalnum():
        text += "?"  # "…Tower" scores 0.91 against "…Tower?": both are the same question
    return text.encode("utf-8", "replace").decode("utf-8")


def _shouted(text: str) -> bool:
    """A question typed in capitals throughout: Latin words only, several of them, and no
    literal (``LS -R``) whose case a lowering would change."""
    return (
        text.isupper()
        and not has_cjk(text)
        and sum(w.isalpha() for w in text.split()) >= 2
        and not literals(text)
    )


def _caseless(question: str) -> bool:
    """True for a question typed without case (all lower, or all capitals: ``_embeddable``
    lowers those) that has letters with case at all."""
    return question == question.lower() and question != question.upper()


_RESCORE_MARGIN = 0.15


def _band(score: float) -> str:
    return f"{int(score * 100) // 2 * 2:02d}"  # 2-point bands: "90", "92", ...
