"""The ``tricache`` command, through typer's runner and as an installed console script."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tricache import Cache
from tricache.tools.cli import app

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
    # the FAQ answers the demo app's curated questions (under its own system prompt)
    served = re.findall(r"│ faq\s+│\s+(\d+) │\s+(\d+) │\s+[\d.]+ ms", result.output)
    assert served and int(served[0][0]) > 0 and served[0][1] == "0", result.output


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
    chosen = re.search(r"chosen threshold: (\d\.\d\d)", result.output)
    assert chosen is not None
    assert re.search(rf"^\W*{chosen.group(1)}0 ", result.output, re.M), "the chosen row is shown"


def test_bad_pairs_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nx\ty\n", encoding="utf-8")
    result = runner.invoke(app, ["eval-pairs", str(bad)])
    assert result.exit_code == 2
    assert "need columns" in result.output


def _one_line_error(result: Any) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricache: error: "), result.output


BAD_FILES = {
    "nolabel.tsv": "q1\tq2\tlabel\na\tb\n",
    "badlabel.tsv": "q1\tq2\tlabel\na\tb\tyes\n",
    "quote.csv": 'q1,q2,label\n"a,b,1\n',
    "header.tsv": "q1\tq2\tlabel\n",
    "ok.tsv": "q1\tq2\tlabel\na\tb\t1\n",
    "array.json": '[{"question": "q", "answer": "a"}]\n',
    "bare.jsonl": '"hello"\n',
    "broken.jsonl": '{"question": \n',
    "empty.jsonl": "",
    "good.jsonl": '{"question": "q", "answer": "a"}\n',
    "notsqlite.sqlite3": "not a database\n",
}


@pytest.mark.parametrize(
    "args",
    [
        ["eval-pairs", "{d}/nolabel.tsv"],
        ["eval-pairs", "{d}/badlabel.tsv"],
        ["eval-pairs", "{d}/quote.csv"],
        ["eval-pairs", "{d}/ok.tsv", "--threshold", "7"],
        ["eval-pairs", "{d}/ok.tsv", "--limit", "0"],
        ["eval-pairs", "{d}/ok.tsv", "--embedder", "nosuch-model"],
        ["eval-pairs", "{d}/missing.tsv"],
        ["calibrate", "{d}/header.tsv"],
        ["calibrate", "{d}/ok.tsv", "--limit", "0"],
        ["calibrate", "{d}/ok.tsv", "--plot", "{d}/notsqlite.sqlite3/x.png"],
        ["calibrate", "{d}/ok.tsv", "--embedder", "nosuch-model"],
        ["demo", "--llm-latency", "-1"],
        ["demo", "--chart", "{d}"],
        ["demo", "--chart", "{d}/notsqlite.sqlite3/chart.png"],
        ["faq", "import", "{d}/array.json", "--path", "{d}/s.sqlite3"],
        ["faq", "import", "{d}/bare.jsonl", "--path", "{d}/s.sqlite3"],
        ["faq", "import", "{d}/broken.jsonl", "--path", "{d}/s.sqlite3"],
        ["faq", "import", "{d}/empty.jsonl", "--path", "{d}/s.sqlite3"],
        ["faq", "import", "{d}/good.jsonl", "--path", "{d}"],
        ["faq", "import", "{d}/good.jsonl", "--path", "{d}/notsqlite.sqlite3"],
        ["audit", "--path", "{d}/notsqlite.sqlite3"],
        ["audit", "--path", "{d}/none.sqlite3"],
        ["invalidate", "docs", "--path", "{d}"],
        ["invalidate", "docs", "--path", "{d}/notsqlite.sqlite3"],
        ["evict", "--path", "{d}"],
        ["evict", "--path", "{d}/notsqlite.sqlite3"],
        ["clear", "--path", "{d}/notsqlite.sqlite3"],
        ["bump-kb", "--path", "{d}/notsqlite.sqlite3"],
        ["evict", "--redis-url", "notaurl"],
        ["evict", "--redis-url", "redis://127.0.0.1:1"],
        ["evict", "--redis-url", "redis://nosuchhost.invalid:6379"],
        ["evict", "--redis-url", "redis://127.0.0.1:6379/99"],
        ["metrics", "--once", "--redis-url", "redis://127.0.0.1:1"],
        ["demo", "--requests", "5"],
    ],
    ids=lambda args: " ".join(args).replace("{d}/", ""),
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    for name, text in BAD_FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    result = runner.invoke(app, [a.replace("{d}", str(tmp_path)) for a in args])
    _one_line_error(result)
    assert not (tmp_path / "s.sqlite3").exists()  # nothing was written


def test_metrics_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(
            app, ["metrics", "--port", str(port), "--path", str(tmp_path / "m.sqlite3")]
        )
    _one_line_error(result)
    assert f"--port {port}" in result.output


def test_empty_faq_import_keeps_the_kb_version(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite3"
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    _one_line_error(
        runner.invoke(app, ["faq", "import", str(tmp_path / "empty.jsonl"), "--path", str(path)])
    )
    result = runner.invoke(app, ["bump-kb", "--path", str(path)])
    assert "version is now 1" in result.output  # the failed import bumped nothing


def test_unexpected_errors_keep_their_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise TypeError("a bug")

    monkeypatch.setattr("tricache.tools.cli.data_dir", broken)
    result = runner.invoke(app, ["info"])
    assert isinstance(result.exception, TypeError)


def test_evict_and_clear_skip_the_models(tmp_path: Path) -> None:
    path = tmp_path / "fast.sqlite3"
    with Cache(path=path, namespace="fast") as cache:
        cache.update(cache.request("one"), "a")
        cache.update(cache.request("two"), "b")
        assert cache.semantic is not None
    common = ["--path", str(path), "--namespace", "fast"]
    started = time.perf_counter()
    assert json.loads(runner.invoke(app, ["evict", *common]).output)["scanned"] == 2
    assert runner.invoke(app, ["clear", *common]).exit_code == 0
    assert time.perf_counter() - started < 3
    with Cache(path=path, namespace="fast") as cache:
        assert list(cache.exact.store.keys("fast")) == []  # type: ignore[union-attr]
        tier = cache.semantic
        assert tier is not None and tier.index.count() == 0
