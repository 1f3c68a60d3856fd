"""Structure rules (``structure.*``): who does what to whom: the order of the words the
questions share, and the closed-class words that relate them (prepositions, and / or,
persons, degrees, a passive's agent)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise

from ....key.script import CJK, HAN
from ..analysis import Analysis, analyze
from ..lexicon import (
    NEGATIONS_EN,
    PERSONS_EN,
    RELATIONS_EN,
    STOPWORDS_ZH,
    WH_EN,
    phrases,
    table,
    words,
)
from .shared import content, content_stems, stem


def order(a: Analysis, b: Analysis) -> str | None:
    """ "Is A better than B" vs "Is B better than A", "A比B好" vs "B比A好".

    The content words the two questions share must keep their order; in Chinese up to moving
    one block to the front or the end ("怎么重置密码" vs "密码怎么重置" is the same question;
    moving a word into the middle re-attaches it: "the original version … the mild edition" vs
    "the mild version … the original edition")."""
    if a.zh and b.zh and (_zh_reordered(a, b) or _copula_swapped(a, b)):
        return "order"  # (by where words stand: jieba may split the two texts apart)
    if _roles_swapped(a, b) or _roles_swapped(b, a) or _places_swapped(a, b):
        return "order"  # "How do I follow someone" / "How does someone follow me"
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
    # he / she / they / we: another person is asked about (I / you is the generic "you"); he
    # or she on one side only, against the asker on the other ("Is it too late for me / for
    # him to learn piano?")
    everyone_a, everyone_b = _persons(words_a), _persons(words_b)
    persons_a, persons_b = everyone_a - _GENERIC, everyone_b - _GENERIC
    if persons_a - persons_b and persons_b - persons_a:
        return "relation"
    for x, y in ((everyone_a, everyone_b), (everyone_b, everyone_a)):
        if x & _THIRD and y and not y & _THIRD:
            return "relation"
    if _degree_differs(a, b) or _degree_differs(b, a):
        return "relation"
    # "my password" / "his password"; "How do I reset my password?" / "How do you reset your
    # password?" is the generic "you": my / your with the asker swapped along
    if _swapped(_POSSESSIVES, words_a, words_b) and not (
        _generic_you(words_a, words_b) and _persons(words_a) != _persons(words_b)
    ):
        return "relation"
    return None


def _generic_you(words_a: set[str], words_b: set[str]) -> bool:
    """The owners the two sides do not share are each the generic asker's: my, our, your,
    their, or "his or her" ("How can we improve our reflexes?" / "How can I improve my
    reflexes?"); not "his" alone ("I forgot my password" / "I forgot his password")."""
    owners_a, owners_b = _owners_en(words_a), _owners_en(words_b)
    only_a, only_b = owners_a - owners_b, owners_b - owners_a
    return bool(only_a and only_b) and (only_a | only_b) <= _GENERIC_OWNERS


def _owners_en(words: set[str]) -> set[str]:
    owners = {_POSSESSIVES[w] for w in words if w in _POSSESSIVES}
    if {"his", "her"} <= words:  # "his or her": anyone's
        owners = (owners - {"3m", "3f"}) | {"3p"}
    return owners


_GENERIC_OWNERS = frozenset(("1s", "1p", "2", "3p"))


# Both languages: the order of the shared words -----------------------------------------------

# A person as the object of a word: "follow me", "联系我" (not 我的, a possessive; "her" is
# either, "them" and "it" as often things said before: "hiccups won't stop, how do I get rid
# of them", and "us" the US once case-folded)
_OBJECT_PERSONS_EN = words("object_persons_en")
# ... and in Chinese the one asked for, which stands where it acts: 猫吃什么 / 什么吃猫
_PERSONS_ZH = words("role_persons_zh")
_COPULAS_ZH = words("copulas_zh")
_ASKED_ZH = frozenset(("谁", "什么"))
_FINAL_ZH = words("final_particles_zh")


def _roles_swapped(a: Analysis, b: Analysis) -> bool:
    """The asker changes sides: a word ``a`` follows with a person ("does someone follow me",
    "房东怎么联系我") ``b`` follows with a word that ``a`` says before it ("do I follow someone",
    "怎么联系房东").  The topic moved to the front with no person left behind ("密码怎么重置" /
    "怎么重置密码") is one question, and the order rule lets it be."""
    persons, copulas = (_PERSONS_ZH, _COPULAS_ZH) if a.zh else (_OBJECT_PERSONS_EN, _BE)
    word = (lambda t: t) if a.zh else stem
    x, y = [word(t) for t in a.tokens], [word(t) for t in b.tokens]
    for i, person in enumerate(a.tokens[1:]):  # (a.tokens[i]: the word it follows)
        if person not in persons or (a.zh and a.tokens[i + 2 : i + 3] == ("的",)):
            continue
        if a.tokens[i] in copulas:  # "谁是X的父亲" / "X的父亲是谁": 是 goes both ways
            continue
        if person in _ASKED_ZH and not _last_word(a.tokens[i + 2 :]):
            continue  # "吃什么好处": 什么 asks which benefits, not what is eaten
        if x.count(x[i]) != 1 or y.count(x[i]) != 1:
            continue  # (the word said once on each side: "送…送什么")
        for there, moved in pairwise(y):
            if there == x[i] and moved in x[:i] and moved not in x[i + 1 :]:
                return True
    return False


# Who acts, by person ("me" is "I"), and who owns ("my" is "I" too): what moved, in English
_ACTORS_EN = table("actors_en")
_OWNERS_EN = table("owners_en")


def _places_swapped(a: Analysis, b: Analysis) -> bool:
    """Who acts and whose thing it is trade places (English): "Can my employer see my
    browsing history?" / "Can I see my employer's browsing history?", "Can you access my
    files?" / "Can I access your files?".  Around a word both say once, the last word before it
    on one side stands after it on the other, where a person now acts ("I").  Not in a
    passive, nor around what one *is* ("if I am shy and socially awkward"), nor where the
    moved word is an adverb or a role ("I … as a musician")."""
    if a.zh or b.zh or _passive(a) or _passive(b):
        return False
    ma, mb = _mentions_en(a), _mentions_en(b)
    for word in {m for m in ma if m and m not in _ACTORS_EN.values()} & set(mb):
        if ma.count(word) != 1 or mb.count(word) != 1:
            continue
        i, j = ma.index(word), mb.index(word)
        if _moved_to_a_person(a, ma, i, b, mb, j) or _moved_to_a_person(b, mb, j, a, ma, i):
            return True
    return False


def _moved_to_a_person(
    x: Analysis, mx: list[str | None], i: int, y: Analysis, my: list[str | None], j: int
) -> bool:
    """The last word ``x`` says before its ``i``-th stands after ``y``'s ``j``-th (the same
    word), and a person stands last before it in ``y``."""
    before_x = [k for k in range(i) if mx[k]]
    before_y = [k for k in range(j) if my[k]]
    if not before_x or not before_y or y.tokens[before_y[-1]] not in _ACTORS_EN:
        return False
    moved = mx[before_x[-1]]
    if moved not in my[j + 1 :] or moved in mx[i + 1 :] or moved in my[:j]:
        return False
    k = my.index(moved, j + 1)
    if _ROLE_OR_PLACE & set(y.tokens[max(0, k - 2) : k]):
        return False  # "… money as a musician?" asks what musicians do; "… do we have in India?"
    if not (_someone(x, before_x[-1]) and _someone(y, k)):
        return False  # "lose weight fast" / "the fastest way to lose weight": no one moved
    # each right before the word, but for auxiliaries ("Can my employer see", "have to pay");
    # not what one *is* ("if I am shy and socially awkward"), nor a word's modifier ("reset my
    # router to factory settings")
    return _auxiliaries(x.tokens[before_x[-1] + 1 : i]) and _auxiliaries(
        y.tokens[before_y[-1] + 1 : j]
    )


def _auxiliaries(tokens: tuple[str, ...]) -> bool:
    """Only auxiliaries, adverbs in -ly, and "to" after one ("have to", "want to")."""
    return all(
        t in _AUXILIARIES or t.endswith("ly") or (t == "to" and i and tokens[i - 1] in _AUXILIARIES)
        for i, t in enumerate(tokens)
    )


def _someone(a: Analysis, k: int) -> bool:
    """The ``k``-th token names someone or something that may act: a person, or a word after
    an owner or an article ("my employer", "the landlord")."""
    token, before = a.tokens[k], a.tokens[k - 1] if k else ""
    return (
        token in _ACTORS_EN or token in _OWNERS_EN or before in _DETERMINERS
    ) or token in a.entities  # "Can Apple see my iMessages?"


_DETERMINERS = words("determiners_en")
_AUXILIARIES = words("role_auxiliaries_en")
_ROLE_OR_PLACE = words("role_or_place_en")
# Verbs the stopword list holds that still say who does what: "Can my roommate use my account?"
_ACTING_STOPWORDS = words("acting_stopwords_en")


def _mentions_en(a: Analysis) -> list[str | None]:
    """Each token as the order of roles reads it: a person by person, an owner by its person,
    a content word by its stem, and None for the rest (stopwords, adverbs in -ly)."""
    kept = set(content_stems(a))
    out: list[str | None] = []
    for token in a.tokens:
        person = _ACTORS_EN.get(token) or _OWNERS_EN.get(token)
        word = stem(token)
        content = (word in kept and not token.endswith("ly")) or token in _ACTING_STOPWORDS
        out.append(person or (word if content else None))
    return out


def _last_word(rest: tuple[str, ...]) -> bool:
    """Nothing but final particles and punctuation follows."""
    return all(t in _FINAL_ZH or not t.isalnum() for t in rest)


_CLAUSE_BREAK = re.compile(r"\S\s*[，,；;]\s*\S")
# Question words and quantifiers do not make a paraphrase long enough to move a word in
_NOT_COUNTED = WH_EN | words("not_counted_en")


def _order_sequence(a: Analysis) -> list[str]:
    """Content words for the order guard: stemmed, English pronouns by person ("me" = "I"),
    and Chinese words holding a pronoun split ("我爱你" → 我 爱 你: who acts on whom)."""
    return _order_sequence_zh(a) if a.zh else _order_sequence_en(a)


def _quantified(a: Analysis) -> bool:
    """A universal quantifier ("every", 所有): the order of what it scopes over is the roles."""
    return _quantified_zh(a) if a.zh else _quantified_en(a)


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


# English -------------------------------------------------------------------------------------

_POSSESSIVE = re.compile(r"\b([a-z]+)['’]s\s+([a-z]+)\b")
_QUANTIFIERS_EN = words("quantifiers_en")
_DO_SUPPORT = re.compile(r"\b(?:which|what|who|whom)\b(?:\s+[a-z]+)?\s+(?:do|does|did)\b")
_BE = words("be_en")
_PARTICIPLES = words("participles_en")


# A possessive is not the person acting: "How do I delete my account" / "the way to delete
# my account" ("her" is either, and stays a person)
_ORDER_PERSONS = {
    **PERSONS_EN,
    **{w: PERSONS_EN[w] + "'s" for w in "my mine our ours your yours his their theirs".split()},
}


def _order_sequence_en(a: Analysis) -> list[str]:
    # negations are the negation guard's: "can't I" = "can I not"
    return [_ORDER_PERSONS.get(t) or stem(t) for t in content(a) if t not in NEGATIONS_EN]


def _quantified_en(a: Analysis) -> bool:
    return any(t in _QUANTIFIERS_EN for t in a.tokens)


def _do_support(a: Analysis) -> bool:
    return not a.zh and bool(_DO_SUPPORT.search(a.text))


def _passive(a: Analysis) -> bool:
    """A form of "be" followed by a past participle ("is … included")."""
    tokens = a.tokens
    for i, token in enumerate(tokens):
        if token in _BE and any(t.endswith("ed") or t in _PARTICIPLES for t in tokens[i + 1 :]):
            return True
    return False


_RELATION_CLASS = {w: w for w in RELATIONS_EN}
_POSSESSIVES = {w: PERSONS_EN[w] for w in ("my", "our", "your", "his", "her", "their")}
_GENERIC = frozenset(("1s", "2"))
_THIRD = frozenset(("3m", "3f"))
_CONJUNCTIONS = {"and": "and", "or": "or", "nor": "nor"}


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


# Chinese -------------------------------------------------------------------------------------

_QUANTIFIERS_ZH = phrases("quantifiers_zh")
_PRONOUN_CHARS = words("pronoun_chars_zh")
_CLAUSE_SPLIT = re.compile(r"\s*[，,；;]\s*")
_QUESTION_NUMERAL = re.compile("^(?:几|多少)")


# Particles that tie one word to another: on which side of one a word stands is what it means
_TIES_ZH = words("ties_zh")


def _order_sequence_zh(a: Analysis) -> list[str]:
    out = []
    for token in content(a):
        if len(token) > 1 and any(c in _PRONOUN_CHARS for c in token):
            out += [c for c in token if c not in STOPWORDS_ZH]
        else:
            out.append(token)
    return out


def _quantified_zh(a: Analysis) -> bool:
    return any(q in a.text for q in _QUANTIFIERS_ZH)


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


def _zh_reordered(a: Analysis, b: Analysis) -> bool:
    """Two Chinese questions whose shared words, or the words a particle ties, stand in
    another order, in the whole or clause by clause."""
    return _possessor_asked(a, b) or any(
        _ties_swapped(x, y) or not _rotation(_zh_placement(x, y)) for x, y in _zh_clauses(a, b)
    )


def _possessor_asked(a: Analysis, b: Analysis) -> bool:
    """Whose it is is asked on one side only: "秦始皇是谁的父亲" (whose father he is) /
    "秦始皇的父亲是谁" (who his father is): 谁的 W on one side, another word's W on the
    other.  By characters: jieba may glue 的 to a neighbour (哈利波 / 特的)."""
    for x, y in ((a.text, b.text), (b.text, a.text)):
        for found in _WHOSE.finditer(x):
            owned = found.group(1)
            for n in range(len(owned), 0, -1):  # the owned word, longest first
                if "的" + owned[:n] in y and "谁的" + owned[:n] not in y:
                    return True
    return False


_WHOSE = re.compile(f"谁的([{HAN}]{{1,4}})")


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


def _zh_clauses(a: Analysis, b: Analysis) -> list[tuple[Analysis, Analysis]]:
    """The two questions, and clause by clause when both have as many (a word that recurs in
    the whole, 甲 in "甲欠乙的钱，乙能起诉甲吗", occurs once in its clause)."""
    pairs = [(a, b)]
    clauses_a, clauses_b = _CLAUSE_SPLIT.split(a.text), _CLAUSE_SPLIT.split(b.text)
    if 1 < len(clauses_a) == len(clauses_b) <= 8:
        pairs += [(analyze(x), analyze(y)) for x, y in zip(clauses_a, clauses_b, strict=True)]
    return pairs


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
