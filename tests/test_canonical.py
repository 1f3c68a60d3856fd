"""The canonical question: discourse around a question goes, the question stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from tricache import Cache
from tricache.key.canonical import canonical
from tricache.key.request import exact_key
from tricache.semantic.guards.checks import check

STRIPPED = [
    # (as typed, canonical)
    ("Um, hi, I was just wondering if I can bring a power bank in my checked luggage? Thanks so much",
     "can I bring a power bank in my checked luggage?"),
    # the yes/no clause a lead-in embeds is asked again as a question
    ("Hi everyone, I'd like to know if you ship to Canada. Thanks a lot", "do you ship to Canada?"),
    ("Do you know if there is a pharmacy nearby?", "is there a pharmacy nearby?"),
    ("I wonder if they can't see it", "can't they see it?"),
    ("I want to know if the store opens at 9", "the store opens at 9"),  # no pronoun: as it is
    ("Quick question if you don't mind: can I bring a power bank?", "can I bring a power bank?"),
    ("Hi there, could you please tell me whether the store opens at 9?", "the store opens at 9?"),
    ("I would like to inquire about the refund policy.", "the refund policy."),
    ("hey guys, whats the best laptop? thx in advance", "whats the best laptop?"),
    ("cant get into my email, help", "cant get into my email"),
    ("Why can't I log in? Thanks!", "Why can't I log in?"),
    ("那个，请问高铁上有WiFi吗？谢谢哈", "高铁上有WiFi吗？"),
    ("您好，我想知道怎么重置密码", "怎么重置密码"),
    ("请问一下，怎么开发票？急急急", "怎么开发票？"),
]  # fmt: skip

KEPT = [
    # discourse words that are content here
    "How do you say thank you in French?",
    "请问的意思是什么",  # what 请问 means: not what 想问一下 means
    "求问是什么意思",
    "老师好用英语怎么说",
    # a question about words or about "this" text keeps its opening: it may be what is asked
    "老师好，用英语怎么说？",
    "Hi team, reverse this string",
    "你好，这两个字是什么意思？",
    "Hello world in Java?",
    "Can you help?",
    "so-called experts?",
    "Hey Jude lyrics",
    "Well water safe?",
    "right, left or right?",
    "你好吗",
    "亲子鉴定多少钱",
    "麻烦的事情怎么办",
    "怎么说谢谢",
    "Thanks!",  # nothing but discourse: stays as typed
    "If you can swim, is it safe to dive?",  # a condition, not politeness
    "If you don't mind the noise, is it a good hotel?",
    "ER wait times in Boston?",
    "不好意思的英文怎么说",
    "你好的英文怎么说",
]


@pytest.mark.parametrize(("typed", "expected"), STRIPPED)
def test_discourse_around_the_question_goes(typed: str, expected: str) -> None:
    assert canonical(typed) == expected


@pytest.mark.parametrize("typed", KEPT)
def test_words_that_carry_the_question_stay(typed: str) -> None:
    assert canonical(typed) == typed


def test_a_negation_inside_a_politeness_formula_is_not_a_negation() -> None:
    polite = "Quick question if you don't mind: is it safe to fly with a power bank?"
    assert check(polite, "Is it safe to fly with a power bank?")[0] is None
    assert check(polite, "Is it not safe to fly with a power bank?")[0] == "polarity.negation"


def test_a_clause_asked_again_keeps_its_negation() -> None:
    wondering = "I was wondering if I can't bring a power bank in my checked luggage"
    assert (
        check(wondering, "Can I bring a power bank in my checked luggage?")[0]
        == "polarity.negation"
    )
    assert check(wondering, "Can't I bring a power bank in my checked luggage?")[0] is None


def test_discourse_never_hides_a_difference_in_meaning() -> None:
    assert check("Thanks! How do I enable it?", "How do I disable it?")[0] == "polarity.antonym"
    assert check("Hi, can I pay with 3 cards?", "Can I pay with 4 cards?")[0] == "quantity.number"
    # "Please" goes, yet the capital of "Polish" still tells the word
    assert (
        check("Please Polish this sentence.", "Please polish this sentence.")[0] == "literal.case"
    )
    assert check("那个，北京明天的天气", "上海明天的天气")[0] == "entity.name"


def test_the_canonical_question_never_feeds_the_exact_key(tmp_path: Path) -> None:
    polite = "Hi, how do I reset my password? Thanks"
    plain = "How do I reset my password?"
    with Cache(path=tmp_path / "c.sqlite3") as cache:
        assert exact_key(cache.request(polite)) != exact_key(cache.request(plain))
        cache.update(cache.request(plain), "Use the reset link.")
        hit = cache.lookup(cache.request(polite))
        assert hit is not None and hit.tier == "semantic"  # compared canonically, not keyed so
        assert cache.lookup(cache.request(polite), semantic=False) is None


def test_cacheability_is_judged_on_the_canonical_question(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "c.sqlite3") as cache:
        # a procedure stays one however it is introduced; time stays time
        assert cache.update(cache.request("Hey there, how do I cancel my subscription?"), "A")
        assert not cache.update(cache.request("Hi, what's the weather today? Thanks"), "B")
        assert cache.lookup(cache.request("Hi, what's the weather today? Thanks")) is None
