"""Look-alikes planted next to answer groups: the blind rounds of issue #39, with the
neighbours' agreement on (the default) and off (``Semantic(agreement=False)``).

Each scenario (``benchmarks/probes/agreement/*.jsonl``, written by helpers who saw neither the
rules nor our probes) stores questions in order through the cache as an app does (a lookup,
the model's answer stored on a miss) — often a group of 3-7 paraphrases answered alike — in a
scope of its own, then asks one question. ``same_as`` names the stored answer that is right
for it, or a list of them (round 3: one answer in other courtesy wrappers; ``null``: none). A
served answer that is not a right one is wrong.

    python benchmarks/agreement_blind.py

Writes benchmarks/results/agreement_blind.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tricache import Cache, Exact, Semantic

HERE = Path(__file__).resolve().parent
SETS = sorted((HERE / "probes" / "agreement").glob("*.jsonl"))
OUT = HERE / "results" / "agreement_blind.md"


def run(rows: list[dict[str, Any]], agreement: bool) -> dict[str, int]:
    """Wrong serves among look-alikes and paraphrases, right serves among paraphrases."""
    counts = dict.fromkeys(("look-alikes", "wrong", "paraphrases", "right", "paraphrase wrong"), 0)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(path=Path(tmp) / "c.sqlite3", warm=True, faq=False,
                      exact=Exact(bloom=False),
                      semantic=Semantic(audit=False, agreement=agreement))  # fmt: skip
        for row in rows:
            key = f"scenario-{row['id']}"
            for question, answer in row["stored"]:
                request = cache.request(question, llm_key=key)
                if cache.lookup(request) is None:
                    cache.update(request, answer)
            hit = cache.lookup(cache.request(row["ask"], llm_key=key))
            same = row.get("same_as")
            right = {row["stored"][k][1] for k in (same if isinstance(same, list) else [same])
                     if k is not None}  # fmt: skip
            served = hit.text if hit is not None else None
            if not right:
                counts["look-alikes"] += 1
                counts["wrong"] += served is not None
            else:
                counts["paraphrases"] += 1
                counts["right"] += served in right
                counts["paraphrase wrong"] += served is not None and served not in right
        cache.close()
    return counts


def main() -> None:
    started = time.perf_counter()
    lines = ["| scenarios | agreement | look-alikes served (wrong) | paraphrases served right |"
             " paraphrases served another's answer |", "|---|---|---|---|---|"]  # fmt: skip
    for path in SETS:
        rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
        for agreement in (True, False):
            c = run(rows, agreement)
            lines.append(f"| {path.stem} ({len(rows)}) | {'on' if agreement else 'off'} |"
                         f" {c['wrong']} / {c['look-alikes']} | {c['right']} / {c['paraphrases']}"
                         f" | {c['paraphrase wrong']} |")  # fmt: skip
            print(lines[-1], flush=True)
    command = "python benchmarks/agreement_blind.py " + " ".join(sys.argv[1:])
    text = "\n".join(["# Look-alikes planted next to answer groups (blind rounds, issue #39)", "",
                      f"Command: `{command.strip()}` ({time.perf_counter() - started:.0f} s)", "",
                      *lines, ""])  # fmt: skip
    OUT.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
