"""The learned decision: rules as priors, thresholds per class of candidate, one error budget.

A candidate is put in a *class* by what the evidence says of it:

- the *hard* rules (``guards.checks.HARD_RULES``: a literal or code token, its case, a
  negation, an antonym, a number, a name) refuse it whatever the traffic shows: no class;
- whether any *soft* rule fired (word order, relations, modality, focus, persons, question
  form, added or substituted content): ``+soft``;
- what its neighbours say (``agreement``): the candidates of the same lookup that point at
  the same answer as it (a digest in the point) ``agree``; one that points at another answer
  and none that agrees is ``split``; a candidate with no other near it is ``alone``.

Without labels a class without ``+soft`` is served at the calibrated threshold and a class
with it is refused: today's rules exactly.  Labels (``learning.py``: every answered miss whose
best candidate no hard rule refused, at no extra LLM call) then move each class's threshold,
all under one bound that the user sets (``Learn(error_bound=δ)``): with 95 % confidence, the
share of the pool's lookups answered wrongly stays under δ.  The budget goes first where it
buys the most hits per expected wrong answer (a greedy allocation over each class's feasible
thresholds, each bounded by the Wilson upper bound of its labels' wrong rate); a class moves
only on ``MIN_LABELS`` labels from ``MIN_ANSWERS`` different answers reaching down to the
threshold, never where more than ``MAX_WRONG`` of what it would add is wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from .guards.checks import HARD_RULES, WORD_RULES

__all__ = [
    "AGREE_BONUS",
    "AGREE_MARGIN",
    "ANSWER_WEIGHT",
    "CLASSES",
    "MAX_WRONG",
    "MIN_ANSWERS",
    "MIN_LABELS",
    "NEIGHBOUR_FLOOR",
    "agreed_score",
    "agreeing",
    "agreement",
    "classify",
    "learned_thresholds",
    "movable",
    "prior",
    "wilson_upper",
]

MIN_LABELS = 30  # effective labels at or above a learned threshold
MIN_ANSWERS = 10  # different answers among its positive labels
ANSWER_WEIGHT = 10.0  # the positive labels of one answer weigh this much in all, at most
MAX_WRONG = 0.25  # the candidates a learned threshold adds are right 3 times in 4 at least
STATIC_PRIOR = (1, 20)  # the calibrated threshold's hits: wrong 1 in 20, worth 20 labels
_Z = 1.645  # one-sided 95 %
_GRID = [round(1.0 - i / 100, 2) for i in range(1, 51)]  # 0.99 … 0.50
SOFT = "+soft"
CLASSES = tuple(f"{a}{s}" for a in ("alone", "agree", "split") for s in ("", SOFT))


class Labelled(Protocol):
    """What the decision reads of a label (``learning.Label``)."""

    @property
    def score(self) -> float: ...
    @property
    def same(self) -> bool: ...
    @property
    def answer(self) -> str: ...
    @property
    def cls(self) -> str: ...


def classify(fired: Iterable[str], agreed: str, *, equivalent: bool = False) -> str | None:
    """The class of a candidate that the rules ``fired`` on (``None``: a hard rule refuses
    it) and whose neighbours ``agreed`` (``agreement``); ``equivalent``: the words it differs
    in were shown harmless in its pool, so the word rules' refusal does not count."""
    fired = set(fired)
    if fired & HARD_RULES:
        return None
    if equivalent:
        fired -= WORD_RULES
    return agreed + (SOFT if fired else "")


def movable(cls: str) -> bool:
    """Whether labels may move a class: a rule's refusal only where the neighbours agree (two
    stored questions near it that the LLM answered alike: a look-alike of one question has
    no such company)."""
    return not cls.endswith(SOFT) or cls.startswith("agree")


def agreement(answers: Sequence[str | None], i: int) -> str:
    """How the other candidates of a lookup stand to candidate ``i`` (``answers``: each
    candidate's answer digest; ``None`` when its point carries none)."""
    mine = answers[i]
    others = [a for j, a in enumerate(answers) if j != i]
    if not others:
        return "alone"
    if mine is not None and mine in others:
        return "agree"
    return "split"


# Neighbour agreement: a candidate's score is its cosine plus AGREE_BONUS for each other stored
# question among the lookup's nearest (top_k, cosine NEIGHBOUR_FLOOR or more) whose answer is
# of its group (``groups.py``).  Measured on banking77 and clinc150 when issue #39 was filed:
# among candidates at 0.80 or more it separates right from wrong with AUC 0.85 / 0.90 where
# the cosine alone has 0.64 / 0.71.  What it serves here is bounded by ``_Judged.agreed``
# (tier.py); its frontier is in benchmarks/results/decision.md.
AGREE_BONUS = 0.05
NEIGHBOUR_FLOOR = 0.70
AGREE_MARGIN = 0.02  # above the calibrated threshold: what agreement must reach


def agreed_score(score: float, agreeing: int) -> float:
    """A candidate's score with ``agreeing`` neighbours of its group: its cosine, plus
    ``AGREE_BONUS`` each."""
    return score + AGREE_BONUS * agreeing


