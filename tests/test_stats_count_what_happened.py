"""Stats that count what really happened (issue #40, items 5-10): a short script's lookups
reach the store without ``close()`` (and on SIGTERM); one request is counted once whichever
layers it passes; what reached the model is counted, coalesced waits apart; what the cache
declined shows in ``tricache stats``; ``--watch`` outlives a store that stops answering; a
hostile counter name cannot break ``tricache metrics``; the demo says where its figures are;
LangChain's ``TriCache`` shows in a notebook.  Commands run as a user runs them: the
``tricache`` command in a fresh process."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tricache import Answer, Cache, Faq
from tricache.stores.base import STATS_BUCKET_S

from conftest import REDIS_URL, RedisServer


def tricache(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tricache", *args], capture_output=True, text=True, timeout=timeout)


def stats_json(*args: str) -> dict[str, Any]:
    out = tricache("stats", "--json", *args)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.splitlines()[-1]))


SCRIPT = """
from tricache import Cache

cache = Cache({options})  # a README quickstart: close() is never called
for i in range(5):
    cache.lookup(cache.request(f"question number {{i}}"))
print("done", flush=True)
"""


# item 5 ------------------------------------------------------------------------------------------
def test_a_script_that_never_closes_shows_its_lookups_in_stats() -> None:
    script = SCRIPT.format(options="semantic=False, faq=False")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    figures = stats_json()  # the default store, as the script's Cache() used it
    assert figures["lookups"] == 5 and figures["llm_calls"] == 5


def test_a_script_stopped_by_sigterm_shows_its_lookups_in_stats(namespace: str) -> None:
    options = f"semantic=False, faq=False, redis_url={REDIS_URL!r}, namespace={namespace!r}"
    script = SCRIPT.format(options=options) + "import time\ntime.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == -signal.SIGTERM  # it still dies of the signal
    finally:
        child.kill()
    figures = stats_json("--redis-url", REDIS_URL, "--namespace", namespace)
    assert figures["lookups"] == 5


# item 7 ------------------------------------------------------------------------------------------
def test_coalesced_waits_are_not_model_calls(tmp_path: Path) -> None:
    real_calls: list[str] = []
    lock = threading.Lock()
    with Cache(path=tmp_path / "c.sqlite3", semantic=False, faq=False) as cache:
        coalescer = cache.coalescer()
        gate = threading.Barrier(30)

        def call(i: int) -> None:
            question = f"What is the capital of country {i % 3}?"

            def ask() -> str:
                with lock:
                    real_calls.append(question)
                time.sleep(0.5)
                return f"capital {i % 3}"

            gate.wait()
            cache.answer(cache.request(question), ask, Answer, lambda hit: hit.text,
                         coalescer=coalescer)  # fmt: skip

        threads = [threading.Thread(target=call, args=(i,)) for i in range(30)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(real_calls) == 3
        figures = cache.shared_stats(600)
    assert figures["lookups"] == 30
    assert figures["llm_calls"] == 3
    assert figures["coalesced"] + sum(figures["hits"].values()) == 27
    assert figures["llm_calls_avoided"] == 0.9


# item 6 ------------------------------------------------------------------------------------------
def test_the_readme_llamaindex_pattern_counts_one_request_once(tmp_path: Path) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from test_llama_index import ScriptedLLM

    from llama_index_tricache import CachedQueryEngine, TriCacheLLM

    model = ScriptedLLM(answers=["An answer."])
    with Cache(path=tmp_path / "li.sqlite3", semantic=False, faq=False) as cache:
        llm = TriCacheLLM(model, cache=cache)
        docs = [
            Document(text="Passwords are reset from Settings, Security, Forgot password."),
            Document(text="Refunds are paid to the original card within 14 days."),
        ]
        index = VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))
        engine = index.as_query_engine(llm=llm)
        cached = CachedQueryEngine(engine, cache, index=index)
        questions = [f"Question {i}: how do I do thing {i}?" for i in range(4)]
        for question in questions * 2:
            cached.query(question)
        figures = cache.shared_stats(600)
    assert len(model.calls) == 4
    assert figures["lookups"] == 8
    assert figures["llm_calls"] == 4
    assert figures["hits"]["exact"] == 4 and figures["hit_rate_total"] == 0.5


# item 8 ------------------------------------------------------------------------------------------
def test_stats_shows_what_the_cache_declined(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"
    with Cache(path=path, faq=Faq(), warm=True) as cache:
        cache.add_faq([("How do I reset my password?", "Settings > Security > Forgot.")])
        for _ in range(2):
            request = cache.request("What time does the store open on Saturday?")
            cache.answer(request, lambda: "At 9.", Answer, lambda hit: hit.text)
        request = cache.request("How do I reset my password?", system="You are ChefBot.")
        cache.answer(request, lambda: "Ask a chef.", Answer, lambda hit: hit.text)
    out = tricache("stats", "--path", str(path))
    assert out.returncode == 0, out.stderr
    text = " ".join(re.sub("[│┃]", " ", out.stdout).split())  # the table's cells, read out
    assert "skipped: time-dependent 2" in text
    assert "FAQ not asked (context) 1" in text
    figures = stats_json("--path", str(path))
    assert figures["skipped"] == {"time_dependent": 2, "faq_context": 1}


def test_the_readme_says_on_its_first_screen_what_is_declined_and_where_to_see_it() -> None:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    first_screen = " ".join(readme.read_text(encoding="utf-8").splitlines()[:12])
    assert "time-dependent" in first_screen and "FAQ not asked (context)" in first_screen
    assert "tricache stats" in first_screen


# item 9 ------------------------------------------------------------------------------------------
def test_stats_refuses_a_negative_window() -> None:
    out = tricache("stats", "--window", "-5m")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--window -5m" in out.stderr, out.stderr


@pytest.mark.parametrize(
    "name", ["exact.latency_ms", 'x".y', "tier\nname.ev}ent", "{a}.b c", "onlytier", "é.ü"]
)
def test_metrics_survives_a_hostile_counter_name(
    name: str, namespace: str, redis_client: redis.Redis
) -> None:
    with Cache(redis_url=REDIS_URL, namespace=namespace, semantic=False, faq=False) as cache:
        cache.lookup(cache.request("a question"))
        assert cache.store is not None
        bucket = int(time.time()) // STATS_BUCKET_S
        cache.store.add_stats(namespace, bucket, {name: 3})  # type: ignore[attr-defined]
    out = tricache("metrics", "--once", "--redis-url", REDIS_URL, "--namespace", namespace)
    assert out.returncode == 0, out.stderr
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(out.stdout))  # valid exposition
    assert any(f.name == "tricache_lookups" for f in families)
    assert 'tricache_events_total{event="lookups",tier="requests"} 1.0' in out.stdout


def test_stats_watch_keeps_watching_a_store_that_stops_answering(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    watcher = subprocess.Popen(
        ["tricache", "stats", "--watch", "--json", "--interval", "1", "--redis-url", server.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert watcher.stdout is not None
        assert "lookups" in watcher.stdout.readline()
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)  # paused
        time.sleep(4)
        server.process.send_signal(signal.SIGCONT)
        time.sleep(1.5)
        server.stop()  # killed
        time.sleep(3)
        assert watcher.poll() is None, watcher.communicate()  # still watching
    finally:
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
        server.stop()
    assert "store unreachable" in err, err
    assert "Traceback" not in err
    assert watcher.returncode == 0


def test_the_demo_says_where_its_figures_are(tmp_path: Path) -> None:
    out = tricache("demo", "--requests", "10", "--llm-latency", "0", timeout=300)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "tricache stats" in text and "--namespace demo-7" in text
    kept = tmp_path / "demo.sqlite3"
    out = tricache("demo", "--requests", "10", "--llm-latency", "0", "--path", str(kept),
                   timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert f"tricache stats --path {kept} --namespace demo-7" in text
    said = re.search(r"LLM calls: (\d+) of 10", text)
    assert said is not None
    figures = stats_json("--path", str(kept), "--namespace", "demo-7")
    assert figures["lookups"] == 10  # (each worker adds its own counters, once)
    assert figures["llm_calls"] == int(said.group(1))


# item 10 -----------------------------------------------------------------------------------------
def test_langchain_tricache_shows_in_a_notebook(tmp_path: Path) -> None:
    from langchain_tricache import TriCache

    llm_cache = TriCache(path=tmp_path / "n.sqlite3", semantic=False, faq=False)
    try:
        llm_cache.update("What is a VPN?", "fake-llm", [])  # nothing to store: a no-op
        llm_cache.lookup("What is a VPN?", "fake-llm")
        table = llm_cache._repr_html_()  # type: ignore[attr-defined]
        assert table == llm_cache.tricache._repr_html_()
        assert "<td>lookups</td><td>1</td>" in table
    finally:
        llm_cache.tricache.close()
