"""Reliability figures: faults injected into real servers, tenants, fuzzed input, a load storm.

    python benchmarks/reliability.py            # the full run (a few minutes)
    python benchmarks/reliability.py --quick    # the short version the tests run

Every scenario counts what reaches the app (exceptions), what the cache served wrongly (another
tenant's entry, a corrupt value, a hit for a prompt never stored) and what it lost (a completed
write that cannot be read back).  Writes benchmarks/results/reliability.{md,json}.
"""

# ruff: noqa: E402, I001  (tests/ goes on sys.path before its helpers are imported)
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the private redis-server and the storm worker

from conftest import RedisServer, SearchServer
from langchain_core.outputs import Generation
from procs import storm

import every_path
import fault_round

from langchain_tricache import TriCache
from tricache import Cache, Exact, Redis, Semantic

RESULTS = Path(__file__).parent / "results"


def outage(requests: int, workdir: Path) -> dict[str, Any]:
    """Redis killed at 25 % of the workload and restarted (empty) at 60 %.  Each write's fate
    is checked on the server itself, so the dropped-write counter can be compared exactly."""
    server = RedisServer(workdir)
    server.start()
    cache = Cache(redis_url=server.url, namespace="outage", exact=Exact(l1_max_items=1),
                  semantic=False, faq=False)  # fmt: skip
    raw = redis.Redis(port=server.port, socket_timeout=0.5)
    errors = answered = hits_after = writes = not_landed = 0
    down = False
    for i in range(requests):
        if i == requests // 4:
            server.stop()
            down = True
        if i == requests * 6 // 10:
            server.start()
            down = False
            time.sleep(cache.exact.breaker.max_backoff / 10)
        try:
            request = cache.request(f"question {i % 25}")
            hit = cache.lookup(request)
            if hit is None:
                answer = f"answer {i % 25} #{i}#"
                cache.update(request, answer)
                writes += 1
                not_landed += down or not _landed(raw, cache.exact.key(request), answer)
            elif i > requests * 6 // 10:
                hits_after += 1
            answered += 1
        except Exception:
            errors += 1
        if requests // 4 <= i < requests * 6 // 10:
            time.sleep(0.005)
    stats = cache.stats()["exact"]
    breaker = cache.exact.breaker
    failed_reads = sum(stats.get(k, 0) for k in ("read_errors", "refresh_errors"))
    report = {"requests": requests, "answered": answered, "app_errors": errors,
              "failed_reads": failed_reads,
              "reads_skipped_by_breaker": stats.get("breaker_skips", 0),
              "writes": writes, "writes_not_on_the_server": not_landed,
              "dropped_writes": stats.get("dropped_writes", 0),
              "breaker_opened": breaker.opened, "breaker_closed_at_end": not breaker.is_open,
              "hits_after_restart": hits_after}  # fmt: skip
    cache.close()
    server.stop()
    return report


def _landed(client: redis.Redis, key: str, answer: str) -> bool:
    try:
        value = client.get(key)
    except redis.RedisError:
        return False
    return value is not None and answer.encode() in value


def slow_redis(lookups: int, workdir: Path) -> dict[str, Any]:
    """The server sleeps (DEBUG SLEEP) while lookups run: each costs its budget, not more."""
    import threading

    server = RedisServer(workdir)
    server.start()
    cache = Cache(
        redis_url=server.url, namespace="slow", semantic=False, faq=False, exact=Exact(bloom=False)
    )
    sleeper = threading.Thread(
        target=lambda: redis.Redis(port=server.port).execute_command("DEBUG", "SLEEP", 2)
    )
    sleeper.start()
    time.sleep(0.1)
    worst, errors = 0.0, 0
    for i in range(lookups):
        start = time.perf_counter()
        try:
            cache.lookup(cache.request(f"slow {i}"))
        except Exception:
            errors += 1
        worst = max(worst, time.perf_counter() - start)
    sleeper.join()
    cache.close()
    server.stop()
    return {"lookups": lookups, "budget_ms": 50, "worst_lookup_ms": round(worst * 1e3, 1),
            "app_errors": errors}  # fmt: skip


