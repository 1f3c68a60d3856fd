"""Mood rules (``mood.*``): permission, obligation, advice and time (modality), and the
words that narrow a yes/no question (focus)."""

from __future__ import annotations

from itertools import pairwise

from ....key.words import known
from ..analysis import Analysis
from ..lexicon import FOCUS_EN, FOCUS_ZH, MOODS_ZH, PAST_ZH, table, words
from .question import form_of


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
    if not (a.zh or b.zh):
        return "modality" if _clause_tenses_differ(a, b) else None
    return "modality" if _aspects_differ_zh(a, b) else None


def focus(a: Analysis, b: Analysis) -> str | None:
    """Words that narrow what a yes/no question asks, on one side only: "Is it just for
    members?" / "Is it for members?", "Can kids fly alone?", "Can I bring my own food?", 自己 /
    才 / 只 / 都 / 还 / 再.  Often fillers elsewhere ("I just wanted to ask" is discourse,
    removed before the guards), here they change the answer."""
    if "yes/no" not in (form_of(a), form_of(b)):
        return None  # "怎样才能减肥" asks what "怎样减肥" asks: only a yes/no question narrows
    narrowing = FOCUS_ZH if a.zh or b.zh else FOCUS_EN
    if {t for t in a.tokens if t in narrowing} != {t for t in b.tokens if t in narrowing}:
        return "focus"
    return None


def _moods(a: Analysis) -> set[str]:
    return _moods_zh(a) if a.zh else _moods_en(a)


def _tense(a: Analysis) -> str | None:
    """ "past" or "now", as the question's first auxiliary says ("Did the iPhone have …" is
    past, "Could it be revoked?" now; a perfect, "Has it been shipped?", past); in Chinese a
    past marker (了, 过) against a mood (你要学…吗); ``None`` when nothing says."""
    return _tense_zh(a) if a.zh else _tense_en(a.tokens)


# English -------------------------------------------------------------------------------------

_MOODS_EN = table("moods_en")
_MOOD_PHRASES_EN = table("mood_phrases_en")
_PERMITTED_EN = words("permitted_en")
_REQUESTS_EN = words("requests_en")
_ASKED_EN = words("asked_en")
_LEADING_MODALS = words("leading_modals_en")
_DO = words("do_en")
_PAST_EN = words("past_en")
_NOW_EN = words("now_en")
_HAVE = words("have_en")
_IRREGULAR_PARTICIPLES = words("irregular_participles_en")
_CLAUSE_WORDS_EN = words("clause_words_en")


def _moods_en(a: Analysis) -> set[str]:
    tokens = a.tokens
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
    """The mood of the modal an English yes/no question opens with ("Will …", "Must …"), if
    any."""
    first = a.tokens[0] if a.tokens and not a.zh else ""
    return _MOODS_EN.get(first) if first in _LEADING_MODALS else None


def _tense_en(tokens: tuple[str, ...]) -> str | None:
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


def _clause_tenses_differ(a: Analysis, b: Analysis) -> bool:
    """As many clauses, one of them in another tense: "… a flight that has departed" / "… that
    is departing"."""
    clauses_a, clauses_b = _clause_tenses(a), _clause_tenses(b)
    return len(clauses_a) == len(clauses_b) and any(
        x and y and x != y for x, y in zip(clauses_a, clauses_b, strict=True)
    )


def _clause_tenses(a: Analysis) -> list[str | None]:
    """The tense of each clause of an English question, as its first auxiliary says."""
    clauses: list[list[str]] = [[]]
    for t in a.tokens:
        if t in _CLAUSE_WORDS_EN:
            clauses.append([])
        clauses[-1].append(t)
    return [_tense_en(tuple(c)) for c in clauses]


# Chinese -------------------------------------------------------------------------------------

_ASPECTS_ZH = words("aspects_zh")


def _moods_zh(a: Analysis) -> set[str]:
    tokens = a.tokens
    moods = {MOODS_ZH[t] for t in tokens if t in MOODS_ZH}
    for before, (i, t) in zip(a.tags, enumerate(tokens[1:-1], 1), strict=False):
        if t == "得" and before[:1] in ("n", "r") and tokens[i + 1] not in _ASPECTS_ZH:
            moods.add("must")  # 学生得交学费吗 (děi: must), not 跑得快 nor 得了新冠
    return moods


def _tense_zh(a: Analysis) -> str | None:
    past = any(t in PAST_ZH for t in a.tokens)
    now = not past and any(t in MOODS_ZH for t in a.tokens)
    return None if past == now else "past" if past else "now"


def _aspects_differ_zh(a: Analysis, b: Analysis) -> bool:
    """得过新冠 (ever had it) / 得了新冠 (has it now)."""
    aspects = {_aspect_zh(a), _aspect_zh(b)}
    return len(aspects) == 2 and None not in aspects


def _aspect_zh(a: Analysis) -> str | None:
    """过 (ever: an experience) or 了 (done, and so now), where one of them marks a verb."""
    ever = any(t in ("过", "曾经") for t in a.tokens)
    done = "了" in a.tokens
    return "ever" if ever else "done" if done else None
