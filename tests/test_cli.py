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


def test_demo_saves_calls_and_serves_no_wrong_answer() -> None:
    result = runner.invoke(app, ["demo", "--requests", "120", "--llm-latency", "0"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "wrong answers served: 0" in output
    calls, total = output.split("LLM calls: ")[1].split(" (")[0].split(" of ")
    assert int(total) == 120 and 0 < int(calls) < 40
    assert "L2" in result.output


def test_demo_on_redis(namespace: str) -> None:
    result = runner.invoke(
        app, ["demo", "-r", "60", "--llm-latency", "0", "--redis-url", REDIS_URL, "--seed", "3"]
    )
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