def corrupt_values(count: int) -> dict[str, Any]:
    """Random bytes, a wrong schema version and truncated MessagePack under real keys."""
    namespace = f"corrupt{time.time_ns()}"
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    rng = random.Random(3)
    cache = Cache(redis_url="redis://127.0.0.1:6379/0", namespace=namespace, semantic=False,
                  faq=False, exact=Exact(bloom=False))  # fmt: skip
    served = errors = 0
    requests = [cache.request(f"corrupt question {i}") for i in range(count)]
    for i, request in enumerate(requests):
        cache.update(request, "good answer")
        key = cache.exact.key(request)
        good = client.get(key) or b""
        kind = i % 3
        if kind == 0:
            bad = rng.randbytes(rng.randrange(1, 200))
        elif kind == 1:  # a well-formed entry of a schema this version does not know
            bad = msgpack.packb([99, "good answer", None, None, 0, {}, False, 0, 0, ""])
        else:
            bad = good[: max(1, len(good) // 2)]
        client.set(key, bad)
    with Cache(redis_url="redis://127.0.0.1:6379/0", namespace=namespace, semantic=False,
               faq=False, exact=Exact(bloom=False)) as fresh:  # fmt: skip
        for request in requests:
            try:
                served += fresh.lookup(request) is not None
            except Exception:
                errors += 1
        stats = fresh.stats()["exact"]
    left = sum(client.exists(cache.exact.key(r)) for r in requests)
    cache.clear()
    cache.close()
    return {"corrupted": count, "served": served, "app_errors": errors,
            "counted_corrupt": stats.get("corrupt", 0), "keys_left": left}  # fmt: skip


def tenants(n_tenants: int, prompts: int, workdir: Path) -> dict[str, Any]:
    """Every tenant stores its own answer to the same prompts; everyone asks everything."""
    cache = Cache(path=workdir / "tenants.sqlite3", faq=False)
    questions = [f"How do I configure feature {i} for my team?" for i in range(prompts)]
    for t in range(n_tenants):
        for q in questions:
            cache.update(cache.request(q, tenant=f"t{t}"), f"t{t}:{q}")
    asked = wrong = 0
    for t in range(n_tenants):
        for q in questions:
            for probe in (q, q.replace("How do I", "How can I")):
                hit = cache.lookup(cache.request(probe, tenant=f"t{t}"))
                asked += 1
                wrong += hit is not None and not hit.text.startswith(f"t{t}:")
    cache.close()
    return {"tenants": n_tenants, "entries": n_tenants * prompts, "lookups": asked,
            "wrong_tenant_hits": wrong}  # fmt: skip


def fuzz(cases: int, workdir: Path) -> dict[str, Any]:
    """Random Unicode (surrogates, controls, CJK, huge), and broken LangChain serializations."""
    rng = random.Random(11)
    cache = Cache(path=workdir / "fuzz.sqlite3", faq=False)
    lc = TriCache(cache=cache)
    errors = foreign_hits = 0

    def text() -> str:
        size = rng.choice([0, 1, 5, 40, 300, 2_000, 200_000])
        pool = rng.choice([(0x20, 0x7E), (0x0, 0x1F), (0x4E00, 0x9FFF), (0xD800, 0xDFFF),
                           (0x1F300, 0x1FAFF), (0x0, 0x10FFFF)])  # fmt: skip
        return "".join(chr(rng.randint(*pool)) for _ in range(size))

    for i in range(cases):
        prompt = text()
        if i % 3 == 1:
            prompt = "[" + prompt
        elif i % 3 == 2:
            prompt = json.dumps([{"id": ["x", rng.choice(["HumanMessage", "Nope"])],
                                  "kwargs": {"content": prompt}}])  # fmt: skip
        try:
            foreign_hits += cache.lookup(cache.request(prompt, tenant="fuzz")) is not None
            foreign_hits += lc.lookup(prompt, f"never-stored-{i}") is not None
            cache.update(cache.request(prompt, tenant="fuzz-w"), "x")
            lc.update(prompt, f"stored-{i}", [Generation(text="x")])
        except Exception:
            errors += 1
    cache.close()
    return {"cases": cases, "app_errors": errors, "hits_for_never_stored": foreign_hits}


def load(seconds: float) -> dict[str, Any]:
    """2 processes × (8 threads + an asyncio task), mixed reads, writes, invalidations."""
    namespace = f"load{time.time_ns()}"
    options = {"redis_url": "redis://127.0.0.1:6379/0", "namespace": namespace,
               "semantic": False, "faq": False}  # fmt: skip
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    workers = [ctx.Process(target=storm, args=(options, w, seconds, results)) for w in range(2)]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join(30)
    written = {k: v for r in reports for k, v in r["last"].items()}
    with Cache(**options, exact=Exact(bloom=False)) as reader:
        lost = sum(
            1
            for key, value in written.items()
            if (hit := reader.lookup(reader.request(key), semantic=False)) is None
            or hit.text != value
        )
        reader.clear()
    ops = {k: sum(r["ops"].get(k, 0) for r in reports) for k in ("read", "write", "volatile",
                                                                 "invalidate")}  # fmt: skip
    return {"seconds": seconds, "operations": ops, "stable_keys": len(written),
            "lost_writes": lost, "torn_or_foreign_reads": sum(len(r["bad"]) for r in reports),
            "dropped_writes": sum(r["dropped_writes"] for r in reports),
            "hung_threads": sum(r["hung"] for r in reports),
            "crashed_processes": sum(w.exitcode != 0 for w in workers)}  # fmt: skip


# never slow: lookup latency and event-loop stalls under faults ------------------------------
def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples) or [0.0]

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 1)

    return {"p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": round(ordered[-1] * 1e3, 1)}


def _threaded_lookups(cache: Cache, questions: list[str], threads: int = 16) -> list[float]:
    import threading

    samples: list[float] = []

    def run(n: int) -> None:
        for i, q in enumerate(questions):
            request = cache.request(questions[(i + n) % len(questions)] if n else q)
            started = time.perf_counter()
            cache.lookup(request)
            samples.append(time.perf_counter() - started)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return samples


class _Stall:
    """``async with _Stall() as s``: a 5 ms ticker runs on the loop meanwhile; ``s.longest``
    is the longest it was kept waiting beyond its 5 ms (the loop's stall)."""

    def __init__(self) -> None:
        self.longest = 0.0

    async def __aenter__(self) -> _Stall:
        import asyncio

        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await self._task

    async def _tick(self) -> None:
        import asyncio

        last = time.perf_counter()
        while not self._stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last - 0.005)
            last = now


def _async_lookups(cache: Cache, questions: list[str]) -> tuple[list[float], float]:
    """1,000 concurrent-ish ``alookup`` calls and the longest the loop went without running
    a 5 ms ticker (its stall)."""
    import asyncio

    async def main() -> tuple[list[float], float]:
        stall = _Stall()

        async def one(q: str) -> float:
            started = time.perf_counter()
            await cache.alookup(cache.request(q))
            return time.perf_counter() - started

        async with stall:
            samples: list[float] = []
            for start in range(0, 1000, 50):
                batch = [questions[(start + i) % len(questions)] for i in range(50)]
                samples += await asyncio.gather(*(one(q) for q in batch))
        return samples, stall.longest

    return asyncio.run(main())


