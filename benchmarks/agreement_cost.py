"""What the neighbours' agreement costs a semantic lookup: the same warmed pool, the same
queries, with ``Semantic(agreement=False)`` and with the default, interleaved query by query
so that both see the same load (and, every other query, the embedding the other one
memoized).

    python benchmarks/agreement_cost.py [--warm 2000] [--timed 1000]

Writes benchmarks/results/agreement_cost.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from decision import read_stream

from tricache import Cache, Exact, Semantic
from tricache.key.asked import ask

OUT = Path(__file__).resolve().parent / "results" / "agreement_cost.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warm", type=int, default=2000)
    parser.add_argument("--timed", type=int, default=1000)
    args = parser.parse_args()
    stream = read_stream("banking77")
    random.Random(0).shuffle(stream)
    warm, timed = stream[: args.warm], stream[args.warm : args.warm + args.timed]
    with tempfile.TemporaryDirectory() as tmp:
        caches = {
            on: Cache(path=Path(tmp) / f"{on}.sqlite3", warm=True, faq=False,
                      exact=Exact(bloom=False), semantic=Semantic(audit=False, agreement=on))
            for on in (False, True)
        }  # fmt: skip
        for query in warm:
            for cache in caches.values():
                request = cache.request(query.text)
                if cache.lookup(request) is None:
                    cache.update(request, query.answer)
        took: dict[bool, list[float]] = {False: [], True: []}
        for i, query in enumerate(timed):  # lookups only: nothing is written while timing
            # each goes first every other query (the second finds the question's embedding
            # memoized)
            for on in (i % 2 == 0, i % 2 == 1):
                cache = caches[on]
                request = cache.request(query.text + " ")  # (past the exact tier's L1)
                start = time.perf_counter()
                cache.semantic.lookup(ask(request, ""), cache.exact.fetch)  # type: ignore[union-attr]
                took[on].append((time.perf_counter() - start) * 1000)
        for cache in caches.values():
            cache.close()
    rows = ["| decision | p50 ms | mean ms | p95 ms |", "|---|---|---|---|"]
    for on, name in ((False, "rules only (agreement=False)"), (True, "default (agreement)")):
        ms = sorted(took[on])
        rows.append(f"| {name} | {statistics.median(ms):.2f} | {statistics.fmean(ms):.2f} |"
                    f" {ms[int(len(ms) * 0.95)]:.2f} |")  # fmt: skip
    extra = statistics.fmean(took[True]) - statistics.fmean(took[False])
    command = "python benchmarks/agreement_cost.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        "# What agreement costs a semantic lookup", "",
        f"Command: `{command.strip()}`. banking77: {len(warm)} queries warm the pool (answers"
        f" stored on misses), then {len(timed)} semantic lookups each, interleaved.", "",
        *rows, "", f"Agreement adds {extra:.3f} ms to the mean semantic lookup.", "",
    ])  # fmt: skip
    print(text)
    OUT.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
