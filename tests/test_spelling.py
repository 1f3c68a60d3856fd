"""Spelling and spacing variants and typos count as one word; two real words never do."""

from __future__ import annotations

import pytest

from tricache.semantic.guards.checks import check
from tricache.semantic.guards.spelling import is_english_word, is_lower_case_word, reconcile

SAME_WORD = [
    # typos: a non-word one edit from a word the other side has
    ("how do i reset my windos pasword", "How do I reset my Windows password?"),
    ("what is the dealine for the scholarhsip aplication", "What is the deadline for the scholarship application?"),
    ("高铁票怎么该签", "高铁票怎么改签"),
    # spelling and spacing variants
    ("Is there wifi on the train?", "Is there Wi-Fi on the train?"),
    ("Is there Wi Fi on the train?", "Is there WiFi on the train?"),
    ("How do I checkin online?", "How do I check-in online?"),
    ("How much is the PS5?", "how much is the ps 5"),
    ("Does it have USB-C?", "does it have usb c"),
    ("Is the holidayinn near the airport?", "Is the Holiday Inn near the airport?"),
    ("whats a mortgage", "What's a mortgage?"),
    ("isnt it safe to fly", "Isn't it safe to fly?"),
    # British and American spellings
    ("What is your favourite colour?", "What is your favorite color?"),
    ("Why was my flight cancelled?", "why was my flight canceled"),
    ("How far is the city centre?", "How far is the city center?"),
    ("Can I pay by cheque?", "Can I pay by check?"),
]  # fmt: skip

OTHER_WORD = [
    # two dictionary words are two words, however close
    ("How does it affect sales?", "How does it effect sales?"),
    ("Is the prostate enlarged?", "Is the prostrate enlarged?"),
    ("How do I delete my account?", "How do I deactivate my account?"),
    ("How do I delete my account?", "How do I delete my comment?"),
    ("What payment methods do you accept?", "What payment methods do you refuse?"),
    ("北京的天气", "背景的天气"),  # same pinyin, both words
    ("期中考试难吗", "期终考试难吗"),  # 期终 is a word: the swapped character was meant
    ("高铁票怎么改签", "高铁票应该签吗"),
    # words the dated, British dictionary lacks are still words when common on the web
    ("Is the tumor benign?", "Is the tutor benign?"),
    ("Who is the best theater actor?", "Who is the best cheater actor?"),
    ("Are the centers open?", "Are the renters open?"),
    # a capital inside a sentence is a name, not a typo
    ("Who is Jon Snow?", "Who is John Snow?"),
    # variants that are other words: a prefix split off, an apostrophe-less other word
    ("How do I re-sign the form?", "How do I resign the form?"),
    ("Were you there?", "We're you there?"),
    # numbers split by a hyphen or a space are other numbers
    ("Is delivery 1-2 days?", "Is delivery 12 days?"),
    ("Do you sell 2 5 kg bags?", "Do you sell 25 kg bags?"),
    # a doubled l is British only when the single-l stem is a word: filling is no filing
    ("Is filling the form required?", "Is filing the form required?"),
    # codes that differ stay different
    ("How much is the PS5?", "How much is the PS4?"),
    ("Does it have USB-C?", "Does it have USB-A?"),
]  # fmt: skip


@pytest.mark.parametrize(("a", "b"), SAME_WORD)
def test_variants_and_typos_pass_the_guards(a: str, b: str) -> None:
    assert check(a, b)[0] is None
    assert check(b, a)[0] is None


@pytest.mark.parametrize(("a", "b"), OTHER_WORD)
def test_look_alike_words_are_still_refused(a: str, b: str) -> None:
    assert check(a, b)[0] is not None
    assert check(b, a)[0] is not None


def test_reconcile_rewrites_both_sides_to_one_spelling() -> None:
    assert reconcile("Is there Wi-Fi?", "is there wi fi") == ("Is there wifi?", "is there wifi")
    assert reconcile("whats up", "what's up") == ("what's up", "what's up")
    assert reconcile("reset my windos", "reset my Windows")[0] == "reset my windows"


def test_only_short_distances_count_as_typos() -> None:
    assert reconcile("reset my wndws", "reset my windows")[0] == "reset my wndws"  # three edits
    # two edits, even in a long word, are too many: hypo- / hyper- is two conditions
    assert reconcile("treating hypretenson", "treating hypertension")[0] == "treating hypretenson"
    # a non-word close to two words of the other side is ambiguous: left alone
    assert reconcile("cheap shrts", "cheap shirts and shorts")[0] == "cheap shrts"


def test_the_dictionary_is_a_real_word_list() -> None:
    assert is_english_word("password") and is_english_word("effect")
    assert not is_english_word("pasword") and not is_english_word("scholarhsip")


def test_lower_case_words_are_told_from_names() -> None:
    for word in ("polish", "turkey", "us", "windows", "parties", "apple"):
        assert is_lower_case_word(word), word
    for word in ("facebook", "gmail", "youtube", "europe", "english", "github"):
        assert not is_lower_case_word(word), word


def test_american_forms_of_british_spellings() -> None:
    from tricache.semantic.guards.british import american

    assert american("colour") == "color" and american("theatres") == "theaters"
    assert american("realise") == "realize" and american("travelled") == "traveled"
    assert american("grey") == "gray" and american("analyse") == "analyze"
    for word in ("four", "your", "flour", "filling", "rise", "acre", "color"):
        assert american(word) is None, word
