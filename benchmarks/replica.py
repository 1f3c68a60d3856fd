"""The semantic tier's per-process replica: qdrant-edge (before) beside the matrix index (now).

Points are real questions (qqp and lcqmc, embedded with USE-m) and perturbations of them (each
a real question plus half the difference of two others, normalized: they stay among sentence
embeddings, unlike random vectors), 512-d, in one scope, in a SQLite store.  Probes are the
other question of each pair.  Each engine is measured in fresh processes:

- cold start: a process loads the model, then opens a replica, which is rebuilt from the store
  (time, RSS after the model and after the points, the difference);
- restart: a new process opens the slot the first one left (its load, RSS);
- lookups in one process: the search alone (p50/p95) at the tier's floor (0.77, top 5), and a
  lookup's overhead over the embedding (embed + search, minus embed alone, p50);
- the longest GIL stall: a thread sleeps 1 ms in a loop and records its worst lateness while
  the replica loads (cold and restart) and while it serves searches.

Plus a micro-benchmark of the scope filter (a mask over the scope-id array against per-scope
row lists) at 100k rows, and searches with many small scopes against one big one.

    python benchmarks/replica.py [--sizes 10000,100000] [--engines edge,matrix] [--probes 300]

Writes results/replica.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).parents[2] / "shared" / "data"
SETS = ("qqp/qqp_quora_5k.tsv", "lcqmc/lcqmc_test_5k.tsv")
NAMESPACE = "bench"
SCOPE = "0" * 32
FLOOR, TOP_K = 0.77, 5  # the tier's search for use-m: threshold 0.92 less the rescoring margin


def rss() -> dict[str, float]:
    """This process's resident memory, MiB: all, anonymous, file-backed, peak."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {
        name: int(fields[key].split()[0]) / 1024
        for name, key in (
            ("rss", "VmRSS"),
            ("anon", "RssAnon"),
            ("file", "RssFile"),
            ("peak", "VmHWM"),
        )
    }


@contextmanager
def lateness() -> Iterator[list[float]]:
    """The worst lateness (ms) of a thread that sleeps 1 ms at a time, while the block runs:
    how long some other thread held the GIL at most."""
    worst = [0.0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            time.sleep(0.001)
            worst[0] = max(worst[0], (time.perf_counter() - start - 0.001) * 1e3)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.02)
    try:
        yield worst
    finally:
        stop.set()
        thread.join()


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.95)] * 1e3


# data --------------------------------------------------------------------------------------
def prepare(work: Path, sizes: list[int], per_set: int) -> None:
    """Embed the questions once; fill one SQLite store per size."""
    from tricache.semantic.embed import get_embedder
    from tricache.semantic.index.replica import encode_point
    from tricache.stores.sqlite import SQLiteStore
    from tricache.tools.evaluate import read_pairs

    stored, probes = [], []
    for name in SETS:
        for pair in read_pairs(DATA / name, limit=per_set):
            stored.append(pair.q1)
            probes.append(pair.q2)
    embedder = get_embedder("use-m")
    vectors = np.asarray(embedder.embed(stored), dtype=np.float32)
    np.save(work / "probes.npy", np.asarray(embedder.embed(probes), dtype=np.float32))
    (work / "probes.json").write_text(json.dumps(probes))
    rng = np.random.default_rng(0)
    for size in sizes:
        base = rng.integers(0, len(vectors), size)
        mixed = vectors[base] + 0.5 * (
            vectors[rng.integers(0, len(vectors), size)]
            - vectors[rng.integers(0, len(vectors), size)]
        )
        mixed[: len(vectors)] = vectors[: min(size, len(vectors))]
        mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
        store = SQLiteStore(work / f"store-{size}.sqlite3")
        for n in range(size):
            question = stored[int(base[n])] if n >= len(vectors) else stored[n]
            payload = {
                "scope": SCOPE,
                "namespace": NAMESPACE,
                "tenant": "t",
                "llm_key": "l",
                "question": question,
                "form": uuid.uuid4().hex,
                "lang": "en",
                "category": "",
                "tags": [],
                "kb_version": 0,
                "watermark": 0.0,
                "expires_at": time.time() + 30 * 86400,
                "verified": False,
                "ref": f"tricache:{NAMESPACE}:x:{n:040x}",
            }
            point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, payload["ref"]))
            store.put_point(NAMESPACE, point_id, encode_point(mixed[n], payload), 30 * 86400)
        store.close()


