"""Guards: refuse a semantic candidate whose question looks alike but means something else.

Each guard is a small function ``(cached, new) -> reason | None`` over two ``Analysis``
objects; the first reason wins.  All of them err on the side of refusing: a refused hit costs
one LLM call, a wrong hit costs a wrong answer.

Conversation context is not a guard here: the semantic tier only ever compares questions asked
in the same context (its search is filtered on the context fingerprint).

Owns the guards: the ``Guard`` type, each guard (with ``person`` and ``negated_verb`` from
``roles``), ``DEFAULT_GUARDS``, ``check`` that runs them on two questions, and ``warm_up``.
The ``Analysis`` they compare is built in ``analysis``; ``is_cacheable`` is in ``cacheable``.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from itertools import pairwise

from ...key.forms import case_differs, folded, unify
from ...key.script import CJK
from ...key.words import is_lower_case_word, known
from ...runtime.exit import checkpoint
from .analysis import Analysis, analyze
from .canonical import canonical
from .lexicon import (
    ANTONYMS_EN,
    ANTONYMS_ZH,
    FILLERS_EN,
    FILLERS_ZH,
    FOCUS_EN,
    FOCUS_ZH,
    IRREGULAR_EN,
    MOODS_ZH,
    NEGATING_PREFIXES,
    NEGATIONS_EN,
    NUMBER_WORDS_EN,
    PAST_ZH,
    PERSONS_EN,
    PRONOUNS_ZH,
    RELATIONS_EN,
    STOPWORDS_EN,
    STOPWORDS_ZH,
    WH_EN,
    phrases,
    table,
    words,
)
from .roles import negated_verb, person

__all__ = [
    "DEFAULT_GUARDS",
    "HARD_RULES",
    "RULE_IDS",
    "WORD_RULES",
    "Guard",
    "any_substitution",
    "check",
    "current_name",
    "differing_words",
    "group_explains",
    "rule_id",
    "verdicts",
    "warm_up",
    "words_covered",
]


def warm_up() -> None:
    """Load the models and word lists the guards use (jieba's tagger, the English word lists,
    spaCy when asked for) now rather than on the first lookup, which would wait for them.
    Raises ``Exiting`` between steps once the interpreter exits."""
    checkpoint()
    analyze("Warm up the guards before the first lookup?")
    checkpoint()
    analyze("先加载分词词典")
    checkpoint()
    is_lower_case_word("warm")
    checkpoint()
    _antonym_stems()
    checkpoint()
    unify("how do i log in", "How do I login?")


# The guards --------------------------------------------------------------------------------
Guard = Callable[[Analysis, Analysis], "str | None"]


def negation(a: Analysis, b: Analysis) -> str | None:
    """ "Is it safe?" vs "Is it not safe?", "推荐" vs "不推荐"."""
    return "negation" if a.negations != b.negations else None


def antonym(a: Analysis, b: Analysis) -> str | None:
    """ "enable" vs "disable", "注册" vs "注销": one holds a word, the other its opposite."""
    words_a, words_b = _stems(a), _stems(b)
    for x, y in _antonym_stems():
        if _opposite(x in words_a, y in words_a, x in words_b, y in words_b):
            return "antonym"
    if a.zh or b.zh:
        for x, y in ANTONYMS_ZH:
            if _opposite(x in a.text, y in a.text, x in b.text, y in b.text):
                return "antonym"
    if _negated_forms(words_a, words_b) or _negated_forms(words_b, words_a):
        return "antonym"
    return None


def _negated_forms(words_a: frozenset[str], words_b: frozenset[str]) -> bool:
    """ "fair" vs "unfair", "advantages" vs "disadvantages", "careful" vs "careless"."""
    for word in words_a:
        if len(word) < 3 or not word.isalpha():
            continue
        for prefix in NEGATING_PREFIXES:
            if prefix + word in words_b and prefix + word not in words_a and word not in words_b:
                return True
        if word.endswith("ful") and word[:-3] + "less" in words_b and word not in words_b:
            return True
    return False


def _opposite(ax: bool, ay: bool, bx: bool, by: bool) -> bool:
    return (ax and not ay and by and not bx) or (ay and not ax and bx and not by)


@lru_cache(maxsize=50_000)
def _stem(word: str) -> str:
    """A light English stem: plural, -ed and -ing off, then a final "e" (hire/hires/hired/
    hiring → "hir"), so inflections of one word compare equal."""
    if word in IRREGULAR_EN:  # "made" → "make" → "mak", as "make" stems
        return _stem(IRREGULAR_EN[word])
    if not _VOWEL.search(word):
        return word  # an acronym or a code, not a plural: "https" is no "http"
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    stem = word
    if len(word) > 4 and word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        stem = word[:-2]
    elif (
        len(word) > 3
        and word.endswith("s")
        and not word.endswith(("ss", "us", "is"))
        and not (known(word) and not known(word[:-1]))  # "canvas" is no plural of "Canva"
    ):
        stem = word[:-1]
    elif len(word) > 5 and word.endswith("ing"):
        stem = word[:-3]
    elif len(word) > 5 and word.endswith("est"):
        stem = word[:-3]  # fastest → fast
    elif len(word) > 4 and word.endswith("ed"):
        stem = word[:-2]
    if stem != word and len(stem) >= 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
        stem = stem[:-1]  # stopped → stop
    return stem[:-1] if len(stem) > 3 and stem.endswith("e") else stem


def _stems(a: Analysis) -> frozenset[str]:
    return frozenset(_stem(w) for w in a.tokens)


_VOWEL = re.compile("[aeiouy]")


@lru_cache(maxsize=1)
def _antonym_stems() -> list[tuple[str, str]]:  # (stemming reads the word lists: on first use)
    return [(_stem(x), _stem(y)) for x, y in ANTONYMS_EN]


def number(a: Analysis, b: Analysis) -> str | None:
    """ "order 12345" vs "order 12346", "3 days" vs "30 days", "三天" vs "3天" are fine; the
    same numbers in another order ("What percentage of 80 is 20?" / "… of 20 is 80?",
    "20是30的百分之几" / "30是20的百分之几") play other parts."""
    if a.numbers != b.numbers:
        return "number"
    if len(a.numbers) > 1 and _DIGITS.findall(a.text) != _DIGITS.findall(b.text):
        return "number"
    return None


_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")


def entity(a: Analysis, b: Analysis) -> str | None:
    """ "iPhone 15" vs "iPhone 15 Pro", "北京" vs "上海": every name in one question must
    appear in the other."""
    for x, y in ((a, b), (b, a)):
        words = set(y.tokens)
        for name in x.entities:
            if name not in words and name not in y.text:
                return "entity"
    return None


def wh_word(a: Analysis, b: Analysis) -> str | None:
    """ "When does it open?" vs "Where does it open?"."""
    return "question_word" if a.wh and b.wh and a.wh != b.wh else None


def order(a: Analysis, b: Analysis) -> str | None:
    """ "Is A better than B" vs "Is B better than A", "A比B好" vs "B比A好".

    The content words the two questions share must keep their order; in Chinese up to moving
    one block to the front or the end ("怎么重置密码" vs "密码怎么重置" is the same question;
    moving a word into the middle re-attaches it: "the original version … the mild edition" vs
    "the mild version … the original edition")."""
    if a.zh and b.zh and (_zh_reordered(a, b) or _copula_swapped(a, b)):
        return "order"  # (by where words stand: jieba may split the two texts apart)
    owned_b = set(_POSSESSIVE.findall(b.text))
    if any((y, x) in owned_b and x != y for x, y in _POSSESSIVE.findall(a.text)):
        return "order"  # "a husband's brother" / "a brother's husband"
    seq_a, seq_b = _order_sequence(a), _order_sequence(b)
    common = Counter(seq_a) & Counter(seq_b)
    if sum(common.values()) < 2:
        return None
    positions: dict[tuple[str, int], int] = {}
    seen: Counter[str] = Counter()
    for token in seq_b:
        if common[token]:
            positions[token, seen[token]] = len(positions)
            seen[token] += 1
    seen.clear()
    permutation = []
    for token in seq_a:
        if (token, seen[token]) in positions:
            permutation.append(positions[token, seen[token]])
            seen[token] += 1
    # Chinese moves a topic to the front ("密码怎么重置"), and so does an English paraphrase
    # of three words or more ("lose weight fast" / "fastest way to lose weight"); two shared
    # words swapped are a relation reversed: "Who defeated Napoleon?" / "Who did Napoleon
    # defeat?", "What do snakes eat?" / "What eats snakes?"
    # a passive without its agent turns the object around: "Does it include support?" / "Is
    # support included?" (with an agent, "by", the relation guard decides)
    # ... within one clause: across a comma a moved block changes what belongs to what
    # ("他出生于A，在B去世" / "他出生于B，去世于A")
    long_enough = sum(t not in _NOT_COUNTED for t in common.elements()) >= 3
    zh = (a.zh or b.zh) and not (_CLAUSE_BREAK.search(a.text) or _CLAUSE_BREAK.search(b.text))
    # ... but not where the order is the roles: a universal quantifier's scope ("Is every
    # integer a rational number?" / "Is every rational number an integer?"), or a question
    # whose subject moved after do-support ("Which animals eat snakes?" / "Which animals do
    # snakes eat?")
    strict = _quantified(a) or _quantified(b) or _do_support(a) != _do_support(b)
    rotation_allowed = zh or (not (a.zh or b.zh) and long_enough) or _passive(a) != _passive(b)
    if rotation_allowed and not strict:
        return None if _rotation(permutation) else "order"
    return None if permutation == sorted(permutation) else "order"


_QUANTIFIERS_EN = words("quantifiers_en")
_QUANTIFIERS_ZH = phrases("quantifiers_zh")
_DO_SUPPORT = re.compile(r"\b(?:which|what|who|whom)\b(?:\s+[a-z]+)?\s+(?:do|does|did)\b")


def _quantified(a: Analysis) -> bool:
    if a.zh:
        return any(q in a.text for q in _QUANTIFIERS_ZH)
    return any(t in _QUANTIFIERS_EN for t in a.tokens)


def _do_support(a: Analysis) -> bool:
    return not a.zh and bool(_DO_SUPPORT.search(a.text))


def _copula_swapped(a: Analysis, b: Analysis) -> bool:
    """ "正方形都是长方形吗" / "长方形都是正方形吗": words on either side of one 是 trade
    sides."""
    if a.text.count("是") != 1 or b.text.count("是") != 1 or "是不是" in a.text + b.text:
        return False
    words = {t for t in (*a.tokens, *b.tokens) if CJK.match(t) and t not in STOPWORDS_ZH}
    words = {w for w in words if "是" not in w and a.text.count(w) == 1 == b.text.count(w)}
    cut_a, cut_b = a.text.index("是"), b.text.index("是")
    to_right = any(a.text.index(w) < cut_a < b.text.index(w) for w in words)
    to_left = any(b.text.index(w) < cut_b < a.text.index(w) for w in words)
    return to_right and to_left


_POSSESSIVE = re.compile(r"\b([a-z]+)['’]s\s+([a-z]+)\b")


def _zh_placement(a: Analysis, b: Analysis) -> list[int]:
    """The order in ``b`` of the words the two Chinese questions share, found by where their
    characters stand in each text rather than by jieba's words, which split one phrasing
    differently from the other ("转账到微信" → 到微 / 信).  The words are both sides' content
    words and the particles that tie two of them (的, 到, 给, 把 …: "妈妈的哥哥" is not "哥哥的
    妈妈"), each counted only where it occurs exactly once in each text."""
    if len(a.text) + len(b.text) > 4000:
        return []  # (bounded time: the tier never compares questions this long)
    words = {t for t in (*a.tokens, *b.tokens) if CJK.match(t) or t.isalnum()}
    words = {w for w in words if w not in STOPWORDS_ZH or w in _TIES_ZH}
    spots = []
    for word in words:
        if a.text.count(word) == 1 and b.text.count(word) == 1:
            spots.append((a.text.index(word), b.text.index(word), word))
    inside = {part for *_, w in spots for part in _parts(w)}  # 微 of 微信 is no word here
    spots = [s for s in spots if s[2] not in inside]
    in_b = sorted(range(len(spots)), key=lambda i: spots[i][1])
    rank = {i: r for r, i in enumerate(in_b)}
    return [rank[i] for i in sorted(range(len(spots)), key=lambda i: spots[i][0])]


def _zh_reordered(a: Analysis, b: Analysis) -> bool:
    """Two Chinese questions whose shared words, or the words a particle ties, stand in
    another order, in the whole or clause by clause."""
    return any(
        _ties_swapped(x, y) or not _rotation(_zh_placement(x, y)) for x, y in _zh_clauses(a, b)
    )


def _zh_clauses(a: Analysis, b: Analysis) -> list[tuple[Analysis, Analysis]]:
    """The two questions, and clause by clause when both have as many (a word that recurs in
    the whole, 甲 in "甲欠乙的钱，乙能起诉甲吗", occurs once in its clause)."""
    pairs = [(a, b)]
    clauses_a, clauses_b = _CLAUSE_SPLIT.split(a.text), _CLAUSE_SPLIT.split(b.text)
    if 1 < len(clauses_a) == len(clauses_b) <= 8:
        pairs += [(analyze(x), analyze(y)) for x, y in zip(clauses_a, clauses_b, strict=True)]
    return pairs


_CLAUSE_SPLIT = re.compile(r"\s*[，,；;]\s*")


def _parts(word: str) -> Iterator[str]:
    """Every shorter piece of ``word``."""
    n = len(word)
    return (word[i:j] for i in range(n) for j in range(i + 1, n + 1) if j - i < n)


def _ties_swapped(a: Analysis, b: Analysis) -> bool:
    """A particle that ties two words ties them the other way round: "1公斤等于几斤" / "1斤等于
    几公斤" (a question numeral glued to its unit by jieba is set aside: 几斤 → 斤), by words or,
    where jieba glued the particle to a neighbour (考研比考公 → 比考 / 公难), by characters."""
    for tie in _TIES_ZH:
        sides_a, sides_b = _tied(a.tokens, tie), _tied(b.tokens, tie)
        if sides_a and sides_b and sides_a != sides_b and sides_a == sides_b[::-1]:
            return True
        if a.text.count(tie) == 1 == b.text.count(tie) and _swapped_around(a.text, b.text, tie):
            return True
    return False


def _swapped_around(x: str, y: str, tie: str) -> bool:
    """ "…X比Y…" against "…Y比X…": what stands right before the tie in one text starts the
    text after it in the other, one way or both ("被狗咬了" / "狗被咬了": who was bitten,
    the one who asks or the dog), and differs."""
    left_x, right_x = x.split(tie)
    left_y, right_y = y.split(tie)
    first = _overlap(left_x, right_y)
    second = _overlap(left_y, right_x)
    return bool((first or second) and first != second)


def _overlap(left: str, right: str) -> str:
    """The longest end of ``left`` that ``right`` starts with (Chinese characters only)."""
    for n in range(min(len(left), len(right)), 0, -1):
        if left[-n:] == right[:n] and CJK.match(left[-n]):
            return left[-n:]
    return ""


def _tied(tokens: tuple[str, ...], tie: str) -> tuple[str, str] | None:
    """The content words on either side of ``tie`` when it occurs once."""
    if tokens.count(tie) != 1:
        return None
    at = tokens.index(tie)
    words = [_QUESTION_NUMERAL.sub("", t) for t in tokens]
    left = [w for w in words[:at] if w and w not in STOPWORDS_ZH]
    right = [w for w in words[at + 1 :] if w and w not in STOPWORDS_ZH]
    return (left[-1], right[0]) if left and right else None


_QUESTION_NUMERAL = re.compile("^(?:几|多少)")
# Particles that tie one word to another: on which side of one a word stands is what it means
_TIES_ZH = words("ties_zh")


_CLAUSE_BREAK = re.compile(r"\S\s*[，,；;]\s*\S")
# Question words and quantifiers do not make a paraphrase long enough to move a word in
_NOT_COUNTED = WH_EN | frozenset("all every each some any no most few many".split())


def _passive(a: Analysis) -> bool:
    """A form of "be" followed by a past participle ("is … included")."""
    tokens = a.tokens
    for i, token in enumerate(tokens):
        if token in _BE and any(t.endswith("ed") or t in _PARTICIPLES for t in tokens[i + 1 :]):
            return True
    return False


_BE = words("be_en")
_PARTICIPLES = words("participles_en")


def _order_sequence(a: Analysis) -> list[str]:
    """Content words for the order guard: stemmed, English pronouns by person ("me" = "I"),
    and Chinese words holding a pronoun split ("我爱你" → 我 爱 你: who acts on whom)."""
    if not a.zh:  # negations are the negation guard's: "can't I" = "can I not"
        return [_ORDER_PERSONS.get(t) or _stem(t) for t in _content(a) if t not in NEGATIONS_EN]
    out = []
    for token in _content(a):
        if len(token) > 1 and any(c in _PRONOUN_CHARS for c in token):
            out += [c for c in token if c not in STOPWORDS_ZH]
        else:
            out.append(token)
    return out


_PRONOUN_CHARS = words("pronoun_chars_zh")
# A possessive is not the person acting: "How do I delete my account" / "the way to delete
# my account" ("her" is either, and stays a person)
_ORDER_PERSONS = {
    **PERSONS_EN,
    **{w: PERSONS_EN[w] + "'s" for w in "my mine our ours your yours his their theirs".split()},
}


def _content(a: Analysis) -> list[str]:
    # In Chinese text a Latin letter is a name ("A比B"), never the English article; in English
    # a stopword the rules found as a name is one too ("blood type A")
    kept = _COURTESY if a.about_words else frozenset()  # "say yes, please"
    if a.zh:
        return [t for t in a.tokens if t not in STOPWORDS_ZH or t in kept]
    return [t for t in a.tokens if t not in STOPWORDS_EN or t in a.entities or t in kept]


_COURTESY = frozenset(
    "please thanks thank thx sorry hi hello hey dear bye regards cheers 请 谢谢 不用 你好 您好 "
    "你们好 大家好 哈喽 嗨 在吗 在 吗 求问 请问".split()
)


def _rotation(p: list[int]) -> bool:
    """True when ``p`` is the identity with at most one block moved to the front or end."""
    n = len(p)
    # one block moved to the front: p = [k..m) + [0..k) + [m..n), runs consecutive
    for cut in range(n + 1):
        head, tail = p[:cut], p[cut:]
        if _consecutive(head) and (
            _ascending_without(tail, head) if head else all(p[i] == i for i in range(n))
        ):
            return True
    # one block moved to the end
    for cut in range(n):
        head, tail = p[:cut], p[cut:]
        if _consecutive(tail) and _ascending_without(head, tail):
            return True
    return False


def _consecutive(run: list[int]) -> bool:
    return all(run[i + 1] == run[i] + 1 for i in range(len(run) - 1))


def _ascending_without(rest: list[int], block: list[int]) -> bool:
    """``rest`` is in order (the values of ``block`` are missing from it)."""
    return all(rest[i] < rest[i + 1] for i in range(len(rest) - 1))


def added_content(a: Analysis, b: Analysis) -> str | None:
    """One question asks more: "best haircut" vs "best haircut for men", "手表" vs "女手表"."""
    only_a, only_b = _unmatched(a, b), _unmatched(b, a)
    if bool(only_a) != bool(only_b):
        return "added_content"
    return None


def any_substitution(a: Analysis, b: Analysis) -> str | None:
    """Any content word swapped for another: what a candidate scoring under the calibrated
    threshold must not differ in (the FAQ's 0.80 - 0.92: "Does home insurance cover fire
    damage?" / "… burst pipes?"), where the embedder tells paraphrases from look-alikes least."""
    only_a, only_b = _unmatched(a, b), _unmatched(b, a)
    return "substitution" if only_a and only_b else None


def substitution(a: Analysis, b: Analysis) -> str | None:
    """The same question about another thing: one content word swapped for one or two others
    ("将军令丢了" vs "将军令坏了", "the chemistry game" vs "the biology game", "用花呗付款"
    vs "用信用卡付款", where jieba splits 花呗 in two), or as many swapped as kept, every
    content word another included ("What is hypothyroidism?" vs "What is hyperthyroidism?":
    the threshold alone would decide)."""
    only_a, only_b = _unmatched(a, b), _unmatched(b, a)
    if not (only_a and only_b):
        return None
    shared = len(set(_content_stems(a)) & set(_content_stems(b)))
    if _another_topic(only_a, only_b, shared):
        return "substitution"
    if a.zh and b.zh and _another_topic(_spans(a, only_a, b), _spans(b, only_b, a), shared):
        return "substitution"  # a word jieba does not know comes in pieces: 魇魔 → 里的魇 / 魔
    return None


def _another_topic(only_a: set[str], only_b: set[str], shared: int) -> bool:
    """One word for one or two; or as many words swapped as kept ("the maximum dose of
    ibuprofen for adults" / "the side effects of …"), no word kept among them (hypo- /
    hyper-): another topic."""
    return len(only_a) + len(only_b) <= 3 or max(len(only_a), len(only_b)) >= shared


def _spans(a: Analysis, words: set[str], b: Analysis) -> set[str]:
    """The runs of ``a``'s text made of the characters of ``words`` that ``b`` lacks: one
    swapped word however jieba cut it; ``words`` itself where none is found."""
    missing = "".join({c for w in words for c in w if CJK.match(c) and c not in b.text})
    runs = {m.group() for m in re.finditer(f"[{missing}]+", a.text)} if missing else set()
    return runs or words


def _content_stems(a: Analysis) -> list[str]:
    """Content words, stemmed; numbers are left to the number guard."""
    skip = FILLERS_ZH | PRONOUNS_ZH if a.zh else FILLERS_EN | RELATIONS_EN | PERSONS_EN.keys()
    if a.about_words:  # "How do you write yes, please in French?": please is asked
        skip = skip - FILLERS_ZH - FILLERS_EN
    out = []
    for token in _content(a):
        if token in skip or token in NUMBER_WORDS_EN or _NUMERIC.fullmatch(token):
            continue
        if CJK.match(token):
            token = _ZH_NUMERAL_CHARS.sub("", token)  # "三天" → "天"
            if not token:
                continue
        out.append(_stem(token))
    return out


_NUMERIC = re.compile(r"[\d.,]+")
_ZH_NUMERAL_CHARS = re.compile("[零〇一二两三四五六七八九十百千万亿]")


def _unmatched(a: Analysis, b: Analysis) -> set[str]:
    """Content words of ``a`` that ``b`` lacks, or has fewer times ("a Roth IRA and a Roth
    401k" asks more than "a Roth IRA and a 401k").  Chinese segmentation varies between two
    phrasings, so a Chinese word is matched when all its characters occur in ``b``."""
    stems_b = Counter(_content_stems(b))
    extra = Counter(_content_stems(a)) - stems_b
    return {w for w in extra if not (CJK.match(w) and w not in stems_b and _within(w, b))}


def _within(word: str, b: Analysis) -> bool:
    """Every character of ``word`` in ``b``'s text, in order (two segmentations keep the order
    of the characters: 价保 is no 保价)."""
    rest = iter(b.text)
    return all(c in rest for c in word)


def literal(a: Analysis, b: Analysis) -> str | None:
    """ "`ls -R`" vs "`ls -r`", "\\W" vs "\\w", "10³" vs "103", an emoji with or without its
    joiners: code, flags, math and symbols are never paraphrased, so they must be identical;
    and so must what both questions put in quotes ("break a leg" / "break the leg")."""
    if a.literals != b.literals:
        return "literal"
    quoted_a, quoted_b = _quoted(a.text), _quoted(b.text)
    return "literal" if quoted_a and quoted_b and quoted_a != quoted_b else None


def _quoted(text: str) -> list[str]:
    return [" ".join(filter(None, m.groups())).strip() for m in _QUOTES.finditer(text)]


_QUOTES = re.compile(r"[\"“”]([^\"“”]+)[\"“”]|(?:^|\s)['‘]([^'‘’]+)['’]")


def apostrophe(a: Analysis, b: Analysis) -> str | None:
    """ "When do you use its?" / "… it's?", "were" / "we're", "well" / "we'll": a word with an
    apostrophe against the same letters without it, when those letters are a word of their
    own, is another word (a missing apostrophe is form only where the letters are no word:
    "dont", "whats"; "cant" and "wont" read as the negations on both sides)."""
    for x, y in ((a, b), (b, a)):
        bare_y = set(_LATIN.findall(y.text))
        for word in _APOSTROPHED.findall(x.text):
            bare = re.sub("['’]", "", word)
            if bare in bare_y and bare not in _READ_AS_NEGATION and known(bare):
                return "apostrophe"
    return None


_LATIN = re.compile(r"[a-z]+")
_APOSTROPHED = re.compile(r"\b[a-z]+(?:['’][a-z]+)+")
_READ_AS_NEGATION = words("read_as_negation_en")


def case(a: Analysis, b: Analysis) -> str | None:
    """ "Please Polish this" vs "Please polish this", ``US`` / ``us``, ``mW`` / ``MW``: the
    case of a word that tells two words apart (``forms.case_differs``, the same rule that
    decides whether two questions are one in form).  A question typed all in lower case (or
    capitals) tells no case, and is compared without it."""
    return "case" if case_differs(a.typed, b.typed) else None


def relation(a: Analysis, b: Analysis) -> str | None:
    """A swapped word of a closed class changes who does what to whom (English): a
    preposition ("with meals" / "between meals", "to the lungs" / "from the lungs"), a
    possessive with the same asker ("my password" / "his password"), and / or, another person
    ("he" / "she"), a degree ("a high dose" / "the highest dose"), or the agent of a passive on
    one side only ("acquired by Google" / "acquire Google")."""
    if a.zh or b.zh:
        return None
    words_a, words_b = set(a.tokens), set(b.tokens)
    if ("by" in words_a) != ("by" in words_b):
        return "relation"
    for classes in (_RELATION_CLASS, _CONJUNCTIONS):
        if _swapped(classes, words_a, words_b):
            return "relation"
    # he / she / they / we: another person is asked about (I / you is the generic "you")
    persons_a, persons_b = _persons(words_a) - _GENERIC, _persons(words_b) - _GENERIC
    if persons_a - persons_b and persons_b - persons_a:
        return "relation"
    if _degree_differs(a, b) or _degree_differs(b, a):
        return "relation"
    # "my password" / "his password" with the same asker; "How do I reset my password?" /
    # "How do you reset your password?" is the generic "you", the asker swapped along
    if _swapped(_POSSESSIVES, words_a, words_b) and _persons(words_a) == _persons(words_b):
        return "relation"
    return None


def _swapped(classes: dict[str, str], words_a: set[str], words_b: set[str]) -> bool:
    """Each side has a word of ``classes`` (by class) that the other lacks."""
    in_a = {classes[w] for w in words_a if w in classes}
    in_b = {classes[w] for w in words_b if w in classes}
    return bool(in_a - in_b and in_b - in_a)


def _degree_differs(a: Analysis, b: Analysis) -> bool:
    """ "the highest dose" / "a high dose": a superlative or comparative on one side whose
    plain adjective, after an article, is on the other ("lose weight fast" / "the fastest way
    to lose weight" is one question)."""
    plain_b = {w for d, w in zip(b.tokens, b.tokens[1:], strict=False) if d in ("a", "an", "the")}
    for word in set(a.tokens) - set(b.tokens):
        for suffix in ("est", "er"):
            plain = word[: -len(suffix)]
            if (
                word.endswith(suffix)
                and len(plain) >= 3
                and (plain in plain_b or plain + "e" in plain_b or plain[:-1] in plain_b)
            ):
                return True
    return False


def _persons(words: set[str]) -> set[str]:
    return {PERSONS_EN[w] for w in words if w in PERSONS_EN and w not in _POSSESSIVES}


_RELATION_CLASS = {w: w for w in RELATIONS_EN}
_POSSESSIVES = {w: PERSONS_EN[w] for w in ("my", "our", "your", "his", "her", "their")}
_GENERIC = frozenset(("1s", "2"))
_CONJUNCTIONS = {"and": "and", "or": "or", "nor": "nor"}


def question_form(a: Analysis, b: Analysis) -> str | None:
    """A question asking for a fact against one asking yes or no: "How tall is the Eiffel
    Tower?" / "Is the Eiffel Tower tall?", "How can I reset it?" / "Can I reset it?", 怎么注册 /
    可以注册吗.  (Which fact, when both ask for one, is the question-word guard's.)"""
    forms = {_form_of(a), _form_of(b)}
    return "question_form" if forms == {"fact", "yes/no"} else None


def _form_of(a: Analysis) -> str | None:
    if a.zh:
        if any(w in a.text for w in _FACT_ZH):
            return "fact"
        return "yes/no" if _YES_NO_ZH.search(a.text) else None
    first = a.tokens[0] if a.tokens else ""
    if first in _FACT_EN:
        return "fact"
    return "yes/no" if first in _AUXILIARIES_EN else None


_FACT_EN = words("fact_en")
_AUXILIARIES_EN = words("auxiliaries_en")
_FACT_ZH = phrases("fact_zh")
_YES_NO_ZH = re.compile(r"吗[?？]?$|是不是|能不能|可不可以|有没有|会不会|要不要|对不对|行不行")


def modality(a: Analysis, b: Analysis) -> str | None:
    """Permission, ability, obligation, advice and time are what a question asks: "Can I
    bring food?" / "Do I have to bring food?", "Will the Fed raise rates?" / "Did the Fed
    raise rates?", 可以 / 应该, 能 / 要, 会 / 了.  Refused when each side has a mood the other
    lacks, when "do" asks a fact that the other side asks with a mood ("Could humans live on
    Mars?" / "Do humans live on Mars?"; "Is it okay if dogs eat grapes?" asks what "Can dogs
    eat grapes?" asks), or when one asks about the past and the other not; a question
    for a fact with one side plain ("How do I …" / "How can I …") is one question."""
    moods_a, moods_b = _moods(a), _moods(b)
    if moods_a - moods_b and moods_b - moods_a:
        return "modality"
    for x, moods_x, moods_y in ((a, moods_a, moods_b), (b, moods_b, moods_a)):
        if moods_y and not moods_x and x.tokens and x.tokens[0] in _DO:
            return "modality"  # "Do humans live on Mars?" asks a fact, "Could humans …" not
    lead_a, lead_b = _leading_mood(a), _leading_mood(b)
    if lead_a and lead_b and lead_a != lead_b:
        return "modality"  # "Will a judge accept a will?" / "Must a judge accept a will?"
    tense_a, tense_b = _tense(a), _tense(b)
    if tense_a is not None and tense_b is not None and tense_a != tense_b:
        return "modality"
    if not (a.zh or b.zh):  # "… a flight that has departed" / "… that is departing"
        clauses_a, clauses_b = _clause_tenses(a), _clause_tenses(b)
        if len(clauses_a) == len(clauses_b) and any(
            x and y and x != y for x, y in zip(clauses_a, clauses_b, strict=True)
        ):
            return "modality"
    else:
        aspects = {_aspect_zh(a), _aspect_zh(b)}
        if len(aspects) == 2 and None not in aspects:
            return "modality"  # 得过新冠 (ever had it) / 得了新冠 (has it now)
    return None


def _clause_tenses(a: Analysis) -> list[str | None]:
    """The tense of each clause of an English question, as its first auxiliary says."""
    clauses: list[list[str]] = [[]]
    for t in a.tokens:
        if t in _CLAUSE_WORDS_EN:
            clauses.append([])
        clauses[-1].append(t)
    return [_english_tense(tuple(c)) for c in clauses]


_CLAUSE_WORDS_EN = words("clause_words_en")


def _aspect_zh(a: Analysis) -> str | None:
    """过 (ever: an experience) or 了 (done, and so now), where one of them marks a verb."""
    ever = any(t in ("过", "曾经") for t in a.tokens)
    done = "了" in a.tokens
    return "ever" if ever else "done" if done else None


def _moods(a: Analysis) -> set[str]:
    tokens = a.tokens
    if a.zh:
        moods = {MOODS_ZH[t] for t in tokens if t in MOODS_ZH}
        for before, (i, t) in zip(a.tags, enumerate(tokens[1:-1], 1), strict=False):
            if t == "得" and before[:1] in ("n", "r") and tokens[i + 1] not in _ASPECTS_ZH:
                moods.add("must")  # 学生得交学费吗 (děi: must), not 跑得快 nor 得了新冠
        return moods
    moods = {
        _MOODS_EN[t]
        for t, you, verb in zip(tokens, (*tokens[1:], ""), (*tokens[2:], "", ""), strict=False)
        if t in _MOODS_EN and not (t in _REQUESTS_EN and you == "you" and verb in _ASKED_EN)
    }  # "Can you tell me my balance?" asks for it ("Can you freeze rice?" asks if one can)
    for first, second in pairwise(tokens):
        if second == "to" and first in _MOOD_PHRASES_EN:  # "have to", "able to", "going to"
            moods.add(_MOOD_PHRASES_EN[first])
        elif second in ("to", "if") and first in _PERMITTED_EN:  # "Is it okay to tip?"
            moods.add("can")
    return moods


def _leading_mood(a: Analysis) -> str | None:
    """The mood of the modal a yes/no question opens with ("Will …", "Must …"), if any."""
    first = a.tokens[0] if a.tokens and not a.zh else ""
    return _MOODS_EN.get(first) if first in _LEADING_MODALS else None


_ASPECTS_ZH = words("aspects_zh")
_LEADING_MODALS = words("leading_modals_en")


def _tense(a: Analysis) -> str | None:
    """ "past" or "now", as the question's first auxiliary says ("Did the iPhone have …" is
    past, "Could it be revoked?" now; a perfect, "Has it been shipped?", past); in Chinese a
    past marker (了, 过) against a mood (你要学…吗); ``None`` when nothing says."""
    if a.zh:
        past = any(t in PAST_ZH for t in a.tokens)
        now = not past and any(t in MOODS_ZH for t in a.tokens)
        return None if past == now else "past" if past else "now"
    return _english_tense(a.tokens)


def _english_tense(tokens: tuple[str, ...]) -> str | None:
    if "been" in tokens:
        return "past"  # a perfect: "Has it been shipped?"
    for i, t in enumerate(tokens):  # the first auxiliary carries the tense: "Did the iPhone …"
        if t in _PAST_EN or (t in _HAVE and _participle_follows(tokens[i + 1 : i + 5])):
            return "past"  # "Has Tesla paid a dividend?" (not "Who has the best pizza?")
        if t in _NOW_EN or t in _MOODS_EN:
            return "now"
    return None


def _participle_follows(tokens: tuple[str, ...]) -> bool:
    """A past participle after "has"/"have" (its subject between): "paid", "shipped",
    "carried", "used" — a regular one only when its stem is an English word ("red" and
    "hundred" are none) — and not "has to"."""
    for t in tokens:
        if t == "to":
            return False
        if t in _IRREGULAR_PARTICIPLES:
            return True
        if len(t) > 4 and t.endswith("ed") and not t.endswith("eed"):
            stems = (t[:-2], t[:-1], t[:-3] if t[-3] == t[-4] else "", t[:-3] + "y")
            if any(s and known(s) for s in stems):
                return True
    return False


_HAVE = words("have_en")
_IRREGULAR_PARTICIPLES = words("irregular_participles_en")


_MOODS_EN = table("moods_en")
_MOOD_PHRASES_EN = table("mood_phrases_en")
_PERMITTED_EN = words("permitted_en")
_REQUESTS_EN = words("requests_en")
_ASKED_EN = words("asked_en")
_DO = words("do_en")
_PAST_EN = words("past_en")
_NOW_EN = words("now_en")


def focus(a: Analysis, b: Analysis) -> str | None:
    """Words that narrow what a yes/no question asks, on one side only: "Is it just for
    members?" / "Is it for members?", "Can kids fly alone?", "Can I bring my own food?", 自己 /
    才 / 只 / 都 / 还 / 再.  Often fillers elsewhere ("I just wanted to ask" is discourse,
    removed before the guards), here they change the answer."""
    if "yes/no" not in (_form_of(a), _form_of(b)):
        return None  # "怎样才能减肥" asks what "怎样减肥" asks: only a yes/no question narrows
    words = FOCUS_ZH if a.zh or b.zh else FOCUS_EN
    if {t for t in a.tokens if t in words} != {t for t in b.tokens if t in words}:
        return "focus"
    return None


DEFAULT_GUARDS: tuple[Guard, ...] = (
    literal,
    case,
    apostrophe,
    negation,
    antonym,
    number,
    entity,
    wh_word,
    question_form,
    order,
    relation,
    modality,
    focus,
    person,
    negated_verb,
    added_content,
    substitution,
)


# Every rule's id, ``family.rule``: what labels, the audit and the golden file
# (tests/golden/rule_verdicts.tsv) call it.  A guard of the app's own is ``custom.<name>``.
RULE_IDS: dict[Guard, str] = {
    literal: "literal.token",
    case: "literal.case",
    apostrophe: "literal.apostrophe",
    negation: "polarity.negation",
    antonym: "polarity.antonym",
    negated_verb: "polarity.negated_verb",
    number: "quantity.number",
    entity: "entity.name",
    wh_word: "question.word",
    question_form: "question.form",
    order: "structure.order",
    relation: "structure.relation",
    modality: "mood.modality",
    focus: "mood.focus",
    person: "person.addressed",
    added_content: "content.added",
    substitution: "content.substituted",
}
# Rules whose refusal marks a provable difference (a literal or code token, its case or
# apostrophe, a negation, an antonym, a number, a name): they refuse whatever the traffic
# shows.  The others are priors the app's own answers may overrule (``semantic/decision.py``).
HARD_RULES = frozenset(
    {
        "literal.token", "literal.case", "literal.apostrophe", "polarity.negation",
        "polarity.antonym", "quantity.number", "entity.name",
    }
)  # fmt: skip


def rule_id(guard: Guard) -> str:
    """A guard's rule id (``RULE_IDS``): the one name of a rule in verdicts, metrics
    (``guard_<id>``), the audit log and the docs."""
    return RULE_IDS.get(guard) or f"custom.{getattr(guard, '__name__', 'guard')}"


# What the audit logs of earlier versions called a refusal, before every path said the id.
_EARLIER_NAMES = {
    "literal": "literal.token", "case": "literal.case", "apostrophe": "literal.apostrophe",
    "negation": "polarity.negation", "antonym": "polarity.antonym", "number": "quantity.number",
    "entity": "entity.name", "question_word": "question.word", "wh_word": "question.word",
    "question_form": "question.form", "order": "structure.order",
    "relation": "structure.relation", "modality": "mood.modality", "focus": "mood.focus",
    "person": "person.addressed", "negated_verb": "polarity.negated_verb",
    "added_content": "content.added", "substitution": "content.substituted",
}  # fmt: skip


def current_name(name: str) -> str:
    """A rule named as an earlier version's audit log names it, by its id (other names, such as
    ``threshold``, as they are)."""
    return _EARLIER_NAMES.get(name, name)


def verdicts(
    cached: str,
    new: str,
    guards: Sequence[Guard] = DEFAULT_GUARDS,
    *,
    all_rules: bool = False,
    first: bool = False,
) -> tuple[str, ...]:
    """The ids of the rules that refuse the pair: the evidence the learned decision reads.
    The hard rules run first and the first that refuses is the answer (nothing overrules it);
    otherwise every soft rule's verdict, in order (``first``: the first only).
    ``all_rules``: every rule's, hard ones included (the golden file)."""
    a, b = _analyses(cached, new)
    if not all_rules:
        for guard in guards:
            if rule_id(guard) in HARD_RULES and guard(a, b) is not None:
                return (rule_id(guard),)
        guards = [g for g in guards if rule_id(g) not in HARD_RULES]
    fired = (rule_id(guard) for guard in guards if guard(a, b) is not None)
    return tuple(itertools.islice(fired, 1) if first else fired)


# The rules that refuse for the content words that differ: a difference the app's answers show
# harmless (``decision.py``, equivalences) keeps them from refusing it again in that pool.
WORD_RULES = frozenset({"content.substituted", "content.added"})


def differing_words(cached: str, new: str) -> str:
    """The content words (stemmed) only one of the two questions has, as one key: each
    side's sorted, the two sides sorted ("" on a side with none): the same difference in
    other questions gives the same key."""
    a, b = _analyses(cached, new)
    sides = sorted(" ".join(sorted(words)) for words in (_unmatched(a, b), _unmatched(b, a)))
    return "|".join(sides)


def words_covered(new: str, cached: str, other: str) -> bool:
    """Whether every content word ``new`` has and ``cached`` lacks is a word of ``other``:
    the question's wording is one the paraphrases already use."""
    a, b = _analyses(cached, new)
    extra = _unmatched(b, a)
    if not extra:
        return True
    c, _ = _analyses(other, new)
    return extra <= set(_content_stems(c))


def group_explains(new: str, cached: str, others: Sequence[str]) -> bool:
    """Whether the content words ``new`` and ``cached`` differ in are differences the other
    questions of ``cached``'s answer group already show harmless: each word only ``new``
    has is a word of one of them, and each word only ``cached`` has is missing from one of
    them ("… for children" next to a group that only ever asks "… for adults" is not)."""
    a, b = _analyses(cached, new)
    only_new, only_cached = _unmatched(b, a), _unmatched(a, b)
    if not (only_new or only_cached):
        return True
    seen = [_analyses(other, new)[0] for other in others]
    has = [(set(_content_stems(x)), x) for x in seen]

    def holds(word: str, stems: set[str], x: Analysis) -> bool:
        return word in stems or bool(CJK.match(word) and _within(word, x))

    return all(any(holds(w, st, x) for st, x in has) for w in only_new) and all(
        any(not holds(w, st, x) for st, x in has) for w in only_cached
    )


def _analyses(cached: str, new: str) -> tuple[Analysis, Analysis]:
    """What the guards compare of two questions (see ``check``)."""
    typed_a, typed_b = folded(cached), folded(new)
    compared_a, compared_b = unify(canonical(typed_a), canonical(typed_b))
    return analyze(compared_a, typed_a), analyze(compared_b, typed_b)


def check(
    cached: str, new: str, guards: Sequence[Guard] = DEFAULT_GUARDS
) -> tuple[str | None, tuple[str, ...]]:
    """Run ``guards`` on two questions: (the id of the first rule that refuses or ``None``,
    the ids of the rules run).

    The guards compare the canonical questions (``folded``: the canonical form; then
    ``canonical``: no greetings, fillers or thanks) with the compounds one writes in parts and
    the other as one word written alike (``forms.unify``).  Nothing else is rewritten: a word
    that looks like a typo of another is another word until the app's traffic says otherwise."""
    a, b = _analyses(cached, new)
    ran = []
    for guard in guards:
        ran.append(rule_id(guard))
        if guard(a, b) is not None:
            return ran[-1], tuple(ran)
    return None, tuple(ran)
