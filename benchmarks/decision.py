"""The semantic decision's frontier: calls avoided against wrong answers served, per contender.

Natural traffic: intent-labelled user queries (``../shared/data``: banking77, and clinc150 read
with ``csv.QUOTE_NONE``, all 5,500 rows), each once in random order (3 seeds), and a stream that
repeats the set in a second order (traffic that keeps coming).  A stand-in model answers each
query with its intent's answer and the query's *slots* (its numbers), and a served answer is
wrong when the intent differs, or the same intent with other numbers ("set an alarm for 7" /
"… for 8") or one question holding a word the other holds the opposite of (an antonym).
Look-alikes: the public pair sets (pawsx_en, pawsx_zh, semantoneg) and the probe sets of
``benchmarks/probes``, each pair in a scope of its own (an LLM key per pair) but in the pool
the natural stream warmed: q1 stored, q2 asked.

Answers worded differently (``stackfaq``): each of its 1,249 paraphrased queries once, in random
order; at each miss the stand-in model answers with one of the entry's real answers (seeded),
and a served answer is right when it is one of its entry's answers.  ``stackfaq wrapped``: the
same, each answer wrapped in rotating boilerplate ("Sure! Here's what you can do: … Hope this
helps!"), right when what is inside the wrapper is one of its entry's answers.

Contenders, each a real ``Cache`` on the embedded defaults: the rules alone (the calibrated
threshold, ``Semantic(agreement=False)``: the decision before answer groups), the default
decision (the rules, then the neighbours' agreement), a plain cosine threshold (no rules) swept
0.88-0.98, and the learned decision (``Learn(error_bound=δ)``) at δ = 0.5 %, 1 %, 2 %.  Each
stream is also cut in thirds: what each decision avoids as the cache fills.

    python benchmarks/decision.py [--quick] [--sets banking77,clinc150,stackfaq] [--seeds 3]

Writes benchmarks/results/decision.{md,json,png}.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tricache import Cache, Exact, Learn, Semantic
from tricache.semantic.guards.lexicon import ANTONYMS_EN
from tricache.tools.evaluate import read_pairs

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PROBES = Path(__file__).resolve().parent / "probes"
OUT = Path(__file__).resolve().parent / "results"
STREAMS = {
    "banking77": "banking77/banking77_test.tsv",
    "clinc150": "clinc150/clinc150_test.tsv",
    "stackfaq": "stackfaq/stackfaq_kb.jsonl",  # answers worded differently (``FaqQuery``)
}
OPENINGS = ["Sure! Here's what you can do:\n\n", "Great question. ", "Happy to help with that. ",
            "Here is how it works: ", "Good news: this is possible. ", ""]  # fmt: skip
CLOSINGS = ["\n\nHope this helps!", " Let me know if you have any other questions.",
            " Good luck!", " I hope that answers your question.", ""]  # fmt: skip
PAIRS = {
    "pawsx_en": "pawsx_en/pawsx_en_dev.tsv",
    "pawsx_zh": "pawsx_zh/pawsx_zh_test.tsv",
    "semantoneg": "semantoneg/semantoneg_5k.tsv",
}
PROBE_SETS = ["lookalikes_evidence", "form_variants", "form_redteam", "reworded_pairs"] + [
    f"heldout{n}_issue23" if n > 1 else "heldout_issue23" for n in range(1, 12)
]
PLAIN = [0.98, 0.96, 0.94, 0.92, 0.90, 0.88]
RULES, DEFAULT = "rules only (before)", "default (rules + agreement)"
WARMED = (RULES, DEFAULT, "learned δ=1.0%")  # look-alikes after a stream
COLD = (RULES, DEFAULT)
PAIRED = ("banking77", "clinc150")  # the streams whose warmed pools the look-alikes are asked in
SEMANTONEG_SAMPLE = 2000  # of its 5,000 pairs, label-balanced as the file is
BOUNDS = [0.005, 0.01, 0.02]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_WORDS = re.compile(r"[a-z']+")


@dataclass(frozen=True)
class Query:
    text: str
    intent: str

    def reply(self, rng: random.Random) -> str:
        return self.answer

    def right(self, served: str, asked_before: str) -> bool:
        return served == self.answer and not opposed(self.text, asked_before)

    @property
    def answer(self) -> str:
        """The stand-in model's answer: the intent's, with the query's numbers; an
        out-of-scope query gets one of its own."""
        if self.intent == "oos":
            return f"[{self.text}] is outside what this assistant covers."
        numbers = sorted(_NUMBER.findall(self.text))
        return f"The answer for {self.intent.replace('_', ' ')}." + (
            f" ({', '.join(numbers)})" if numbers else ""
        )


def opposed(a: str, b: str) -> bool:
    """One question holds a word and the other its opposite ("turn the lights on" / "… off"):
    the same intent, another answer."""
    words_a, words_b = set(_WORDS.findall(a.lower())), set(_WORDS.findall(b.lower()))
    return any(
        (x in words_a and y in words_b and y not in words_a and x not in words_b)
        or (y in words_a and x in words_b and x not in words_a and y not in words_b)
        for x, y in ANTONYMS_EN
    )


@dataclass(frozen=True)
class FaqQuery:
    """A paraphrased query of a stackfaq entry: its model answers with one of the entry's real
    answers, wrapped in rotating boilerplate when ``wrapped``."""

    text: str
    answers: tuple[str, ...]
    wrapped: bool = False

    def reply(self, rng: random.Random) -> str:
        answer = rng.choice(self.answers)
        if self.wrapped:
            answer = rng.choice(OPENINGS) + answer + rng.choice(CLOSINGS)
        return answer

    def right(self, served: str, asked_before: str) -> bool:
        return _unwrapped(served) in self.answers


def _unwrapped(text: str) -> str:
    for opening in OPENINGS:
        if opening and text.startswith(opening):
            text = text[len(opening) :]
            break
    for closing in CLOSINGS:
        if closing and text.endswith(closing):
            return text[: -len(closing)]
    return text


def read_stream(name: str) -> list[Query] | list[FaqQuery]:
    if name.startswith("stackfaq"):
        with (DATA / STREAMS["stackfaq"]).open(encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
        return [FaqQuery(q, tuple(e["answers"]), wrapped=name.endswith("wrapped"))
                for e in entries for q in e["paraphrased_queries"]]  # fmt: skip
    with (DATA / STREAMS[name]).open(encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [Query(r["text"], r["intent"]) for r in rows]


def contenders() -> dict[str, Callable[[Path], Cache]]:
    def make(semantic: Semantic) -> Callable[[Path], Cache]:
        def build(home: Path) -> Cache:
            return Cache(path=home / "l2.sqlite3", warm=True, faq=False,
                         exact=Exact(bloom=False), semantic=semantic)  # fmt: skip

        return build

    found = {
        RULES: make(Semantic(audit=False, agreement=False)),
        DEFAULT: make(Semantic(audit=False)),
    }
    for t in PLAIN:
        found[f"plain @{t:.2f}"] = make(Semantic(audit=False, threshold=t, guards=(),
                                                 agreement=False))  # fmt: skip
    for d in BOUNDS:
        found[f"learned δ={d:.1%}"] = make(Semantic(audit=False, learn=Learn(error_bound=d)))
    return found


def run_stream(cache: Cache, stream: list[Query] | list[FaqQuery], seed: int = 0) -> dict[str, Any]:
    """Calls avoided and wrong answers served, over the stream and over each third of it."""
    learning = cache.semantic.learning if cache.semantic is not None else None
    rng = random.Random(seed)
    served: list[tuple[bool, bool]] = []  # (a hit, a wrong one) per query
    for query in stream:
        request = cache.request(query.text)
        hit = cache.lookup(request)
        if hit is not None:
            asked_before = hit.matched_question or query.text  # (an exact hit: the same)
            served.append((True, not query.right(hit.text, asked_before)))
        else:
            served.append((False, False))
            cache.update(request, query.reply(rng))
            if learning is not None:
                learning.drain()  # labels in before the next query: reproducible
    n = max(len(stream), 1)
    third = max(len(served) // 3, 1)
    parts = [served[k * third : (k + 1) * third] for k in range(3)]
    return {
        "requests": len(stream),
        "avoided": sum(h for h, _ in served) / n,
        "wrong": sum(w for _, w in served) / n,
        "thirds": [sum(h for h, _ in p) / max(len(p), 1) for p in parts],
        "thirds_wrong": [sum(w for _, w in p) / max(len(p), 1) for p in parts],
    }


def run_pairs(cache: Cache, pairs: list[tuple[str, str, int]]) -> dict[str, float]:
    """q1 stored, q2 asked, each pair in a scope of its own (an LLM key) in the warmed pool."""
    served = {0: 0, 1: 0}
    count = {0: 0, 1: 0}
    for i, (q1, q2, label) in enumerate(pairs):
        key = f"pair-{i}"
        first = cache.request(q1, llm_key=key)
        if cache.lookup(first) is None:
            cache.update(first, f"answer {i}")
        hit = cache.lookup(cache.request(q2, llm_key=key))
        count[label] += 1
        served[label] += hit is not None and hit.text == f"answer {i}"
    return {
        "false_hits": served[0] / max(count[0], 1),
        "recall": served[1] / max(count[1], 1),
        "negatives": count[0],
        "positives": count[1],
    }


def read_pair_set(name: str) -> list[tuple[str, str, int]]:
    if name in PAIRS:
        with (DATA / PAIRS[name]).open(encoding="utf-8", newline="") as f:
            rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            return [(r["text1"], r["text2"], int(r["label"])) for r in rows]
    return [(p.q1, p.q2, p.label) for p in read_pairs(PROBES / f"{name}.tsv")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="banking77,clinc150,stackfaq,stackfaq_wrapped")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="800 queries, 1 seed, 300 pairs")
    parser.add_argument("--only", default="", help="contenders whose name holds one of these"
                        " (comma-separated)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {"streams": {}, "pairs": {}}
    wanted = args.only.split(",")
    who_all = {k: v for k, v in contenders().items() if any(w in k for w in wanted)}
    for name in args.sets.split(","):
        queries = read_stream(name)
        seeds = args.seeds
        if args.quick:
            queries, seeds = random.Random(7).sample(queries, min(800, len(queries))), 1
        orders = []
        for seed in range(seeds):
            order = list(queries)
            random.Random(seed).shuffle(order)
            orders.append((f"{name} random (seed {seed})", order))
        again = list(queries)
        random.Random(100).shuffle(again)
        orders.append((f"{name} twice", orders[0][1] + again))
        for label, stream in orders:
            results["streams"][label] = {}
            for who, build in who_all.items():
                with tempfile.TemporaryDirectory(prefix="tricache-decision-") as tmp:
                    cache = build(Path(tmp))
                    if cache.semantic is not None and cache.semantic.learning is not None:
                        cache.semantic.learning.rng = random.Random(len(results["streams"]))
                    row = run_stream(cache, stream, seed=len(label))
                    if label.endswith("(seed 0)") and who in WARMED and name in PAIRED:
                        # the look-alike sets, in the pool this stream warmed
                        results["pairs"].setdefault(f"after {name}", {})[who] = {
                            pair_set: run_pairs(cache, _sample(pair_set, args.quick))
                            for pair_set in (*PAIRS, *PROBE_SETS)
                        }
                    cache.close()
                results["streams"][label][who] = row
                print(f"{label:26} {who:22} avoided {row['avoided']:6.1%}  wrong "
                      f"{row['wrong']:6.2%}", flush=True)  # fmt: skip
    for who in [w for w in who_all if w in COLD]:  # a cold cache (learned: the same rules)
        with tempfile.TemporaryDirectory(prefix="tricache-decision-") as tmp:
            cache = who_all[who](Path(tmp))
            results["pairs"].setdefault("cold", {})[who] = {
                pair_set: run_pairs(cache, _sample(pair_set, args.quick))
                for pair_set in (*PAIRS, *PROBE_SETS)
            }
            cache.close()
    command = "python benchmarks/decision.py " + " ".join(sys.argv[1:])
    write(results, args.out, command.strip(), time.perf_counter() - started, args.quick)


def _sample(name: str, quick: bool) -> list[tuple[str, str, int]]:
    pairs = read_pair_set(name)
    size = 300 if quick else SEMANTONEG_SAMPLE if name == "semantoneg" else len(pairs)
    return random.Random(3).sample(pairs, min(size, len(pairs)))


def write(results: dict[str, Any], out: Path, command: str, took: float, quick: bool) -> None:
    streams, pairs = results["streams"], results["pairs"]
    names = list(next(iter(streams.values())))
    lines = ["# The semantic decision's frontier", "", f"Command: `{command}` ({took:.0f} s)", ""]
    lines += ["## Natural traffic", "",
              "Each cell: LLM calls avoided / wrong answers served, as shares of the stream"
              " (wrong: another intent, or the same intent with other numbers or an antonym).",
              "", "| stream | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]  # fmt: skip
    for label, row in streams.items():
        cells = [f"{r['avoided']:.1%} / {r['wrong']:.2%}" for r in row.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## As the cache fills", "",
              "Calls avoided / wrong answers in each third of the stream (seeds averaged).", "",
              "| set | decision | first third | second third | last third |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name in sorted({label.split()[0] for label in streams}):
        seeded = _seeded(streams, name)
        for who in names:
            cells = [
                f"{sum(r[who]['thirds'][k] for r in seeded) / len(seeded):.1%} / "
                f"{sum(r[who]['thirds_wrong'][k] for r in seeded) / len(seeded):.2%}"
                for k in range(3)
            ]
            lines.append(f"| {name} | {who} | " + " | ".join(cells) + " |")
    lines += ["", "## Against the plain threshold, at matched wrong rates", "",
              "The plain threshold's curve (seeds averaged), read at each decision's wrong rate:"
              " what a threshold alone avoids at the same share of wrong answers.", "",
              "| set | decision | avoided / wrong | plain threshold at that wrong rate |",
              "|---|---|---|---|"]  # fmt: skip
    for name in sorted({label.split()[0] for label in streams}):
        seeded = _seeded(streams, name)
        curve = _mean_curve(seeded, [w for w in names if w.startswith("plain")])
        for who in [w for w in names if not w.startswith("plain")]:
            avoided = sum(r[who]["avoided"] for r in seeded) / len(seeded)
            wrong = sum(r[who]["wrong"] for r in seeded) / len(seeded)
            lines.append(f"| {name} | {who} | {avoided:.1%} / {wrong:.2%} |"
                         f" {_read_at(curve, wrong):.1%} |")  # fmt: skip
    if RULES in names and DEFAULT in names:
        lines += ["", "## The default decision, in short", "",
                  "Calls avoided / wrong answers (seeds averaged); the plain threshold read at the"
                  " default's wrong rate.", "",
                  f"| set | {RULES} | {DEFAULT} | plain threshold |",
                  "|---|---|---|---|"]  # fmt: skip
        for name in sorted({label.split()[0] for label in streams}):
            seeded = _seeded(streams, name)
            curve = _mean_curve(seeded, [w for w in names if w.startswith("plain")])
            cells = []
            for who in (RULES, DEFAULT):
                avoided = sum(r[who]["avoided"] for r in seeded) / len(seeded)
                wrong = sum(r[who]["wrong"] for r in seeded) / len(seeded)
                cells.append(f"{avoided:.1%} / {wrong:.2%}")
            lines.append(f"| {name} | {cells[0]} | {cells[1]} | {_read_at(curve, wrong):.1%} |")
    lines += ["", "## Look-alikes", "",
              "False hits (label 0 served) / recall (label 1 served), each pair in a scope of its"
              " own in the pool: cold, and after the natural stream warmed it.", ""]  # fmt: skip
    for when, by_who in pairs.items():
        sets = list(next(iter(by_who.values())))
        lines += [f"### {when}", "", "| decision | " + " | ".join(sets) + " |",
                  "|---|" + "---|" * len(sets)]  # fmt: skip
        for who, row in by_who.items():
            cells = [f"{r['false_hits']:.1%} / {r['recall']:.0%}" for r in row.values()]
            lines.append(f"| {who} | " + " | ".join(cells) + " |")
        lines.append("")
    text = "\n".join(lines) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    stem = "decision_quick" if quick else "decision"
    (out / f"{stem}.md").write_text(text, encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    _plot(streams, names, out / f"{stem}.png")


def _seeded(streams: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The rows of ``name``'s seeded random orders."""
    return [r for label, r in streams.items() if label.startswith(name + " ") and "seed" in label]


