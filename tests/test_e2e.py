"""The end-to-end benchmark's quick mode, as CI runs it: the targets that are about behaviour
(no wrong answer on follow-ups or time-dependent questions, at most 0.5 % wrong overall, more
LLM calls avoided than an exact-match cache) hold on its stream, learning from it or not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_end_to_end_run(tmp_path: Path) -> None:
    if not (SHARED_DATA / "qqp").exists():
        pytest.skip(f"labelled pairs not found under {SHARED_DATA}")
    subprocess.run(
        [sys.executable, "benchmarks/e2e.py", "--quick", "--no-peers", "--out", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True, timeout=540,
    )  # fmt: skip
    report = json.loads((tmp_path / "e2e_quick.json").read_text())
    rows = {r["contender"]: r for r in report["results"]}
    assert (tmp_path / "e2e_quick.png").stat().st_size > 0
    for name in (
        "TriCache (embedded)",
        "TriCache (Redis L2)",
        "TriCache (embedded, learning δ=1%)",
    ):
        tri = rows[name]
        assert tri["wrong_follow_ups"] == 0
        assert tri["wrong_by_kind"].get("time-dependent", 0) == 0
        assert tri["wrong"] <= 0.005
        assert tri["calls_avoided"] > rows["LangChain InMemoryCache"]["calls_avoided"]
    assert rows["no cache"]["calls_avoided"] == 0
