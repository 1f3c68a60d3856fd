"""Cacheability: whether a question's answer depends on the time or on who asks.

Owns ``is_cacheable`` and its patterns (English and Chinese): a time word or the asker's own
things ("today", "my order", "my IP address"), the present state of the world asked without
one (the date, a countdown, the next train, whether something is open, down or delayed now),
and the asker's place ("near me", "附近"); the cache neither stores nor serves a question it
refuses.  It reads the raw question, not the guards' ``Analysis``.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = ["is_cacheable"]


# Cacheability ------------------------------------------------------------------------------
_TIME_OR_ASKER_EN = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|now|right now|currently|current|latest|recent|"
    r"recently|this (?:week|month|year|morning|afternoon|evening)|next (?:week|month|year)|"
    r"last (?:week|month|year|night)|"
    r"weather|stock price|exchange rate|score of|breaking news|what time(?! zone))\b"
)
# The present state of the world, asked without a time word: the date, a countdown or a time
# since (its answer moves with the clock), whether something is open, down or delayed now.
_NOW_EN = re.compile(
    r"\bwhat(?:'s| is) (?:the )?(?:date|day|year|month|season)(?: of the (?:week|month|year))?"
    r"(?: is it| it is)?\??$|"
    r"\bwhat (?:day|date|year|month|season)(?: of the (?:week|month|year))? is it\b|"
    r"\bhow (?:long|much time|many (?:days|hours|minutes|weeks|months|years|sleeps)) "
    r"(?:[\w'’]+ ){0,3}(?:until|till)\b|"
    r"\b(?:days|hours|weeks|months) (?:are )?left in (?:the|this) (?:year|month|week|day)\b|"
    r"\bwhat (?:week|quarter) of the year\b|\bwhen(?:'s| is) the next\b|"
    r"\b(?:sunset|sunrise)\b|\bhow old (?:am i|will i be)\b|"
    r"\bhow many (?:days|hours|minutes|weeks|months|years) (?:ago|since|have passed|has it been)\b|"
    r"\bhow long ago\b|\bdays? left (?:until|till)\b|"
    r"^is it (?:a |the )?(?:weekend|weekday|holiday|daytime|day time|night|nighttime|dark|"
    r"morning|evening|raining|snowing|sunny)\b|"
    r"^(?:is|are) (?:the |it |they )?(?:[\w'’-]+ ){0,3}(?:open|closed|down|offline)\??$|"
    r"\b(?:any|are there|is there) (?:\w+ )?(?:delays?|outages?|disruptions?|traffic)\b"
)
_NOW_ZH = re.compile(
    r"还有(?:几|多少)(?:天|个月|周|个星期|小时|分钟|年)|(?:几|多少)(?:天|年|个月)(?:以|之)?前|"
    r"几号(?:了|啦|呀|啊|呢)?[？?！!。]*$|现任|在任|下一(?:班|趟|场|次)|日落|日出|"
    r"星期几|礼拜几|周几|是周末吗|是不是周末|放假了?吗|"
    r"开门了?吗|营业了?吗|关门了?吗|开着吗|宕机|挂了吗|崩了吗|(?:延误|晚点|堵车)了?吗"
)
# "Is my order late?" asks about the asker's own state; "How do I cancel my order?" asks how
# to do something, which has one answer for everyone.  So does a value of the asker's own
# ("What is my IP address?", "Where is my parcel?"), and the asker's place: where they are,
# what is near them (their answer is another asker's wrong one).
_ASKER_EN = re.compile(
    r"\bmy (?:order|account|balance|package|parcel|delivery|bill|invoice|subscription|payment|"
    r"refund|ticket|booking|reservation|flight|card|location|ip|ip address|time ?zone)\b|"
    r"^(?:what|where|when|which|who|how much|how many)(?:'s| is| are| was| were) "
    r"(?:[\w'’]+ )?my\b"
)
_HERE_EN = re.compile(
    r"\b(?:near me|nearby|around me|close to me|around here|near here|where am i|"
    r"how far am i|from my location|temperature outside|outside temperature)\b"
)
_HERE_ZH = re.compile(r"附近|周边|离我|我在哪|我这里|我这边|我所在|本地的")
# What has one answer for everyone, "my …" or not: how to do something ("How do I activate my
# card?"), what to do ("What should I do if I lost my card?"), a request to the service ("I
# want to close my account", "Can you freeze my card?"), how long or where in general.  A
# question about the state of the asker's things ("Why was my card declined?", "Has my card
# arrived?") stays out.
_PROCEDURE_EN = re.compile(
    r"^(?:how (?:do|can|could|should|would) i|how to|what(?: is|'s) the (?:way|best way) to|"
    r"is it possible to|can i|is there a way to|what (?:do|should|can) i|"
    r"i (?:would like|want|need|wish) to|i'd like to|can you|could you|please|help me|"
    r"how long (?:does|do|will) it take|where can i) "
)
_TIME_OR_ASKER_ZH = re.compile(
    r"今天|今日|今晚|明天|昨天|现在|目前|当前|最新|最近|刚刚|本周|这周|本月|这个月|今年|下周|"
    r"上周|我的订单|我的账户|我的余额|我的快递|我的包裹|我的账单|我的退款|我的预订|天气|股价|汇率|几点"
)


def is_cacheable(question: str) -> bool:
    """False for questions whose answer depends on the time or on who asks ("today",
    "latest", "my order", "今天", "最新", "我的订单" …): the cache neither stores nor serves
    them.  Asked on every lookup, so short questions are memoized."""
    return _cacheable_short(question) if len(question) <= 1024 else _cacheable(question)


def _cacheable(question: str) -> bool:
    folded = " ".join(unicodedata.normalize("NFKC", question).casefold().split())
    if _TIME_OR_ASKER_EN.search(folded) or _TIME_OR_ASKER_ZH.search(folded):
        return False
    if _NOW_EN.search(folded) or _NOW_ZH.search(folded):
        return False
    if _HERE_EN.search(folded) or _HERE_ZH.search(folded):
        return False
    return not _ASKER_EN.search(folded) or bool(_PROCEDURE_EN.match(folded))


_cacheable_short = lru_cache(maxsize=8192)(_cacheable)
