"""Semantic decision quality on every labelled pair set, beside the peers' threshold-only rule.

For each set: TriCache at its defaults (calibrated threshold + guards), and a plain cosine
threshold at 0.80 and 0.90 with the same embedder and no guards (what GPTCache, RedisVL,
langchain-redis and LiteLLM do).  Each pair runs through the real cache (eval-pairs).

    python benchmarks/semantic_quality.py [--limit 1000] [--embedder use-m] [--data ../shared/data]
        [--entities auto|spacy|rules]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tricache.semantic.guards import entities
from tricache.semantic.guards.analysis import use_entity_recognizer
from tricache.tools.evaluate import evaluate_pairs, read_pairs

SETS = {
    # hard negatives: word order, negation/antonyms
    "pawsx_en": "pawsx_en/pawsx_en_dev.tsv",
    "pawsx_zh": "pawsx_zh/pawsx_zh_test.tsv",
    "semantoneg": "semantoneg/semantoneg_5k.tsv",
    # query-like
    "qqp": "qqp/qqp_quora_5k.tsv",
    "lcqmc": "lcqmc/lcqmc_test_5k.tsv",
    "bq_corpus": "bq_corpus/bq_dev_5k.tsv",
    "afqmc": "afqmc/afqmc_dev.tsv",
    "oppo_xiaobu": "oppo_xiaobu/oppo_xiaobu_dev_5k.tsv",
    # other
    "mrpc": "mrpc/mrpc_test.tsv",
    "covid_qsim": "covid_faq/covid_qsim_en.tsv",
}
HARD = {"pawsx_en", "pawsx_zh", "semantoneg"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/data")
    parser.add_argument("--limit", type=int, default=None, help="pairs per set (default: all)")
    parser.add_argument("--embedder", default="use-m")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument(
        "--entities", default="auto", help="English names: auto (the rules), spacy, rules"
    )
    parser.add_argument("--baselines", default="0.8,0.9", help="'' for none")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    baselines = [float(b) for b in args.baselines.split(",") if b]
    use_entity_recognizer(args.entities)
    names_by = entities.recognizer()

    results: dict[str, dict[str, object]] = {}
    lines = [
        "| set | pairs | TriCache precision / recall / false-hit | "
        + "".join(f" threshold-only @{b} P / R / FH |" for b in baselines)
        + " guard refusals |",
        "|---|---:|---|" + "---|" * len(baselines) + "---|",
    ]
    for name in args.sets.split(","):
        pairs = read_pairs(args.data / SETS[name], limit=args.limit)
        started = time.perf_counter()
        ours = evaluate_pairs(pairs, embedder=args.embedder)
        elapsed = time.perf_counter() - started
        row = {"tricache": ours.as_json(), "seconds": round(elapsed, 1)}
        cells = [_cell(ours.overall)]
        for threshold in baselines:
            base = evaluate_pairs(pairs, embedder=args.embedder, threshold=threshold, guards=())
            row[f"threshold_{threshold}"] = base.as_json()
            cells.append(_cell(base.overall))
        results[name] = row
        refusals = ", ".join(
            f"{k} {v}" for k, v in sorted(ours.rejections.items(), key=lambda kv: -kv[1])
        )
        lines.append(
            f"| {name}{' (hard)' if name in HARD else ''} | {len(pairs)} | "
            + " | ".join(cells)
            + f" | {refusals} |"
        )
        print(lines[-1], flush=True)

    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/semantic_quality.py " + " ".join(sys.argv[1:])
    stem = f"semantic_quality_{args.embedder}"
    if args.entities != "auto":
        stem += f"_{args.entities}"
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    (args.out / f"{stem}.md").write_text(
        f"# Semantic decision quality ({args.embedder}, English names by {names_by})\n\n"
        f"Command: `{command.strip()}`\n\n"
        "P = precision of served answers, R = recall (share of same-meaning pairs served), "
        "FH = false-hit rate (share of different-meaning pairs served).\n\n" + table + "\n"
    )


def _cell(summary: dict[str, object]) -> str:
    def fmt(value: object) -> str:
        return "–" if value is None else f"{float(value):.3f}"  # type: ignore[arg-type]

    return (
        f"{fmt(summary['precision'])} / {fmt(summary['recall'])} / {fmt(summary['false_hit_rate'])}"
    )


if __name__ == "__main__":
    main()
