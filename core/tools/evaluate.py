"""Measure the semantic decision on labelled question pairs (``eval-pairs``, ``calibrate``).

A pair file is TSV or CSV with a header: ``q1``/``q2`` (or ``text1``/``text2``), ``label``
(1 = same meaning, so a hit is right; 0 = different, so a hit is wrong), and optionally
``kind`` (or ``pair_type``) and ``lang``.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import Cache
from ..faq.store import read_text
from ..key.script import lang
from ..semantic.guards.checks import DEFAULT_GUARDS, Guard, check
from ..semantic.tier import embedded_text
from ..settings import Exact, Semantic

__all__ = ["Pair", "calibrate", "evaluate_pairs", "plot_calibration", "read_pairs"]


@dataclass(slots=True)
class Pair:
    q1: str
    q2: str
    label: int
    kind: str = ""
    lang: str = ""


def read_pairs(path: str | Path, limit: int | None = None) -> list[Pair]:
    """Read a labelled pair file; raises ``ValueError`` naming what is wrong, and where."""
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    f = io.StringIO(read_text(path), newline="")
    sample = f.readline()
    f.seek(0)
    if "\t" in sample:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE, strict=True)
    else:
        reader = csv.DictReader(f, strict=True)
    try:
        pairs = _read_rows(path, reader, limit)
    except csv.Error as exc:
        raise ValueError(f"{path}: line {reader.line_num}: {exc}") from None
    if not pairs:
        raise ValueError(f"{path}: no pairs (only a header?)")
    return pairs


def _read_rows(path: Path, reader: csv.DictReader[str], limit: int | None) -> list[Pair]:
    columns = set(reader.fieldnames or ())
    first, second = ("q1", "q2") if {"q1", "q2"} <= columns else ("text1", "text2")
    if not {first, second, "label"} <= columns:
        raise ValueError(f"{path}: need columns q1,q2 (or text1,text2) and label")
    kind = "kind" if "kind" in columns else "pair_type" if "pair_type" in columns else None
    pairs = []
    for row in reader:
        where = f"{path}: line {reader.line_num}"
        if None in row:
            raise ValueError(f"{where}: more fields than the header has")
        q1, q2, label = row[first], row[second], row["label"]
        if q1 is None or q2 is None or label is None:
            raise ValueError(f"{where}: missing fields (need {first}, {second} and label)")
        if label.strip() not in ("0", "1"):
            raise ValueError(f"{where}: label must be 0 or 1, got {label!r}")
        language = row.get("lang") or lang(q1 + q2)
        pairs.append(Pair(q1, q2, int(label), (row.get(kind) or "") if kind else "", language))
        if limit is not None and len(pairs) >= limit:
            break
    return pairs


@dataclass(slots=True)
class _Tally:
    n: int = 0
    positives: int = 0
    negatives: int = 0
    hits_right: int = 0
    hits_wrong: int = 0

    def add(self, label: int, hit: bool) -> None:
        self.n += 1
        self.positives += label == 1
        self.negatives += label == 0
        self.hits_right += hit and label == 1
        self.hits_wrong += hit and label == 0

    def summary(self) -> dict[str, Any]:
        hits = self.hits_right + self.hits_wrong
        return {
            "n": self.n,
            "precision": round(self.hits_right / hits, 4) if hits else None,
            "recall": round(self.hits_right / self.positives, 4) if self.positives else None,
            "false_hit_rate": round(self.hits_wrong / self.negatives, 4)
            if self.negatives
            else None,
            "hit_rate": round(hits / self.n, 4) if self.n else None,
        }


@dataclass(slots=True)
class PairReport:
    pairs: int
    overall: dict[str, Any]
    by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_lang: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejections: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "precision": self.overall["precision"],
            "recall": self.overall["recall"],
            "false_hit_rate": self.overall["false_hit_rate"],
            "by_kind": self.by_kind,
            "by_lang": self.by_lang,
            "rejections": self.rejections,
        }


_SEMANTIC_FIELDS = {f.name for f in fields(Semantic)}


def evaluate_pairs(
    pairs: Sequence[Pair],
    *,
    embedder: Any = None,
    threshold: float | None = None,
    guards: Sequence[Guard] = DEFAULT_GUARDS,
    on_step: Callable[[], None] | None = None,
    **cache_options: Any,
) -> PairReport:
    """The whole decision, end to end: for each pair, store q1 with its own answer in a fresh
    cache scope (its own tenant), look up q2, and score the result."""
    with tempfile.TemporaryDirectory(prefix="tricache-eval-") as tmp:
        semantic = {k: cache_options.pop(k) for k in _SEMANTIC_FIELDS & set(cache_options)}
        cache = Cache(
            path=Path(tmp) / "eval.sqlite3",
            warm=True,
            exact=Exact(bloom=False),
            semantic=Semantic(
                embedder=embedder, threshold=threshold, guards=guards, audit=False, **semantic
            ),
            **cache_options,
        )
        tier = cache.semantic
        if tier is None:
            raise RuntimeError("the semantic tier is not available (see the log)")
        _prefetch(tier.embedder, [embedded_text(t) for p in pairs for t in (p.q1, p.q2)])
        overall = _Tally()
        kinds: defaultdict[str, _Tally] = defaultdict(_Tally)
        langs: defaultdict[str, _Tally] = defaultdict(_Tally)
        for i, pair in enumerate(pairs):
            tenant = f"pair{i}"
            cache.update(cache.request(pair.q1, tenant=tenant), f"answer to pair {i}")
            hit = cache.lookup(cache.request(pair.q2, tenant=tenant)) is not None
            for tally in (overall, kinds[pair.kind or "all"], langs[pair.lang or "?"]):
                tally.add(pair.label, hit)
            if on_step is not None:
                on_step()
        rejections = {
            event.removeprefix("guard_"): count
            for event, count in cache.stats().get("semantic", {}).items()
            if event.startswith("guard_")
        }
        cache.close()
    return PairReport(
        len(pairs),
        overall.summary(),
        {k: t.summary() for k, t in sorted(kinds.items())},
        {k: t.summary() for k, t in sorted(langs.items())},
        rejections,
    )


def _prefetch(embedder: Any, texts: list[str]) -> None:
    """Embed every text in batches up front (the embedder's LRU then serves the lookups)."""
    unique = list(dict.fromkeys(texts))
    if hasattr(embedder, "maxsize"):
        embedder.maxsize = max(embedder.maxsize, len(unique) + 1000)
    for start in range(0, len(unique), 256):
        embedder.embed(unique[start : start + 256])


def similarities(pairs: Sequence[Pair], embedder: Any) -> np.ndarray:
    """Cosine similarity of each pair, embedded as the semantic tier embeds a question."""
    first = [embedded_text(p.q1) for p in pairs]
    second = [embedded_text(p.q2) for p in pairs]
    _prefetch(embedder, first + second)
    a = embedder.embed(first)
    b = embedder.embed(second)
    return np.asarray((a * b).sum(axis=1))


# Fewer labelled pairs than this (or of either label) cannot support a threshold: with 10
# look-alikes and none served, the false-hit rate can still be 26% (95% upper bound).
MIN_PAIRS = 50
MIN_PER_LABEL = 10


@dataclass(slots=True)
class Calibration:
    rows: list[dict[str, float]]  # threshold, precision, recall, hit_rate
    chosen: float | None  # lowest threshold meeting the target precision, if any
    target_precision: float
    warning: str | None = None  # why ``chosen`` is not reliable (too few pairs), if it is not

    def as_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "target_precision": self.target_precision,
            "reliable": self.warning is None,
            "warning": self.warning,
            "rows": self.rows,
        }