def _mean_curve(rows: list[dict[str, Any]], plain: list[str]) -> list[tuple[float, float]]:
    """The plain thresholds' frontier: (wrong, avoided) of each, averaged over the rows, by
    wrong rate, keeping at each wrong rate the threshold that avoids the most there."""
    n = len(rows)
    points = [
        (sum(r[w]["wrong"] for r in rows) / n, sum(r[w]["avoided"] for r in rows) / n)
        for w in plain
    ]
    frontier: list[tuple[float, float]] = []  # the most avoided at each wrong rate or less
    for wrong, avoided in sorted(points):
        if frontier and wrong == frontier[-1][0]:
            frontier[-1] = (wrong, max(avoided, frontier[-1][1]))
        elif not frontier or avoided > frontier[-1][1]:
            frontier.append((wrong, avoided))
    return frontier


def _read_at(curve: list[tuple[float, float]], wrong: float) -> float:
    """The curve's calls avoided at ``wrong`` (linear between its points; its ends beyond)."""
    if not curve:
        return float("nan")
    if wrong <= curve[0][0]:
        return curve[0][1] * (wrong / curve[0][0] if curve[0][0] else 1.0)
    for (w0, a0), (w1, a1) in itertools.pairwise(curve):
        if w0 <= wrong <= w1:
            return a0 + (a1 - a0) * ((wrong - w0) / (w1 - w0) if w1 > w0 else 0.0)
    return curve[-1][1]


def _plot(streams: dict[str, Any], names: list[str], path: Path) -> None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return
    sets = sorted({label.split()[0] for label in streams})
    figure = Figure(figsize=(6 * len(sets), 4.5))
    axes = figure.subplots(1, len(sets), squeeze=False)[0]
    for ax, name in zip(axes, sets, strict=True):
        seeded = _seeded(streams, name)
        plain = [w for w in names if w.startswith("plain")]
        curve = _mean_curve(seeded, plain)
        ax.plot([w * 100 for w, _ in curve], [a * 100 for _, a in curve], "o-", color="grey",
                label="plain threshold 0.98 → 0.88")  # fmt: skip
        for who in [w for w in names if not w.startswith("plain")]:
            xs = [r[who]["wrong"] * 100 for r in seeded]
            ys = [r[who]["avoided"] * 100 for r in seeded]
            ax.scatter(xs, ys, label=who, s=30)
        ax.set_title(f"{name}: calls avoided against wrong answers (3 seeds)")
        ax.set_xlabel("wrong answers served, % of requests")
        ax.set_ylabel("LLM calls avoided, %")
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