def hung_redis(kind: str, workdir: Path) -> dict[str, Any]:
    """Redis paused (SIGSTOP) or asleep (DEBUG SLEEP): 16 threads, then 1,000 async lookups."""
    import os
    import signal
    import threading

    server = RedisServer(workdir)
    server.start()
    cache = Cache(redis_url=server.url, namespace="hung", semantic=False, faq=False,
                  exact=Exact(bloom=False))  # fmt: skip
    questions = [f"hung question {i}" for i in range(100)]
    for q in questions[:50]:
        cache.lookup(cache.request(q))
        cache.update(cache.request(q), f"answer {q}")
    cache.exact.l1.clear()
    sleeper = None
    if kind == "paused":
        os.kill(server.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    else:
        sleeper = threading.Thread(target=lambda: redis.Redis(port=server.port).execute_command(
            "DEBUG", "SLEEP", 6))  # fmt: skip
        sleeper.start()
        time.sleep(0.1)
    threaded = _threaded_lookups(cache, questions[:20])
    asynchronous, stall = _async_lookups(cache, questions)
    if kind == "paused":
        os.kill(server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    elif sleeper is not None:
        sleeper.join()
    cache.close()
    server.stop()
    return {"scenario": f"hung Redis ({'SIGSTOP' if kind == 'paused' else 'DEBUG SLEEP 6'})",
            "threads_16": _percentiles(threaded), "async_1000": _percentiles(asynchronous),
            "loop_stall_ms": round(stall * 1e3, 1)}  # fmt: skip


def peer_wrote(entries: int, freeze: bool = False) -> dict[str, Any]:
    """A peer wrote ``entries`` entries (their write log too): this process's lookups while its
    Bloom filter catches up in the background.  The catch-up allocates, and Python's cyclic
    garbage collector then walks the whole heap while holding the interpreter: ``freeze``
    moves what was imported out of its reach first (``gc.freeze()``, as servers do after
    loading an app), to tell that pause from TriCache's own work."""
    import gc

    if freeze:
        gc.freeze()
    namespace = f"peer{time.time_ns()}"
    cache = Cache(redis_url="redis://127.0.0.1:6379/0", namespace=namespace, semantic=False,
                  faq=False)  # fmt: skip
    cache.lookup(cache.request("warm"))  # versions read, the filter loaded (empty)
    deadline = time.monotonic() + 10
    while not cache.exact.bloom.ready and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.01)
    client = redis.Redis()
    for start in range(0, entries, 5000):  # the peer, written straight to Redis
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(entries, start + 5000)):
            key = f"tricache:{namespace}:x:{i:040x}"
            pipe.set(key, b"0" * 16 + b"x", px=600_000)
            pipe.xadd(f"tricache:{namespace}:wlog", {"k": key})
        pipe.execute()
    questions = [f"never asked {i}" for i in range(200)]
    threaded = _threaded_lookups(cache, questions[:20])
    asynchronous, stall = _async_lookups(cache, questions)
    cache.clear()
    cache.close()
    client.close()
    if freeze:
        gc.unfreeze()
    return {
        "scenario": f"a peer wrote {entries:,} entries" + (", gc.freeze() first" if freeze else ""),
        "threads_16": _percentiles(threaded),
        "async_1000": _percentiles(asynchronous),
        "loop_stall_ms": round(stall * 1e3, 1),
    }


def expired_rows(rows: int, workdir: Path) -> dict[str, Any]:
    """SQLite holding ``rows`` expired rows: lookups and writes while they are swept."""
    import sqlite3

    path = workdir / "expired.sqlite3"
    cache = Cache(path=path, semantic=False, faq=False)
    cache.lookup(cache.request("warm"))
    db = sqlite3.connect(path)
    db.executemany(
        "INSERT INTO entries (key, value, watermark, expires_at) VALUES (?, ?, 0, 1)",
        ((f"tricache:default:x:{i:040x}", b"x") for i in range(rows)),
    )
    db.commit()
    db.close()
    questions = [f"expired question {i}" for i in range(100)]
    samples = []
    for q in questions:
        started = time.perf_counter()
        if cache.lookup(cache.request(q)) is None:
            cache.update(cache.request(q), "answer")
        samples.append(time.perf_counter() - started)
    asynchronous, stall = _async_lookups(cache, questions)
    cache.close()
    return {"scenario": f"{rows:,} expired SQLite rows", "threads_16": _percentiles(samples),
            "async_1000": _percentiles(asynchronous), "loop_stall_ms": round(stall * 1e3, 1),
            "note": "one thread: lookup + write"}  # fmt: skip


def big_prompts_with_faq(workdir: Path) -> dict[str, Any]:
    """1 MB prompts with an FAQ loaded: bounded misses, memory included."""
    import tracemalloc

    from tricache.faq.store import FaqEntry

    cache = Cache(path=workdir / "big.sqlite3", warm=True)
    cache.add_faq([FaqEntry("How do I reset my password?", "Settings > Security.")])
    prompts = [f"How do I reset my password? {i} " + "x" * 1_000_000 + "?" for i in range(5)]
    tracemalloc.start()
    samples = []
    for prompt in prompts:
        started = time.perf_counter()
        cache.lookup(cache.request(prompt))
        samples.append(time.perf_counter() - started)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    cache.close()
    return {"scenario": "1 MB prompts, FAQ loaded", "threads_16": _percentiles(samples),
            "peak_mib": round(peak / 2**20, 1), "note": "one thread, 5 prompts"}  # fmt: skip


def faq_import(entries: int, workdir: Path, by: str) -> dict[str, Any]:
    """An FAQ import of ``entries`` entries, by ``add_faq`` in another thread or by ``tricache
    faq import`` in another process, while the app asks a curated question and reports the
    answer to others wrong: what each lookup and each ``feedback()`` took meanwhile."""
    import subprocess
    import threading

    from tricache.faq.store import FaqEntry, write_entries

    path = workdir / f"faq-import-{by}.sqlite3"
    app = Cache(path=path, warm=True)
    offices = [(f"Which office handles region {i}?", f"Office {i}.") for i in range(1000)]
    app.add_faq([("How do I reset my password?", "Settings > Security."), *offices])
    big = [
        FaqEntry(f"How do I configure widget {i} on the dashboard?", f"Answer {i}.",
                 (f"Where is the setting for widget {i}?",))
        for i in range(entries)
    ]  # fmt: skip
    started = time.perf_counter()
    if by == "thread":
        thread = threading.Thread(target=app.add_faq, args=(big,))
        thread.start()
        busy = thread.is_alive
    else:
        write_entries(big, workdir / "big-faq.csv")
        command = ["tricache", "faq", "import", str(workdir / "big-faq.csv"), "--path", str(path)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        busy = lambda: process.poll() is None  # noqa: E731
    waits: list[float] = []
    errors = not_served = 0
    for question, answer in offices:  # (each office's answer reported wrong once)
        if not busy():
            break
        began = time.perf_counter()
        try:
            hit = app.lookup(app.request("How do I reset my password?"))
            waits.append(time.perf_counter() - began)
            not_served += hit is None or hit.text != "Settings > Security."
            hit = app.lookup(app.request(question))
            not_served += hit is None or hit.text != answer
            began = time.perf_counter()
            if hit is not None:
                app.feedback(hit.entry_id, correct=False)
                waits.append(time.perf_counter() - began)
        except Exception:
            errors += 1
        time.sleep(0.02)
    took = time.perf_counter() - started
    app.close()
    how = "add_faq in another thread" if by == "thread" else "tricache faq import, another process"
    return {"scenario": f"FAQ import of {entries:,} entries ({how})",
            "threads_16": _percentiles(waits), "import_s": round(took, 1), "errors": errors,
            "not_served": not_served,
            "note": f"one thread: {len(waits)} lookups and feedbacks during the {took:.1f} s"
                    f" import; {errors} exceptions, {not_served} not served"}  # fmt: skip


_PAIRS = [(f"How do I export report number {n} to a spreadsheet?",
           f"How can I export report number {n} to a spreadsheet?") for n in range(20)]  # fmt: skip


def _busy(busy: bool) -> list[Any]:
    """Two processes spinning on the CPU (the machine's other load), when ``busy``."""
    import subprocess

    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin) for _ in range(2 if busy else 0)]


