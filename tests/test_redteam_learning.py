"""A red team's breaks of the learned decisions, each kept as a test that failed before its fix.

- three paraphrases answered alike lowered *one entry's* threshold to the floor, and a question
  about something else (its side effects, not its maximum dose) got that entry's answer;
- an entry's labels were shared by every tenant (the FAQ's ``faq:<id>`` in particular): one
  tenant's traffic served, or refused, another's;
- the SQLite label log was never trimmed (``executemany`` leaves ``lastrowid`` unset);
- one pool's counts were kept for every tenant ever seen;
- a verified FAQ paraphrase named a bare entry id: after the FAQ was imported again in another
  order, it served another entry's answer;
- a request answered by the FAQ after a semantic miss kept its pending label, so an app that
  stores what it returned made a label from the cache's own answer.
"""

from __future__ import annotations

import random
import sqlite3
import tracemalloc
import uuid
from pathlib import Path

import pytest

from tricache import Cache, Faq, Learn, Semantic
from tricache.faq.store import FaqEntry
from tricache.key.asked import ask
from tricache.semantic.learning import (
    Evidence,
    Label,
    encode_lookups,
    entry_threshold,
    pool_of,
)
from tricache.stores.sqlite import SQLiteStore

from conftest import REDIS_URL

DOSE = "What is the maximum dose of ibuprofen for adults?"
DOSE_ANSWER = "The maximum dose for adults is 3200 mg per day."
SIDE_EFFECTS = "What are the side effects of ibuprofen for adults?"  # 0.80 against DOSE


def test_answers_to_a_few_paraphrases_never_lower_one_entrys_threshold(tmp_path: Path) -> None:
    """Without guards (so that only the learned decision stands between them), three questions
    that got an entry's answer at 0.79-0.89 do not make a fourth at 0.80 its paraphrase."""
    learn = Learn(error_bound=0.01, explore=0.05)
    with Cache(path=tmp_path / "c.sqlite3", faq=False,
               semantic=Semantic(audit=False, guards=(), learn=learn)) as cache:  # fmt: skip
        learning = cache.semantic.learning  # type: ignore[union-attr]
        assert learning is not None
        learning.rng = random.Random(0)
        cache.update(cache.request(DOSE), DOSE_ANSWER)
        for asked in (
            "What would be the highest dose of advil for adults?",
            "What is the max dosage of ibuprofen?",
            "What is the dose limit of ibuprofen for grown-ups?",
        ):
            request = cache.request(asked)
            if cache.lookup(request) is None:
                cache.update(request, DOSE_ANSWER)
            learning.drain()
        served = [cache.lookup(cache.request(SIDE_EFFECTS)) for _ in range(20)]
        assert [h.text for h in served if h is not None and h.text == DOSE_ANSWER] == []
    same = [Label("p", "e", 1.0, s, True, 1.0, "a") for s in (0.78, 0.80, 0.81, 0.85)]
    assert entry_threshold(same, 1.0, 0.92) == 0.92  # right labels never lower it
    assert entry_threshold([*same, Label("p", "e", 1.0, 0.95, False, 1.0, "b")], 1.0, 0.92) > 0.95


def test_an_entrys_labels_stay_in_the_tenant_that_made_them() -> None:
    evidence = Evidence()
    evidence.add([Label("tenant-a", "faq:1", 0.0, 0.95, False, 1.0, "x")])
    assert evidence.of_entry("tenant-a", "faq:1") and not evidence.of_entry("tenant-b", "faq:1")