# one process -------------------------------------------------------------------------------
def child(engine: str, size: int, work: Path, phase: str, probes_n: int) -> dict[str, Any]:
    """One fresh process: the model, then the replica (cold: rebuilt; restart: its slot)."""
    from tricache.semantic.embed import get_embedder
    from tricache.semantic.index import replica as module
    from tricache.stores.sqlite import SQLiteStore

    if engine == "edge":  # the replica as it was: qdrant-edge, searched exhaustively
        from tricache.semantic.index.vectors import EdgeIndex

        def edge(path: Path, dim: int) -> Any:
            return EdgeIndex(path, dim, optimize_every=2**62)

        module._engine = edge  # type: ignore[assignment]
    embedder = get_embedder("use-m")
    embedder.embed(["warm up the model"])
    probes = np.load(work / "probes.npy")
    texts = json.loads((work / "probes.json").read_text())
    before = rss()
    store = SQLiteStore(work / f"store-{size}.sqlite3")
    with lateness() as stall:
        start = time.perf_counter()
        replica = module.ReplicatedIndex(store, NAMESPACE, 512, work / f"slots-{engine}-{size}")
        opened = time.perf_counter() - start
        while getattr(replica._local, "_maintaining", threading.Lock()).locked():
            time.sleep(0.01)  # the matrix index's first fit, in the background
        ready = time.perf_counter() - start
    after = rss()
    scope = {"scope": SCOPE}
    for vector in probes[:20]:
        replica.search(vector, scope, TOP_K, FLOOR)
    searches, hits = [], 0
    with lateness() as search_stall:
        for vector in probes[:probes_n]:
            start = time.perf_counter()
            found = replica.search(vector, scope, TOP_K, FLOOR)
            searches.append(time.perf_counter() - start)
            hits += bool(found)
    raw = getattr(embedder, "inner", embedder)  # no LRU: a real embed each time
    alone, both = [], []
    for text in texts[:probes_n]:
        start = time.perf_counter()
        raw.embed([text])
        alone.append(time.perf_counter() - start)
        start = time.perf_counter()
        vector = raw.embed([text])[0]
        replica.search(vector, scope, TOP_K, FLOOR)
        both.append(time.perf_counter() - start)
    steady = rss()
    result = {
        "engine": engine,
        "size": size,
        "phase": phase,
        "points": replica.count(),
        "rebuilds": replica.rebuilds,
        "open_s": opened,
        "ready_s": ready,
        "stall_load_ms": stall[0],
        "stall_search_ms": search_stall[0],
        "search_p50_ms": percentiles(searches)[0],
        "search_p95_ms": percentiles(searches)[1],
        "embed_p50_ms": percentiles(alone)[0],
        "lookup_p50_ms": percentiles(both)[0],
        "overhead_p50_ms": percentiles(both)[0] - percentiles(alone)[0],
        "probes_with_candidates": hits,
        "rss_model": before["rss"],
        "rss_points": after["rss"],
        "anon_loaded": after["anon"] - before["anon"],
        "rss_steady": steady["rss"],
        "rss_peak": steady["peak"],
        "anon_delta": steady["anon"] - before["anon"],
        "file_delta": steady["file"] - before["file"],
        "disk_mib": replica.stats()["disk_bytes"] / 2**20,
    }
    replica.close()
    store.close()
    return result


