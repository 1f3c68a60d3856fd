"""What the order rule's role checks (``structure._roles_swapped``, ``_places_swapped``,
``_possessor_asked``) cost and catch on the labelled pair sets: how many pairs they fire on,
and how many of those no other rule refuses (the pairs whose outcome they change),
same-meaning and different apart.

    python benchmarks/role_swaps.py   # → benchmarks/results/role_swaps.md (about 2 min)
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tricache.semantic.guards.checks import _analyses, verdicts
from tricache.semantic.guards.rules import structure
from tricache.tools.evaluate import read_pairs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "role_swaps.md"
SETS = {
    "lcqmc": "lcqmc/lcqmc_test_5k.tsv",
    "afqmc": "afqmc/afqmc_dev.tsv",
    "bq_corpus": "bq_corpus/bq_dev_5k.tsv",
    "oppo_xiaobu": "oppo_xiaobu/oppo_xiaobu_dev_5k.tsv",
    "pawsx_zh": "pawsx_zh/pawsx_zh_test.tsv",
    "qqp": "qqp/qqp_quora_5k.tsv",
    "pawsx_en": "pawsx_en/pawsx_en_dev.tsv",
    "gptcache_qqp_positives": "gptcache_qqp_positives/gptcache_similar_qqp_5k.tsv",
    "mrpc": "mrpc/mrpc_test.tsv",
    "stsb_en": "stsb_en/stsb_en_test.tsv",
}


def fires(q1: str, q2: str) -> bool:
    a, b = _analyses(q1, q2)
    swapped = structure._roles_swapped(a, b) or structure._roles_swapped(b, a)
    swapped = swapped or structure._places_swapped(a, b)
    return swapped or (a.zh and b.zh and structure._possessor_asked(a, b))


@contextlib.contextmanager
def without_role_checks() -> Iterator[None]:
    names = ("_roles_swapped", "_places_swapped", "_possessor_asked")
    saved = [getattr(structure, name) for name in names]
    for name in names:
        setattr(structure, name, lambda a, b: False)
    try:
        yield
    finally:
        for name, check in zip(names, saved, strict=True):
            setattr(structure, name, check)


def main() -> None:
    started = time.perf_counter()
    lines = ["| set | same pairs | fired | changed | different pairs | fired | changed |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    examples = []
    for name, rel in SETS.items():
        total, fired, changed = Counter[int](), Counter[int](), Counter[int]()
        for pair in read_pairs(DATA / rel):
            total[pair.label] += 1
            if not fires(pair.q1, pair.q2):
                continue
            fired[pair.label] += 1
            with without_role_checks():
                refused_anyway = bool(verdicts(pair.q1, pair.q2))
            if not refused_anyway:
                changed[pair.label] += 1
                examples.append(f"- {name}, label {pair.label}: {pair.q1} / {pair.q2}")
        lines.append(f"| {name} | {total[1]} | {fired[1]} | {changed[1]} | {total[0]} | "
                     f"{fired[0]} | {changed[0]} |")  # fmt: skip
    took = time.perf_counter() - started
    OUT.write_text(
        "# The order rule's role checks on the labelled pair sets\n\n"
        f"Command: `python benchmarks/role_swaps.py` ({took:.0f} s). *Fired*: the role checks "
        "refuse the pair; *changed*: no other rule refuses it (the outcome they change).\n\n"
        + "\n".join(lines)
        + "\n\nThe pairs whose outcome they change:\n\n"
        + ("\n".join(examples) or "- none")
        + "\n",
        encoding="utf-8",
    )
    print(OUT.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
