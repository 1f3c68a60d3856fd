"""Decisions learned from traffic, against today's static threshold and the peers' rule.

Streams of real user queries labelled with their intent (``../shared/data``: banking77, and
clinc150 with its out-of-scope queries), in random order (3 seeds) and in a Zipf-skewed order
with repeats.  A stand-in model answers each query with its intent's answer (each
out-of-scope query with an answer of its own), so a served answer is wrong exactly when the
intent differs.  Every contender is a real ``Cache`` on the embedded defaults (its own
temporary directory), fed the stream through the core API: look up, on a miss ask the model and
store its answer.

Contenders: today's static decision (calibrated threshold + guards), the learned decision
(``Semantic(learn=Learn(error_bound=δ))``) at δ = 0.5 %, 1 %, 2 %, and the peers' rule — a
plain cosine threshold, no guards — at GPTCache's default (0.8) and RedisVL's (distance 0.1:
cosine 0.9), on the same embedder.

    python benchmarks/learning.py [--quick] [--sets banking77,clinc150] [--seeds 3]

Prints one table (calls avoided, wrong answers served, explorations: each a share of the
stream) and writes benchmarks/results/learning.md and learning.png.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tricache import Cache, Exact, Faq, Learn, Semantic
from tricache.faq.store import FaqEntry

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"
SETS = {
    "banking77": "banking77/banking77_test.tsv",
    "clinc150": "clinc150/clinc150_test.tsv",
    "stackfaq": "stackfaq/stackfaq_kb.jsonl",  # the FAQ: paraphrases of curated questions
}


@dataclass
class Query:
    text: str
    intent: str
    curated: str = ""  # the FAQ's answer, for a StackFAQ paraphrase

    @property
    def answer(self) -> str:
        """The stand-in model's answer: its intent's (a FAQ entry's curated answer), or (out
        of scope) one of its own."""
        if self.intent == "oos":
            return f"[{self.text}] is outside what this assistant covers."
        return self.curated or f"The answer for {self.intent.replace('_', ' ')}."


@dataclass
class Run:
    """What one contender did on one stream."""

    requests: int = 0
    hits: int = 0
    wrong: int = 0
    explorations: int = 0
    learned_hits: int = 0
    right_misses: int = 0  # misses whose best candidate the guards accepted, and was right
    wrong_misses: int = 0  # … and was wrong (serving it would have been)
    refused: int = 0  # candidates the guards refused
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (seen, avoided, wrong)

    def row(self) -> dict[str, float]:
        n = max(self.requests, 1)
        return {
            "requests": self.requests,
            "avoided": self.hits / n,
            "wrong": self.wrong / n,
            "explorations": self.explorations / n,
            "learned_hits": self.learned_hits / n,
            # what a perfect decision among the candidates the guards accept would avoid
            "ceiling": (self.hits - self.wrong + self.right_misses) / n,
            "near_wrong": self.wrong_misses / n,
            "refused": self.refused / n,
        }


def read(name: str) -> list[Query]:
    if name == "stackfaq":  # the human paraphrases, and 1,000 out-of-scope CLINC150 queries
        paraphrases = [
            Query(q, f"faq{entry['id']}", entry["answers"][0])
            for entry in faq_entries()
            for q in entry["paraphrased_queries"]
        ]
        other = [q for q in read("clinc150") if q.intent == "oos"]
        return paraphrases + other
    with (DATA / SETS[name]).open(encoding="utf-8") as f:
        return [Query(r["text"], r["intent"]) for r in csv.DictReader(f, delimiter="\t")]


def faq_entries() -> list[dict[str, Any]]:
    with (DATA / SETS["stackfaq"]).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def streams(
    name: str, queries: list[Query], seeds: int, zipf_len: int
) -> Iterator[tuple[str, list[Query]]]:
    for seed in range(seeds):
        order = list(queries)
        random.Random(seed).shuffle(order)
        yield f"{name} random (seed {seed})", order
    # Zipf-skewed: queries drawn by rank (s = 1.1), so popular ones repeat, as in real traffic
    rng = random.Random(100)
    ranked = list(queries)
    rng.shuffle(ranked)
    weights = [1 / (rank + 1) ** 1.1 for rank in range(len(ranked))]
    yield f"{name} zipf", rng.choices(ranked, weights=weights, k=zipf_len)


def contenders(name: str) -> dict[str, Callable[[Path], Cache]]:
    def make(semantic: Semantic, faq: Faq | bool = False) -> Callable[[Path], Cache]:
        def build(home: Path) -> Cache:
            cache = Cache(
                path=home / "l2.sqlite3", warm=True, faq=faq, exact=Exact(bloom=False),
                semantic=semantic,
            )  # fmt: skip
            if faq:  # the curated questions only: their paraphrases are the stream
                cache.add_faq(FaqEntry(e["question"], e["answers"][0]) for e in faq_entries())
            return cache

        return build

    if name == "stackfaq":
        plain = Semantic(audit=False)
        return {
            "FAQ static (today)": make(plain, Faq()),
            "FAQ learned δ=1%": make(plain, Faq(learn=Learn(error_bound=0.01))),
            "FAQ learned δ=2%": make(plain, Faq(learn=Learn(error_bound=0.02))),
        }
    return {
        "static (today)": make(Semantic(audit=False)),
        "learned δ=0.5%": make(Semantic(audit=False, learn=Learn(error_bound=0.005))),
        "learned δ=1%": make(Semantic(audit=False, learn=Learn(error_bound=0.01))),
        "learned δ=2%": make(Semantic(audit=False, learn=Learn(error_bound=0.02))),
        "peers' rule @0.80 (GPTCache)": make(
            Semantic(audit=False, threshold=0.80, guards=(), agreement=False)
        ),
        "peers' rule @0.90 (RedisVL)": make(
            Semantic(audit=False, threshold=0.90, guards=(), agreement=False)
        ),
    }


def run(build: Callable[[Path], Cache], stream: list[Query], seed: int) -> Run:
    result = Run()
    with tempfile.TemporaryDirectory(prefix="tricache-learning-") as tmp:
        cache = build(Path(tmp))
        tier = cache.semantic
        assert tier is not None
        learning = tier.learning
        if learning is not None:
            learning.rng = random.Random(seed)
        step = max(1, len(stream) // 100)
        for i, query in enumerate(stream, 1):
            request = cache.request(query.text)
            hit = cache.lookup(request)
            result.requests += 1
            if hit is not None:
                result.hits += 1
                result.wrong += hit.text != query.answer
            else:
                cache.update(request, query.answer)
                if learning is not None:
                    learning.drain()  # labels in before the next query: reproducible
            if i % step == 0 or i == len(stream):
                result.curve.append((i, result.hits / i, result.wrong / i))
        stats = cache.stats()
        for tier in ("semantic", "faq"):
            result.explorations += stats.get(tier, {}).get("explorations", 0)
            result.learned_hits += stats.get(tier, {}).get("hits_learned", 0)
        result.refused = sum(
            n for k, n in stats.get("semantic", {}).items() if k.startswith("guard_")
        )
        if learning is not None:  # the misses labelled (explorations weigh more than 1)
            labels = [x for p in learning.evidence.pools() for x in learning.evidence.labels(p)]
            result.right_misses = sum(x.same for x in labels if x.weight == 1.0)
            result.wrong_misses = sum(not x.same for x in labels if x.weight == 1.0)
        cache.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="600 queries a set, 1 seed")
    parser.add_argument("--only", default="", help="contenders whose name holds this")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for name in args.sets.split(","):
        queries = read(name)
        seeds, zipf_len = args.seeds, len(queries)
        if args.quick:  # a sample of every intent, not the first ones (the file is sorted)
            queries, seeds, zipf_len = random.Random(7).sample(queries, 600), 1, 600
        for label, stream in streams(name, queries, seeds, zipf_len):
            results[label] = {}
            for who, build in contenders(name).items():
                if args.only and args.only not in who:
                    continue
                outcome = run(build, stream, seed=len(results))
                results[label][who] = {**outcome.row(), "curve": outcome.curve}
                row = outcome.row()
                print(
                    f"{label:28} {who:30} avoided {row['avoided']:6.1%}  wrong "
                    f"{row['wrong']:6.2%}  explored {row['explorations']:5.1%}",
                    flush=True,
                )
            if args.quick:
                break
    table = _table(results)
    limits = _limits(results)
    print(table)
    print(limits)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "learning_quick" if args.quick else "learning"
    command = "python benchmarks/learning.py " + " ".join(sys.argv[1:])
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    (args.out / f"{stem}.md").write_text(
        "# Decisions learned from traffic\n\n"
        f"Command: `{command.strip()}` ({time.perf_counter() - started:.0f} s)\n\n"
        "## Results\n\n"
        "Each cell: LLM calls avoided / wrong answers served / explorations (LLM calls a hit "
        "would have skipped), as shares of the stream.\n\n" + table + "\n\n"
        "## What limits it\n\n" + limits + "\n"
    )
    _plot(results, args.out / f"{stem}.png")


def _table(results: dict[str, dict[str, Any]]) -> str:
    names = list(next(iter(results.values())))
    lines = ["| stream | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, row in results.items():
        cells = [
            f"{r['avoided']:.1%} / {r['wrong']:.2%} / {r['explorations']:.1%}" for r in row.values()
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _limits(results: dict[str, dict[str, Any]]) -> str:
    """Against what the learned decision could reach: the calls a perfect decision among the
    candidates the guards accept would avoid (every near miss whose candidate was right
    served), and how many candidates the guards refused."""
    lines = [
        "The learned decision only chooses among candidates the guards accept. *Ceiling*: the "
        "calls avoided if every such candidate that was right were served (the δ = 1 % run's "
        "hits plus its labelled misses that were right); *near wrong*: labelled misses that "
        "were wrong (shares of the stream); *refusals*: candidates the guards refused, per "
        "request (each lookup weighs up to 5 candidates).",
        "",
        "| stream | static | learned δ=1% | ceiling | near wrong | guard refusals / request |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in results.items():
        static = next((r for who, r in row.items() if "static" in who), None)
        learned = next((r for who, r in row.items() if "δ=1%" in who), None)
        if static is None or learned is None:
            continue
        lines.append(
            f"| {label} | {static['avoided']:.1%} | {learned['avoided']:.1%} | "
            f"{learned['ceiling']:.1%} | {learned['near_wrong']:.1%} | {learned['refused']:.2f} |"
        )
    return "\n".join(lines)


def _plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return
    label = next(iter(results))
    figure = Figure(figsize=(10, 4))
    avoided, wrong = figure.subplots(1, 2)
    for who, row in results[label].items():
        xs = [c[0] for c in row["curve"]]
        avoided.plot(xs, [c[1] for c in row["curve"]], label=who)
        wrong.plot(xs, [c[2] for c in row["curve"]], label=who)
    avoided.set_title(f"calls avoided — {label}")
    wrong.set_title("wrong answers served")
    for ax in (avoided, wrong):
        ax.set_xlabel("requests seen")
    avoided.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
