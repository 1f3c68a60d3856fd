"""Every rule's verdict on every probe pair is what the golden file says (a fast test: the
pairs are analysed once, ~6 s).  A change to a rule shows as a diff of the golden file,
reviewed with the change: ``python benchmarks/rule_verdicts.py --diff``, then without
``--diff`` to accept it."""

from __future__ import annotations

import sys
from pathlib import Path

from tricache.semantic.guards.checks import HARD_RULES, RULE_IDS, WORD_RULES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import rule_verdicts


def test_every_rule_verdict_on_every_probe_pair_is_the_golden_one() -> None:
    golden = rule_verdicts.GOLDEN.read_text(encoding="utf-8").splitlines()
    now = rule_verdicts.rows()
    changed = [f"- {a}\n+ {b}" for a, b in zip(golden, now, strict=False) if a != b]
    assert len(golden) == len(now) > 5000
    assert not changed, "\n".join(changed[:20]) + "\n(python benchmarks/rule_verdicts.py)"


def test_rule_ids_are_family_dot_rule_and_the_hard_and_word_rules_exist() -> None:
    ids = set(RULE_IDS.values())
    assert len(ids) == len(RULE_IDS)  # one id a rule
    assert all(i.count(".") == 1 and i.replace(".", "").replace("_", "").isalpha() for i in ids)
    assert ids >= HARD_RULES and ids >= WORD_RULES and not HARD_RULES & WORD_RULES
