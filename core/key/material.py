"""Text handed over as material: a message the model is told to work on, not a question.

An app whose system prompt says "Translate the user's message into French" (or "Count the
words in the user's message", "把用户的话翻译成英文"), or a template that says "Is this sentence
grammatical?" above the text it hands over, answers the text's very form: "Hi, how do I reset my
password?" translates differently from "How do I reset my password?", and "Where you are
going?" is not grammatical where "Where are you going?" is.  Such a text is keyed as typed
(``request.exact_key``: no folding of case, apostrophes, spacing or a final "?") and has no
question for the semantic tier or the FAQ to compare (``asked.ask``).

A system prompt works on the user's text when it names an operation on wording (translate,
proofread, paraphrase, 翻译, 润色 …) or the user's text itself ("the user's message", 用户的话:
"Does the user's message end with a question mark?"), other than to answer it ("Reply to the
user's message …"; the user's *question* is answered).  A message hands its material over when
its first line, up to a colon, names an operation on a text (those, or count, repeat, reverse,
summarize, 数, 重复 …) or "this sentence" / 这句话, and text follows ("Translate into French: How
do I …", "Is this question formal?\n…"): "How do I translate a PDF?" asks a question, and a
template's retrieved context, below its first line, is not read.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["hands_over_text", "instructs_on_text", "is_material"]

# Operations on wording: the text's form is what they answer
_WORDING = (
    r"\b(?:translat\w*|transliterat\w*|proofread\w*|paraphras\w*|rephras\w*|reword\w*|"
    r"rewrit\w*|spell[- ]?check\w*|grammar|grammatical\w*|ungrammatical|punctuat\w*|"
    r"copy[- ]?edit\w*|echo bot|echo back|repeat back|"
    r"(?:only|just) (?:the )?number of (?:words|characters|letters|sentences)|"
    r"number of (?:words|characters|letters|sentences) only)\b"
    r"|翻译|译成|译为|润色|改写|校对|纠错|病句|语法|通顺|标点|复读|只(?:回答|输出|给出)?字数|全角|半角"
)
# Other operations on a text: a message's first line naming one, then the text, hands it over
_ON_A_TEXT = (
    r"\b(?:count\w*|repeat\w*|echo\w*|revers\w*|summari[sz]\w*|capitali[sz]\w*|"
    r"correct|fix|rate|score|grade|judge|check|classify|analy[sz]e|spelling|typos?|convert|"
    r"title ?case|sentence ?case|make it sound|sound like|in the style of|"
    r"how many (?:words|characters|letters|sentences|syllables|vowels))\b"
    r"|几个字|多少字|字数|数一数|统计|重复|复述|原样|倒过来|反过来|总结|摘要|概括|大写|小写|"
    r"错别字|改正|纠正|判断|评价|打分|转成|转换|繁体|简体"
)
# The user's text, named in a system prompt (not the user's question: that one is answered)
_USERS_TEXT = (
    r"\b(?:the )?user(?:'s|’s|s')?\s+(?:message|text|input|sentence|words|writing)s?\b"
    r"|\bwhat (?:the user|they) (?:say|says|said|write|writes|wrote|type|types|typed)\b"
    r"|用户(?:的)?(?:话|消息|输入|句子|文本|文字)|用户(?:说|写|输入)的"
)
# The text handed over in a message, pointed at
_THIS_TEXT = (
    r"\b(?:this|that)\s+(?:sentence|text|message|phrase|question|passage|paragraph|word)s?\b"
    r"|这句|这段|这个句子|这条消息|下面这句|以下句子"
)
_WORDING_RE = re.compile(_WORDING, re.IGNORECASE)
_USERS_TEXT_RE = re.compile(_USERS_TEXT, re.IGNORECASE)
# ... unless it is only answered: "Reply to the user's message in a friendly tone"
_ANSWERED = re.compile(r"(?:answer|respond to|reply to|回答|回复|答复)\s*$", re.IGNORECASE)
_HANDS_OVER = re.compile(
    rf"^[^\n:：]{{0,200}}?(?:{_WORDING}|{_ON_A_TEXT}|{_THIS_TEXT})[^\n:：]*[:：\n]\s*\S",
    re.IGNORECASE,
)


def is_material(system: str, message: str) -> bool:
    """True when ``message``, under ``system``, is a text to work on: its system prompt works
    on the user's text, or it hands its text over itself."""
    return instructs_on_text(system) or hands_over_text(message)


@lru_cache(maxsize=4096)
def instructs_on_text(system: str) -> bool:
    """True when a system prompt tells the model to work on the user's very text: translate
    it, correct it, count its words … (its first 1,000 characters are read)."""
    head = system[:1000]
    if _WORDING_RE.search(head):
        return True
    return any(
        not _ANSWERED.search(head[max(0, m.start() - 20) : m.start()])
        for m in _USERS_TEXT_RE.finditer(head)
    )


def hands_over_text(message: str) -> bool:
    """True when ``message`` is an instruction that works on a text followed by the text ("Is
    this sentence grammatical?\\nWhere you are going?", "翻译成英文：天空为什么是蓝色的？").
    Asked on every lookup: a message with no colon or line break is no such thing, and the
    others are memoized."""
    head = message.lstrip()[:2000]
    if ":" not in head and "：" not in head and "\n" not in head:
        return False
    return _hands_over(head)


@lru_cache(maxsize=4096)
def _hands_over(head: str) -> bool:
    return _HANDS_OVER.search(head) is not None
