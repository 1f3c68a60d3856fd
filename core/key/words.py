"""English word lists: which spellings are words, and which are words in lower case.

Loaded on first use (a few hundred milliseconds; the cache's warm-up asks for them early):

- symspellpy's bundled English dictionary (82,765 words);
- wordfreq's small English list (words common on the web: "tumor", "theater", which the
  dated, British symspellpy list lacks);
- english-words' Webster's Second (web2), which keeps names capitalized: "polish" is a word
  in lower case, "facebook" is not.

The first and the last are kept as word tables (``runtime/tables.py``: tries, built once per
machine).  These lists only ever *refuse* to treat two spellings as
one (a word is not a spelling variant of another word); a word missing from them is no
evidence of anything.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from ..runtime.tables import WordTable, word_table

__all__ = [
    "FUNCTION_WORDS_EN",
    "common_on_the_web",
    "is_english_word",
    "is_lower_case_word",
    "known",
    "package_dir",
]


# Closed-class English words: determiners, pronouns, prepositions, conjunctions, auxiliaries
# and modals, and the adverbs that build phrases ("now here", "a part", "every day", "may be":
# written as one word these are other words, so a space next to one of them is never form)
FUNCTION_WORDS_EN = frozenset(
    "a an the this that these those all any some every each no none both either neither "
    "i me my mine you your yours he him his she her hers it its we us our ours they them "
    "their theirs who whom whose what which where when why how "
    "in on at by for from to of off out up down over under into onto upon with within "
    "without about above below after before between through across along around among "
    "and or nor but if so than then as not "
    "be is am are was were been being do does did have has had can could may might must "
    "shall should will would "
    "now here there ever never also just only still even too very much many more most few "
    "such same own other another".split()
)


def known(word: str) -> bool:
    """A word of symspellpy's dictionary, or one common on the web (lower case)."""
    return is_english_word(word) or common_on_the_web(word)


def is_english_word(word: str) -> bool:
    """True for a word of symspellpy's English dictionary (lower case)."""
    return word in _english()


@lru_cache(maxsize=50_000)
def common_on_the_web(word: str) -> bool:
    """A frequency of one in a million or more in wordfreq's small English list."""
    from wordfreq import word_frequency

    return word_frequency(word, "en", wordlist="small") > 0


def is_lower_case_word(word: str) -> bool:
    """True when ``word`` (folded) is also an ordinary word in lower case — "polish", "turkey",
    "us", "windows" — in Webster's list and in symspellpy's; false for a name only:
    "facebook", "gmail", "europe"."""
    forms = {word}
    if len(word) > 3 and word.endswith("s"):  # a plural: "windows" → "window"
        forms |= {word[:-1], word[:-2] if word.endswith("es") else word, word[:-3] + "y"}
    return any(w in _lower_case_words() for w in forms)


@lru_cache(maxsize=1)
def _lower_case_words() -> WordTable:
    from english_words.util import get_data_file_name

    web2 = package_dir("english_words") / "data" / get_data_file_name("web2", ["alpha"])

    def words() -> Iterator[str]:
        from english_words import get_english_words_set

        return (w for w in get_english_words_set(["web2"], alpha=True) if w in _english())

    return word_table("lower-case-words", [web2, _symspell_list()], words)


@lru_cache(maxsize=1)
def _english() -> WordTable:
    """symspellpy's bundled English dictionary (82,765 words), as a set."""
    return word_table("english-words", [_symspell_list()], _symspell_words)


def _symspell_list() -> Path:
    return package_dir("symspellpy") / "frequency_dictionary_en_82_765.txt"


def _symspell_words() -> Iterator[str]:
    with _symspell_list().open(encoding="utf-8") as f:
        for line in f:
            word = line.partition(" ")[0].strip()
            if word:
                yield word


def package_dir(name: str) -> Path:
    """The folder of an installed package, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"tricache needs {name}: pip install {name}")
    return Path(next(iter(spec.submodule_search_locations)))
