"""What the cacheability gate costs and what it prevents, on natural traffic (issue #35).

The gate keeps questions that depend on the time or on the asker ("today", "my card" …) out of
every tier.  On intent-labelled streams (``decision.py``'s: banking77, clinc150, each query once
in random order, seed 0; a served answer is wrong when the intent, the numbers or an antonym
differ) each decision runs twice — with the gate and without it (``Cache(cacheable=)`` saying
yes to everything) — and the gated share of each stream is counted.

    python benchmarks/cacheable_gate.py [--sets banking77,clinc150]

Writes benchmarks/results/cacheable_gate.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decision import OUT, STREAMS, read_stream, run_stream

from tricache import Cache, Exact, Learn, Semantic
from tricache.key.canonical import canonical
from tricache.key.forms import folded
from tricache.semantic.guards.cacheable import is_cacheable

DECISIONS = {
    "static (today)": lambda: Semantic(audit=False),
    "plain @0.94": lambda: Semantic(audit=False, threshold=0.94, guards=(), agreement=False),
    "learned δ=1.0%": lambda: Semantic(audit=False, learn=Learn(error_bound=0.01)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default=",".join(STREAMS))
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    for name in args.sets.split(","):
        stream = read_stream(name)
        random.Random(0).shuffle(stream)
        # (the question's canonical form, as ``Asked.cacheable`` judges it)
        gated = sum(not is_cacheable(canonical(folded(q.text))) for q in stream) / len(stream)
        for who, semantic in DECISIONS.items():
            found = {}
            for gate in ("with the gate", "without"):
                cacheable = None if gate == "with the gate" else (lambda q: True)
                with tempfile.TemporaryDirectory(prefix="tricache-gate-") as tmp:
                    cache = Cache(path=Path(tmp) / "l2.sqlite3", warm=True, faq=False,
                                  exact=Exact(bloom=False), semantic=semantic(),
                                  cacheable=cacheable)  # fmt: skip
                    if cache.semantic is not None and cache.semantic.learning is not None:
                        cache.semantic.learning.rng = random.Random(0)
                    found[gate] = run_stream(cache, stream)
                    cache.close()
                print(name, who, gate, found[gate], flush=True)
            rows.append((name, gated, who, found))
    lines = [
        "# The cacheability gate: what it costs, what it prevents",
        "",
        f"Command: `python benchmarks/cacheable_gate.py --sets {args.sets}` "
        f"({time.perf_counter() - started:.0f} s)",
        "",
        "Each cell: LLM calls avoided / wrong answers served, as shares of the stream (seed 0).",
        "",
        "| stream | gated | decision | with the gate | without it |",
        "|---|---:|---|---|---|",
    ]
    for name, gated, who, found in rows:
        cells = [f"{r['avoided']:.1%} / {r['wrong']:.2%}" for r in found.values()]
        lines.append(f"| {name} | {gated:.1%} | {who} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (OUT / "cacheable_gate.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
