"""Word lists behind the guards, English and Chinese, read from ``words/*.txt`` (one word or
phrase a line, ``#`` comments; ``runtime.tables.word_list``).  Data only; the rules are in
``rules/``, the table of them in checks.py.  The number words stay code: they map to values."""

from __future__ import annotations

from pathlib import Path

from ...runtime.tables import word_list

_WORDS = Path(__file__).with_name("words")


def phrases(name: str) -> tuple[str, ...]:
    """The lines of ``words/<name>.txt``, in file order."""
    return word_list(_WORDS / f"{name}.txt")


def words(name: str) -> frozenset[str]:
    """The words of ``words/<name>.txt``, as a set."""
    return frozenset(phrases(name))


def pairs(name: str) -> list[tuple[str, str]]:
    """Two words a line (``register unregister``), in file order."""
    return [(a, b) for a, b in (line.split() for line in phrases(name))]


def table(name: str) -> dict[str, str]:
    """A word and what it maps to a line (``could can``; the rest of the line, "" where none),
    in file order."""
    out = {}
    for line in phrases(name):
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


# Negation markers. English forms are matched as whole tokens ("n't" becomes "not" first).
NEGATIONS_EN = words("negations_en")

# Chinese negators, each with the compounds in which the character does not negate.
NEGATIONS_ZH = table("negations_zh")

# Pairs of opposite actions and qualities. A guard rejects two questions when one holds a
# word of a pair and the other holds its opposite (and neither holds both).
ANTONYMS_EN = pairs("antonyms_en")

ANTONYMS_ZH = pairs("antonyms_zh")

# Words that ask different questions: two questions asking with different ones differ.
WH_EN = words("wh_en")
WH_ZH = phrases("wh_zh")

# English words that carry no content for the order and entity guards.  Relation words
# ("than", "from", "to", "vs") are NOT here: swapping what stands around them changes meaning.
STOPWORDS_EN = words("stopwords_en")

# Words that add no content when one question has them and the other does not.
FILLERS_EN = words("fillers_en")
FILLERS_ZH = words("fillers_zh")

# Relation words: they order the question (order guard) but are not content of their own.
RELATIONS_EN = words("relations_en")

IRREGULAR_EN = table("irregular_en")
# Prefixes and suffixes that turn a word into its opposite: fair/unfair, careful/careless.
NEGATING_PREFIXES = phrases("negating_prefixes_en")

# Chinese moods: permission or ability, obligation, a future (the modality guard), and the
# marks of a past.
MOODS_ZH = table("moods_zh")
PAST_ZH = words("past_zh")

# Words that narrow what is asked ("just for members", 自己, 才): the focus guard.
FOCUS_EN = words("focus_en")
FOCUS_ZH = words("focus_zh")

# Chinese function words dropped by the order guard ("和" is symmetric: "A和B" = "B和A").
STOPWORDS_ZH = words("stopwords_zh")
# Personal pronouns by person: who does what to whom orders a question ("Do you love me?" /
# "Do I love you?"), yet a pronoun adds no content of its own.
PERSONS_EN = table("persons_en")
# Pronouns order a Chinese question ("我借给他" / "他借给我") but add no content of their own.
PRONOUNS_ZH = words("pronouns_zh")

# Chinese numerals; a lone "一" counts only before a measure word ("一个", not "一下").
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
             "七": 7, "八": 8, "九": 9}  # fmt: skip
ZH_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
ZH_MEASURES = words("measures_zh")
ZH_NOT_NUMBERS = phrases("not_numbers_zh")

NUMBER_WORDS_EN = {
    "zero": 0, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "dozen": 12, "half": 0.5,
}  # fmt: skip
