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
    with pytest.raises(ValueError, match="needs a question and an answer"):
        read_entries(bad)


def test_faq_answers_after_the_cache_tiers_and_import_bumps_the_kb(tmp_path: Path) -> None:
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
        assert cache.lookup(old) is None  # the knowledge base changed: cached answers are stale
        hit = cache.lookup(cache.request("How do I reset my password?"))
        assert hit is not None and hit.tier == "faq" and hit.text == "Use the Forgot password link."
        follow_up = cache.request("How do I reset my password?", history=[("user", "hi")])
        assert cache.lookup(follow_up) is None  # curated answers fit first questions only
        stats = cache.stats()
        assert stats["faq"]["hits"] == 1
        assert stats["exact"].get("hits_l1", 0) + stats["exact"].get("hits_l2", 0) == 0


def test_faq_cli_import_and_search(tmp_path: Path) -> None:
    runner = CliRunner()
    faq_file = tmp_path / "faq.csv"
    faq_file.write_text("question,answer\n怎么开通发票服务？,在发票页面开通。\n", encoding="utf-8")
    db = str(tmp_path / "cli.sqlite3")
    result = runner.invoke(app, ["faq", "import", str(faq_file), "--path", db])
    assert result.exit_code == 0 and "imported 1" in result.output
    result = runner.invoke(app, ["faq", "search", "发票服务怎么开通", "--path", db])
    assert result.exit_code == 0 and "answers with entry 1" in " ".join(result.output.split())