def test_a_faq_explored_in_one_tenant_is_not_refused_in_another(tmp_path: Path) -> None:
    """One tenant's explorations that the LLM answered otherwise raise that entry's bar for
    that tenant only (they took another tenant from served to refused)."""
    with Cache(path=tmp_path / "f.sqlite3", semantic=Semantic(audit=False),
               faq=Faq(learn=Learn(explore=0.5))) as cache:  # fmt: skip
        learning = cache.semantic.learning  # type: ignore[union-attr]
        assert learning is not None
        learning.rng = random.Random(3)
        cache.add_faq([FaqEntry("How much ibuprofen can an adult take?", DOSE_ANSWER)])
        asked = "How much ibuprofen can adults take?"  # 0.98: served
        explored = 0
        for i in range(10):  # tenant a: explorations that the LLM answers otherwise
            request = cache.request(asked, tenant="a", llm_key=f"m{i}")
            if cache.lookup(request) is None:
                explored += 1
                cache.update(request, f"Another answer {i}.")
        learning.drain()
        assert explored
        pools = {t: pool_of("default", t, "en", kind="faq") for t in ("a", "b")}
        assert learning.entry_threshold(pools["a"], "faq:1", 0.0, 0.80) > 0.98
        assert learning.entry_threshold(pools["b"], "faq:1", 0.0, 0.80) == 0.80
        served = [cache.lookup(cache.request(asked, tenant="b", llm_key=f"n{i}")) for i in range(8)]
        assert any(h is not None and h.text == DOSE_ANSWER for h in served)  # bar explorations


def test_the_sqlite_label_log_keeps_only_its_newest_records(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "l.sqlite3", label_log_length=1000)
    try:
        for i in range(50):
            store.add_labels("ns", [encode_lookups(f"pool{i}-{j}", 1, {}) for j in range(100)])
        for _ in range(2000):
            store.add_labels("ns", [encode_lookups("one", 1, {})])
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "l.sqlite3") as db:
        kept = db.execute("SELECT count(*) FROM labels").fetchone()[0]
    assert 1000 <= kept <= 2000  # 7,000 written


def test_the_sqlite_label_log_is_capped_per_namespace_when_two_share_the_file(
    tmp_path: Path,
) -> None:
    """Two namespaces writing to one file: each keeps its newest records (the trim fired on
    the table's global sequence and trimmed only the writer's namespace: 6,000 rows kept
    against a cap of 1,000)."""
    store = SQLiteStore(tmp_path / "l.sqlite3", label_log_length=1000)
    try:
        for i in range(3000):
            for ns in ("a", "b"):
                store.add_labels(ns, [encode_lookups(f"pool{i}", 1, {})])
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "l.sqlite3") as db:
        kept = dict(db.execute("SELECT namespace, count(*) FROM labels GROUP BY namespace"))
    assert set(kept) == {"a", "b"}
    assert all(1000 <= n <= 1100 for n in kept.values()), kept  # 3,000 written to each


def test_many_tenants_keep_memory_bounded() -> None:
    """Lookups of pools without labels leave nothing behind; labelled pools past the bound
    are forgotten, least recently labelled first."""
    evidence = Evidence(pools=100)
    tracemalloc.start()
    try:
        for i in range(3000):
            pool = f"tenant-{i}"
            evidence.looked(pool, 10, {})
            evidence.threshold(pool, 0.01, 0.77, 0.92)
            evidence.add([Label(pool, "e", 1.0, 0.9, True, 1.0, "a")])
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(evidence.pools()) == 100 and evidence.pools()[-1] == "tenant-2999"
    assert evidence.lookups("tenant-0") == (0.0, {})
    assert current < 2 * 1024 * 1024


