"""The FAQ's part of a lookup: which requests it may answer, and its decision (its threshold,
or with ``Faq(learn=...)`` the one the app's labels taught, and the paraphrases the LLM
verified).  ``Cache`` calls it after the semantic tier misses.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..hit import Hit
from ..key.asked import Asked
from ..key.entry import CacheEntry
from ..ops.metrics import Metrics
from ..settings import Learn

if TYPE_CHECKING:  # (numpy and the FAQ's store load with the FAQ, not with this module)
    from ..semantic.tier import SemanticTier
    from .store import FaqMatch, FaqStore

__all__ = ["MAX_QUESTION_CHARS", "faq_hit", "faq_question"]

MAX_QUESTION_CHARS = 2000  # what the FAQ embeds and compares: longer questions are a miss


def faq_question(asked: Asked, systems: tuple[str, ...] = ()) -> str | None:
    """The question of ``asked`` when the FAQ may answer it: a first question, asked bare
    (curated answers fit neither a conversation under way nor a template with context), under
    no system prompt or one of ``systems`` (``Faq(systems=)``)."""
    request = asked.request
    if request.history or asked.located is None or asked.located.frame:
        return None
    if request.system and request.system not in systems:
        return None
    return asked.located.question


def faq_hit(
    store: FaqStore,
    question: str,
    asked: Asked,
    *,
    learn: Learn | None,
    tier: SemanticTier | None,
    metrics: Metrics,
) -> Hit | None:
    """The curated answer to ``question``, when the FAQ has a confident one."""
    match = _decide(store, question, asked, learn, tier, metrics)
    if match is None:
        metrics.incr("faq", "misses")
        return None
    metrics.incr("faq", "hits")
    from .store import question_key  # (loaded with the FAQ it opened)

    entry = CacheEntry(match.answer, {"faq_id": match.faq_id, "question": match.question})
    entry_id = f"faq:{match.faq_id}:{question_key(question)}"
    return Hit(text=match.answer, payload=entry.payload, tier="faq", level="sqlite",
               key=entry_id, entry=entry, score=match.score, entry_id=entry_id,
               matched_question=match.matched)  # fmt: skip


def _decide(
    store: FaqStore,
    question: str,
    asked: Asked,
    learn: Learn | None,
    tier: SemanticTier | None,
    metrics: Metrics,
) -> FaqMatch | None:
    """The FAQ's answer: its threshold, or (``Faq(learn=...)``) the one the app's labels
    taught, and the questions the LLM answered with a curated answer (verified
    paraphrases, for the asker's tenant); a miss is labelled by the answer the LLM gives."""
    learning = tier.learning if tier is not None else None
    if learn is None or learning is None:
        return store.answer(question)
    from ..semantic.learning import Pending, answer_digest, pool_of

    assert tier is not None
    request = asked.request
    pool = pool_of(request.namespace, request.tenant, asked.lang, kind="faq")
    # a verified paraphrase is a user's question: matched as the semantic tier matches one,
    # at its threshold or the one the pool's labels taught
    bar = learning.threshold(pool, max(store.threshold, tier.threshold), learn.error_bound)
    verified = learning.alias(pool, question, bar)
    match = store.entry(verified[0].faq_id) if verified is not None else None
    # (the entry must still hold the answer it was verified with: not another entry's now)
    if verified is not None and match and answer_digest(match.answer) == verified[0].answer:
        metrics.incr("faq", "hits_verified")
        return match._replace(matched=verified[0].question, score=verified[1])
    best = next(store.matches(question, learn.floor), None)
    if best is not None and best.score >= 1.0:  # the same question in another form
        return best
    learning.looked(pool)
    near = tuple((m.faq_id, m.answer) for m in store.search(question))  # alias candidates
    if best is None:
        learning.pend(asked.key, Pending(pool, "", "", 0.0, "", question, 1.0, time.monotonic(),
                                         None, near))  # fmt: skip
        return None
    threshold = learning.threshold(pool, store.threshold, learn.error_bound)
    pending = Pending(pool, f"faq:{best.faq_id}", "", best.score, best.matched, question, 1.0,
                      time.monotonic(), best.answer, near)  # fmt: skip
    verdict = learning.serves(asked.key, pending, threshold, explore=learn.explore)
    if verdict == "below":  # the LLM's answer labels it
        learning.pend(asked.key, pending)
        return None
    if verdict == "explored":
        metrics.incr("faq", "explorations")
        return None
    if best.score < store.threshold:
        metrics.incr("faq", "hits_learned")
    return best
