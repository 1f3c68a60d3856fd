"""Experiment: does hybrid retrieval (BM25 + dense, fused by reciprocal rank) help the decision?

Per set, every first question is a cached entry (one shared index, as in a real cache) and
every second question a lookup.  Candidates come from the dense top-k alone, or from the
dense and the BM25 top-k fused with RRF; either way a candidate is served only if it clears
the calibrated threshold and every guard.  A lookup is scored against its own pair: serving
its own first question is right on a same-meaning pair and wrong on a different-meaning one;
serving another entry is counted apart (the sets do not say whether it is right).

BM25 is SQLite's FTS5 (Chinese segmented with jieba), the engine the FAQ tier already uses.

    python benchmarks/hybrid.py [--limit 2000] [--sets qqp,lcqmc,oppo_xiaobu]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from pathlib import Path

import numpy as np
from semantic_quality import SETS

from tricache.semantic.embed import get_embedder
from tricache.semantic.guards.analysis import analyze
from tricache.semantic.guards.checks import check
from tricache.semantic.tier import CALIBRATED_THRESHOLDS
from tricache.tools.evaluate import read_pairs

RRF_K = 60


def bm25_index(texts: list[str]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(body)")
    db.executemany(
        "INSERT INTO docs(rowid, body) VALUES (?, ?)",
        [(i, " ".join(analyze(t).tokens)) for i, t in enumerate(texts)],
    )
    return db


def bm25_top(db: sqlite3.Connection, query: str, k: int) -> list[int]:
    terms = {re.sub(r'"', "", t) for t in analyze(query).tokens} - {""}
    if not terms:
        return []
    match = " OR ".join(f'"{t}"' for t in sorted(terms))
    rows = db.execute(
        "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?", (match, k)
    ).fetchall()
    return [r[0] for r in rows]


def rrf(*rankings: list[int]) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(scores, key=lambda d: -scores[d])


def run_set(name: str, path: Path, limit: int | None, k: int, embedder_name: str) -> dict:
    pairs = read_pairs(path, limit=limit)
    embedder = get_embedder(embedder_name)
    threshold = CALIBRATED_THRESHOLDS[embedder.name]
    cached = sorted({p.q1 for p in pairs})
    where = {t: i for i, t in enumerate(cached)}
    matrix = embedder.embed(cached)
    queries = embedder.embed([p.q2 for p in pairs])
    db = bm25_index(cached)
    modes = ("dense", "hybrid")
    tallies = {mode: {"right": 0, "wrong": 0, "other": 0, "miss": 0} for mode in modes}
    changed = 0  # lookups where the two modes served different entries (or one missed)
    for pair, vector in zip(pairs, queries, strict=True):
        scores = matrix @ vector
        dense = [int(i) for i in np.argsort(-scores)[:k]]
        orders = {"dense": dense, "hybrid": rrf(dense, bm25_top(db, pair.q2, k))}
        served_by = {}
        for mode, order in orders.items():
            served = next(
                (
                    i
                    for i in order
                    if scores[i] >= threshold and check(cached[i], pair.q2)[0] is None
                ),
                None,
            )
            served_by[mode] = served
            if served is None:
                outcome = "miss"
            elif served != where[pair.q1]:
                outcome = "other"
            else:
                outcome = "right" if pair.label == 1 else "wrong"
            tallies[mode][outcome] += 1
        changed += served_by["dense"] != served_by["hybrid"]
    positives = sum(p.label for p in pairs)
    negatives = len(pairs) - positives
    out = {"pairs": len(pairs), "entries": len(cached), "changed": changed}
    for mode, t in tallies.items():
        out[mode] = {
            **t,
            "recall": t["right"] / max(positives, 1),
            "false_hit_rate": t["wrong"] / max(negatives, 1),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/data")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--embedder", default="use-m")
    parser.add_argument(
        "--sets", default="qqp,lcqmc,oppo_xiaobu,bq_corpus,afqmc,pawsx_en,pawsx_zh,mrpc"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    lines = [
        "| set | entries | dense: right / wrong / other / recall / false-hit |"
        " hybrid (RRF): right / wrong / other / recall / false-hit | lookups changed |",
        "|---|---:|---|---|---:|",
    ]
    results = {}
    for name in args.sets.split(","):
        r = run_set(name, args.data / SETS[name], args.limit, args.top_k, args.embedder)
        results[name] = r
        cells = [
            f"{r[m]['right']} / {r[m]['wrong']} / {r[m]['other']} / "
            f"{r[m]['recall']:.3f} / {r[m]['false_hit_rate']:.3f}"
            for m in ("dense", "hybrid")
        ]
        lines.append(f"| {name} | {r['entries']} | {cells[0]} | {cells[1]} | {r['changed']} |")
        print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/hybrid.py " + " ".join(sys.argv[1:])
    changed = sum(r["changed"] for r in results.values())
    lookups = sum(r["pairs"] for r in results.values())
    (args.out / "hybrid.md").write_text(
        f"# Hybrid retrieval (BM25 + dense, RRF) vs dense ({args.embedder})\n\n"
        f"Command: `{command.strip()}`\n\n" + "\n".join(lines) + "\n\n"
        "right = served its own first question on a same-meaning pair; wrong = the same on a "
        "different-meaning pair; other = served another cached entry (the sets do not say "
        f"whether that is right).  RRF fusion changed {changed} of {lookups:,} lookups.\n"
    )
    (args.out / "hybrid.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
