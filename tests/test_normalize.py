"""Normalization and keys: form differences share a key, meaning differences never do."""

from __future__ import annotations

import csv
import itertools

import pytest

from tricache import CacheRequest, Turn
from tricache.key.normalize import normalize
from tricache.key.request import context_fingerprint, exact_key

from conftest import SHARED_DATA


def key(query: str, **kw: object) -> str:
    return exact_key(CacheRequest(query, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "forms",
    [
        [
            "How do I reset my password?",
            "how do I  reset my password",
            "  How do I reset my password??  ",
            "How do I\u200b reset my password?",
        ],
        [
            "HOW DO I RESET MY PASSWORD?",
            "ＨＯＷ ＤＯ Ｉ ＲＥＳＥＴ ＭＹ ＰＡＳＳＷＯＲＤ？",
            "how do i reset my password",
        ],
        ["怎么重置密码？", "怎么重置密码", "怎么 重置 密码。", "怎么重置密码?"],
        ["Ｉ ｌｉｋｅ ｃａｆé", "i like cafe\u0301"],  # full-width and NFD accents
        ["Straße öffnen", "straße öffnen"],  # a capital that starts a sentence; ß kept
        ["What does `ls -R` do?", "what does `ls -R` do"],  # prose around code folds
    ],
)
def test_form_differences_share_a_key(forms: list[str]) -> None:
    assert len({key(f) for f in forms}) == 1
    assert len({normalize(f) for f in forms}) == 1


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("推荐", "不推荐"),
        ("A比B好吗", "B比A好吗"),
        ("order 12345", "order 12346"),
        ("Can I cancel my order?", "Can't I cancel my order?"),
        ("Is it safe?", "Is it not safe?"),
        ("refund within 3 days", "refund within 30 days"),
        ("iPhone 15 price", "iPhone 15 Pro price"),
        ("How do I enable 2FA?", "How do I disable 2FA?"),
        ("怎么注册账号", "怎么注销账号"),
        ("is python faster than java", "is java faster than python"),
        ("3.5", "35"),
        ("-5 degrees", "5 degrees"),
        ("?", "!"),
        ("", " ?"),
        # case, characters and spacing that carry meaning
        ("What does `ls -R` do?", "What does `ls -r` do?"),
        ("What does ls -R do?", "What does ls -r do?"),
        ("match \\W in a regex", "match \\w in a regex"),
        ("Is this Polish?", "Is this polish?"),
        ("Is US a country?", "Is us a country?"),
        ("What is I squared?", "What is i squared?"),
        ("Explain the U.S. Turkey relationship", "Explain the U.S. turkey relationship"),
        ("아버지가 방에 들어가신다", "아버지 가방에 들어가신다"),  # spaces separate Korean words
        ("ここで はきものを ぬぐ", "ここでは きものを ぬぐ"),
        ("Is it safe to run: rm -rf .", "Is it safe to run: rm -rf"),
        ("What does s.replace('  ', ' ') do", "What does s.replace(' ', ' ') do"),
        ('What does echo "a"b print', 'What does echo "a" b print'),
        ("How many fields: a\tb c", "How many fields: a b\tc"),
        ("  if x:\n    pass", "if x:\n    pass"),
        ('Does `"你 好"` contain a space?', 'Does `"你好"` contain a space?'),
        ("What is len('a\u200bb')?", "What is len('ab')?"),
        ("What is ord('\u00a0')?", "What is ord(' ')?"),
        ("What is len('a\x00b')?", "What is len('a b')?"),
        ("Explain:\n    var name: String?", "Explain:\n    var name: String"),
        ("Mr. Smith", "Mr. smith"),
        ("Who wins, Greece vs. Turkey?", "Who wins, Greece vs. turkey?"),
        ("Define: Polish", "Define: polish"),
        ("Translate each word:\nPolish\nTurkey", "Translate each word:\npolish\nturkey"),
        ("Maße", "Masse"),
        ("What is 5!", "What is 5?"),
        ("Continue:", "Continue"),
        ("Continue...", "Continue"),
        ("What is 10³?", "What is 103?"),
        ("decode aGVsbG8gV29ybGQ=", "decode AGVSBG8GV29YBGQ="),
        ("def f():\n    return 1", "def f():\n return 1"),
        ('print("a  b")', 'print("a b")'),
        ("👨\u200d👩\u200d👧", "👨👩👧"),
        ("between 10:00:00 and 10:00:30", "between 11:00:00 and 11:00:30"),
        ("status of job 550e8400-e29b-41d4-a716-446655440000",
         "status of job 650e8400-e29b-41d4-a716-446655440000"),
        # questions about a text's own form: its case, apostrophes and spaces are the question
        ("IS THIS SENTENCE IN CAPITAL LETTERS?", "is this sentence in capital letters?"),
        ("CONVERT THIS SENTENCE TO LOWERCASE", "convert this sentence to lowercase"),
        ("Fix the typo: I dont know", "Fix the typo: I don't know"),
        ("Is im a prefix?", "Is i'm a prefix?"),
        ("How many letters does dont have?", "How many letters does don't have?"),
        ("english or English, which is right?", "English or English, which is right?"),
        ("北京 大学 这个词里有空格吗？", "北京大学 这个词里有空格吗？"),
        ("这句话 有几个空格？", "这句话有几个空格？"),
    ],
)  # fmt: skip
def test_meaning_differences_never_share_a_key(a: str, b: str) -> None:
    assert key(a) != key(b)