def too_few_pairs(pairs: Sequence[Pair]) -> str | None:
    """Why ``pairs`` are too few to pick a threshold from, or ``None`` when they are enough."""
    same = sum(p.label == 1 for p in pairs)
    different = len(pairs) - same
    if len(pairs) >= MIN_PAIRS and min(same, different) >= MIN_PER_LABEL:
        return None
    return (
        f"only {len(pairs)} labelled pairs ({same} same, {different} different): too few to "
        f"choose a threshold from; label at least {MIN_PAIRS}, with at least {MIN_PER_LABEL} of "
        "each"
    )


def calibrate(
    pairs: Sequence[Pair],
    embedder: Any,
    *,
    target_precision: float = 0.99,
    guards: Sequence[Guard] = DEFAULT_GUARDS,
    thresholds: Iterable[float] | None = None,
) -> Calibration:
    """Precision, recall and hit rate per threshold (guards applied, as in the tier), and the
    lowest threshold whose precision meets ``target_precision`` (with a warning when the pairs
    are too few to trust it: ``MIN_PAIRS``, ``MIN_PER_LABEL``)."""
    sims = similarities(pairs, embedder)
    passed = np.array([check(p.q1, p.q2, guards)[0] is None for p in pairs])
    labels = np.array([p.label for p in pairs])
    grid = (
        list(thresholds)
        if thresholds is not None
        else [round(t, 3) for t in np.arange(0.5, 1.0, 0.01)]
    )
    rows, chosen = [], None
    for threshold in grid:
        hit = (sims >= threshold) & passed
        n_hit = int(hit.sum())
        right = int((hit & (labels == 1)).sum())
        precision = right / n_hit if n_hit else 1.0
        recall = right / max(int((labels == 1).sum()), 1)
        rows.append(
            {
                "threshold": float(threshold),
                "precision": round(precision, 4),
                "recall": round(recall, 4),
                "hit_rate": round(n_hit / len(pairs), 4),
            }
        )
        if chosen is None and n_hit and precision >= target_precision:
            chosen = float(threshold)
    return Calibration(rows, chosen, target_precision, too_few_pairs(pairs))


def plot_calibration(result: Calibration, title: str = "") -> Any:
    """A matplotlib figure of precision, recall and hit rate per threshold (needs matplotlib)."""
    from matplotlib.figure import Figure

    xs = [r["threshold"] for r in result.rows]
    figure = Figure(figsize=(7, 4.2))
    ax = figure.subplots()
    for key, label in (("precision", "precision"), ("recall", "recall"), ("hit_rate", "hit rate")):
        ax.plot(xs, [r[key] for r in result.rows], label=label)
    ax.axhline(result.target_precision, color="grey", linestyle=":", label="target precision")
    if result.chosen is not None:
        ax.axvline(
            result.chosen, color="black", linestyle="--", label=f"chosen {result.chosen:.2f}"
        )
    ax.set_xlabel("cosine threshold")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(loc="lower left")
    figure.tight_layout()
    return figure
