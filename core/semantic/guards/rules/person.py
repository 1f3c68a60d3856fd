"""Person rule (``person.addressed``): another person meant ("你妈妈" / "我妈妈"), or the one
asked addressed on one side only ("What is your type?" / "What are the types?")."""

from __future__ import annotations

import re

from ..analysis import Analysis
from ..lexicon import RELATIONS_EN, table, words


def person(a: Analysis, b: Analysis) -> str | None:
    """Another person meant: "你妈妈" / "我妈妈", or the one asked addressed on one side only
    ("What is your type?" / "What are the types?"; "How do I …my…" / "How do you …your…" is
    one question)."""
    if a.zh or b.zh:
        return _person_zh(a, b)
    return _person_en(a, b)


# English -------------------------------------------------------------------------------------

# English words that address the one asked: a possessive, or "you" after a preposition --------
_ADDRESSEE = words("addressee_en")
_PERSON_WORDS = words("person_words_en")


def _person_en(a: Analysis, b: Analysis) -> str | None:
    for x, y in ((a, b), (b, a)):
        if _addressed(x.tokens) and not _PERSON_WORDS & set(y.tokens):
            return "person"
    return None


def _addressed(tokens: tuple[str, ...]) -> bool:
    if _ADDRESSEE & set(tokens):
        return True
    return any(t == "you" and i and tokens[i - 1] in RELATIONS_EN for i, t in enumerate(tokens))


# Chinese -------------------------------------------------------------------------------------

# Chinese personal pronouns by person, longest first (我们 before 我): 您 is a polite 你, and ------
# number is left out (你 / 你们 are swapped freely in questions asked of an assistant)
_ZH_PERSONS = table("persons_zh")
_ZH_PRONOUN = re.compile("|".join(sorted(_ZH_PERSONS, key=len, reverse=True)))


def _person_zh(a: Analysis, b: Analysis) -> str | None:
    """Each side meaning a person the other does not (a person dropped is often the asker left
    implicit: 我的提问 / 提问)."""
    persons_a, persons_b = _zh_persons(a.text), _zh_persons(b.text)
    return "person" if persons_a - persons_b and persons_b - persons_a else None


def _zh_persons(text: str) -> set[str]:
    return {_ZH_PERSONS[m.group()] for m in _ZH_PRONOUN.finditer(text)}