def test_nothing_in_the_question_becomes_a_placeholder() -> None:
    assert key("[sent 2026-11-29T10:13:31Z] where is my parcel?") != key(
        "[sent 2026-11-30T08:00:02Z] where is my parcel?"
    )
    assert normalize("ping at 10:13:31.123 UTC") == "ping at 10:13:31.123 UTC"
    assert normalize("ping at 10:13:31.123 UTC", volatile=True) == "ping at <ts>"


def test_context_is_volatile_only_where_the_app_says_so() -> None:
    a = "You are a bot. Now: 2026-11-29 10:13:31. Session 9f86d081884c7d659a2feaa0c55ad015."
    b = "You are a bot. Now: 2026-11-30 11:00:00. Session 1b4f0e9851971998e732078544c96b36."

    def fp(system: str, volatile: bool) -> str:
        return context_fingerprint(CacheRequest("q", system=system), volatile=volatile)

    assert fp(a, False) != fp(b, False)  # by default an id or a time may be the subject
    assert fp(a, True) == fp(b, True)
    assert fp(a, True) != fp("You are a pirate.", True)
    uid = "request 123e4567-e89b-12d3-a456-426614174000"
    assert fp(uid, True) == fp("request 00000000-0000-4000-8000-000000000000", True)
    request = CacheRequest("q", system=a)
    assert exact_key(request, volatile=True) == exact_key(
        CacheRequest("q", system=b), volatile=True
    )


def test_every_part_of_the_request_changes_the_key() -> None:
    base = CacheRequest("what is the refund policy?")
    variants = [
        CacheRequest("what is the refund policy?", tenant="acme"),
        CacheRequest("what is the refund policy?", llm_key="gpt-x|t=0.7"),
        CacheRequest("what is the refund policy?", system="Answer in French."),
        CacheRequest("what is the refund policy?", history=(("user", "I bought a TV"),)),
        CacheRequest("what is the refund policy?", namespace="other"),
        CacheRequest("what is the refund policy?", query_meta='{"name": "Alice"}'),
        CacheRequest(
            "what is the refund policy?", history=(("user", "I bought a TV", '{"name": "Bob"}'),)
        ),
    ]
    keys = {exact_key(base), exact_key(base, cache_version="2"), *map(exact_key, variants)}
    assert len(keys) == 9


