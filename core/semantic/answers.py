"""Which answers say something about their question: only those can teach that two questions
are the same.

A label says "serving the cached answer to this question would have been right" because the LLM
gave the same answer.  An answer the LLM gives to many unrelated questions — a refusal, an
error, an apology, "please contact support" — agrees with itself whatever was asked, so such
agreement is no evidence: twelve rotating refusal phrasings once lowered a pool's threshold to
0.78 and served a look-alike 5 of 5 times.  Two checks, each enough:

- ``boilerplate``: the answer opens as a refusal, an apology, "I don't know", or reads as an
  error (English and Chinese word lists, ``REFUSALS``/``ERRORS``), or is empty;
- ``Families``: an answer whose near-duplicates (embeddings at ``SAME_FAMILY`` or closer) are
  the cached answers of ``GENERIC_ENTRIES`` or more other entries of the pool, for questions
  unrelated to its own, answers no question in particular.

And one the other way: ``wrapped_alike``, two answers that are one text inside other courtesy
wrappers (an LLM words its opening and closing anew each time) say the same.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..key.script import CJK
from .guards.analysis import analyze

__all__ = [
    "GENERIC_ENTRIES",
    "SAME_FAMILY",
    "UNRELATED",
    "Families",
    "bare_verdict",
    "boilerplate",
    "failure",
    "uninformative",
    "wrapped_alike",
]

SAME_FAMILY = 0.8  # cosine of two answers' embeddings taken as one family of wordings
# cosine under which two questions are about different things (USE-m: unrelated questions score
# 0.12-0.27, and 7 % of banking77's same-intent pairs under 0.3: a paraphrase cluster's own
# spread must not read as boilerplate)
UNRELATED = 0.2
GENERIC_ENTRIES = 2  # other entries, of unrelated questions, holding the family: generic
_PER_POOL = 512  # answers remembered per pool (the oldest go first)
_POOLS = 1000

# The openings of answers that refuse, apologize or do not know (matched on the folded start).
REFUSALS = (
    "i can't", "i cannot", "i can not", "i'm sorry", "i am sorry", "sorry", "i apologize",
    "apologies", "my apologies", "i'm unable", "i am unable", "i'm not able", "i am not able",
    "i won't", "i will not", "i must decline", "i'm afraid", "i am afraid", "unfortunately, i",
    "unfortunately i", "as an ai", "as a language model", "as an assistant", "i don't know",
    "i do not know", "i'm not sure", "i am not sure", "i don't have", "i do not have",
    "i'm not allowed", "i am not allowed", "that's not something i", "it's not possible for me",
    "i'd rather not", "i would rather not", "no comment", "cannot help", "can't help",
    "抱歉", "对不起", "很抱歉", "非常抱歉", "不好意思", "我无法", "我不能", "我不知道", "我没办法",
    "我没有办法", "作为一个ai", "作为ai", "作为人工智能", "作为一个人工智能", "作为语言模型",
    "无法回答", "暂时无法", "我不确定", "这个问题我无法",
)  # fmt: skip
# What an error or a failed call reads like: a code or a label, or a short text that says so.
_ERROR_LABEL = re.compile(
    r"^\W*(error|exception|fatal|failed|failure|traceback|warning)\b\s*[:\[\(#\-]"
    r"|^\W*traceback \(most recent call last\)|^\W*(http|status)\s*\d{3}\b|^\W*\d{3}\s+[a-z -]+$"
    r"|^\W*(错误|出错|异常|失败)\s*[:：\[\(（]"
)
_ERROR_WORDS = re.compile(
    r"\b(timed out|try again later|something went wrong|internal server error|bad gateway|"
    r"service (is )?unavailable|temporarily unavailable|rate limit (exceeded|reached)|"
    r"request failed|an? (unexpected )?error (has )?occurred|upstream (error|timeout)|"
    r"upstream connect error|http \d{3}|(usage|content|safety) polic(y|ies))\b"
    r"|请稍后再试|请求失败|服务不可用|系统繁忙|出错了|发生错误|网络异常|系统错误|服务器错误|"
    r"网络繁忙|违反相关|违反了|敏感词|敏感内容|无法显示|内容违规"
)
# A short text that names a failure of the call (a condition) and the call, the service or what
# to do about it (a context): "That model is currently overloaded with other requests", "You
# exceeded your current quota, please check your plan", "当前请求量过大，请稍后重试".
_FAILURE_CONDITION = re.compile(
    r"\b(errors?|exceptions?|overloaded|unavailable|exceeded|quota|rate[ -]?limit(ed)?|"
    r"too many requests|time-?out|timed out|gateway|(at|over) capacity|throttl(ed|ing)|busy|"
    r"failed|failure|outage|down for maintenance|not responding|unreachable|high demand|"
    r"(do not|don't) have access|does not exist|invalid (api )?key|unauthori[sz]ed|forbidden|"
    r"permission denied)\b"
    r"|错误|出错|异常|失败|不可用|超时|限流|繁忙|过大|拥挤|过载|维护中|额度|频繁"
)
_FAILURE_CONTEXT = re.compile(
    r"\b(your requests?|the requests?|requests|server|service|model|api|endpoint|upstream|"
    r"retry|try again|later|slow down|sorry|plan|billing|help center|support|status page|"
    r"processing)\b"
    r"|请求|服务|系统|稍后|重试|再试|网络|接口"
)
_FAILURE_CHARS = 240  # longer texts explain errors rather than report one
# A provider's error body passed on as the answer: {"type": "error", "error": {...}}
_ERROR_BODY = re.compile(
    r'^\{.{0,200}"(type|object|code|status)"\s*:\s*"?(error|\d{3})\b|^\{\s*"error"\s*:', re.S
)
# Answers that hold no words at all, or say only that there is none.
_NOTHING = frozenset({"n/a", "na", "null", "none", "nil", "undefined", "nan", "empty",
                      "no answer", "无", "暂无", "没有", "空"})  # fmt: skip
_WORDLESS = re.compile(r"[^\W_]")  # a letter, digit or ideograph


def boilerplate(answer: str) -> bool:
    """True for an answer that refuses, apologizes, does not know, reports an error or a
    policy block, or says nothing ("…", "N/A")."""
    text = _plain(answer)
    if not text or not _WORDLESS.search(text) or text.rstrip(".。!！") in _NOTHING:
        return True
    return text.startswith(REFUSALS) or _reports_failure(text)


def bare_verdict(answer: str) -> bool:
    """True for an answer that is a yes or a no and little else ("Yes.", "No, you can't.",
    "是的。", "不可以"): it fits every question of its shape, so questions answered alike by it
    are not shown to be one question ("Is a whale a mammal?" and "Is a whale a fish?" would
    both be "Yes." by the group of their neighbours)."""
    text = _plain(answer).rstrip(_ENDS + "。！？")
    words = _VERDICT_WORDS.findall(text)
    if words and words[0] in _VERDICTS_EN:
        return len(words) <= _VERDICT_TAIL
    return bool(_VERDICT_ZH.fullmatch(text))


def uninformative(answer: str) -> bool:
    """``boilerplate`` or a ``bare_verdict``: agreeing on it shows nothing about the
    questions (no label, no answer group)."""
    return boilerplate(answer) or bare_verdict(answer)


_VERDICTS_EN = frozenset(
    "yes no yeah yep nope nah correct incorrect true false right wrong sure absolutely "
    "definitely certainly indeed".split()
)
_VERDICT_TAIL = 5  # words at most: "No, you cannot bring it."
_VERDICT_WORDS = re.compile(r"[a-z0-9']+")
_VERDICT_ZH = re.compile(
    r"(?:是的?|不是|对的?|不对|没错|可以|不可以|不行|行|能|不能|会|不会|有|没有|当然|当然可以|"
    r"当然不|正确|错误|不)[，,]?.{0,6}"
)


def failure(answer: str) -> bool:
    """True for an answer that reports an error or a failed call ("temporarily unavailable
    (HTTP 503)", "Rate limit exceeded", "Error: …", a policy block) rather than answering:
    what the model says once it has recovered may differ."""
    return _reports_failure(_plain(answer))


def wrapped_alike(a: str, b: str) -> bool:
    """True for two answers that are one text inside different courtesy wrappers ("Sure!
    Here's how: …", "… Hope this helps!"): whole sentences in common (``_CORE_WORDS`` words
    or more), and where they differ only before and after them, in sentences of
    ``_WRAPPER_WORDS`` words at most, on each side no more words than they share, that hold
    no number, negation, name or literal ("Yes. …" / "No. …" are not wrappers; "press the
    left button …" / "press the right button …" differ inside a sentence: not either).  A
    short sentence of content at one end can pass for a wrapper: the groups this decides are
    evidence, the rules still judge each question."""
    x, y = (" ".join(t[:_COMPARED_CHARS].split()).replace("’", "'") for t in (a, b))
    block = _common_block(x, y)
    if block is None:
        return False
    i, j, size = block
    if (i or j) and not (_opens(x[:i]) and _opens(y[:j])):
        cut = _SENTENCE_END.search(x, i, i + size)  # (the block began inside a sentence)
        if cut is None:
            return False
        i, j, size = cut.end(), j + cut.end() - i, size - (cut.end() - i)
    if (i + size < len(x) or j + size < len(y)) and not _ends_sentence(x[i : i + size]):
        ends = list(_SENTENCE_END.finditer(x, i, i + size))  # (it ended inside one)
        if not ends:
            return False
        size = ends[-1].end() - i
    core = _words(x[i : i + size])
    if core < _CORE_WORDS:
        return False
    sides = ((x[:i], x[i + size :]), (y[:j], y[j + size :]))
    return all(
        sum(map(_words, edges)) <= core * _WRAPPER_SHARE and all(map(_says_nothing, edges))
        for edges in sides
    )


_CORE_WORDS = 4
_WRAPPER_WORDS = 12
_WRAPPER_SHARE = 1.0  # a side's wrappers: as many words as they have in common, at most
_OPENER_WORDS = 3
_COMPARED_CHARS = 4000
_ANCHOR = 16  # characters from the middle of one answer, found in the other
_ENDS = ".!?:;。！？：；"
# courtesy that reads as a negation: "No problem!", "没问题。" open answers that say yes
_COURTESY = re.compile(r"\b(?:no problem|no worries)\b|没问题|不客气|不用谢", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?:;]\s|[。！？：；]\s?")
_WORD_OR_HAN = re.compile(rf"{CJK.pattern}{{2}}|{CJK.pattern}|\w+")  # (key/script.py)


def _common_block(x: str, y: str) -> tuple[int, int, int] | None:
    """The text both hold around the middle of one of them, as (start in ``x``, start in
    ``y``, length): where only the ends differ, that is all they share (linear time)."""
    for text, other, swap in ((x, y, False), (y, x, True)):
        size = min(_ANCHOR, len(text) // 4)  # (inside what they share, in a short text too)
        mid = len(text) // 2 - size // 2
        at = other.find(text[mid : mid + size]) if size >= 4 else -1
        if at < 0:
            continue
        i, j, end_i, end_j = mid, at, mid + size, at + size
        while i and j and text[i - 1] == other[j - 1]:
            i, j = i - 1, j - 1
        while end_i < len(text) and end_j < len(other) and text[end_i] == other[end_j]:
            end_i, end_j = end_i + 1, end_j + 1
        return (j, i, end_i - i) if swap else (i, j, end_i - i)
    return None


def _ends_sentence(text: str) -> bool:
    """Empty, or ending where a sentence ends."""
    return not text.strip() or text.rstrip()[-1] in _ENDS


def _opens(text: str) -> bool:
    """What comes before the text in common ends a sentence, or is an opener of
    ``_OPENER_WORDS`` words at most before a comma ("Sure, …", "好的，…", "简单来说，…")."""
    end = text.rstrip()[-1:]
    return _ends_sentence(text) or (end in ",，、" and _words(text) <= _OPENER_WORDS)


def _words(text: str) -> int:
    """Words, a Chinese word counted as two characters."""
    return len(_WORD_OR_HAN.findall(text))


def _says_nothing(edge: str) -> bool:
    if any(_words(sentence) > _WRAPPER_WORDS for sentence in _SENTENCE_END.split(edge)):
        return False
    if not _WORDLESS.search(edge):
        return True
    edge = _COURTESY.sub("", edge).strip().rstrip(_ENDS)  # ("helps!" is no shell literal)
    found = analyze(edge)
    return not (found.numbers or found.negations or found.entities or found.literals)


def _plain(answer: str) -> str:
    text = " ".join(answer.split()).casefold().replace("’", "'")
    return text.lstrip("\"'“‘「『*#>-• ")


def _reports_failure(text: str) -> bool:
    if _ERROR_LABEL.search(text) or _ERROR_BODY.search(text):
        return True
    if len(text) > _FAILURE_CHARS:
        return False
    if len(text) <= 120 and _ERROR_WORDS.search(text):
        return True
    return bool(_FAILURE_CONDITION.search(text) and _FAILURE_CONTEXT.search(text))


class Families:
    """Per pool, the cached answers that positive labels were made on, by entry, grouped into
    families of near-duplicate wordings.  ``generic`` says whether the family of an answer is
    held by ``GENERIC_ENTRIES`` or more other entries whose questions are unrelated to this
    entry's (embeddings under ``UNRELATED``): paraphrases answered alike are a cluster, the
    evidence learning is for; unrelated questions answered alike are boilerplate.  Bounded;
    thread-safe."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray] | None) -> None:
        self._embed = embed
        self._pools: OrderedDict[str, OrderedDict[str, _Held]] = OrderedDict()
        self._lock = threading.Lock()

    def family(self, pool: str, entry: str, question: str, answer: str) -> tuple[str, bool]:
        """The family of ``answer`` (cached by ``entry``, for ``question``, in ``pool``), and
        whether it is generic.  Without an embedder a family is one wording (folded), and
        every two questions count as unrelated."""
        own = _digest(answer)
        vectors: list[np.ndarray | None] = [None, None]
        if self._embed is not None:
            embedded = self._embed([answer[:2000], question[:2000]])
            vectors = [np.asarray(v, dtype=np.float32) for v in embedded]
        held = _Held(vectors[0], vectors[1], own)
        with self._lock:
            seen = self._pools.setdefault(pool, OrderedDict())
            self._pools.move_to_end(pool)
            while len(self._pools) > _POOLS:
                self._pools.popitem(last=False)
            unrelated = 0
            for other, was in seen.items():
                if other == entry or not _same_family(held, was):
                    continue
                held = held._replace(family=was.family) if held.family == own else held
                unrelated += _unrelated(held, was)
            seen[entry] = held
            seen.move_to_end(entry)
            while len(seen) > _PER_POOL:
                seen.popitem(last=False)
            return held.family, unrelated >= GENERIC_ENTRIES

    def reset(self) -> None:
        with self._lock:
            self._pools.clear()


class _Held(NamedTuple):
    answer: np.ndarray | None
    question: np.ndarray | None
    family: str


def _same_family(a: _Held, b: _Held) -> bool:
    if a.family == b.family:
        return True
    if a.answer is None or b.answer is None:
        return False
    return float(np.dot(a.answer, b.answer)) >= SAME_FAMILY


def _unrelated(a: _Held, b: _Held) -> bool:
    if a.question is None or b.question is None:
        return True
    return float(np.dot(a.question, b.question)) < UNRELATED


def _digest(text: str) -> str:
    folded = " ".join(text.split()).casefold()
    return hashlib.blake2b(folded.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
