"""What the cache holds, listed, shown and deleted (issue #33): through the core API, the
framework objects and the CLI, on SQLite and Redis."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from tricache import Cache
from tricache.tools.cli import app

from conftest import CacheFactory
from procs import admin_verbs, langchain_app

spawn = multiprocessing.get_context("spawn")
STORED = "How do I reset my password on the website?"
PARAPHRASE = "How can I reset my password on the website?"
WRONG = {"correct": False}


def _fill(cache: Cache) -> None:
    for question, answer, tags in [
        ("How do I reset my password?", "Settings > Security.", ["account"]),
        ("How do I delete my account?", "Settings > Account > Delete.", ["account"]),
        ("What is the refund window?", "30 days.", []),
    ]:
        request = cache.request(question, tags=tags)
        cache.lookup(request)
        assert cache.update(request, answer, tokens=40, model="m")


def test_entries_are_listed_filtered_shown_and_deleted(make_cache: CacheFactory) -> None:
    writer, reader = make_cache(), make_cache()  # two processes of one app
    _fill(writer)
    listed = reader.entries()
    assert sorted(e.question for e in listed) == [
        "How do I delete my account?", "How do I reset my password?", "What is the refund window?"
    ]  # fmt: skip
    assert {e.question for e in reader.entries(tag="account")} == {
        "How do I reset my password?", "How do I delete my account?"
    }  # fmt: skip
    [refund] = reader.entries(prefix="what is")
    assert refund.answer == "30 days." and refund.tokens == 40 and refund.computed_at > 0
    assert len(reader.entries(limit=1)) == 1
    assert reader.entry(refund.id) == refund
    reader.delete(refund.id)
    assert reader.entry(refund.id) is None
    assert reader.lookup(reader.request("What is the refund window?")) is None
    fresh = make_cache()  # another process reads the store (one holding it in its L1 keeps it
    assert fresh.lookup(fresh.request("What is the refund window?")) is None  # up to 60 s)
    with pytest.raises(ValueError):
        reader.delete("tricache:another-namespace:x:" + "0" * 40)


def test_a_deleted_entry_is_not_served_to_a_paraphrase(tmp_path: Any) -> None:
    with Cache(path=tmp_path / "c.sqlite3", faq=False) as cache:
        request = cache.request("How do I reset my password on the website?")
        cache.lookup(request)
        cache.update(request, "Use 'Forgot password'.")
        paraphrase = cache.request("How can I reset my password on the website?")
        hit = cache.lookup(paraphrase)
        assert hit is not None and hit.tier == "semantic"
        cache.delete(cache.entries()[0].id)
        assert cache.lookup(paraphrase) is None


def test_entries_cli(tmp_path: Any) -> None:
    db = str(tmp_path / "c.sqlite3")
    with Cache(path=db, semantic=False, faq=False) as cache:
        _fill(cache)
    runner = CliRunner()
    result = runner.invoke(app, ["entries", "list", "--path", db, "--json", "--tag", "account"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 2 and all(r["tags"] == ["account"] for r in rows)
    short = rows[0]["id"].rsplit(":", 1)[-1][:12]
    shown = runner.invoke(app, ["entries", "show", short, "--path", db])
    assert shown.exit_code == 0 and json.loads(shown.output)["id"] == rows[0]["id"]
    gone = runner.invoke(app, ["entries", "delete", rows[0]["id"], "--path", db])
    assert gone.exit_code == 0, gone.output
    left = runner.invoke(app, ["entries", "list", "--path", db, "--json"])
    assert len(left.output.splitlines()) == 2
    assert runner.invoke(app, ["entries", "show", "ffffffffffff", "--path", db]).exit_code != 0
    table = runner.invoke(app, ["entries", "list", "--path", db])
    assert table.exit_code == 0 and table.output.startswith("2 entries")


# issue #38, item 1: the admin entry points in a process that has looked nothing up ----------
def test_the_admin_verbs_work_in_a_process_that_looked_nothing_up(options: dict[str, Any]) -> None:
    """Each ``Cache`` admin verb, on a new ``Cache`` in a process of its own (the first one,
    ``entry``, raised 'versions not verified with the store' there), and what it did is seen
    by the app that served the answers, and by another new cache."""
    served = Cache(**options)
    for question, tags in [
        ("What is the refund window?", ["billing"]),
        (STORED, []),
        ("How do I delete my account?", []),
        ("How do I export data?", []),
    ]:
        request = served.request(question, tags=tags)
        served.lookup(request)
        assert served.update(request, f"answer: {question}")
    served.add_faq(
        [("What are your opening hours?", "9 to 5."), ("Where is the office?", "Berlin.")]
    )
    ids = {e.question: e.id for e in served.entries()}
    semantic = served.lookup(served.request(PARAPHRASE))
    exact = served.lookup(served.request("How do I delete my account?"))
    faq = served.lookup(served.request("What are your opening hours?"))
    assert semantic is not None and semantic.tier == "semantic"
    assert exact is not None and faq is not None and faq.tier == "faq"
    office = next(i for i, e in served.faq_entries() if e.question == "Where is the office?")
    verbs = [("entry", (ids["What is the refund window?"],)), ("entry", (semantic.entry_id,)),
             ("feedback", (semantic.entry_id, WRONG)), ("feedback", (exact.entry_id, WRONG)),
             ("feedback", (faq.entry_id, WRONG)), ("delete", (ids["How do I export data?"],)),
             ("entries", ()), ("invalidate", ("billing",)), ("evict", ()),
             ("faq_entries", ()), ("delete_faq", ([office],))]  # fmt: skip
    results = spawn.Queue()
    child = spawn.Process(target=admin_verbs, args=(options, verbs, results))
    child.start()
    report = results.get(timeout=240)
    child.join(30)
    assert [r for r in report if r[1] == "error"] == []
    assert [r[2] for r in report[:2]] == ["What is the refund window?", STORED]
    assert dict((r[0], r[2]) for r in report[6:]) == {
        "entries": 2, "invalidate": 1, "evict": {"scanned": 2, "stale": 1, "corrupt": 0},
        "faq_entries": 2, "delete_faq": 1}  # fmt: skip
    after = Cache(**options)
    for question in ("What is the refund window?", "How do I delete my account?",
                     "How do I export data?", "Where is the office?"):  # fmt: skip
        assert after.lookup(after.request(question)) is None, question
    hit = after.lookup(after.request("What are your opening hours?"))  # rejected for it
    assert hit is None or hit.tier != "faq"
    assert after.lookup(after.request(PARAPHRASE)) is None
    deadline = time.monotonic() + 10  # the app: its replica reads the store's log
    while (hit := served.lookup(served.request(PARAPHRASE))) is not None:
        assert time.monotonic() < deadline, f"still served: {hit.tier}"
        time.sleep(0.1)
    # the invalidation reaches the app's process at its next poll (refresh_s, 0.5 s; a loaded
    # machine may delay its upkeep thread a little)
    billing = served.request("What is the refund window?", tags=["billing"])
    deadline = time.monotonic() + 3
    while (hit := served.lookup(billing)) is not None:
        assert time.monotonic() < deadline, "the invalidated answer is still served"
        time.sleep(0.05)
    after.close()
    served.close()


def _cli(options: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """The ``tricache`` command on ``options``'s store and namespace, in its own process."""
    where = ["--redis-url", options["redis_url"]] if "redis_url" in options else [
        "--path", options["path"]]  # fmt: skip
    return subprocess.run(["tricache", *args, *where, "--namespace", options["namespace"]],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.timeout(300)
def test_entries_show_and_delete_from_the_command_take_a_served_answer_out(
    options: dict[str, Any],
) -> None:
    """The app (LangChain, real store) serves an answer and a paraphrase of its question;
    `tricache entries show` with the full id `list --json` prints, and with the hit's
    `entry_id`, works in a process of its own; `entries delete` takes the match out of the
    app and out of a new process of it."""
    caches = {"main": options}
    app_in, app_out = spawn.Queue(), spawn.Queue()
    running = spawn.Process(target=langchain_app, args=(caches, app_in, app_out))
    running.start()
    try:
        assert app_out.get(timeout=120) == "ready"
        app_in.put(("main", "default", STORED))
        assert app_out.get(timeout=60)["tier"] == "model"
        app_in.put(("main", "default", PARAPHRASE))
        hit = app_out.get(timeout=60)
        assert hit["tier"] == "semantic"
        listed = _cli(options, "entries", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = [json.loads(line) for line in listed.stdout.splitlines()]
        assert row["question"] == STORED and hit["entry_id"] == f"s:{row['id']}"
        for given in (row["id"], hit["entry_id"]):
            shown = _cli(options, "entries", "show", given)
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["id"] == row["id"]
        deleted = _cli(options, "entries", "delete", row["id"])
        assert deleted.returncode == 0, deleted.stderr
        gone = {row["id"], hit["entry_id"]}
        deadline = time.monotonic() + 10  # the app: its replica reads the store's log
        while True:
            app_in.put(("main", "default", PARAPHRASE))
            if app_out.get(timeout=60)["entry_id"] not in gone:
                break
            assert time.monotonic() < deadline, "the deleted answer is still served"
            time.sleep(0.1)
    finally:
        app_in.put(None)
        running.join(60)
    fresh_in, fresh_out = spawn.Queue(), spawn.Queue()
    fresh = spawn.Process(target=langchain_app, args=(caches, fresh_in, fresh_out))
    fresh.start()
    try:
        assert fresh_out.get(timeout=120) == "ready"
        for question in (STORED, PARAPHRASE):
            fresh_in.put(("main", "default", question))
            assert fresh_out.get(timeout=60)["entry_id"] not in gone, question
    finally:
        fresh_in.put(None)
        fresh.join(60)