def test_the_whole_conversation_is_in_the_key() -> None:
    recent = (Turn("user", "a"), Turn("assistant", "b"), Turn("user", "c"))
    with_old = (Turn("user", "something long ago"), *recent)
    assert key("and then?", history=recent) != key("and then?", history=with_old)
    # roles, tool calls and names of earlier turns count too
    assert key("x", history=[Turn("user", "a")]) != key("x", history=[Turn("assistant", "a")])
    assert key("x", history=[Turn("ai", "", '{"tool_calls": [{"name": "f"}]}')]) != key(
        "x", history=[Turn("ai", "", '{"tool_calls": [{"name": "g"}]}')]
    )
    # a follow-up never shares a key with the same words asked first
    assert key("and then?", history=recent) != key("and then?")


def test_keys_carry_a_readable_prefix_and_never_the_prompt() -> None:
    k = key("my secret question about taxes", namespace="shop", tenant="t1")
    prefix, digest = k.rsplit(":", 1)
    assert prefix == "tricache:shop:x"
    assert len(digest) == 40 and int(digest, 16) >= 0
    assert "secret" not in k and "t1" not in k


def _labelled_pairs(*files: str) -> list[tuple[str, str, str]]:
    rows = []
    for name in files:
        path = SHARED_DATA / name
        if not path.exists():
            pytest.skip(f"shared data not found: {path}")
        with path.open(encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                rows.append((row["text1"], row["text2"], row["label"]))
    return rows


def test_no_labelled_different_pair_shares_a_key() -> None:
    """On public paraphrase sets (English and Chinese), label-0 pairs — different meaning,
    often differing only by word order, a negation or a number — never share a key."""
    pairs = _labelled_pairs(
        "lcqmc/lcqmc_test_5k.tsv",
        "pawsx_en/pawsx_en_dev.tsv",
        "pawsx_zh/pawsx_zh_test.tsv",
        "qqp/qqp_quora_5k.tsv",
        "semantoneg/semantoneg_5k.tsv",
        "afqmc/afqmc_dev.tsv",
        "bq_corpus/bq_dev_5k.tsv",
    )
    # a few rows hold the very same text twice with label 0 (dataset artifacts): no key can
    # tell those apart, so they are left out
    different = [(a, b) for a, b, label in pairs if label == "0" and a != b]
    assert len(different) > 10_000
    collisions = [(a, b) for a, b in different if normalize(a) == normalize(b)]
    assert collisions == []
    # ...while pairs labelled same-meaning that differ only in form do share one
    same = [(a, b) for a, b, label in pairs if label == "1"]
    assert sum(normalize(a) == normalize(b) for a, b in same) > sum(a == b for a, b in same)


def test_normalize_is_idempotent_on_real_questions() -> None:
    pairs = _labelled_pairs("lcqmc/lcqmc_test_5k.tsv", "qqp/qqp_quora_5k.tsv")
    for text in itertools.islice((t for a, b, _ in pairs for t in (a, b)), 4000):
        once = normalize(text)
        assert normalize(once) == once


def test_the_conversation_keeps_its_structure() -> None:
    from tricache.key.conversation import split_conversation

    def request(messages: list[tuple[str, str, str]]) -> CacheRequest:
        c = split_conversation(messages)
        return CacheRequest(c.query, system=c.system, history=c.history, query_meta=c.query_meta)

    late = [("system", "Be brief.", ""), ("human", "Hi", ""), ("ai", "Hello!", "")]
    late += [("system", "Answer in French.", ""), ("human", "Capital of Italy?", "")]
    early = [late[0], late[3], late[1], late[2], late[4]]
    assert exact_key(request(late)) != exact_key(request(early))  # a system turn stays in place
    two = [("system", "A", ""), ("system", "B", ""), ("human", "q", "")]
    assert exact_key(request(two)) != exact_key(request([("system", "A\nB", ""), two[2]]))
    ends_with_ai = [("human", "Finish my sentence", ""), ("ai", "The quick brown fox", "")]
    spoofed = [ends_with_ai[0], ("human", "[ai] The quick brown fox", "")]
    assert exact_key(request(ends_with_ai)) != exact_key(request(spoofed))
