"""Experiment: would a learned verifier beat the rule-based decision on sets it never saw?

For every labelled set: candidates are the pairs a semantic search would return (cosine >= the
floor) that pass the hard guards.  A logistic model is trained on the OTHER sets, its cut
chosen there for the target precision, and then scored on the held-out set, beside the current
rules (threshold + every guard).  Only a verifier that helps on sets it never saw is worth
shipping; this one did not (benchmarks/results/verifier_experiment.md), so none ships.

    pip install scikit-learn
    python benchmarks/train_verifier.py [--limit 2000] [--target 0.95]
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

import numpy as np
from semantic_quality import SETS
from sklearn.linear_model import LogisticRegression

from tricache.semantic.embed import get_embedder
from tricache.semantic.guards.analysis import Analysis, analyze
from tricache.semantic.guards.checks import DEFAULT_GUARDS, check
from tricache.semantic.guards.rules.content import added_content, substitution
from tricache.semantic.guards.rules.shared import content_stems, unmatched
from tricache.tools.evaluate import read_pairs, similarities

FEATURES = (
    "sim",
    "sim_zh",
    "zh",
    "only_min",
    "only_max",
    "addition",
    "substitution",
    "jaccard",
    "char_ratio",
    "short",
)


def features(cached: str, new: str, similarity: float) -> dict[str, float]:
    """The verifier's inputs for one candidate pair."""
    a, b = analyze(cached), analyze(new)
    only_a, only_b = len(unmatched(a, b)), len(unmatched(b, a))
    stems_a, stems_b = set(content_stems(a)), set(content_stems(b))
    union = stems_a | stems_b
    zh = float(a.zh or b.zh)
    return {
        "sim": similarity,
        "sim_zh": similarity * zh,
        "zh": zh,
        "only_min": float(min(only_a, only_b)),
        "only_max": float(min(max(only_a, only_b), 6)),
        "addition": float((only_a == 0) != (only_b == 0)),
        "substitution": float(only_a == 1 and only_b == 1),
        "jaccard": len(stems_a & stems_b) / len(union) if union else 1.0,
        "char_ratio": difflib.SequenceMatcher(None, a.text, b.text).ratio(),
        "short": float(min(_length(a), _length(b)) <= 3),
    }


def _length(a: Analysis) -> int:
    return len(content_stems(a))


HARD_GUARDS = tuple(g for g in DEFAULT_GUARDS if g not in (added_content, substitution))


def set_features(pairs, sims, floor):  # type: ignore[no-untyped-def]
    rows, labels, rule_hits, keep = [], [], [], []
    for pair, sim in zip(pairs, sims, strict=True):
        if sim < floor or check(pair.q1, pair.q2, HARD_GUARDS)[0] is not None:
            keep.append(False)
            continue
        keep.append(True)
        x = features(pair.q1, pair.q2, float(sim))
        rows.append([x[k] for k in FEATURES])
        labels.append(pair.label)
        rule_hits.append(sim >= 0.90 and check(pair.q1, pair.q2, DEFAULT_GUARDS)[0] is None)
    return np.array(rows), np.array(labels), np.array(rule_hits), np.array(keep)


def cut_for(model, x, y, target):  # type: ignore[no-untyped-def]
    """The lowest probability cut whose precision on (x, y) reaches ``target``."""
    p = model.predict_proba(x)[:, 1]
    for cut in np.arange(0.5, 0.999, 0.005):
        hit = p >= cut
        if hit.sum() >= 20 and y[hit].mean() >= target:
            return float(cut)
    return 0.999


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/data")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--floor", type=float, default=0.80)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--embedder", default="use-m")
    args = parser.parse_args()
    embedder = get_embedder(args.embedder)
    data = {}
    for name, path in SETS.items():
        pairs = read_pairs(args.data / path, limit=args.limit)
        sims = similarities(pairs, embedder)
        x, y, rule, _ = set_features(pairs, sims, args.floor)
        positives = sum(p.label for p in pairs)
        data[name] = (x, y, rule, positives, len(pairs) - positives)
        print(f"{name}: {len(y)} candidates", file=sys.stderr)

    print("| held-out set | rules P / R / FH | verifier P / R / FH |")
    print("|---|---|---|")
    for held in data:
        train = [data[n] for n in data if n != held]
        x = np.vstack([t[0] for t in train])
        y = np.concatenate([t[1] for t in train])
        model = LogisticRegression(max_iter=2000, C=1.0).fit(x, y)
        cut = cut_for(model, x, y, args.target)
        hx, hy, hrule, pos, neg = data[held]
        hit = model.predict_proba(hx)[:, 1] >= cut if len(hx) else np.array([], bool)
        print(f"| {held} | {_prf(hrule, hy, pos, neg)} | {_prf(hit, hy, pos, neg)} |")

    x = np.vstack([d[0] for d in data.values()])
    y = np.concatenate([d[1] for d in data.values()])
    model = LogisticRegression(max_iter=2000, C=1.0).fit(x, y)
    cut = cut_for(model, x, y, args.target)
    weights = dict(zip(FEATURES, (round(float(w), 4) for w in model.coef_[0]), strict=True))
    print(
        json.dumps({"weights": weights, "bias": round(float(model.intercept_[0]), 4), "cut": cut})
    )


def _prf(hit, y, positives, negatives) -> str:  # type: ignore[no-untyped-def]
    right = int((hit & (y == 1)).sum())
    wrong = int((hit & (y == 0)).sum())
    precision = right / (right + wrong) if right + wrong else float("nan")
    return f"{precision:.3f} / {right / max(positives, 1):.3f} / {wrong / max(negatives, 1):.3f}"


if __name__ == "__main__":
    main()
