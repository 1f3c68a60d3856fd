"""Guards on who is meant: the person asked about, and what a negation negates.

Two questions alike in every content word still differ when another person is meant
("你妈妈叫什么" / "我妈妈叫什么", "What are your predictions?" / "What are some predictions?")
or when the negation sits on another verb ("What if you don't …?" / "What if you can't …?").
Each guard takes two ``guards.Analysis`` objects and returns a reason or ``None``.
"""

from __future__ import annotations

import re

from .analysis import Analysis
from .lexicon import RELATIONS_EN, table, words

__all__ = ["negated_verb", "person"]

# Chinese personal pronouns by person, longest first (我们 before 我): 您 is a polite 你, and
# number is left out (你 / 你们 are swapped freely in questions asked of an assistant)
_ZH_PERSONS = table("persons_zh")
_ZH_PRONOUN = re.compile("|".join(sorted(_ZH_PERSONS, key=len, reverse=True)))
# English words that address the one asked: a possessive, or "you" after a preposition
_ADDRESSEE = words("addressee_en")
_PERSON_WORDS = words("person_words_en")
# The verb a negation sits on, by class ("don't" and "didn't" both "do"; tense is not here)
_AUXILIARY = table("auxiliary_en")


def person(a: Analysis, b: Analysis) -> str | None:
    """Another person meant: "你妈妈" / "我妈妈", or the one asked addressed on one side only
    ("What is your type?" / "What are the types?"; "How do I …my…" / "How do you …your…" is
    one question)."""
    if a.zh or b.zh:  # a person dropped is often the asker left implicit: 我的提问 / 提问
        persons_a, persons_b = _zh_persons(a.text), _zh_persons(b.text)
        return "person" if persons_a - persons_b and persons_b - persons_a else None
    for x, y in ((a, b), (b, a)):
        if _addressed(x.tokens) and not _PERSON_WORDS & set(y.tokens):
            return "person"
    return None


def _zh_persons(text: str) -> set[str]:
    return {_ZH_PERSONS[m.group()] for m in _ZH_PRONOUN.finditer(text)}


def _addressed(tokens: tuple[str, ...]) -> bool:
    if _ADDRESSEE & set(tokens):
        return True
    return any(t == "you" and i and tokens[i - 1] in RELATIONS_EN for i, t in enumerate(tokens))


def negated_verb(a: Analysis, b: Analysis) -> str | None:
    """ "What happens if you don't eat?" / "… if you can't eat?": as many negations, on verbs
    of another kind ("can't I" = "can I not"; "didn't" / "don't" is the relation guard's)."""
    if a.zh or b.zh:
        return None
    verbs_a, verbs_b = _negated(a.tokens), _negated(b.tokens)
    return "negation" if len(verbs_a) == len(verbs_b) and verbs_a != verbs_b else None


def _negated(tokens: tuple[str, ...]) -> list[str]:
    """The auxiliary class before each "not" (up to two words back: "can I not")."""
    out = []
    for i, token in enumerate(tokens):
        if token == "not":
            before = [_AUXILIARY[t] for t in tokens[max(0, i - 2) : i] if t in _AUXILIARY]
            out.append(before[-1] if before else "")
    return sorted(out)
