"""The FAQ fallback: import, FTS5 (trigram, CJK), embeddings, guards, and its place in the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tricache import Cache
from tricache.faq.store import FaqEntry, FaqStore, read_entries
from tricache.semantic.embed import get_embedder
from tricache.semantic.guards.checks import DEFAULT_GUARDS
from tricache.tools.cli import app

ENTRIES = [
    FaqEntry("How do I delete my Facebook account?", "Settings > Account > Delete.",
             ("How can I remove my Facebook account?",)),
    FaqEntry("How do I reset my password?", "Use the Forgot password link on the sign-in page."),
    FaqEntry("怎么开通发票服务？", "在账户设置的发票页面开通。", ("发票服务怎么开通",)),
    FaqEntry("退款多久到账？", "原路退回，一般三个工作日内到账。"),
]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> FaqStore:
    faq = FaqStore(tmp_path / "faq.sqlite3", embedder=get_embedder("use-m"))
    assert faq.add(ENTRIES) == 4
    return faq


def test_answers_paraphrases_in_english_and_chinese(store: FaqStore) -> None:
    match = store.answer("How can I delete my Facebook account?")
    assert match is not None and match.answer.startswith("Settings")
    assert store.answer("如何开通发票服务") is not None
    assert store.answer("退款一般多久到账") is not None


def test_refuses_look_alikes_and_out_of_scope_questions(store: FaqStore) -> None:
    assert store.answer("How do I delete my Google account?") is None  # entity
    assert store.answer("How do I not reset my password?") is None  # negation
    assert store.answer("怎么关闭发票服务？") is None  # antonym
    assert store.answer("What is the capital of France?") is None  # nothing close
    assert store.answer("") is None


def test_runs_every_guard_of_the_semantic_tier(tmp_path: Path) -> None:
    faq = FaqStore(tmp_path / "faq.sqlite3", embedder=get_embedder("use-m"), threshold=0.5)
    faq.add([
        FaqEntry("How do I delete my account?", "Settings > Account > Delete."),
        FaqEntry("What payment methods do you accept?", "Visa and Mastercard."),
    ])  # fmt: skip
    for look_alike in (
        "How do I delete my comment?",  # substitution
        "How do I deactivate my account?",  # substitution
        "How do I delete my account temporarily?",  # added content
        "What payment methods do you refuse?",  # substitution
    ):
        assert faq.answer(look_alike) is None, look_alike
    assert faq.guards == DEFAULT_GUARDS


def test_compares_the_canonical_question(store: FaqStore) -> None:
    match = store.answer("Hi! Quick question: how do I reset my password? Thanks so much")
    assert match is not None and match.question == "How do I reset my password?"
    assert store.answer("那个，请问退款多久到账？谢谢哈") is not None
    assert store.answer("Hi! Quick question: how do I not reset my password?") is None


def test_fts5_trigram_finds_chinese_text_without_an_embedder(tmp_path: Path) -> None:
    faq = FaqStore(tmp_path / "plain.sqlite3")
    faq.add(ENTRIES)
    candidates = faq.search("发票服务怎么开通")
    assert candidates and candidates[0].question == "怎么开通发票服务？"
    # without an embedder only an exact form is confident
    assert faq.answer("发票服务怎么开通") is not None
    assert faq.answer("发票服务怎样开通呢") is None
    assert faq.search('"; DROP TABLE faq; --') == []  # FTS syntax in a query is just text


def test_import_csv_and_jsonl(tmp_path: Path) -> None:
    csv_file = tmp_path / "faq.csv"
    csv_file.write_text(
        "question,answer,paraphrases,tags\nHow do I export data?,Use Export.,Export my data|"
        "Download my data,data\n",
        encoding="utf-8",
    )
    jsonl = tmp_path / "faq.jsonl"
    jsonl.write_text(
        json.dumps(
            {"question": "怎么退款", "answer": "在订单页申请。", "lang": "zh"}, ensure_ascii=False
        )
        + "\n",
        encoding="utf-8",
    )
    entries = read_entries(csv_file) + read_entries(jsonl)
    assert entries[0].paraphrases == ("Export my data", "Download my data")
    assert entries[0].tags == ("data",) and entries[1].lang == "zh"
    bad = tmp_path / "bad.csv"
    bad.write_text("q,a\nx,y\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no header row"):
        read_entries(bad)


def test_faq_answers_after_the_cache_tiers_and_an_import_keeps_cached_answers(
    tmp_path: Path,
) -> None:
    faq_file = tmp_path / "faq.csv"
    faq_file.write_text(
        "question,answer\nHow do I reset my password?,Use the Forgot password link.\n",
        encoding="utf-8",
    )
    with Cache(path=tmp_path / "c.sqlite3") as cache:
        assert cache.faq is None  # off until something is imported
        old = cache.request("What is the refund policy?")
        cache.update(old, "30 days (old handbook)")
        assert cache.import_faq(faq_file) == 1
        kept = cache.lookup(old)  # the FAQ is versioned on its own (issue #33: an import of 3
        assert kept is not None and kept.text == "30 days (old handbook)"  # made 0 calls 6)
        cache.bump_kb_version()  # the explicit verb retires them
        assert cache.lookup(old) is None
        hit = cache.lookup(cache.request("How do I reset my password?"))
        assert hit is not None and hit.tier == "faq" and hit.text == "Use the Forgot password link."
        follow_up = cache.request("How do I reset my password?", history=[("user", "hi")])
        assert cache.lookup(follow_up) is None  # curated answers fit first questions only
        stats = cache.stats()
        assert stats["faq"]["hits"] == 1
        assert stats["exact"].get("hits_l1", 0) + stats["exact"].get("hits_l2", 0) == 1


def test_faq_cli_import_and_search(tmp_path: Path) -> None:
    runner = CliRunner()
    faq_file = tmp_path / "faq.csv"
    faq_file.write_text("question,answer\n怎么开通发票服务？,在发票页面开通。\n", encoding="utf-8")
    db = str(tmp_path / "cli.sqlite3")
    result = runner.invoke(app, ["faq", "import", str(faq_file), "--path", db])
    assert result.exit_code == 0 and "imported 1" in result.output
    result = runner.invoke(app, ["faq", "search", "发票服务怎么开通", "--path", db])
    assert result.exit_code == 0 and "answers with entry 1" in " ".join(result.output.split())


def test_add_faq_takes_entries_dicts_and_tuples_and_names_a_bad_one(tmp_path: Path) -> None:
    from tricache import FaqEntry

    with Cache(path=tmp_path / "c.sqlite3", semantic=False) as cache:
        added = cache.add_faq([
            FaqEntry("How do I reset my password?", "Settings > Security."),
            {"question": "What is the refund window?", "answer": "30 days.",
             "paraphrases": ["How long do I have to return an item?"]},
            ("Do you ship abroad?", "Yes, to 40 countries."),
        ])  # fmt: skip
        assert added == 3
        listed = cache.faq_entries()
        assert [e.question for _, e in listed][1] == "What is the refund window?"
        assert listed[1][1].paraphrases == ("How long do I have to return an item?",)
        with pytest.raises(TypeError, match=r"entries\[1\]"):
            cache.add_faq([("A?", "B."), 42])
        with pytest.raises(TypeError, match="unknown keys"):
            cache.add_faq([{"q": "A?", "a": "B."}])
        with pytest.raises(ValueError, match="empty answer"):
            cache.add_faq([("A question?", "  ")])
        with pytest.raises(TypeError, match="a list of entries"):
            cache.add_faq(FaqEntry("A?", "B."))  # type: ignore[arg-type]
        assert len(cache.faq_entries()) == 3  # nothing added by the bad calls
        first_id = listed[0][0]
        assert cache.delete_faq([first_id, 999_999]) == 1
        assert cache.lookup(cache.request("How do I reset my password?")) is None
        assert len(cache.faq_entries()) == 2


def test_a_csv_without_a_header_row_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "faq.csv"
    bad.write_text("How do I reset my password?,Settings > Security.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no header row"):
        read_entries(bad)


def test_export_writes_what_import_reads(tmp_path: Path) -> None:
    from tricache.faq.store import write_entries

    entries = [FaqEntry("Q1, with a comma?", 'A "quoted" answer.', ("P1", "P2"), ("t",)),
               FaqEntry("问题二？", "答案二。")]  # fmt: skip
    for name in ("faq.csv", "faq.jsonl"):
        assert write_entries(entries, tmp_path / name) == 2
        back = read_entries(tmp_path / name)
        assert [(e.question, e.answer, e.paraphrases, e.tags) for e in back] == [
            (e.question, e.answer, e.paraphrases, e.tags) for e in entries
        ]


def test_faq_cli_lists_deletes_and_exports_by_id(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "c.sqlite3")
    faq_file = tmp_path / "faq.csv"
    faq_file.write_text(
        "question,answer,paraphrases\n"
        "How do I reset my password?,Settings > Security.,Forgot my password|Lost password\n"
        "Do you ship abroad?,Yes.,\n",
        encoding="utf-8",
    )
    assert runner.invoke(app, ["faq", "import", str(faq_file), "--path", db]).exit_code == 0
    listed = runner.invoke(app, ["faq", "list", "--path", db, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert [r["question"] for r in rows] == ["How do I reset my password?", "Do you ship abroad?"]
    assert rows[0]["paraphrases"] == ["Forgot my password", "Lost password"]
    search = runner.invoke(app, ["faq", "search", "Do you ship abroad", "--path", db])
    assert str(rows[1]["id"]) in search.output  # ids shown beside the candidates
    exported = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["faq", "export", str(exported), "--path", db]).exit_code == 0
    assert len(read_entries(exported)) == 2
    gone = runner.invoke(app, ["faq", "delete", str(rows[0]["id"]), "--path", db])
    assert gone.exit_code == 0 and "deleted 1 of 1" in gone.output
    again = runner.invoke(app, ["faq", "list", "--path", db, "--json"])
    assert [json.loads(line)["id"] for line in again.output.splitlines()] == [rows[1]["id"]]
    assert runner.invoke(app, ["faq", "delete", "424242", "--path", db]).exit_code == 1
