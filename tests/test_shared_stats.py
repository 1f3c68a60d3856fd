"""The running app's figures, from every process (issue #33): each process adds its counters
to the shared store; ``shared_stats`` and ``tricache stats`` add them up; ``tricache metrics``
serves them; a notebook shows a cache as a table."""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

from typer.testing import CliRunner

from tricache import Cache
from tricache.tools.cli import app

from conftest import CacheFactory

spawn = multiprocessing.get_context("spawn")


def work(options: dict[str, Any], questions: list[str]) -> None:
    """A worker process: asks each question twice (a miss, stored, then an exact hit)."""
    with Cache(**options, semantic=False, faq=False, prices={"m": 2.0}) as cache:
        for question in questions:
            for _ in range(2):
                request = cache.request(question)
                if cache.lookup(request) is None:
                    cache.update(request, f"answer to {question}", tokens=50, model="m")
    # close() adds the last counters to the store


def test_every_process_adds_up(options: dict[str, Any]) -> None:
    workers = [spawn.Process(target=work, args=(options, [f"q{w}-{i}" for i in range(5)]))
               for w in range(2)]  # fmt: skip
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    with Cache(**options, semantic=False, faq=False) as reader:  # another process's view
        figures = reader.shared_stats(600)
    assert figures["processes"] == "all"
    assert figures["lookups"] == 20 and figures["llm_calls"] == 10
    assert figures["hits"]["exact"] == 10 and figures["hit_rate"]["exact"] == 0.5
    assert figures["tokens_saved"] == 500 and figures["cost_saved_usd"] == 0.001
    cli = ["--namespace", options["namespace"]]
    cli += (
        ["--redis-url", options["redis_url"]]
        if "redis_url" in options
        else ["--path", options["path"]]
    )
    result = CliRunner().invoke(app, ["stats", "--json", "--window", "10m", *cli])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1])["lookups"] == 20
    exposition = CliRunner().invoke(app, ["metrics", "--once", *cli])
    assert exposition.exit_code == 0, exposition.output
    assert 'tricache_hits_total{level="l1",tier="exact"} 10.0' in exposition.output


def test_a_notebook_shows_the_cache_as_a_table(make_cache: CacheFactory) -> None:
    cache = make_cache()
    request = cache.request("What is a VPN?")
    cache.lookup(request)
    cache.update(request, "A private network.", tokens=10)
    cache.lookup(request)
    table = cache._repr_html_()
    assert table.startswith("<table>") and "<td>lookups</td><td>2</td>" in table
    assert "<td>exact hits</td><td>1 (50.0%)</td>" in table