def test_a_verified_paraphrase_serves_its_answer_only_after_the_faq_is_imported_again(
    tmp_path: Path,
) -> None:
    """The labels live in Redis, the FAQ file is made again with the same entries in another
    order: the question learned for the invoice entry must not get the refund answer."""
    namespace = "redteam-" + uuid.uuid4().hex[:8]
    invoice = FaqEntry("如何开具发票？", "在订单页点击申请发票。")
    refund = FaqEntry("如何申请退款？", "在订单页点击申请退款，7天内到账。")

    def make(path: Path) -> Cache:
        return Cache(namespace=namespace, redis_url=REDIS_URL,
                     semantic=Semantic(audit=False, learn=Learn(explore=0.05)),
                     faq=Faq(path=path, learn=Learn(explore=0.001)))  # fmt: skip

    with make(tmp_path / "faq1.sqlite3") as cache:
        cache.semantic.learning.rng = random.Random(0)  # type: ignore[union-attr]
        cache.add_faq([invoice, refund])
        asked = cache.request("怎么开发票", tenant="shop", llm_key="m1")
        assert cache.lookup(asked) is None
        cache.update(asked, invoice.answer)
        cache.semantic.learning.drain()  # type: ignore[union-attr]
        hit = cache.lookup(cache.request("怎么开发票", tenant="shop", llm_key="m2"))
        assert hit is not None and hit.text == invoice.answer
    with make(tmp_path / "faq2.sqlite3") as cache:
        try:
            cache.add_faq([refund, invoice])
            cache.semantic.learning.drain()  # type: ignore[union-attr]
            hit = cache.lookup(cache.request("怎么开发票", tenant="shop", llm_key="m3"))
            assert hit is None or hit.text == invoice.answer
        finally:
            cache.clear()


def test_a_request_the_faq_answered_after_a_semantic_miss_labels_nothing(tmp_path: Path) -> None:
    """A semantic candidate under the threshold leaves a label waiting for the LLM's answer;
    the FAQ then answers the request (the same question in another form).  An app that stores
    whatever it returned must not turn the FAQ's answer into a label."""
    with Cache(path=tmp_path / "c.sqlite3", semantic=Semantic(audit=False, learn=Learn()),
               faq=Faq(learn=Learn(explore=0.001))) as cache:  # fmt: skip
        learning = cache.semantic.learning  # type: ignore[union-attr]
        assert learning is not None
        learning.rng = random.Random(0)
        cache.add_faq([FaqEntry("What is the max dosage of ibuprofen?", DOSE_ANSWER)])
        cache.update(cache.request(DOSE), DOSE_ANSWER)
        request = cache.request("What is the max dosage of ibuprofen")  # 0.89 against DOSE
        hit = cache.lookup(request)
        assert hit is not None and hit.tier == "faq"
        assert learning.stats()["pending"] == 0
        cache.update(request, hit.text)
        learning.drain()
        assert [p for p in learning.evidence.pools() if learning.evidence.labels(p)] == []


REFUSALS = [
    "I can't help with that.", "Sorry, I'm unable to assist with this request.",
    "I'm not able to answer that.", "Unfortunately, I can't provide that information.",
    "I cannot help with this one.", "As an AI, I can't answer this.",
    "I'm sorry, but I can't help with that request.", "That's not something I can help with.",
    "I won't be able to answer that.", "Apologies, I can't assist here.",
    "I must decline to answer.", "抱歉，我无法回答这个问题。",
]  # fmt: skip
PLACES = [
    "the library", "the gym", "the pool", "the cafeteria", "the bookstore", "the museum",
    "the lab", "the clinic", "the chapel", "the theater", "the garage", "the dorm office",
]  # fmt: skip
ASKS = [
    "Is {s} open 24 hours during {p}?", "What time does {s} close during {p}?",
    "Is {s} open late during {p}?", "When does {s} open during {p}?",
    "Does {s} stay open overnight during {p}?", "Is {s} open on weekends during {p}?",
]  # fmt: skip
PERIODS = ["finals week", "midterms", "the summer", "winter break", "exam season",
           "orientation week", "reading week", "the holidays"]  # fmt: skip


