"""The ``tricache`` command, through typer's runner and as an installed console script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from tricache import Cache
from tricache.cli import app

from conftest import REDIS_URL

runner = CliRunner()


def test_demo_saves_calls_and_serves_no_wrong_answer(tmp_path: Path) -> None:
    chart = tmp_path / "demo.png"
    result = runner.invoke(
        app, ["demo", "--requests", "120", "--llm-latency", "0", "--chart", str(chart)]
    )
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "through LangChain" in output
    assert "wrong answers served: 0" in output
    assert chart.read_bytes()[:4] == b"\x89PNG"
    calls, total = output.split("LLM calls: ")[1].split(" (")[0].split(" of ")
    assert int(total) == 120 and 0 < int(calls) < 40
    assert "L2" in result.output


def test_demo_on_redis(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["demo", "-r", "80", "--llm-latency", "0", "--redis-url", REDIS_URL, "--seed", "3",
         "--chart", str(tmp_path / "c.png")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "L2: redis" in output and "wrong answers served: 0" in output
    assert "look-alike" in output and "paraphrase" in output


def test_invalidate_bump_evict_and_clear(tmp_path: Path) -> None:
    path = tmp_path / "cli.sqlite3"
    with Cache(path=path, namespace="cli") as cache:
        cache.update(cache.request("tagged", tags=["docs"]), "a")
        cache.update(cache.request("plain"), "b")
    common = ["--path", str(path), "--namespace", "cli"]
    result = runner.invoke(app, ["invalidate", "docs", *common])
    assert result.exit_code == 0 and "version 1" in result.output
    result = runner.invoke(app, ["evict", *common])
    assert json.loads(result.output) == {"scanned": 2, "stale": 1, "corrupt": 0}
    result = runner.invoke(app, ["bump-kb", *common])
    assert "version is now 1" in result.output
    assert json.loads(runner.invoke(app, ["evict", *common]).output)["stale"] == 1
    assert runner.invoke(app, ["clear", *common]).exit_code == 0
    with Cache(path=path, namespace="cli") as cache:
        assert list(cache.exact.store.keys("cli")) == []  # type: ignore[union-attr]


def test_console_script_is_installed(tmp_path: Path) -> None:
    env = {**os.environ, "TRICACHE_HOME": str(tmp_path / "home")}
    out = subprocess.run(["tricache", "info"], capture_output=True, text=True, env=env, check=True)
    assert str(tmp_path / "home") in out.stdout.replace("\n", "")


PAIRS = """q1\tq2\tlabel\tkind
How do I reset my password?\tHow can I reset my password?\t1\tparaphrase
How do I enable dark mode?\tHow do I disable dark mode?\t0\tantonym
Is it safe to mix bleach and vinegar?\tIs it not safe to mix bleach and vinegar?\t0\tnegation
怎么开通发票服务？\t发票服务怎么开通？\t1\tparaphrase
A套餐比B套餐好吗？\tB套餐比A套餐好吗？\t0\torder
"""


def test_eval_pairs_scores_the_whole_decision(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(PAIRS, encoding="utf-8")
    result = runner.invoke(app, ["eval-pairs", str(pairs), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["pairs"] == 5
    assert report["false_hit_rate"] == 0.0 and report["recall"] == 1.0
    assert report["by_kind"]["negation"]["false_hit_rate"] == 0.0
    assert set(report["by_lang"]) == {"en", "zh"}
    # the peers' rule, for comparison: a plain threshold serves the look-alikes
    plain = runner.invoke(app, ["eval-pairs", str(pairs), "--json", "--no-guards",
                                "--threshold", "0.8"])  # fmt: skip
    assert json.loads(plain.output)["false_hit_rate"] > 0.5


def test_calibrate_prints_a_table_and_writes_a_plot(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(PAIRS, encoding="utf-8")
    plot = tmp_path / "curve.png"
    result = runner.invoke(
        app, ["calibrate", str(pairs), "--target-precision", "0.9", "--plot", str(plot)]
    )
    assert result.exit_code == 0, result.output
    assert "chosen threshold" in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_pairs_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nx\ty\n", encoding="utf-8")
    result = runner.invoke(app, ["eval-pairs", str(bad)])
    assert result.exit_code == 2
    assert "need columns" in result.output
