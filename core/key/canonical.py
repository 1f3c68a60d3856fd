"""The canonical question: what a user asks, without what is said around it.

Users wrap a question in discourse that asks nothing: fillers ("um", "那个，"), greetings
("hi there", "您好"), lead-ins ("I was just wondering if", "请问", "我想知道"), politeness
("if you don't mind", "麻烦你") and thanks ("Thanks so much", "谢谢哈").  The semantic tier and
the FAQ compare canonical questions: the embedder sees them, and so do the guards — "Quick
question if you don't mind: …" must not read as a negation.

The phrases come from curated lists (``discourse/*.txt``: openings, lead-ins, words set off by
punctuation, closings) and are removed only where discourse stands: at the start, or at the end
after punctuation; a word that can be content ("hello world", "亲子", "say thank you") goes only
when punctuation sets it off, and thanks at the end stay in a question about a phrase ("How do
I politely say no, thanks?"). Nothing is removed inside the question, and a question that would
be left without words stays as typed. A yes/no clause that a lead-in embedded is asked again
when its subject is a pronoun: "I'd like to know if you ship to Canada" asks "do you ship to
Canada?", "I was wondering if I can't …" asks "can't I …?". The exact tier never sees this
form: its key holds the message as typed (normalized).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from ..runtime.tables import word_list
from .forms import mentions_phrase

__all__ = ["about_its_words", "canonical"]

_DISCOURSE = Path(__file__).with_name("discourse")


def _listed(name: str) -> tuple[str, ...]:
    """The phrases of ``discourse/<name>.txt``, one a line."""
    return word_list(_DISCOURSE / f"{name}.txt")


# Phrases of the first two lists go wherever they stand at the start; SET_OFF words only when
# punctuation (or another opening phrase) follows them, since "hello world" or "亲子" are
# content.  Closings go at the end, only after punctuation ("How do you say thank you?").
# A lead-in that takes a clause also takes its "if" / "whether": "I was wondering if …".
OPENINGS_EN, LEAD_INS_EN, SET_OFF_EN, CLOSINGS_EN = (
    _listed(n) for n in ("openings_en", "lead_ins_en", "set_off_en", "closings_en")
)
OPENINGS_ZH, SET_OFF_ZH, CLOSINGS_ZH = (
    _listed(n) for n in ("openings_zh", "set_off_zh", "closings_zh")
)

_PUNCT = r"[\s,.!?:;…~\-–—，。！？：；、～]"


def _phrases(listed: tuple[str, ...]) -> list[str]:
    """Phrases of a list, longest first (so "hi there" wins over "hi"), as regular
    expressions: an apostrophe may be typed, curly or missing ("don't", "dont")."""
    items = sorted({p.strip() for p in listed if p.strip()}, key=len, reverse=True)
    return [re.escape(p).replace("'", "['’]?").replace(r"\ ", r"\s+") for p in items]


def _alternation(*lists: tuple[str, ...]) -> str:
    return "|".join(p for listed in lists for p in _phrases(listed))


# English words end at a non-letter; Chinese phrases need no boundary.
_EN_END = r"(?![\w'’-])"
_FREE_EN = (
    rf"(?:{_alternation(OPENINGS_EN)}){_EN_END}"
    rf"|(?:{_alternation(LEAD_INS_EN)}){_EN_END}(?:\s+(?:if|whether){_EN_END})?"
)
_FREE_ZH = _alternation(OPENINGS_ZH)
_OPENING = re.compile(
    rf"^(?:{_FREE_EN}|{_FREE_ZH}"
    rf"|(?:(?:{_alternation(SET_OFF_EN)}){_EN_END}|{_alternation(SET_OFF_ZH)})"
    rf"(?:{_PUNCT}*[,.!:;，。！：；、…~～—]|\s*(?={_FREE_EN}|{_FREE_ZH})))"
    rf"{_PUNCT}*",
    re.IGNORECASE,
)
_CLOSING = re.compile(
    rf"(?<=[,.!?:;…~，。！？：；、～)])\s*(?:(?:{_alternation(CLOSINGS_EN)}){_EN_END}"
    rf"|{_alternation(CLOSINGS_ZH)})[\s,.!?:;…~\-–—，。！？：；、～]*$",
    re.IGNORECASE,
)


def about_its_words(question: str) -> bool:
    """A question about words, or about "this" text: its greetings and thanks may be what it
    asks about ("Hi team, reverse this string", "老师好，用英语怎么说？")."""
    return mentions_phrase(question) or _DEICTIC.search(question) is not None


def canonical(question: str) -> str:
    """``question`` without the discourse around it (see the module); memoized."""
    return _canonical(question) if len(question) <= 2000 else question.strip()


@lru_cache(maxsize=20_000)
def _canonical(question: str) -> str:
    text = question.strip()
    # a question about words, or about "this" text, keeps what may be its words: "Hi team,
    # reverse this string", "老师好，用英语怎么说？"
    phrase = mentions_phrase(text)
    about = phrase or _DEICTIC.search(text) is not None  # (about_its_words)
    embedded = False  # a lead-in took the clause's "if" / "whether"
    while True:
        opening = _OPENING.match(text)
        if opening and about:
            opening = None  # "请问的意思是什么" asks what 请问 means
        stripped = text[opening.end() :] if opening else text
        if opening and _IF.search(opening.group()):
            embedded = True
        if not phrase:  # "How do I say no, thanks?" asks about thanks
            stripped = _CLOSING.sub("", stripped, count=1).rstrip(" ,;:，；：、-—")
        if stripped == text:
            break
        text = stripped
    if sum(c.isalnum() for c in text) < 2:  # nothing but discourse ("Thanks!", "你好吗")
        return question.strip()
    return _as_question(text) if embedded else text


_IF = re.compile(r"\b(?:if|whether)\W*$", re.IGNORECASE)
_DEICTIC = re.compile(
    r"\b(?:this|these|here|above|below)\b|这句|这段|这个词|这个字|这几个字|[这那][两三四五六七八九十几]个字"
    r"|这个称呼|这样开头|前面|上面|这里|这条消息|这句话",
    re.IGNORECASE,
)
# "… wondering if I can bring it" asks "can I bring it?"; "… know if you ship to Canada" asks
# "do you ship to Canada?": the clause's subject and auxiliary change places back
_SUBJECT = r"(?P<subject>i|you|we|they|he|she|it|there)"
_AUXILIARY = (
    r"(?P<aux>can['’]t|won['’]t|cannot|can|could|should|would|will|shall|may|might|must|am|is|are|was|were|have|has|"
    r"had|do|does|did)(?P<neg>n['’]t)?"
)
_CLAUSE = re.compile(rf"^{_SUBJECT}\s+{_AUXILIARY}(?![\w'’])\s*", re.IGNORECASE)
_PLAIN_CLAUSE = re.compile(r"^(?P<subject>i|you|we|they)\s+(?=[a-z]+\b)", re.IGNORECASE)


def _as_question(clause: str) -> str:
    """An embedded yes/no clause as the question it asks, when its subject is a pronoun (any
    other clause stays as it is)."""
    match = _CLAUSE.match(clause)
    if match:
        aux = match.group("aux") + (match.group("neg") or "")
        rest = f"{aux} {match.group('subject')} {clause[match.end() :]}"
    else:
        match = _PLAIN_CLAUSE.match(clause)
        verb = clause[match.end() :].split(" ", 1)[0].lower() if match else ""
        if match is None or verb in _NOT_VERBS or verb.endswith("ed"):
            return clause  # not a present-tense verb: the clause stays as it is
        rest = f"do {match.group('subject')} {clause[match.end() :]}"
    return rest.rstrip(" .。") + ("" if rest.rstrip().endswith(("?", "？")) else "?")


# words after a plain subject that are no verb to put "do" before: "if I not …", "if you also …"
_NOT_VERBS = frozenset("not also still really just ever never already".split())
