"""What the cache holds, listed, shown and deleted (issue #33): through the core API, the
framework objects and the CLI, on SQLite and Redis."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from tricache import Cache
from tricache.tools.cli import app

from conftest import CacheFactory


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
