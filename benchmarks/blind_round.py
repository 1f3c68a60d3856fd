"""A blind round against the learned decision: look-alike pairs and paraphrase clusters written
by a helper who saw neither the rules nor the probes (issue #35), run once and kept.

``benchmarks/probes/heldout12_issue35.tsv`` (q1 stored, q2 asked) and
``clusters/heldout12_issue35.tsv`` (q1a and q1b stored with one answer — two paraphrases, so
their neighbours agree — then q2 asked).  Each pair or cluster has a scope of its own (an LLM
key) in one pool: cold, then after a natural stream (banking77, clinc150) warmed that pool and
taught it thresholds.  A label-0 row served is a look-alike served.

    python benchmarks/blind_round.py [--quick]

Writes benchmarks/results/blind_round.md.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tricache import Cache, Exact, Learn, Semantic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decision import read_stream, run_stream

PROBES = Path(__file__).resolve().parent / "probes"
OUT = Path(__file__).resolve().parent / "results"
PAIRS = PROBES / "heldout12_issue35.tsv"
CLUSTERS = PROBES / "clusters" / "heldout12_issue35.tsv"


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def served(cache: Cache, stored: list[str], asked: str, key: str) -> bool:
    answer = f"answer of {key}"
    for question in stored:
        request = cache.request(question, llm_key=key)
        if cache.lookup(request) is None:
            cache.update(request, answer)
    hit = cache.lookup(cache.request(asked, llm_key=key))
    return hit is not None and hit.text == answer


def evaluate(cache: Cache, pairs: list[dict[str, str]], clusters: list[dict[str, str]]) -> dict:
    out: dict[str, Counter[tuple[str, str, int]]] = {"served": Counter(), "rows": Counter()}
    for i, row in enumerate(pairs):
        kind = ("pairs", row["kind"], int(row["label"]))
        out["rows"][kind] += 1
        out["served"][kind] += served(cache, [row["q1"]], row["q2"], f"p{i}")
    for i, row in enumerate(clusters):
        kind = ("clusters", row["kind"], int(row["label"]))
        out["rows"][kind] += 1
        out["served"][kind] += served(cache, [row["q1a"], row["q1b"]], row["q2"], f"c{i}")
    return out


def summary(result: dict) -> dict[str, tuple[int, int]]:
    totals: dict[str, list[int]] = {}
    for (what, _, label), n in result["rows"].items():
        key = f"{what} label {label}"
        cell = totals.setdefault(key, [0, 0])
        cell[0] += result["served"][(what, _, label)]
        cell[1] += n
    return {k: (v[0], v[1]) for k, v in sorted(totals.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    pairs, clusters = read(PAIRS), read(CLUSTERS)
    runs: dict[str, dict] = {}
    decisions = {
        "rules only (before)": Semantic(audit=False, agreement=False),
        "default (rules + agreement)": Semantic(audit=False),
        "learned δ=1%": Semantic(audit=False, learn=Learn(error_bound=0.01)),
        "learned δ=2%": Semantic(audit=False, learn=Learn(error_bound=0.02)),
    }
    for warm in ("cold", "banking77", "clinc150"):
        for who, semantic in decisions.items():
            if warm != "cold" and who.startswith("rules"):
                continue  # (the rules alone learn nothing from a stream)
            with tempfile.TemporaryDirectory(prefix="tricache-blind-") as tmp:
                cache = Cache(path=Path(tmp) / "c.sqlite3", warm=True, faq=False,
                              exact=Exact(bloom=False), semantic=semantic)  # fmt: skip
                if cache.semantic is not None and cache.semantic.learning is not None:
                    cache.semantic.learning.rng = random.Random(0)
                if warm != "cold":
                    stream = read_stream(warm)
                    random.Random(0).shuffle(stream)
                    run_stream(cache, stream[:800] if args.quick else stream)
                runs[f"{who}, {warm}"] = evaluate(cache, pairs, clusters)
                cache.close()
            print(f"{who}, {warm}: {summary(runs[f'{who}, {warm}'])}", flush=True)
    write(runs, args.out, time.perf_counter() - started, args.quick)


def write(runs: dict[str, dict], out: Path, took: float, quick: bool) -> None:
    command = "python benchmarks/blind_round.py" + (" --quick" if quick else "")
    first = next(iter(runs.values()))
    columns = sorted({f"{w} label {lab}" for (w, _, lab) in first["rows"]})
    lines = ["# Blind round (issue #35)", "", f"Command: `{command}` ({took:.0f} s)", "",
             "Served / rows. Label 0 (a look-alike) should never be served, label 1 (the same"
             " question) should.", "", "| decision | " + " | ".join(columns) + " |",
             "|---|" + "---|" * len(columns)]  # fmt: skip
    for name, result in runs.items():
        cells = summary(result)
        lines.append(f"| {name} | " + " | ".join(f"{cells[c][0]} / {cells[c][1]}" for c in columns)
                     + " |")  # fmt: skip
    lines += ["", "## Look-alikes served, by kind", "", "| decision | kind | served |",
              "|---|---|---|"]  # fmt: skip
    for name, result in runs.items():
        for (what, kind, label), n in sorted(result["served"].items()):
            if label == 0 and n:
                lines.append(
                    f"| {name} | {what}: {kind} | {n} / {result['rows'][(what, kind, 0)]} |"
                )
    text = "\n".join(lines) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / ("blind_round_quick.md" if quick else "blind_round.md")).write_text(text, "utf-8")


if __name__ == "__main__":
    main()
