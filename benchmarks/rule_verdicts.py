"""Every rule's verdict on every probe pair, written as a golden file the tests compare with.

    python benchmarks/rule_verdicts.py          # write tests/golden/rule_verdicts.tsv
    python benchmarks/rule_verdicts.py --diff   # say which pairs' verdicts changed

A rule added, weakened or retired shows as a diff of this file: which pairs it now refuses or
lets through, by id (``family.rule``, ``guards/checks.py`` ``RULE_IDS``), reviewed with the
change that made it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tricache.semantic.guards.checks import verdicts
from tricache.tools.evaluate import read_pairs

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "benchmarks" / "probes"
GOLDEN = ROOT / "tests" / "golden" / "rule_verdicts.tsv"


def rows() -> list[str]:
    """``file<TAB>line<TAB>rule ids`` for every pair of every probe file (no ids: none fired)."""
    out = ["file\tline\trules"]
    for path in sorted(PROBES.glob("*.tsv")):
        for n, pair in enumerate(read_pairs(path), start=2):
            out.append(f"{path.name}\t{n}\t{' '.join(verdicts(pair.q1, pair.q2, all_rules=True))}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--diff", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    now = rows()
    if not args.diff:
        GOLDEN.write_text("\n".join(now) + "\n", encoding="utf-8")
        print(f"{GOLDEN}: {len(now) - 1} pairs")
        return 0
    before = GOLDEN.read_text(encoding="utf-8").splitlines()
    changed = [(a, b) for a, b in zip(before, now, strict=False) if a != b]
    for a, b in changed:
        print(f"- {a}\n+ {b}")
    return 1 if changed or len(before) != len(now) else 0


if __name__ == "__main__":
    sys.exit(main())