def paused_search_server(
    threads: int, workdir: Path, busy: bool = False, pause: bool = True
) -> dict[str, Any]:
    """The valkey that holds the entries and the query engine's index, paused (SIGSTOP) for
    4 s while ``threads`` threads ask the questions and their paraphrases without a pause.
    ``pause=False``: the same loop against the running server, the baseline: what the threads
    cost each other on this machine's cores, with no fault."""
    import signal
    import threading

    server = SearchServer(workdir)
    server.start()
    cache = Cache(redis_url=server.url, faq=False, semantic=Semantic(index="redis-search"))
    for n, (asked, _) in enumerate(_PAIRS):
        cache.lookup(cache.request(asked))
        cache.update(cache.request(asked), f"Reports > {n} > Export.")
    spinners = _busy(busy)
    samples: list[float] = []
    if pause:
        os.kill(server.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    cache.exact.l1.clear()
    until = time.monotonic() + 4.0

    def run(w: int) -> None:
        i = 0
        while time.monotonic() < until:
            pair = _PAIRS[(i + w) % len(_PAIRS)]
            request = cache.request(pair[i % 2])
            i += 1
            started = time.perf_counter()
            cache.lookup(request)
            samples.append(time.perf_counter() - started)

    workers = [threading.Thread(target=run, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if pause:
        os.kill(server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    for spinner in spinners:
        spinner.kill()
    stats = cache.stats()["exact"]
    store_calls = sum(stats.get(k, 0) for k in ("read_errors", "refresh_errors", "fetch_errors"))
    cache.close()
    server.stop()
    what = "paused (SIGSTOP 4 s)" if pause else "running (the baseline: no fault)"
    return {"scenario": f"query engine and store {what}, {threads} threads,"
                        f" {'busy (2 spinning processes)' if busy else 'quiet'} machine",
            "threads_16": _percentiles(samples),
            "note": f"{len(samples):,} lookups, {sum(x > 0.1 for x in samples)} over 100 ms,"
                    f" {store_calls} store calls failed"}  # fmt: skip


def search_reindex(points: int, workdir: Path) -> dict[str, Any]:
    """``FT.DROPINDEX`` and the index made again over ``points`` points (the engine re-indexes
    them in the background): 10 s of exact questions (L1 emptied before each: read from the
    store) and their paraphrases.  An exact answer missed is one lost while the index rebuilds."""
    import numpy as np

    server = SearchServer(workdir)
    server.start()
    cache = Cache(redis_url=server.url, faq=False, namespace="reindex",
                  semantic=Semantic(index="redis-search"))  # fmt: skip
    for n, (asked, _) in enumerate(_PAIRS):
        cache.lookup(cache.request(asked))
        cache.update(cache.request(asked), f"Reports > {n} > Export.")
    index = cache.tiers.semantic.index  # type: ignore[union-attr]
    rng = np.random.default_rng(0)
    for start in range(0, points, 1000):
        index.upsert_many([
            (f"filler{start + i}", rng.standard_normal(index.dim).astype(np.float32),
             {"question": f"filler {start + i}", "ref": "tricache:reindex:x:none",
              "expires_at": time.time() + 3600, "scope": "other"})
            for i in range(min(1000, points - start))
        ])  # fmt: skip
    # the bulk load above (50 points a MULTI) slows the server for the cache's own polls: a
    # fresh cache, as an app's process would be, so its breaker starts closed
    cache.close()
    cache = Cache(redis_url=server.url, faq=False, namespace="reindex",
                  semantic=Semantic(index="redis-search"))  # fmt: skip
    index = cache.tiers.semantic.index  # type: ignore[union-attr]
    redis.Redis.from_url(server.url).execute_command("FT.DROPINDEX", index.index)
    began = time.monotonic()
    index.ensure(force=True)  # what the next write does
    samples: list[float] = []
    exact = missed = paraphrases = found = 0
    back_after = None
    while time.monotonic() - began < 10.0:
        asked, paraphrase = _PAIRS[exact % len(_PAIRS)]
        cache.exact.l1.clear()
        started = time.perf_counter()
        hit = cache.lookup(cache.request(asked))
        samples.append(time.perf_counter() - started)
        exact += 1
        missed += hit is None
        started = time.perf_counter()
        hit = cache.lookup(cache.request(paraphrase))
        samples.append(time.perf_counter() - started)
        paraphrases += 1
        found += hit is not None
        if hit is not None and back_after is None:
            back_after = time.monotonic() - began
    stats = cache.stats()["exact"]
    cache.close()
    server.stop()
    back = f"{back_after:.1f} s" if back_after is not None else "never"
    return {"scenario": f"re-index of {points:,} points after FT.DROPINDEX (one thread, 10 s)",
            "threads_16": _percentiles(samples), "exact_missed": missed, "exact": exact,
            "note": f"{missed} of {exact} exact lookups missed ({stats.get('read_errors', 0)}"
                    f" store reads failed, breaker opened {cache.exact.breaker.opened}x);"
                    f" {found} of {paraphrases} paraphrases served, first at {back}"}  # fmt: skip


def first_lookup(workdir: Path) -> dict[str, Any]:
    """A new process on the embedded defaults: its first lookup, and the background warm-up."""
    import subprocess

    code = (
        "import time, json; t0 = time.perf_counter()\n"
        "from tricache import Cache\n"
        "c = Cache(); r = c.request('How do I reset my password?')\n"
        "t1 = time.perf_counter(); c.lookup(r); t2 = time.perf_counter()\n"
        "while c.stats()['store']['warm_up_s'] is None: time.sleep(0.01)\n"
        "print(json.dumps({'import_and_construct_ms': round((t1 - t0) * 1e3, 1),"
        " 'first_lookup_ms': round((t2 - t1) * 1e3, 1),"
        " 'warm_up_s': c.stats()['store']['warm_up_s']}))\n"
    )
    env = {**os.environ, "TRICACHE_HOME": str(workdir / "first")}
    env.pop("TRICACHE_WARM", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=300).stdout  # fmt: skip
    return {"scenario": "first lookup in a new process", **json.loads(out.strip().splitlines()[-1])}


def fork_after_use(workdir: Path) -> dict[str, Any]:
    """A parent uses the cache, forks 4 workers that use it (gunicorn --preload)."""
    from procs import use_inherited_cache

    parent = Cache(path=workdir / "fork.sqlite3", warm=True)
    for i in range(20):
        request = parent.request(f"How do I configure feature {i}?")
        parent.lookup(request)
        parent.update(request, f"Feature {i}: Settings > Features.")
    points = parent.semantic.index.count()  # type: ignore[union-attr]
    fork = mp.get_context("fork")
    results = fork.Queue()
    children = [fork.Process(target=use_inherited_cache, args=(parent, n, results))
                for n in range(4)]  # fmt: skip
    for child in children:
        child.start()
    reports = [results.get(timeout=300) for _ in children]
    for child in children:
        child.join(60)
    index = parent.semantic.index  # type: ignore[union-attr]
    parent.tiers.upkeep()  # the answers children stored while warming up (their journal)
    index.sync()  # what the children indexed before exiting reaches the parent's replica
    after = index.count()
    stored = sum(1 for _ in parent.exact.store.scan_points(parent.namespace))  # type: ignore[union-attr]
    parent.close()
    with Cache(path=workdir / "fork.sqlite3", warm=True) as again:
        reopened = again.semantic.index.count()  # type: ignore[union-attr]
    return {
        "scenario": "fork after use (4 workers)",
        "child_errors": sum(len(r["errors"]) for r in reports),
        "crashed_children": sum(c.exitcode != 0 for c in children),
        "points_before": points,
        "points_after": after,
        "points_reopened": reopened,
        "points_stored": stored,
    }


def event_loops(runs: int) -> dict[str, Any]:
    """``asyncio.run(cache.alookup(...))`` ``runs`` times on Redis: lookup latency in each new
    loop, and the open file descriptors afterwards (each loop's client closes with it)."""
    import asyncio
    import gc

    cache = Cache(redis_url="redis://127.0.0.1:6379/0", namespace=f"loops{time.time_ns()}",
                  semantic=False, faq=False, exact=Exact(l1_max_items=1))  # fmt: skip
    requests = [cache.request(f"Which loop is this, {i}?") for i in range(2)]
    for request in requests:  # two, alternating: L1 holds one, so each lookup reads Redis
        cache.lookup(request)
        cache.update(request, "Any loop.")
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))

    async def one(request: Any) -> float:
        started = time.perf_counter()
        await cache.alookup(request)
        return time.perf_counter() - started

    samples = [asyncio.run(one(requests[i % 2])) for i in range(runs)]
    gc.collect()
    fds = len(os.listdir("/proc/self/fd")) - before
    cache.clear()
    cache.close()
    return {"scenario": f"{runs:,} event loops (asyncio.run each)",
            "async_1000": _percentiles(samples), "open_fds_after": fds}  # fmt: skip


def cancellation_storm() -> dict[str, Any]:
    """300 identical ``CachedChatModel.ainvoke`` calls (a 0.3 s model), 150 of them cancelled
    at random moments, the first leader among them: locks left, model calls, the next call."""
    import asyncio

    from langchain_core.language_models import FakeListChatModel

    from langchain_tricache import CachedChatModel

    class SlowModel(FakeListChatModel):
        calls: int = 0

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            self.calls += 1
            await asyncio.sleep(0.3)
            return await super().ainvoke(input, config, **kwargs)

    namespace = f"storm{time.time_ns()}"
    cache = Cache(store=Redis("redis://127.0.0.1:6379/0", timeout=2), namespace=namespace,
                  semantic=False, faq=False)  # fmt: skip
    inner = SlowModel(responses=["Lima."])
    model = CachedChatModel(inner=inner, tricache=cache, coalesce_timeout=60)
    rng = random.Random(14)

    async def storm() -> tuple[list[float], float, float]:
        stall = _Stall()

        async def call() -> float:
            started = time.perf_counter()
            await model.ainvoke("What is the capital of Peru?")
            return time.perf_counter() - started

        async with stall:
            calls = [asyncio.create_task(call()) for _ in range(300)]
            await asyncio.sleep(0.01)
            for task in [calls[0], *rng.sample(calls, 150)]:
                asyncio.get_running_loop().call_later(rng.uniform(0, 0.6), task.cancel)
            results = await asyncio.gather(*calls, return_exceptions=True)
            cache.clear()  # the next call misses: does it wait for a lock left behind?
            started = time.perf_counter()
            await model.ainvoke("What is the capital of Peru?")
            next_call = time.perf_counter() - started
        return [r for r in results if isinstance(r, float)], stall.longest, next_call

    answered, stall, next_call = asyncio.run(storm())
    left = len(redis.Redis().keys(f"tricache:{namespace}:lock:*"))
    cache.close()
    return {"scenario": "cancellation storm (300 calls, 150 cancelled, 0.3 s model)",
            "async_1000": _percentiles(answered), "loop_stall_ms": round(stall * 1e3, 1),
            "locks_left": left, "model_calls": inner.calls,
            "next_call_ms": round(next_call * 1e3, 1)}  # fmt: skip


# coalescing: identical requests at once (#38, items 14-15) ------------------------------------
def coalescing(n: int = 10) -> list[dict[str, Any]]:
    """``n`` identical requests at once, through both frameworks, the model 0.3 s slow (a
    stream: 4 pieces over 0.3 s): the model calls they cost, the slowest caller's wait as a
    multiple of the model's latency, and the answers that differ from the model's."""
    import asyncio
    import threading

    from test_coalescing import DELAY, NOW, PERU, SlowChat, SlowLlama

    from langchain_tricache import CachedChatModel
    from llama_index_tricache import TriCacheLLM

    def in_threads(call: Any) -> list[tuple[Any, float]]:
        results: list[Any] = [None] * n
        barrier = threading.Barrier(n)

        def run(i: int) -> None:
            barrier.wait()
            began = time.perf_counter()
            results[i] = (call(), time.perf_counter() - began)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return results

    def in_tasks(call: Any) -> list[tuple[Any, float]]:
        async def one() -> tuple[Any, float]:
            began = time.perf_counter()
            return await call(), time.perf_counter() - began

        async def all_of() -> list[tuple[Any, float]]:
            return await asyncio.gather(*(one() for _ in range(n)))

        return asyncio.run(all_of())

    async def astreamed(model: Any, question: str) -> str:
        return "".join([str(c.content) async for c in model.astream(question)])

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (scenario, framework, run) in enumerate([
            ("time-dependent `invoke()`, threads", "langchain", lambda m: in_threads(
                lambda: str(m.invoke(NOW).content))),
            ("time-dependent `ainvoke()`, tasks", "langchain", lambda m: in_tasks(
                lambda: _content(m.ainvoke(NOW)))),
            ("`stream()`, threads", "langchain", lambda m: in_threads(
                lambda: "".join(str(c.content) for c in m.stream(PERU)))),
            ("time-dependent `astream()`, tasks", "langchain", lambda m: in_tasks(
                lambda: astreamed(m, NOW))),
            ("time-dependent `complete()`, threads", "llama_index", lambda m: in_threads(
                lambda: m.complete(NOW).text)),
            ("`stream_complete()`, threads", "llama_index", lambda m: in_threads(
                lambda: list(m.stream_complete(PERU))[-1].text)),
        ]):  # fmt: skip
            cache = Cache(path=Path(tmp) / f"c{i}.sqlite3", semantic=False, faq=False)
            if framework == "langchain":
                inner: Any = SlowChat()
                model: Any = CachedChatModel(inner=inner, tricache=cache, coalesce_timeout=30)
                question = NOW if "time" in scenario else PERU
                want = str(inner.respond([_human(question)]).content)
            else:
                inner = SlowLlama()
                model = TriCacheLLM(inner, cache=cache, coalesce_timeout=30)
                want = inner.respond_text(NOW if "time" in scenario else PERU)
            results = run(model)
            calls = getattr(inner, "streams", 0) + inner.calls
            cache.close()
            rows.append({"scenario": scenario, "requests": n, "model_calls": calls,
                         "slowest_x": round(max(t for _, t in results) / DELAY, 2),
                         "wrong": sum(answer != want for answer, _ in results)})  # fmt: skip
    return rows


async def _content(reply: Any) -> str:
    return str((await reply).content)


def _human(text: str) -> Any:
    from langchain_core.messages import HumanMessage

    return HumanMessage(text)


# freshness: faults that once made invalidated answers servable -----------------------------
_FRESH_QS = [f"what does section {i} of the handbook say?" for i in range(40)]


def _fresh_cache(url: str, **kw: Any) -> Cache:
    return Cache(redis_url=url, namespace="fresh", semantic=False, faq=False, **kw)


def _answer_all(cache: Cache, answer: str) -> None:
    for q in _FRESH_QS:
        request = cache.request(q, tags=["handbook"])
        if cache.lookup(request) is None:
            cache.update(request, f"{answer}: {q}")


def _stale_served(caches: list[Cache]) -> tuple[int, int]:
    """(old answers served, lookups) over every cache and question."""
    served = lookups = 0
    for cache in caches:
        for q in _FRESH_QS:
            hit = cache.lookup(cache.request(q, tags=["handbook"]))
            lookups += 1
            served += hit is not None and hit.text.startswith("old")
    return served, lookups


def _state_keys(client: redis.Redis) -> list[Any]:
    return list(client.scan_iter(match="tricache:{fresh}:*"))


def _fault(kind: str, server: RedisServer, client: redis.Redis, admin: Cache) -> str:
    """Inject one fault after the answers were invalidated; returns what was done."""
    if kind == "evict":
        entries = list(client.scan_iter(match="tricache:fresh:x:*"))
        for i in range(50_000):  # readers keep the old entries hot; junk fills the memory
            client.set(f"junk:{i}", b"x" * 4096)
            client.get(entries[i % len(entries)])
            if i % 50 == 0 and not _state_keys(client):
                return f"state evicted after {i} junk writes"
        return "state never evicted"
    if kind == "restart":
        server.stop()
        server.start()
        return "restarted empty"
    if kind == "delete":
        client.delete(*_state_keys(client))
        return "DEL of the version keys"
    if kind == "rollback":
        client.hset("tricache:{fresh}:meta", mapping={"seq": 0, "tag:handbook": 0})
        return "state rolled back to an older snapshot"
    if kind == "clear":
        admin.clear()
        return "clear()"
    return "none"


def freshness(workdir: Path) -> list[dict[str, Any]]:
    """For each fault: answers written, invalidated, the fault injected, invalidated again,
    then every cache (the writer, a second process-like cache holding them in L1, a fresh
    one) asks every question.  Counts invalidated answers served (goal 0)."""
    rows = []
    scenarios = [
        ("allkeys-lru eviction (3 MB)", "evict", ["--maxmemory", "3mb", "--maxmemory-policy",
                                                  "allkeys-lru"]),
        ("allkeys-random eviction (3 MB)", "evict", ["--maxmemory", "3mb",
                                                     "--maxmemory-policy", "allkeys-random"]),
        ("restart with no data", "restart", []),
        ("version keys deleted by hand", "delete", []),
        ("restored from an older snapshot", "rollback", []),
        ("clear(), then invalidate()", "clear", []),
    ]  # fmt: skip
    for n, (name, kind, args) in enumerate(scenarios):
        (workdir / f"f{n}").mkdir()
        server = RedisServer(workdir / f"f{n}", args)
        server.start()
        client = redis.Redis(port=server.port)
        writer, holder, admin = (_fresh_cache(server.url) for _ in range(3))
        admin.invalidate("handbook")  # the app's answers carry version 1
        _answer_all(writer, "old")
        _stale_served([holder])  # now in holder's L1 too
        admin.invalidate("handbook")
        done = _fault(kind, server, client, admin)
        for cache in (writer, holder, admin):
            cache.exact.breaker = type(cache.exact.breaker)()  # a restart cost them a back-off
        admin.invalidate("handbook")
        time.sleep(0.6)  # one poll: the promise for other processes
        served, lookups = _stale_served(
            [writer, holder, _fresh_cache(server.url, exact=Exact(bloom=False))]
        )
        rows.append({"scenario": name, "fault": done, "stale_served": served,
                     "lookups": lookups})  # fmt: skip
        for cache in (writer, holder, admin):
            cache.close()
        client.close()
        server.stop()
    rows.append(_in_flight(workdir / "inflight"))
    rows.append(_outage_points(workdir / "pause"))
    return rows


def _in_flight(workdir: Path) -> dict[str, Any]:
    """Invalidations landing while the LLM runs: each answer is computed from old data."""
    workdir.mkdir()
    server = RedisServer(workdir)
    server.start()
    app, admin = _fresh_cache(server.url), _fresh_cache(server.url)
    for q in _FRESH_QS:
        request = app.request(q, tags=["handbook"])
        app.lookup(request)
        admin.invalidate("handbook")  # the docs change during the call
        app.update(request, f"old: {q}")
    served, lookups = _stale_served([app, _fresh_cache(server.url, exact=Exact(bloom=False))])
    server.stop()
    return {"scenario": "invalidate() during each LLM call", "fault": f"{len(_FRESH_QS)} calls",
            "stale_served": served, "lookups": lookups}  # fmt: skip


def _outage_points(workdir: Path) -> dict[str, Any]:
    """Redis paused (SIGSTOP) for 1.5 s while paraphrases are asked: no point may be lost."""
    import os
    import signal

    workdir.mkdir()
    server = RedisServer(workdir)
    server.start()
    cache = Cache(
        redis_url=server.url,
        namespace="pause",
        faq=False,
        semantic=Semantic(vector_path=workdir / "v"),
    )
    questions = ["How do I reset my password?", "How do I export my data to CSV?",
                 "How do I change my billing address?", "How do I invite a teammate?"]  # fmt: skip
    for q in questions:
        request = cache.request(q)
        cache.lookup(request)
        cache.update(request, f"answer: {q}")
    index = cache.semantic.index  # type: ignore[union-attr]
    before = index.count()
    os.kill(server.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        for q in questions:
            cache.exact.l1.clear()
            cache.lookup(cache.request(q.replace("How do I", "How can I")))
    os.kill(server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    lost = before - index.count()
    cache.close()
    server.stop()
    return {"scenario": "Redis paused 1.5 s during semantic lookups", "fault": "SIGSTOP",
            "stale_served": 0, "lookups": 0, "points_lost": lost, "points": before}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--search",
        action="store_true",
        help="only the query engine's rows: reliability_search.{md,json}",
    )
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    # the scenarios measure the tiers, not the warm-up (first_lookup measures that, without it)
    os.environ.setdefault("TRICACHE_WARM", "1")
    if args.search:
        with tempfile.TemporaryDirectory() as tmp:
            rows = search_rows(Path(tmp), scale)
        command = " ".join(["python", "benchmarks/reliability.py", *sys.argv[1:]])
        write_search(rows, args.out, command)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for sub in ("a", "b", "h1", "h2", "round"):
            (work / sub).mkdir()
        report = {
            "command": " ".join(["python", "benchmarks/reliability.py", *sys.argv[1:]]),
            "outage": outage(int(1000 * scale), work / "a"),
            "slow_redis": slow_redis(int(20 * scale) + 5, work / "b"),
            "corrupt_values": corrupt_values(int(300 * scale)),
            "tenants": tenants(int(20 * scale) + 2, int(50 * scale), work),
            "fuzz": fuzz(int(3000 * scale), work),
            "load": load(10.0 * scale),
            "freshness": freshness(work),
            "never_slow": [
                hung_redis("paused", work / "h1"),
                hung_redis("sleep", work / "h2"),
                peer_wrote(int(100_000 * scale)),
                peer_wrote(int(100_000 * scale), freeze=True),
                expired_rows(int(1_000_000 * scale), work),
                big_prompts_with_faq(work),
                event_loops(int(2000 * scale)),
                cancellation_storm(),
                *([] if args.quick else search_rows(work, scale)),  # (--search: these alone)
            ],
            "coalescing": coalescing(),
            "faq_import": [  # issue #38 item 13: lookups and feedback during an FAQ import
                faq_import(int(1500 * scale), work, "thread"),
                faq_import(int(1500 * scale), work, "process"),
            ],
            "every_path": every_path.run(work / "paths", quick=args.quick),
            "first_lookup": first_lookup(work),
            "fork": fork_after_use(work),
            "last_round": fault_round.run(work / "round", quick=args.quick),
        }
    write(report, args.out, "reliability_quick" if args.quick else "reliability")


def search_rows(work: Path, scale: float) -> list[dict[str, Any]]:
    """The query engine's server paused (8 and 16 threads, a quiet and a busy machine), and a
    re-index after ``FT.DROPINDEX``."""
    rows = []
    runs = [(threads, busy, pause) for busy in (False, True) for threads in (8, 16)
            for pause in (False, True)]  # fmt: skip
    for n, (threads, busy, pause) in enumerate(runs):
        (work / f"ps{n}").mkdir()
        rows.append(paused_search_server(threads, work / f"ps{n}", busy, pause))
    (work / "reindex").mkdir()
    rows.append(search_reindex(int(40_000 * scale), work / "reindex"))
    return rows


def write_search(rows: list[dict[str, Any]], out: Path, command: str) -> None:
    lines = [
        "# Reliability figures: the Redis query engine",
        "",
        f"Command: `{command}` (private valkey-server processes with RediSearch loaded, on"
        " loopback; nothing mocked). Store timeout 50 ms: the budget of one lookup.",
        "",
        "| scenario | lookups p50 / p99 / max (ms) | what happened |",
        "|---|---|---|",
    ]
    for row in rows:
        t = row["threads_16"]
        lines.append(f"| {row['scenario']} | {t['p50_ms']} / {t['p99_ms']} / {t['max_ms']} |"
                     f" {row['note']} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reliability_search.md").write_text(text)
    (out / "reliability_search.json").write_text(
        json.dumps({"command": command, "rows": rows}, indent=1) + "\n"
    )


def write(report: dict[str, Any], out: Path, stem: str) -> None:
    lines = [
        "# Reliability figures",
        "",
        f"Command: `{report['command']}` (real redis-server processes on loopback, real SQLite"
        " and embedded Qdrant; nothing mocked).",
        "",
        "| scenario | what was done | what reached the app | what went wrong |",
        "|---|---|---|---|",
    ]
    o = report["outage"]
    lines.append(
        f"| Redis killed, restarted empty | {o['requests']} requests; kill at 25 %, restart at"
        f" 60 % | {o['app_errors']} exceptions; {o['answered']} of {o['requests']} answered |"
        f" {o['failed_reads']} failed reads and {o['reads_skipped_by_breaker']} reads skipped by"
        f" the breaker; {o['dropped_writes']} dropped writes counted,"
        f" {o['writes_not_on_the_server']} of {o['writes']} writes missing on the server;"
        f" breaker opened {o['breaker_opened']}×, closed at the end: {o['breaker_closed_at_end']};"
        f" {o['hits_after_restart']} hits after the restart |"
    )
    s = report["slow_redis"]
    lines.append(
        f"| Redis asleep (DEBUG SLEEP 2 s) | {s['lookups']} lookups | {s['app_errors']}"
        f" exceptions | slowest lookup {s['worst_lookup_ms']} ms (budget {s['budget_ms']} ms) |"
    )
    c = report["corrupt_values"]
    lines.append(
        f"| corrupt values in L2 | {c['corrupted']} keys overwritten (random bytes, wrong schema,"
        f" truncated) | {c['app_errors']} exceptions | {c['served']} served; {c['counted_corrupt']}"
        f" counted corrupt; {c['keys_left']} keys left |"
    )
    t = report["tenants"]
    lines.append(
        f"| tenants | {t['tenants']} tenants × the same prompts ({t['entries']} entries), every"
        f" tenant asks everything, reworded too ({t['lookups']} lookups) | 0 |"
        f" {t['wrong_tenant_hits']} wrong-tenant hits |"
    )
    f = report["fuzz"]
    lines.append(
        f"| fuzzed prompts | {f['cases']} random Unicode / broken LangChain serializations"
        f" (core and LangChain) | {f['app_errors']} exceptions | {f['hits_for_never_stored']}"
        " hits for prompts never stored |"
    )
    ld = report["load"]
    lines.append(
        f"| load storm | 2 processes × (8 threads + asyncio), {ld['seconds']:.0f} s:"
        f" {ld['operations']} | {ld['crashed_processes']} crashed processes,"
        f" {ld['hung_threads']} hung threads | {ld['lost_writes']} lost writes of"
        f" {ld['stable_keys']} keys; {ld['torn_or_foreign_reads']} torn or foreign reads |"
    )
    lines += [
        "",
        "## Freshness under store faults",
        "",
        "Answers written under a tag, the tag invalidated, the fault injected, the tag invalidated"
        " again; then three caches (the writer, a second one holding the answers in L1, a fresh"
        " one reading Redis) ask every question 0.6 s later.",
        "",
        "| fault | what was done | invalidated answers served | entries lost |",
        "|---|---|---|---|",
    ]
    for row in report["freshness"]:
        lost = (f"{row['points_lost']} of {row['points']} semantic points"
                if "points_lost" in row else "n/a")  # fmt: skip
        served = f"{row['stale_served']} of {row['lookups']}" if row["lookups"] else "—"
        lines.append(f"| {row['scenario']} | {row['fault']} | {served} | {lost} |")
    lines += [
        "",
        "## Never slow: lookups under faults",
        "",
        "Store timeout 50 ms. 16 threads × 20 lookups, then 1,000 `alookup` calls (50 at a time)"
        " with a 5 ms ticker on the same loop: its longest delay is the loop stall. A stall can"
        " also be Python's garbage collector walking the heap (the peer rows, with and without"
        " `gc.freeze()`, tell it apart) or plain CPU work: in the storm, 300 calls become ready"
        " at once and the loop runs them all before the ticker.",
        "",
        "| fault | threads p50 / p99 / max (ms) | async p50 / p99 / max (ms) | loop stall (ms) |",
        "|---|---|---|---|",
    ]
    for row in [*report["never_slow"], *report["faq_import"]]:
        t, a = row.get("threads_16"), row.get("async_1000")
        asyn = f"{a['p50_ms']} / {a['p99_ms']} / {a['max_ms']}" if a else "—"
        note = f" ({row['note']})" if row.get("note") else ""
        extra = f"; peak {row['peak_mib']} MiB traced" if "peak_mib" in row else ""
        if "open_fds_after" in row:
            asyn += f"; {row['open_fds_after']} more open files after"
        if "locks_left" in row:
            asyn += (f"; {row['model_calls']} model calls, {row['locks_left']} locks left, the"
                     f" next call {row['next_call_ms']} ms")  # fmt: skip
        threads = f"{t['p50_ms']} / {t['p99_ms']} / {t['max_ms']}{extra}" if t else "—"
        lines.append(
            f"| {row['scenario']}{note} | {threads} | {asyn} | {row.get('loop_stall_ms', '—')} |"
        )
    first, fork = report["first_lookup"], report["fork"]
    lines += [
        "",
        f"First lookup in a new process (embedded defaults, empty home): import and"
        f" `Cache()` {first['import_and_construct_ms']} ms, first lookup"
        f" {first['first_lookup_ms']} ms (a miss while warming); the background warm-up took"
        f" {first['warm_up_s']} s.",
        "",
        f"Fork after use: {fork['scenario']}: {fork['child_errors']} errors in children,"
        f" {fork['crashed_children']} crashed; vector points {fork['points_before']} before,"
        f" {fork['points_after']} after (the children's included), {fork['points_stored']} in"
        f" the store, {fork['points_reopened']} when reopened.",
    ]
    lines += [
        "",
        "## Identical requests at once (coalescing)",
        "",
        "Each row: that many identical requests at the same instant through one wrapped model"
        " (0.3 s to answer; a stream: 4 pieces over 0.3 s); what they cost the model, the"
        " slowest caller's wait in model latencies, and the answers that are not the model's.",
        "",
        "| requests | what was done | model calls | slowest caller (× the model's latency) |"
        " wrong answers |",
        "|---|---|---|---|---|",
    ]
    for row in report["coalescing"]:
        lines.append(f"| {row['requests']} | {row['scenario']} | {row['model_calls']} |"
                     f" {row['slowest_x']} | {row['wrong']} |")  # fmt: skip
    lines += [
        "",
        "## Every path (issue 38)",
        "",
        "Items 1–12 of issue #38, each measured the way it broke (`benchmarks/every_path.py`):"
        " a review verdict, per-call options and tags, FAQ re-import and export, deletes,"
        " error texts, TTLs, the store's bound; each value must be at most its goal.",
        "",
        *every_path.table(report["every_path"]),
    ]
    lines += [
        "",
        "## Faults of the last round",
        "",
        "Issue #32's red team, each attack measured (`benchmarks/fault_round.py`): the slowest"
        " lookup, exit or start during the fault against its budget (a lookup's is one store"
        " timeout, 50 ms), the answers lost (stored, never indexed or never readable), the"
        " wrong answers served.",
        "",
        *fault_round.table(report["last_round"]),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
