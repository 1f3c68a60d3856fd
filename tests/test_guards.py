"""Guards and cacheability rules, English and Chinese, one verdict per example."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tricache.semantic.guards import entities
from tricache.semantic.guards.analysis import analyze, use_entity_recognizer
from tricache.semantic.guards.cacheable import is_cacheable
from tricache.semantic.guards.checks import check

REFUSED = [
    # (cached question, new question, the guard that must refuse)
    ("What does `ls -R` do?", "What does `ls -r` do?", "literal.token"),
    ("What does ls -R do?", "What does ls -r do?", "literal.token"),
    ("What does \\W match in a regex?", "What does \\w match in a regex?", "literal.token"),
    ("What is 10³?", "What is 103?", "literal.token"),
    ("What does 👨\u200d👩\u200d👧 mean?", "What does 👨👩👧 mean?", "literal.token"),
    # roles by position (issue #35's blind round): the same numbers in another order, a
    # universal quantifier's scope, a subject moved after do-support, the sides of 是
    ("What percentage of 80 is 20?", "What percentage of 20 is 80?", "quantity.number"),
    ("20是30的百分之几？", "30是20的百分之几？", "quantity.number"),
    ("Is every integer a rational number?", "Is every rational number an integer?", "structure.order"),
    ("所有的自然数都是整数吗？", "所有的整数都是自然数吗？", "structure.order"),
    ("Which animals eat snakes?", "Which animals do snakes eat?", "structure.order"),
    ("正方形都是长方形吗？", "长方形都是正方形吗？", "structure.order"),
    # an arithmetic expression with its brackets moved (the FAQ served it at 0.80-0.92)
    ("What is (2 + 3) * 4?", "What is 2 + (3 * 4)?", "literal.token"),
    ("What is 10 - 4 - 2?", "What is 10 - (4 - 2)?", "literal.token"),
    ("计算（2+3）×4等于多少", "计算2+（3×4）等于多少", "literal.token"),
    ("Please Polish the following sentence.", "Please polish the following sentence.", "literal.case"),
    ("Is Turkey in Europe?", "Is turkey in Europe?", "literal.case"),
    ("Does the app run on Windows?", "Does the app run on windows?", "literal.case"),  # window, a word
    ("Can US citizens apply?", "Can us citizens apply?", "literal.case"),
    ("Should I take the medication with meals?", "Should I take the medication between meals?", "structure.relation"),
    ("Does the heart pump blood to the lungs?", "Does the heart pump blood from the lungs?", "structure.relation"),
    ("Was the company acquired by Google?", "Did the company acquire Google?", "structure.relation"),
    ("Was Pluto a planet?", "Is Pluto a planet?", "mood.modality"),
    ("Can I take ibuprofen and aspirin?", "Can I take ibuprofen or aspirin?", "structure.relation"),
    ("Can he donate blood?", "Can she donate blood?", "structure.relation"),
    ("What is a high dose of vitamin D?", "What is the highest dose of vitamin D?", "structure.relation"),
    ("Who defeated Napoleon?", "Who did Napoleon defeat?", "structure.order"),
    ("What do snakes eat?", "What eats snakes?", "structure.order"),
    ("Are all squares rectangles?", "Are all rectangles squares?", "structure.order"),
    ("How do I reset my password?", "How do I reset his password?", "structure.relation"),
    ("Can I take ibuprofen while pregnant?", "Should I take ibuprofen while pregnant?", "mood.modality"),
    ("Is it safe to mix these?", "Is it not safe to mix these?", "polarity.negation"),
    ("Why can't I log in?", "Why can I log in?", "polarity.negation"),
    ("你们推荐年付套餐吗？", "你们不推荐年付套餐吗？", "polarity.negation"),
    ("这个功能有用", "这个功能没有用", "polarity.negation"),
    ("How do I enable two-factor authentication?", "How do I disable two-factor authentication?", "polarity.antonym"),
    ("How do I increase my credit limit?", "How do I decrease my credit limit?", "polarity.antonym"),
    ("怎么注册账号", "怎么注销账号", "polarity.antonym"),
    ("怎么开通自动续费", "怎么关闭自动续费", "polarity.antonym"),
    ("It's not fair.", "It's not unfair.", "polarity.antonym"),
    ("What are the advantages of remote work?", "What are the disadvantages of remote work?", "polarity.antonym"),
    ("Where is order 12345?", "Where is order 12346?", "quantity.number"),
    ("Can I get a refund within 3 days?", "Can I get a refund within 30 days?", "quantity.number"),
    ("零点九除以三等于多少", "零点九除以零点三等于多少", "quantity.number"),
    ("三天能到吗", "五天能到吗", "quantity.number"),
    ("How much is the iPhone 15?", "How much is the iPhone 15 Pro?", "entity.name"),
    ("北京明天的天气", "上海明天的天气", "entity.name"),
    ("When does the store open?", "Where does the store open?", "question.word"),
    ("Is Python better than Java?", "Is Java better than Python?", "structure.order"),
    ("A比B好吗", "B比A好吗", "structure.order"),
    ("他出生于上海，在北京去世", "他出生于北京，去世于上海", "structure.order"),  # a block moved across a comma
    ("flights from Paris to London", "flights from London to Paris", "structure.order"),
    ("How many grams are in a pound?", "How many pounds are in a gram?", "structure.order"),
    ("Should I eat before running?", "Should I eat after running?", "polarity.antonym"),
    ("Can you help me?", "Can I help you?", "structure.order"),
    ("Is his dog bigger than my dog?", "Is my dog bigger than his dog?", "structure.order"),
    ("Did my brother call your sister?", "Did your brother call my sister?", "structure.order"),
    ("我借给他一千块钱", "他借给我一千块钱", "structure.order"),
    ("你爱我吗", "我爱你吗", "structure.order"),
    ("That's not bad, is it?", "That's bad, isn't it?", "polarity.negation"),  # the tag is not the question
    ("能用花呗付款吗", "能用信用卡付款吗", "content.substituted"),
    ("Which is the best haircut?", "Which is the best haircut for women?", "content.added"),
    ("什么牌子的手表好", "什么牌子的女手表好", "content.added"),
    ("魔兽世界将军令丢了", "魔兽世界将军令坏了", "content.substituted"),
    ("What is the chemistry exam like?", "What is the biology exam like?", "content.substituted"),
    # another person meant; the one asked addressed on one side only
    ("你妈妈叫什么名字", "我妈妈叫什么名字", "person.addressed"),
    ("他的手机坏了怎么办", "我的手机坏了怎么办", "person.addressed"),
    ("What is your favorite book?", "What is the favorite book?", "person.addressed"),
    ("Can I borrow money from you?", "Can I borrow money?", "person.addressed"),
    # as many negations, on another verb
    ("What happens if you don't sleep?", "What happens if you can't sleep?", "polarity.negated_verb"),
    ("Why won't the app open?", "Why doesn't the app open?", "polarity.negated_verb"),
    # a held-out round (#23): roles swapped around a particle, a word with an apostrophe that
    # is another word without it, a reflexive or "also" on one side, "do" against a mood
    ("妈妈的哥哥叫什么", "哥哥的妈妈叫什么", "structure.order"),
    ("微信怎么转账到支付宝", "支付宝怎么转账到微信", "structure.order"),  # jieba: 到微 / 信
    ("1公斤等于几斤", "1斤等于几公斤", "structure.order"),
    ("人能把感冒传染给狗吗", "狗能把感冒传染给人吗", "structure.order"),
    # the asker changes sides: a word now followed by a person, once by what moved before it
    ("How do I follow someone on Instagram?", "How does someone follow me on Instagram?",
     "structure.order"),
    ("How do I know if someone blocked me?", "How do I know if I blocked someone?",
     "structure.order"),
    ("How can I help you?", "How can you help me?", "structure.order"),
    ("怎么联系房东", "房东怎么联系我", "structure.order"),
    ("怎么给妈妈打电话", "妈妈怎么给我打电话", "structure.order"),
    ("怎么向银行借钱", "银行怎么向我借钱", "structure.order"),
    # another owner, the asker not swapped along with it
    ("Forgot my password", "I forgot his password", "structure.relation"),
    ("Is it too late for me to learn piano?", "Is it too late for him to learn piano?",
     "structure.relation"),
    # how to tell whether it is so, against how to do it
    ("How do I change my password?", "How do I know if someone changed my password?",
     "question.form"),
    ("怎么屏蔽别人", "怎么知道别人屏蔽了我", "question.form"),
    ("哪个国家人口最多", "哪些国家人口最多", "question.form"),
    # who acts and whose thing it is trade places
    ("Can my employer see my browsing history?", "Can I see my employer's browsing history?",
     "structure.order"),
    ("What happens if someone steals my identity?", "What happens if I steal someone's identity?",
     "structure.order"),
    ("Can you access my files?", "Can I access your files?", "structure.order"),
    ("Can my boss fire me?", "Can I fire my boss?", "structure.order"),
    ("Can my roommate use my Netflix account?", "Can I use my roommate's Netflix account?",
     "structure.order"),
    ("Do I have to pay my parents' debts?", "Do my parents have to pay my debts?",
     "structure.order"),
    ("Can Apple see my iMessages?", "Can I see Apple's iMessages?", "structure.order"),
    # the one asked for stands where it acts; whose it is, asked on one side only
    ("猫吃什么", "什么吃猫", "structure.order"),
    ("他打了谁", "谁打了他", "structure.order"),
    ("秦始皇的父亲是谁", "秦始皇是谁的父亲", "structure.order"),
    ("哈利波特的教父是谁", "哈利波特是谁的教父", "structure.order"),
    ("When do you use its?", "When do you use it's?", "literal.apostrophe"),
    ("Were you there?", "We're you there?", "literal.apostrophe"),
    ("Can I file taxes?", "Can I file taxes myself?", "mood.focus"),
    ("猫怕水吗", "猫也怕水吗", "mood.focus"),
    ("Could humans live on Mars?", "Do humans live on Mars?", "mood.modality"),
    ("What is the maximum dose of ibuprofen for adults?",
     "What are the side effects of ibuprofen for adults?", "content.substituted"),
]  # fmt: skip

PASSED = [
    # a topic moved to the front, a question word moved: one question
    ("什么是机器学习", "机器学习是什么"),
    ("How do I lose weight fast?", "What is the fastest way to lose weight?"),
    ("Is it possible to pay with Visa or Mastercard?", "Can I pay with Mastercard or Visa?"),
    # case tells nothing in a question typed all in lower case; a sentence start is positional
    ("Who designed the Eiffel Tower?", "who designed the eiffel tower"),
    # a name that is no word in lower case is the same name typed carelessly
    ("How do I delete my Facebook account?", "How can I delete my facebook account?"),
    ("How do I split conversations in Gmail?", "How do I split conversations in gmail"),
    ("Paris hotels, are they expensive?", "are Paris hotels expensive?"),
    ("How do I use `git rebase`?", "How can I use `git rebase`?"),
    ("How do I reset my password?", "How can I reset my password?"),
    ("How do I reset my password?", "how do i reset my password"),
    ("How can I lose weight fast?", "What is the fastest way to lose weight?"),
    ("How do I learn Python?", "What is the best way to learn Python?"),
    ("怎么重置密码", "密码怎么重置"),
    ("refund within 3 days", "refund within three days"),
    ("三天能到吗", "3天能到吗"),
    ("Why can't I log in?", "Why can I not log in?"),
    ("what is the difference between A and B", "what is the difference between B and A"),
    ("Which is the best haircut for man?", "Which is the best haircut for men?"),
    ("What companies hire remote workers?", "What company hires remote workers?"),
    ("北京有什么好玩的地方", "北京有哪些好玩的地方"),
    ("Can dogs eat grapes?", "Is it okay if dogs eat grapes?"),
    ("How do I reset my password?", "How do you reset your password?"),
    ("我想知道怎么重置密码", "怎么重置密码"),
    # "I" acts, "my" owns: the asker's "I" gone with "my" kept is no reordering
    ("How do I delete my Facebook account?", "What is the way to delete my account on Facebook?"),
    # a person left implicit on one side, another number of one person, the asker swapped along
    ("我的提问怎么删除", "提问怎么删除"),
    ("你最喜欢哪个明星", "你们最喜欢哪个明星"),
    ("How do I change my name?", "How do you change your name?"),
    ("Why can't I sleep?", "Why can I not sleep?"),
    # intensifiers, "about", a request verb
    ("这部电影好看吗", "这部电影真的很好看吗"),
    ("找一部科幻电影", "求一部科幻电影"),
    # hedges ask nothing of their own
    ("退款多久到账", "退款一般多久到账"),
    ("How long does shipping take?", "How long does shipping usually take?"),
    # a block moved whole, a tie kept with its words; a request is no mood; no apostrophe word
    ("我的密码怎么重置", "怎么重置我的密码"),
    ("密码的重置方法", "重置密码的方法"),
    ("Can you tell me my balance?", "Do you know my balance?"),
    ("Dont I need a visa?", "Don't I need a visa?"),
    # a person that stays where it was, a thing said before and named again
    ("Can you help me reset my password?", "Could you help me reset my password?"),
    ("客服怎么联系", "怎么联系客服"),
    ("谁是秦始皇的父亲", "秦始皇的父亲是谁"),
    ("How can my password be reset?", "How do I reset my password?"),
    ("How can I make money as a musician?", "How do musicians make money?"),
    ("How many architects do we have in India?", "How many architects does India have?"),
    ("How can we improve our reflexes?", "How can I improve my reflexes?"),
    ("How do you check your Yahoo Mail inbox?", "How can I check my Yahoo Mail inbox?"),
    ("How do I know if a US passport is fake?", "How can you tell if a US passport is fake?"),
    (
        "How can I get a girlfriend if I am shy and socially awkward?",
        "How do I get a girlfriend if I am socially awkward and shy?",
    ),
    ("韭菜多吃什么好处", "多吃韭菜有什么好处"),
    (
        "Hiccups won't go away, how do I get rid of them?",
        "Hiccups won't go away, how to get rid of them?",
    ),
    ("What is the drinking age in the US?", "What's the drinking age in the US?"),
]


@pytest.mark.parametrize(("cached", "new", "guard"), REFUSED)
def test_look_alikes_are_refused_by_the_right_guard(cached: str, new: str, guard: str) -> None:
    reason, ran = check(cached, new)
    assert reason == guard
    assert ran[-1] in (guard, "wh_word") or guard in ran


@pytest.mark.parametrize(("cached", "new"), PASSED)
def test_paraphrases_pass_every_guard(cached: str, new: str) -> None:
    assert check(cached, new) == (None, check(cached, new)[1])
    assert check(cached, new)[0] is None
    assert check(new, cached)[0] is None  # symmetric


def test_guards_are_symmetric_on_refusals() -> None:
    for cached, new, guard in REFUSED:
        assert check(new, cached)[0] is not None, (cached, new, guard)


def test_analysis_extracts_numbers_entities_and_negations() -> None:
    a = analyze("我想在北京买两部iPhone 15 Pro，不要二手的，预算三万五千元")
    assert {"北京", "iphone", "pro"} <= a.entities
    assert a.numbers == tuple(sorted(["2", "15", "35000"]))
    assert a.negations == ("不",)
    assert a.zh
    e = analyze("Don't charge me twice for 2 orders")
    assert e.negations == ("not",) and e.numbers == ("2",)


@pytest.mark.parametrize(
    "question",
    ["What's the weather today?", "What is the latest version?", "Where is my order?",
     "今天北京天气怎么样", "最新的版本是什么", "我的订单到哪了", "What time is it now?",
     "Is my account locked?", "Has my refund been paid?", "Why was my card declined?",
     "My card payment is still on hold, why?", "When will my card arrive?",
     # the present state of the world without a time word: the date, a countdown, a time
     # since, open or down now, delays
     "What day of the week is it?", "What year is it?", "what's the date",
     "How long until midnight?", "How many days until Christmas?", "离春节还有几天？",
     "How many years since the Berlin Wall fell?", "Is it a weekend?", "Is the store open?",
     "Is it daytime in Tokyo?", "Is Gmail down?", "Any delays on the Piccadilly line?",
     "28号是星期几", "银行开门了吗", "微信是不是崩了吗",
     # the next one, the sun today, a countdown with words between; the asker's value or
     # place; an incumbent
     "How many days are left until Christmas?", "When is the next train to Boston?",
     "What time is sunset?", "How many days left in the year?", "What week of the year is it?",
     "What is my IP address?", "Where am I?", "What's near me?", "How far am I from Paris?",
     "What's my credit score?", "How old will I be in 2030?", "附近有什么好吃的",
     "离我最近的医院在哪", "我在哪里", "几号了", "谁是美国现任总统", "下一班地铁几点"],
)  # fmt: skip
def test_time_or_asker_dependent_questions_are_not_cacheable(question: str) -> None:
    assert not is_cacheable(question)


@pytest.mark.parametrize(
    "question",
    ["How do I reset my password?", "怎么重置密码", "What is a mortgage?",
     "How do I delete my account?", "How can I cancel my subscription?",
     # what to do, a request to the service, how long in general: one answer for everyone
     "What should I do if I lost my card?", "I want to close my account",
     "Can you freeze my card?", "Is there a way to know when my card will arrive?",
     "How long does it take to get my card?", "What time zone is Tokyo in?",
     # dates and durations that do not move with the clock
     "What day is Christmas?", "What year did WW2 end?", "What is the day of the dead?",
     "How many days are in a leap year?", "What day of the week was July 4 1776?",
     "How long before bed should I stop drinking coffee?", "Is Python open source?",
     "每个月几号还款", "What date format does Excel use?"],
)  # fmt: skip
def test_stable_questions_are_cacheable(question: str) -> None:
    assert is_cacheable(question)


@pytest.mark.parametrize("text", ["", " ", "\ud800", "\x00\x01", "😀" * 50, "a" * 100_000])
def test_odd_input_never_crashes_the_guards(text: str) -> None:
    reason, _ = check(text, "How do I reset my password?")
    assert reason is None or isinstance(reason, str)


# English names: the rules by default, spaCy when asked for (the dev install has it) ------
Switch = Callable[[str], None]


@pytest.fixture
def recognizer() -> Iterator[Switch]:
    """Restore the default recognizer (and forget analyses) after a test that switches it."""
    yield use_entity_recognizer
    use_entity_recognizer("auto")


def test_spacy_finds_names_the_capitalization_rule_cannot_see(recognizer: Switch) -> None:
    question = "Google is hiring engineers in Berlin?"  # a name at the sentence start
    recognizer("rules")
    assert entities.recognizer() == "rules"
    assert analyze(question).entities == {"berlin"}
    recognizer("spacy")
    assert entities.recognizer() == "spacy"
    assert {"google", "berlin"} <= analyze(question).entities
    assert check(question, "Amazon is hiring engineers in Berlin?")[0] == "entity.name"


def test_the_rules_are_the_default_and_spacy_is_asked_for(recognizer: Switch) -> None:
    assert entities.recognizer() == "rules"  # no 2-3 s import when a cache starts
    recognizer("spacy")
    assert entities.recognizer() == "spacy"


def test_the_rules_find_names_inside_a_sentence(recognizer: Switch) -> None:
    recognizer("rules")
    assert analyze("How do I learn Python?").entities == {"python"}  # "I" is not Title Case
    assert analyze("How To Learn Python Fast").entities == frozenset()  # Title Case: unknown
    assert check("How do I learn Python?", "How do I learn Java?")[0] == "entity.name"


def test_spacy_adds_to_the_rules_and_never_removes(recognizer: Switch) -> None:
    recognizer("spacy")
    # spaCy's small model sees no product in these; codes and variants still count
    assert {"iphone", "pro"} <= analyze("How much is the iPhone 15 Pro?").entities
    assert check("How much is the iPhone 15?", "How much is the iPhone 15 Pro?")[0] == "entity.name"
    assert "北京" in analyze("我想在北京买iPhone").entities  # Chinese text: jieba and rules


@pytest.mark.parametrize("text", ["\ud800 Paris", "\x00 London", "Ⅻ Rome", "😀" * 500])
def test_odd_input_never_crashes_the_recognizer(recognizer: Switch, text: str) -> None:
    recognizer("spacy")
    assert isinstance(analyze(text).entities, frozenset)


def test_unknown_recognizer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="auto"):
        use_entity_recognizer("bert")  # type: ignore[arg-type]


def test_an_irregular_form_stems_as_its_base_does() -> None:
    from tricache.semantic.guards.rules.shared import stem as _stem

    assert _stem("made") == _stem("make") and _stem("lost") == _stem("lose")
    assert _stem("did") == _stem("do")
