"""The workload behind ``tricache demo``: questions, harmless rewrites and look-alikes.

Every request carries the id of its true answer, so a served answer is scored right or wrong.
A stand-in LLM answers with that id after a fixed latency and counts its calls.
"""

from __future__ import annotations

import random
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..cache import Cache
from ..faq.store import FaqEntry

__all__ = [
    "DemoReport",
    "StandInLLM",
    "merged_counts",
    "run_demo",
    "where_figures",
    "workload",
    "write_chart",
]

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
# Conversations whose last question is the same words with a different meaning in each.
FOLLOW_UPS: list[tuple[str, tuple[tuple[str, str], ...], str]] = [
    ("pro-price", (("user", "Tell me about the Pro plan."), ("assistant", "It has SSO.")),
     "How much does it cost?"),
    ("basic-price", (("user", "Tell me about the Basic plan."), ("assistant", "It has 3 seats.")),
     "How much does it cost?"),
    ("eu-region", (("user", "I host in the EU region."), ("assistant", "Noted.")),
     "Where is my data stored?"),
    ("us-region", (("user", "I host in the US region."), ("assistant", "Noted.")),
     "Where is my data stored?"),
]  # fmt: skip
# Curated FAQ entries (imported before the run) and how users ask them.
FAQ: list[tuple[str, str, tuple[str, ...]]] = [
    ("faq-sla", "What is your uptime SLA?", ("What uptime do you guarantee?",)),
    ("faq-invoice", "怎么下载发票？", ("发票在哪里下载",)),
    ("faq-gdpr", "Are you GDPR compliant?", ("Is ACME Cloud GDPR compliant?",)),
]
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
    kind: str  # "first", "look-alike", "repeat", "rewrite", "paraphrase", "follow-up", "faq"
    history: tuple[tuple[str, str], ...] = ()  # earlier turns: (role, text)


def workload(n: int, seed: int = 7) -> Iterator[DemoRequest]:
    """``n`` requests: each question first as written (a "look-alike" when its twin with
    another meaning was asked before), then repeats, harmless rewrites and paraphrases."""
    rng = random.Random(seed)
    seen: set[str] = set()
    for _ in range(n):
        if rng.random() < 0.12:  # the same follow-up words in different conversations
            answer_id, history, question = rng.choice(FOLLOW_UPS)
            yield DemoRequest(question, answer_id, "follow-up", history)
            continue
        if rng.random() < 0.06:  # a question the curated FAQ answers
            answer_id, question, asked = rng.choice(FAQ)
            yield DemoRequest(rng.choice((question, *asked)), answer_id, "faq")
            continue
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
    """Outcomes per request kind and per answering tier ("exact", "semantic", "faq", "llm")."""

    requests: int = 0
    llm_calls: int = 0
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    wrong_by_tier: Counter[str] = field(default_factory=Counter)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)  # overhead, without the LLM
    wall_s: float = 0.0
    no_cache_s: float = 0.0

    def record(self, kind: str, tier: str, wrong: bool, overhead_ms: float) -> None:
        self.requests += 1
        outcome = self.by_kind.setdefault(kind, Counter())
        outcome[tier] += 1
        if wrong:
            outcome["wrong"] += 1
            self.wrong_by_tier[tier] += 1
        self.latency_ms.setdefault(tier, []).append(overhead_ms)

    @property
    def wrong(self) -> int:
        return sum(self.wrong_by_tier.values())


def run_demo(
    workers: list[Cache],
    n: int = 300,
    *,
    llm_latency: float = 0.05,
    seed: int = 7,
    on_step: Callable[[], None] | None = None,
) -> DemoReport:
    """Send ``n`` requests through the core API in front of a stand-in LLM; score every answer.

    The requests are split in order over ``workers`` (caches sharing one store, like an app
    that restarts or scales out): a later worker starts with an empty L1.
    """
    llm = StandInLLM(llm_latency)
    report = DemoReport()
    start = time.perf_counter()
    for i, item in enumerate(workload(n, seed)):
        cache = workers[i * len(workers) // n]
        request = cache.request(
            item.query, system=SYSTEM, history=item.history, llm_key="stand-in-llm"
        )
        t0 = time.perf_counter()
        hit = cache.lookup(request)
        if hit is None:
            answer, tier = llm(item), "llm"
            cache.update(request, answer)
        else:
            answer, tier = hit.text, hit.tier
        overhead = time.perf_counter() - t0 - (llm.latency if tier == "llm" else 0.0)
        report.record(item.kind, tier, answer != f"answer:{item.answer_id}", overhead * 1e3)
        if on_step is not None:
            on_step()
    report.wall_s = time.perf_counter() - start
    report.llm_calls = llm.calls
    report.no_cache_s = n * llm_latency
    return report


KIND_ORDER = ["first", "look-alike", "repeat", "rewrite", "paraphrase", "follow-up", "faq"]


def faq_entries() -> list[FaqEntry]:
    """The demo's curated FAQ: each answer is the one the stand-in LLM would give."""
    return [FaqEntry(question, f"answer:{answer_id}", asked) for answer_id, question, asked in FAQ]


TIER_ORDER = ["exact", "semantic", "faq", "llm"]


def merged_counts(caches: list[Cache]) -> dict[str, dict[str, int]]:
    """The counters of the demo's workers, added up (``{tier: {event: n}}``).  Each worker
    keeps its own: each adds its own to the store, and one set shared by two would be added
    twice."""
    out: dict[str, dict[str, int]] = {}
    for cache in caches:
        for name, n in cache.metrics.counts().items():
            tier, _, event = name.partition(".")
            out.setdefault(tier, {})[event] = out.get(tier, {}).get(event, 0) + n
    return out


def where_figures(namespace: str, path: Path | None, redis_url: str | None) -> str:
    """Where the demo's figures went, and the command that shows them."""
    if redis_url:
        return (f"These figures were added to Redis ({redis_url}), namespace {namespace!r}: "
                f"tricache stats --redis-url {redis_url} --namespace {namespace}")  # fmt: skip
    if path is not None:
        return (f"These figures were added to {path}, namespace {namespace!r}: "
                f"tricache stats --path {path} --namespace {namespace}")  # fmt: skip
    return (
        "The demo ran on a temporary store, now deleted: `tricache stats` shows your app's "
        f"store, not the demo's. To keep the demo's figures: tricache demo --path demo.sqlite3, "
        f"then tricache stats --path demo.sqlite3 --namespace {namespace}"
    )


def write_chart(report: DemoReport, path: str | Path) -> Path:
    """A stacked bar per request kind: who answered, and wrong answers (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in KIND_ORDER if k in report.by_kind]
    colors = {"exact": "#2b8a3e", "semantic": "#74b816", "faq": "#1c7ed6", "llm": "#adb5bd"}
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bottom = [0] * len(kinds)
    for tier in TIER_ORDER:
        values = [report.by_kind[k][tier] for k in kinds]
        ax.bar(kinds, values, bottom=bottom, label=tier if tier != "llm" else "LLM call",
               color=colors[tier])  # fmt: skip
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    wrong = [report.by_kind[k]["wrong"] for k in kinds]
    if any(wrong):
        ax.bar(kinds, wrong, color="#e03131", label="wrong answer served")
    saved = report.requests - report.llm_calls
    ax.set_title(
        f"tricache demo: {report.requests} requests, {saved / report.requests:.0%} LLM calls "
        f"saved, {report.wrong} wrong answers"
    )
    ax.set_ylabel("requests")
    ax.legend()
    fig.tight_layout()
    out = Path(path)  # its folder must exist: a typo creates no folders
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