def run_child(engine: str, size: int, work: Path, phase: str, probes: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", engine, str(size), str(work), phase, str(probes)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{engine} {size} {phase} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# the scope filter --------------------------------------------------------------------------
def scope_filter(work: Path, size: int) -> list[str]:
    """Masking a scope-id array against per-scope row lists, and whole searches in a small
    scope against one big one (the matrix index, 100k rows, 1,000 scopes or one)."""
    from tricache.semantic.index.matrix import MatrixIndex

    rng = np.random.default_rng(0)
    sid = rng.integers(0, 1000, size).astype(np.int32)
    lists = {s: np.flatnonzero(sid == s) for s in range(1000)}

    def timed(fn: Callable[[], object], n: int = 300) -> float:
        fn()
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1e6

    mask = timed(lambda: np.flatnonzero(sid == 7))
    listed = timed(lambda: lists[7])
    lines = [
        f"| scope rows of 1 of 1,000 scopes, {size:,} rows | mask over the scope ids: "
        f"{mask:.0f} µs | per-scope row list: {listed:.1f} µs |"
    ]
    probes = np.load(work / "probes.npy")[:200]
    vectors = probes[rng.integers(0, len(probes), size)] + 0.5 * (
        probes[rng.integers(0, len(probes), size)] - probes[rng.integers(0, len(probes), size)]
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for scopes in (1, 1000):
        index = MatrixIndex(work / f"scopes-{scopes}", 512)
        for start in range(0, size, 2000):
            index.upsert_many(
                [
                    (str(uuid.UUID(int=n + 1)), vectors[n], {"scope": str(n % scopes)})
                    for n in range(start, min(size, start + 2000))
                ]
            )
        index.fit()
        queries = iter(np.load(work / "probes.npy")[200:500])

        def search(index: MatrixIndex = index, queries: Iterator[np.ndarray] = queries) -> object:
            return index.search(next(queries), {"scope": "0"}, TOP_K, FLOOR)

        took = timed(search, 250)
        lines.append(
            f"| search, {size:,} rows in {scopes:,} scope(s) | p50 {took / 1000:.2f} ms | |"
        )
        index.close()
    return lines


# report ------------------------------------------------------------------------------------
def report(rows: list[dict[str, Any]], scopes: list[str], args: argparse.Namespace) -> str:
    names = {"edge": "qdrant-edge (before)", "matrix": "matrix index (now)"}
    out = [
        "# The per-process replica: qdrant-edge beside the matrix index",
        "",
        f"Command: `python benchmarks/replica.py --sizes {args.sizes} --probes {args.probes}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared, busy: other jobs ran), "
        f"Python {platform.python_version()}, numpy {np.__version__}, "
        f"{time.strftime('%Y-%m-%d')}.  Embedder use-m.  One process per row (fresh: spawned), "
        "one SQLite store; points are real questions (qqp + lcqmc) and perturbations of them, "
        "512-d, one scope; probes are the other question of each pair.",
        "",
        "## Memory, start and GIL stalls (one process)",
        "",
        "RSS after importing and loading the model (and the probes), after the replica holds "
        "the points (loaded), and after it served the probes (steady); Δ: over the model's. "
        "Δ anon / Δ file: the growth of anonymous and file-backed resident memory (qdrant-edge "
        "maps its segments; the matrix index reads its vectors file with pread: page cache, not "
        "RSS).  Open s: until searchable (for the matrix index, its sketch fitted too).  "
        "Stall: the worst lateness of a thread sleeping 1 ms (the longest the GIL was held).",
        "",
        "| engine | points | start | open s | RSS model MiB | RSS loaded MiB | RSS steady MiB "
        "| Δ RSS loaded | Δ RSS steady | Δ anon steady | Δ file steady | stall while loading ms "
        "| stall while searching ms | peak RSS MiB | slot on disk MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        out.append(
            f"| {names[row['engine']]} | {row['points']} | {row['phase']} | {row['ready_s']:.2f} "
            f"| {row['rss_model']:.0f} | {row['rss_points']:.0f} | {row['rss_steady']:.0f} | "
            f"{row['rss_points'] - row['rss_model']:.0f} | "
            f"{row['rss_steady'] - row['rss_model']:.0f} | {row['anon_delta']:.0f} | "
            f"{row['file_delta']:.0f} | {row['stall_load_ms']:.1f} | "
            f"{row['stall_search_ms']:.1f} | {row['rss_peak']:.0f} | {row['disk_mib']:.0f} |"
        )
    out += [
        "",
        "## Lookups (one process)",
        "",
        f"Search alone: the replica's search at the tier's floor ({FLOOR}, top {TOP_K}) for "
        f"{args.probes} probe vectors.  Overhead: p50 of (embed + search) less p50 of embed "
        "alone, on the probe texts (the embedder without its LRU).",
        "",
        "| engine | points | start | search p50 ms | search p95 ms | embed p50 ms | "
        "embed + search p50 ms | overhead p50 ms | probes with a candidate |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        out.append(
            f"| {names[row['engine']]} | {row['points']} | {row['phase']} | "
            f"{row['search_p50_ms']:.2f} | {row['search_p95_ms']:.2f} | "
            f"{row['embed_p50_ms']:.2f} | {row['lookup_p50_ms']:.2f} | "
            f"{row['overhead_p50_ms']:.2f} | {row['probes_with_candidates']} |"
        )
    out += ["", "## The scope filter (matrix index)", "", "| case | | |", "|---|---|---|"]
    out += scopes
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--engines", default="edge,matrix")
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--per-set", type=int, default=2500, help="questions per data set")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, size, work, phase, probes = args.child
        print(json.dumps(child(engine, int(size), Path(work), phase, int(probes))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tricache-replica-") as tmp:
        work = Path(tmp)
        os.environ["TRICACHE_HOME"] = str(work / "home")
        prepare(work, sizes, args.per_set)
        for size in sizes:
            for engine in args.engines.split(","):
                for phase in ("cold start", "restart"):
                    row = run_child(engine, size, work, phase, args.probes)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        scopes = scope_filter(work, max(sizes))
    text = report(rows, scopes, args)
    (Path(__file__).parent / "results" / "replica.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