def test_rotating_canned_refusals_teach_nothing(tmp_path: Path) -> None:
    """Twelve refusal phrasings, one per family of questions, returned for 576 different
    questions: agreement between refusals is no evidence that two questions are the same, so
    no label is made and the threshold stays the calibrated one (issue #32: a tenant's went to
    0.78 and a look-alike was served 5 of 5 times; on this traffic, 0.85 and 156 labels)."""
    learn = Learn(error_bound=0.01)
    with Cache(path=tmp_path / "c.sqlite3", faq=False,
               semantic=Semantic(audit=False, learn=learn)) as cache:  # fmt: skip
        tier = cache.semantic
        assert tier is not None and tier.learning is not None
        tier.learning.rng = random.Random(0)
        traffic = [(n, ask.format(s=place, p=period)) for n, place in enumerate(PLACES)
                   for ask in ASKS for period in PERIODS]  # fmt: skip
        random.Random(1).shuffle(traffic)
        for n, asked in traffic:
            request = cache.request(asked)
            if cache.lookup(request) is None:
                cache.update(request, REFUSALS[n])
        tier.learning.drain()
        pool = tier.pool(ask(cache.request("x"), ""))
        assert tier.learning.threshold(pool, tier.threshold) == tier.threshold
        assert not [x for x in tier.learning.evidence.labels(pool) if x.same]
        assert cache.stats()["semantic"]["labels_boilerplate"] >= 100


def test_an_answer_unrelated_questions_hold_alike_is_no_evidence() -> None:
    """A canned answer no word list names ("please see the front desk"), cached by entries of
    unrelated questions: agreement with it makes no positive label.  Paraphrases answered
    alike stay evidence (that is what learning is for)."""
    from tricache.semantic.answers import Families
    from tricache.semantic.embed import get_embedder

    families = Families(get_embedder(None).embed)
    canned = "Please see the front desk for that."
    unrelated = ["Can I bring my dog to the hotel?", "What is the capital of Peru?",
                 "How many moons does Jupiter have?", "How do I bake sourdough bread?"]  # fmt: skip
    verdicts = [families.family("p", f"u{i}", q, canned)[1] for i, q in enumerate(unrelated)]
    assert verdicts == [False, False, False, True]  # two others unrelated to it: generic
    assert families.family("other pool", "u9", unrelated[0], canned)[1] is False  # pools apart
    answer = "Checkout is at 11 am."
    paraphrases = ["What time is checkout?", "When do I have to check out?",
                   "What is the checkout time?", "By what time must I check out?"]  # fmt: skip
    assert not any(families.family("p", f"c{i}", q, answer)[1] for i, q in enumerate(paraphrases))


@pytest.mark.parametrize(
    ("answer", "canned"),
    [
        ("ERROR: upstream timeout", True), ("Sorry, I cannot help.", True),
        ("I'm afraid I can't do that.", True), ("As an AI language model, I cannot", True),
        ("Traceback (most recent call last):", True), ("HTTP 503 Service Unavailable", True),
        ("The request timed out, please try again later.", True), ("", True),
        ("抱歉，我无法回答这个问题。", True), ("错误：请求超时", True),
        ("系统繁忙，请稍后再试", True), ("不好意思，这个我不清楚", True),
        ("Error 404 means the page was not found.", False),
        ("Yes, 24/7 during finals week.", False),
        ("Timeout is a setting in seconds.", False), ("图书馆期末周24小时开放。", False),
        # the blind round of the one request flow: errors, policy blocks, answers of no words
        ("The service is temporarily unavailable (HTTP 503).", True),
        ("upstream connect error or disconnect/reset before headers", True),
        ("This content may violate our usage policies.", True), ("...", True), ("N/A", True),
        ("null", True), ("系统错误", True), ("该内容可能违反相关法律法规，无法显示。", True),
        ("你的问题包含敏感词，请重新输入。", True),
        ("HTTP is the protocol of the web.", False), ("No.", False), ("42", False),
        ("None of the options apply; choose B.", False),
    ],
)  # fmt: skip
def test_boilerplate_answers_are_told_from_answers(answer: str, canned: bool) -> None:
    from tricache.semantic.answers import boilerplate

    assert boilerplate(answer) is canned