def agreeing(groups: Sequence[str | None], i: int) -> int:
    """How many of the other candidates hold candidate ``i``'s answer group (``groups``: each
    candidate's; ``None`` when its point names none)."""
    mine = groups[i]
    if mine is None:
        return 0
    return sum(1 for j, group in enumerate(groups) if j != i and group == mine)


def prior(cls: str, static: float) -> float | None:
    """The threshold of a class without labels: the calibrated one where no rule fired, a
    refusal (``None``) where one did."""
    return None if cls.endswith(SOFT) else static


def wilson_upper(p: float, n: float) -> float:
    if n <= 0:
        return 1.0
    centre = p + _Z * _Z / (2 * n)
    spread = _Z * math.sqrt(p * (1 - p) / n + _Z * _Z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + _Z * _Z / n))


def learned_thresholds(
    labels: Sequence[Labelled],
    *,
    error_bound: float,
    floor: float,
    static: float,
    lookups: float,
    hits: Mapping[str, Mapping[int, float]],
) -> dict[str, float]:
    """The threshold of each class the labels allow moving (classes left out keep their
    ``prior``).

    ``lookups``: the pool's lookups that reached a decision; ``hits``: those a threshold
    served, by class and score (hundredths).  What the calibrated threshold already serves is
    charged first (its hits, wrong as often as their explored labels and the calibration's
    prior say); the rest of ``error_bound`` goes, option by option, to the class and threshold
    that adds the most right answers per expected wrong one (each option's wrong share is the
    Wilson upper bound of its labels)."""
    decisions = max(lookups, 1.0)
    cut = round(static * 100)
    by_class: dict[str, list[Labelled]] = {}
    for label in labels:
        by_class.setdefault(label.cls, []).append(label)
    spent = 0.0
    for cls, served in hits.items():
        if cls.endswith(SOFT):
            continue  # (a soft class serves at a learned threshold: charged with its option)
        above = [x for x in by_class.get(cls, ()) if x.score >= static]
        wrong, weight = STATIC_PRIOR
        rate = (wrong + sum(not x.same for x in above)) / (weight + len(above))
        spent += sum(n for b, n in served.items() if b >= cut) / decisions * rate
    options = {}
    for cls, group in by_class.items():
        if not movable(cls):
            continue
        found = _options(
            group, cls, floor=floor, static=static, decisions=decisions, hits=hits.get(cls, {})
        )
        if found:
            options[cls] = found
    return _allocate(options, error_bound - spent)


def _options(
    labels: Sequence[Labelled],
    cls: str,
    *,
    floor: float,
    static: float,
    decisions: float,
    hits: Mapping[int, float],
) -> list[tuple[float, float, float]]:
    """The thresholds a class could move to, highest first: (t, expected wrong share,
    expected right share), each with enough labels reaching down to it."""
    start = static if prior(cls, static) is not None else 1.0
    zone = sorted((x for x in labels if floor <= x.score < start), key=lambda x: -x.score)
    recurring = Counter(x.answer for x in zone if x.same)
    found = []
    n = weight = wrong = 0.0
    answers: set[str] = set()
    i = 0
    for t in _GRID:
        if t >= start:
            continue
        if t < floor:
            break
        while i < len(zone) and zone[i].score >= t - 1e-9:
            x = zone[i]
            n += 1
            if x.same:  # one answer that recurs weighs ANSWER_WEIGHT labels at most
                weight += min(1.0, ANSWER_WEIGHT / recurring[x.answer])
                answers.add(x.answer)
            else:
                weight += 1
                wrong += 1
            i += 1
        if n < MIN_LABELS:
            continue  # too few labels to judge yet: look lower
        upper = wilson_upper(wrong / weight, n)
        if upper > MAX_WRONG:
            break
        if len(answers) < MIN_ANSWERS or zone[i - 1].score >= t + 0.02:
            continue  # (labels must reach down to t: no threshold under the evidence)
        added = n + sum(h for b, h in hits.items() if round(t * 100) <= b)
        found.append((t, added / decisions * upper, added / decisions * (1 - wrong / weight)))
    return found


def _allocate(
    options: Mapping[str, list[tuple[float, float, float]]], budget: float
) -> dict[str, float]:
    """Greedily, the class and threshold adding the most right answers per expected wrong
    one, while the expected wrong share fits ``budget``."""
    chosen: dict[str, tuple[float, float, float]] = {}
    used = 0.0
    while True:
        best: tuple[float, str, tuple[float, float, float], float] | None = None
        for cls, found in options.items():
            current = chosen.get(cls)
            for option in found:
                if current is not None and option[0] >= current[0]:
                    continue
                cost = option[1] - (current[1] if current else 0.0)
                gain = option[2] - (current[2] if current else 0.0)
                if gain <= 0 or used + cost > budget:
                    continue
                ratio = gain / max(cost, 1e-12)
                if best is None or ratio > best[0]:
                    best = (ratio, cls, option, cost)
        if best is None:
            return {cls: option[0] for cls, option in chosen.items()}
        _, cls, option, cost = best
        chosen[cls] = option
        used += cost
