"""Recall, false-hit rate and precision per threshold, guards and canonical question on, for one
embedder over the labelled pair sets: how the threshold and the embedder were chosen.

Scores are the cosine of the two questions as the semantic tier embeds them (canonical
question); a pair is served when it clears the threshold and every guard passes.  Faster than
``semantic_quality.py`` (no cache round trip), so it can sweep thresholds and embedders.

    python benchmarks/threshold_sweep.py [--embedder use-m] [--limit 2000] [--sets qqp,lcqmc]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from semantic_quality import SETS

from tricache.semantic.embed import get_embedder
from tricache.semantic.guards.checks import check
from tricache.tools.evaluate import read_pairs, similarities

THRESHOLDS = (0.85, 0.88, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/data")
    parser.add_argument("--embedder", default="use-m")
    parser.add_argument("--limit", type=int, default=None, help="pairs per set (default: all)")
    parser.add_argument("--sets", default="pawsx_en,pawsx_zh,semantoneg,qqp,lcqmc,oppo_xiaobu")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    model = get_embedder(args.embedder)
    header = "| set | pairs | " + " | ".join(f"@{t:.2f} R / FH / P" for t in THRESHOLDS) + " |"
    lines = [header, "|---|---:|" + "---|" * len(THRESHOLDS)]
    for name in args.sets.split(","):
        pairs = read_pairs(args.data / SETS[name], limit=args.limit)
        scores = similarities(pairs, model)
        passed = np.array([check(p.q1, p.q2)[0] is None for p in pairs])
        same = np.array([p.label == 1 for p in pairs])
        cells = []
        for threshold in THRESHOLDS:
            served = passed & (scores >= threshold)
            right, wrong = int((served & same).sum()), int((served & ~same).sum())
            precision = f"{right / (right + wrong):.3f}" if right + wrong else "–"
            cells.append(
                f"{right / max(int(same.sum()), 1):.3f} / {wrong / max(int((~same).sum()), 1):.4f}"
                f" / {precision}"
            )
        lines.append(f"| {name} | {len(pairs)} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    command = "python benchmarks/threshold_sweep.py " + " ".join(sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"threshold_sweep_{args.embedder}.md").write_text(
        f"# Threshold sweep ({args.embedder}, guards and canonical question on)\n\n"
        f"Command: `{command.strip()}`\n\nR = recall, FH = false-hit rate, P = precision of "
        "served answers (cosine of the canonical questions; no cache round trip).\n\n"
        + "\n".join(lines)
        + "\n"
    )


if __name__ == "__main__":
    main()
