"""The CLI a person can trust (issue #40, items 11-15): it prints stored text as text, never
as terminal markup or control sequences; a read changes no file; deletes say what they did;
``entries(limit=...)`` reads no more than it returns; the small things met in the first hour.
Every command runs as the docs say it is run: the ``tricache`` console script, in a fresh
process."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from tricache import Cache
from tricache.faq.store import FaqEntry, read_entries

from conftest import REDIS_URL

# Rich markup that crashed (``[/]``) or was obeyed (``[link=…]``), raw terminal control (clear
# the screen, a bell) and a bidi override; within the 60 characters ``entries list`` shows
HOSTILE = "[/] \x1b[2J\x07\u202e [link=https://evil.test]x[/link] [bold red]why"


def _tricache(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRICACHE_HOME": str(home), "COLUMNS": "500"}
    env.pop("TRICACHE_DEBUG", None)
    return subprocess.run(["tricache", *args], capture_output=True, text=True, env=env,
                          timeout=180)  # fmt: skip


def _shown_as_text(result: subprocess.CompletedProcess[str], escaped: str = "\\x") -> None:
    """The hostile text was printed, as text: markup literally, controls as escapes (Python's,
    or JSON's: ``escaped="\\u00"``)."""
    assert result.returncode == 0, result.stderr
    both = result.stdout + result.stderr
    for control in ("\x1b", "\x07", "\u202e"):
        assert control not in both, f"{control!r} reached the terminal: {both!r}"
    assert f"{escaped}1b[2J" in result.stdout and f"{escaped}07" in result.stdout, result.stdout
    assert "\\u202e" in result.stdout, result.stdout
    assert "[/]" in result.stdout and "[link=https://evil.test]" in result.stdout
    assert "[bold red]" in result.stdout


# item 11 ----------------------------------------------------------------------------------
def test_entries_list_and_show_print_stored_markup_and_controls_as_text(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    with Cache(path=path, namespace="t", semantic=False, faq=False) as cache:
        assert cache.update(cache.request(HOSTILE, tags=["x"]), HOSTILE)
        [entry] = cache.entries()
    common = ("--path", str(path), "-n", "t")
    _shown_as_text(_tricache(tmp_path, "entries", "list", *common))
    digest = entry.id.rsplit(":", 1)[-1]
    shown = _tricache(tmp_path, "entries", "show", digest[:12], *common)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and json.loads(shown.stdout)["question"] == HOSTILE


def _faq_file(tmp_path: Path) -> Path:
    file = tmp_path / "faq.jsonl"
    rows = [{"question": HOSTILE, "answer": HOSTILE},
            {"question": "How do I reset my password?", "answer": "Settings."}]  # fmt: skip
    file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return file


def test_faq_list_and_search_print_stored_markup_and_controls_as_text(tmp_path: Path) -> None:
    common = ("--path", str(tmp_path / "s.sqlite3"), "-n", "t")
    imported = _tricache(tmp_path, "faq", "import", str(_faq_file(tmp_path)), *common)
    assert imported.returncode == 0, imported.stderr
    _shown_as_text(_tricache(tmp_path, "faq", "list", *common))
    _shown_as_text(_tricache(tmp_path, "faq", "search", "why x link evil test bold red", *common))


def test_audit_prints_stored_markup_as_text(tmp_path: Path) -> None:
    from tricache.semantic.audit import AuditLog

    log = AuditLog(tmp_path / "audit.sqlite3")
    log.record({"query_hash": "h", "hit": 0, "score": 0.5, "question": HOSTILE})
    log.close()
    shown = _tricache(tmp_path, "audit", "--path", str(tmp_path / "audit.sqlite3"))
    _shown_as_text(shown, escaped="\\u00")
    assert json.loads(shown.stdout)["question"] == HOSTILE


def test_an_error_message_sends_no_control_characters(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    Cache(path=path, semantic=False, faq=False).close()
    result = _tricache(tmp_path, "entries", "show", "\x1b[2Jdeadbeefdead", "--path", str(path))
    assert result.returncode == 2 and "\x1b" not in result.stderr, result.stderr
    assert "\\x1b" in result.stderr


# item 12 ----------------------------------------------------------------------------------
READS = (
    ("entries", "list"),
    ("entries", "show", "0123456789ab"),
    ("faq", "list"),
    ("faq", "search", "how do I reset my password"),
    ("stats",),
)


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c[:2]))
def test_a_read_of_a_missing_store_creates_nothing(tmp_path: Path, command: tuple[str]) -> None:
    missing = tmp_path / "nonexistent" / "x.sqlite3"
    result = _tricache(tmp_path / "home", *command, "--path", str(missing))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no store" in lines[0] and str(missing) in lines[0], lines
    assert not (tmp_path / "nonexistent").exists()
    # without --path: the default store under TRICACHE_HOME, which does not exist either
    result = _tricache(tmp_path / "home", *command)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home").exists(), "the data folder was created"


def _files(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Each file's mode and bytes; SQLite's own -wal and -shm left by a reader of a WAL file
    (as any reader leaves them: the next writer takes them over) must have the mode of their
    database and hold no write."""
    files = {p.name: (stat.S_IMODE(p.stat().st_mode), p.read_bytes()) for p in folder.iterdir()}
    for name in [n for n in files if n.endswith(("-wal", "-shm"))]:
        mode, data = files.pop(name)
        assert mode == files[name[:-4]][0], f"{name} has mode {oct(mode)}"
        assert not name.endswith("-wal") or data == b"", f"{name} holds a write"
    return files


def test_reads_change_no_file_of_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o750)
    path = store / "s.sqlite3"
    with Cache(path=path, namespace="t", semantic=False) as cache:
        cache.update(cache.request("How do I reset my password?"), "Settings > Security.")
        cache.add_faq([("How do I delete my account?", "Settings > Account.")])
    for file in store.iterdir():
        file.chmod(0o644)  # looser than tricache makes them: a write would tighten them
    before = _files(store)
    assert {"s.sqlite3", "s-faq.sqlite3"} <= set(before)
    for command in READS:
        result = _tricache(tmp_path, *command, "--path", str(path), "-n", "t")
        assert result.returncode in (0, 2), (command, result.stderr)
        assert "Traceback" not in result.stderr and "readonly" not in result.stderr
        assert _files(store) == before, f"{' '.join(command)} changed the store's files"
    assert stat.S_IMODE(store.stat().st_mode) == 0o750
    listed = _tricache(tmp_path, "entries", "list", "--json", "--path", str(path), "-n", "t")
    assert json.loads(listed.stdout)["question"] == "How do I reset my password?"
    faq = _tricache(tmp_path, "faq", "list", "--json", "--path", str(path), "-n", "t")
    assert json.loads(faq.stdout)["question"] == "How do I delete my account?"


# items 13 and 15 (the plural) -------------------------------------------------------------
def _entry_ids(path: Path, questions: list[str]) -> list[str]:
    with Cache(path=path, namespace="t", semantic=False, faq=False) as cache:
        for question in questions:
            assert cache.update(cache.request(question), f"answer to {question}")
        ids = {e.question: e.id for e in cache.entries()}
    return [ids[q] for q in questions]


def test_entries_delete_needs_long_prefixes_and_reports_each_id(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    first, second, kept = _entry_ids(path, ["q one", "q two", "q three"])
    digest = second.rsplit(":", 1)[-1]
    short = kept.rsplit(":", 1)[-1][:1]
    common = ("--path", str(path), "-n", "t")
    result = _tricache(tmp_path, "entries", "delete", short, first, digest[:8],
                       "feedfacefeedface", *common)  # fmt: skip
    assert result.returncode == 1, result.stderr
    out = " ".join(result.stdout.split())
    assert f"{short}: not deleted: too short" in out, out
    assert f"{first}: deleted" in out and f"{digest[:8]}: deleted" in out, out
    assert "feedfacefeedface: not deleted: not found" in out, out
    assert "deleted 2 entries, 2 not deleted" in out, out
    with Cache(path=path, namespace="t", semantic=False, faq=False) as cache:
        assert [e.id for e in cache.entries()] == [kept]
    result = _tricache(tmp_path, "entries", "delete", kept, *common)
    assert result.returncode == 0 and "deleted 1 entry" in result.stdout
    assert "entries" not in result.stdout.split("deleted 1 entry")[1]


def test_an_ambiguous_prefix_resolves_to_nothing() -> None:
    from tricache.tools.cli import resolve_ids

    ids = ["tricache:t:x:" + "ab12cd34" + "0" * 32, "tricache:t:x:" + "ab12cd34" + "1" * 32]
    assert resolve_ids(["ab12cd34"], ids) == [("ab12cd34", None, "ambiguous: 2 entries")]
    assert resolve_ids(["ab12cd340"], ids) == [("ab12cd340", ids[0], "")]
    assert resolve_ids(["ab12"], ids)[0][1] is None
    assert resolve_ids(["99999999"], ids) == [("99999999", None, "not found")]


# item 14 ----------------------------------------------------------------------------------
def test_entries_limit_zero_returns_nothing(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "s.sqlite3", semantic=False, faq=False) as cache:
        cache.update(cache.request("q"), "a")
        assert cache.entries(limit=0) == []
        assert len(cache.entries(limit=1)) == 1


@pytest.mark.parametrize("where", ["sqlite", "redis"])
def test_entries_limit_one_reads_little_of_a_big_store(tmp_path: Path, where: str) -> None:
    """3,000 entries of 20 KB: listing one holds a small part of them in memory."""
    options = {"redis_url": REDIS_URL} if where == "redis" else {"path": tmp_path / "s.sqlite3"}
    namespace = f"big-{os.getpid()}"
    answer = os.urandom(10_000).hex()  # 20 KB that does not compress
    with Cache(namespace=namespace, semantic=False, faq=False, **options) as cache:  # type: ignore[arg-type]
        try:
            cache.clear()
            for i in range(3000):
                assert cache.update(cache.request(f"question {i}"), f"{i} {answer}")
            tracemalloc.start()
            found = cache.entries(limit=1)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert len(found) == 1
            held = 3000 * 20_000
            assert peak < held / 50, f"entries(limit=1) peaked at {peak:,} bytes of {held:,}"
        finally:
            cache.clear()


# item 15 ----------------------------------------------------------------------------------
@pytest.mark.parametrize("header", ["Question,Answer", "question, answer", " QUESTION ,Answer "])
def test_a_csv_header_in_any_case_and_spacing_is_read(tmp_path: Path, header: str) -> None:
    file = tmp_path / "faq.csv"
    file.write_text(f"{header}\nHow do I reset my password?,Settings.\n", encoding="utf-8")
    assert read_entries(file) == [FaqEntry("How do I reset my password?", "Settings.")]


def test_extra_csv_columns_are_reported(tmp_path: Path) -> None:
    file = tmp_path / "faq.csv"
    file.write_text("question,answer,source,Owner\nHow do I reset?,Settings.,wiki,ann\n",
                    encoding="utf-8")  # fmt: skip
    result = _tricache(tmp_path, "faq", "import", str(file), "--path", str(tmp_path / "s.sqlite3"))
    assert result.returncode == 0, result.stderr
    assert "ignored columns: source, Owner" in " ".join((result.stdout + result.stderr).split())


def test_a_null_tag_never_becomes_the_tag_none(tmp_path: Path) -> None:
    file = tmp_path / "faq.jsonl"
    row = {"question": "How do I reset?", "answer": "Settings.", "tags": ["billing", None],
           "paraphrases": [None]}  # fmt: skip
    file.write_text(json.dumps(row) + "\n")
    [entry] = read_entries(file)
    assert entry.tags == ("billing",) and entry.paraphrases == ()
    with Cache(path=tmp_path / "s.sqlite3", semantic=False) as cache:
        cache.add_faq([{"question": "How do I pay?", "answer": "Card.", "tags": [None]},
                       FaqEntry("How do I leave?", "Settings.", (), ("x", None))])  # type: ignore[arg-type]  # fmt: skip
        tags = {e.question: e.tags for _, e in cache.faq_entries()}
    assert tags == {"How do I pay?": (), "How do I leave?": ("x",)}


def test_a_quick_cache_and_close_logs_no_bloom_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store with entries: the Bloom filter's load runs while the script closes."""
    path = tmp_path / "s.sqlite3"
    with Cache(path=path, semantic=False, faq=False) as cache:
        for i in range(3000):
            cache.update(cache.request(f"question {i}"), "answer")
    caplog.set_level(logging.DEBUG, logger="tricache")
    for _ in range(30):
        cache = Cache(path=path, semantic=False, faq=False)
        cache.lookup(cache.request("not cached"))
        cache.close()
    failed = [r.getMessage() for r in caplog.records if "closed database" in r.getMessage()]
    assert not failed, f"{len(failed)} warnings in 30 runs: {failed[0]}"


def test_entries_show_of_a_stored_entry_writes_nothing(tmp_path: Path) -> None:
    """``entries show`` of an entry that is there reads it: no "last used" write is tried on
    the read-only store (it printed "sqlite store touch failed: attempt to write a readonly
    database")."""
    path = tmp_path / "s.sqlite3"
    [entry_id] = _entry_ids(path, ["How do I reset my password?"])
    before = _files(tmp_path)
    prefix = entry_id.rsplit(":", 1)[-1][:12]
    shown = _tricache(tmp_path, "entries", "show", prefix, "--path", str(path), "-n", "t")
    assert shown.returncode == 0, shown.stderr
    assert "How do I reset my password?" in shown.stdout
    assert "readonly" not in shown.stderr and "failed" not in shown.stderr, shown.stderr
    assert _files(tmp_path) == before
