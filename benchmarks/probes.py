"""The probe pair sets of benchmarks/probes, through the whole semantic decision, per kind.

Each set runs through ``tricache.tools.evaluate.evaluate_pairs`` (what ``tricache eval-pairs``
runs: a real cache on the embedded defaults, q1 stored in a tenant of its own, q2 looked up).
A cell counts the pairs served: same-meaning kinds (label 1) should be served, look-alike
kinds (label 0) never.

    python benchmarks/probes.py

Writes benchmarks/results/probes.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tricache.tools.evaluate import evaluate_pairs, read_pairs

PROBES = Path(__file__).resolve().parent / "probes"
OUT = Path(__file__).resolve().parent / "results"
SETS = {
    "form_variants": "form variants (label 1) and form look-alikes (label 0)",
    "form_redteam": "a red team's form look-alikes, written after the form rules (label 0)",
    "lookalikes_evidence": "look-alikes of the kinds the old rewrite rules served (label 0)",
    "heldout_issue23": "held-out round 1, written blind by a helper, run once, kept since",
    "heldout2_issue23": "held-out round 2, written blind by a helper, run once, kept since",
    "heldout3_issue23": "held-out round 3, written blind by a helper, run once, kept since",
    "heldout4_issue23": "held-out round 4, written blind by a helper, run once, kept since",
    "heldout5_issue23": "held-out round 5, written blind by a helper, run once, kept since",
    "heldout6_issue23": "held-out round 6, written blind by a helper, run once, kept since",
    "heldout7_issue23": "held-out round 7, written blind by a helper, run once, kept since",
    "heldout8_issue23": "held-out round 8, written blind by a helper, run once, kept since",
    "heldout9_issue23": "held-out round 9, written blind by a helper, run once, kept since",
    "heldout10_issue23": "held-out round 10, written blind by a helper, run once, kept since",
    "heldout11_issue23": "held-out round 11 (greetings), written blind; 5 look-alikes still open",
    "reworded_pairs": "rewordings users type and their look-alikes (issue #16)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    lines = ["# Probe pairs, per kind", ""]
    command = " ".join(["python benchmarks/probes.py", *sys.argv[1:]])
    lines += [f"Command: `{command}`", ""]
    lines += ["Each cell: pairs served / pairs. Label 1 should be served, label 0 never.", ""]
    totals = {0: [0, 0], 1: [0, 0]}
    for name, what in SETS.items():
        pairs = read_pairs(PROBES / f"{name}.tsv")
        report = evaluate_pairs(pairs)
        lines += [f"## {name}", "", f"`benchmarks/probes/{name}.tsv`: {what}.", ""]
        lines += ["| kind | label | served |", "|---|---:|---:|"]
        for kind in sorted({p.kind for p in pairs}):
            of_kind = [p for p in pairs if p.kind == kind]
            label = of_kind[0].label
            tally = report.by_kind.get(kind or "all", {})
            rate = tally.get("hit_rate") or 0.0
            served = round(rate * len(of_kind))
            totals[label][0] += served
            totals[label][1] += len(of_kind)
            lines.append(f"| {kind} | {label} | {served} / {len(of_kind)} |")
            print(f"{name:20} {kind:24} {label} {served:4} / {len(of_kind)}", flush=True)
        lines.append("")
    lines += ["## All sets", "", "| label | served |", "|---|---:|"]
    lines += [f"| {label} | {s} / {n} |" for label, (s, n) in sorted(totals.items())]
    lines += ["", f"({time.perf_counter() - started:.0f} s)", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probes.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
