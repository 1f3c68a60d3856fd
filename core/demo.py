"""The workload behind ``tricache demo``: questions, harmless rewrites and look-alikes.

Every request carries the id of its true answer, so a served answer is scored right or wrong.
A stand-in LLM answers with that id after a fixed latency and counts its calls.
"""

from __future__ import annotations

import random
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .stack import Cache

__all__ = ["DemoReport", "StandInLLM", "run_demo", "workload"]

SYSTEM = "You are the helpdesk assistant of ACME Cloud. Answer briefly."

# (answer id, question, paraphrases). Neighbouring ids are look-alikes of each other: the same
# words with another meaning; serving one's answer for the other is a wrong answer.
QUESTIONS: list[tuple[str, str, tuple[str, ...]]] = [
    ("reset-password", "How do I reset my password?",
     ("How can I reset my password?", "What's the way to reset my password?")),
    ("reset-email", "How do I reset my email?", ()),
    ("delete-account", "How do I delete my account?", ("How can I delete my account?",)),
    ("register-account", "How do I register an account?", ("How can I register an account?",)),
    ("enable-2fa", "How do I enable two-factor authentication?",
     ("How can I enable two-factor authentication?",
      "How can I turn on two-factor authentication?")),
    ("disable-2fa", "How do I disable two-factor authentication?", ()),
    ("order-12345", "Where is order 12345?", ("Where's order 12345?",)),
    ("order-12346", "Where is order 12346?", ()),
    ("refund-3", "Can I get a refund within 3 days?", ("Is a refund possible within 3 days?",)),
    ("refund-30", "Can I get a refund within 30 days?", ()),
    ("pro-vs-basic", "Is the Pro plan better than the Basic plan?",
     ("Is the Pro plan superior to the Basic plan?",)),
    ("basic-vs-pro", "Is the Basic plan better than the Pro plan?", ()),
    ("export-csv", "Can I export my data to CSV?", ("Is it possible to export my data to CSV?",)),
    ("not-export-csv", "Why can't I export my data to CSV?", ()),
    ("zh-recommend", "你们推荐年付套餐吗？", ("你们是否推荐年付套餐？",)),
    ("zh-not-recommend", "你们不推荐年付套餐吗？", ()),
    ("zh-a-vs-b", "A套餐比B套餐好吗？", ()),
    ("zh-b-vs-a", "B套餐比A套餐好吗？", ()),
    ("zh-open", "怎么开通发票服务？", ("发票服务怎么开通？",)),
    ("zh-close", "怎么关闭发票服务？", ()),
    ("zh-invoice", "发票多久能开出来？", ("发票要多久才能开出来？",)),
    ("zh-contact", "怎么联系人工客服？", ("如何联系人工客服？",)),
]  # fmt: skip
_TWIN = {a[0]: b[0] for i in range(0, len(QUESTIONS) - 1, 2) for a, b in [QUESTIONS[i : i + 2]]}
_TWIN |= {b: a for a, b in _TWIN.items()}


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


REWRITES: list[Callable[[str], str]] = [
    str.lower,
    str.upper,
    lambda q: "  " + q.replace(" ", "   ") + "  ",
    lambda q: q.rstrip("?？") + "??",
    lambda q: q.rstrip("?？"),
    _full_width,
    lambda q: unicodedata.normalize("NFD", q),
]


@dataclass(slots=True)
class DemoRequest:
    query: str
    answer_id: str
    kind: str  # "first", "look-alike", "repeat", "rewrite", "paraphrase"


def workload(n: int, seed: int = 7) -> Iterator[DemoRequest]:
    """``n`` requests: each question first as written (a "look-alike" when its twin with
    another meaning was asked before), then repeats, harmless rewrites and paraphrases."""
    rng = random.Random(seed)
    seen: set[str] = set()
    for _ in range(n):
        answer_id, question, paraphrases = rng.choice(QUESTIONS)
        if answer_id not in seen:
            seen.add(answer_id)
            yield DemoRequest(
                question, answer_id, "look-alike" if _TWIN.get(answer_id) in seen else "first"
            )
        elif paraphrases and rng.random() < 0.35:
            yield DemoRequest(rng.choice(paraphrases), answer_id, "paraphrase")
        elif rng.random() < 0.4:
            yield DemoRequest(question, answer_id, "repeat")
        else:
            yield DemoRequest(rng.choice(REWRITES)(question), answer_id, "rewrite")


@dataclass(slots=True)
class StandInLLM:
    """Answers with the true answer id after ``latency`` seconds; counts its calls."""

    latency: float = 0.05
    calls: int = 0

    def __call__(self, request: DemoRequest) -> str:
        self.calls += 1
        time.sleep(self.latency)
        return f"answer:{request.answer_id}"


@dataclass(slots=True)
class DemoReport:
    requests: int = 0
    llm_calls: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    wrong_hits: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [n, hits, wrong]
    lookup_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    no_cache_s: float = 0.0


def run_demo(
    workers: list[Cache],
    n: int = 300,
    *,
    llm_latency: float = 0.05,
    seed: int = 7,
    on_step: Callable[[], None] | None = None,
) -> DemoReport:
    """Send ``n`` requests in front of a stand-in LLM and score every answer.

    The requests are split in order over ``workers`` (caches sharing one L2, like an app that
    restarts or scales out): a later worker starts with an empty L1 and finds earlier answers
    in L2.
    """
    llm = StandInLLM(llm_latency)
    report = DemoReport()
    start = time.perf_counter()
    for i, item in enumerate(workload(n, seed)):
        cache = workers[i * len(workers) // n]
        request = cache.request(item.query, system=SYSTEM, llm_key="stand-in-llm")
        t0 = time.perf_counter()
        hit = cache.lookup(request)
        report.lookup_ms.append((time.perf_counter() - t0) * 1e3)
        counts = report.by_kind.setdefault(item.kind, [0, 0, 0])
        counts[0] += 1
        if hit is None:
            cache.update(request, llm(item))
        else:
            wrong = hit.text != f"answer:{item.answer_id}"
            counts[1] += 1
            counts[2] += wrong
            source = hit.tier if hit.tier == "semantic" else hit.level
            report.hits[source] = report.hits.get(source, 0) + 1
            report.wrong_hits += wrong
        report.requests += 1
        if on_step is not None:
            on_step()
    report.wall_s = time.perf_counter() - start
    report.llm_calls = llm.calls
    report.no_cache_s = n * llm_latency
    return report
