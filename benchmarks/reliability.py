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

from conftest import RedisServer
from langchain_core.outputs import Generation
from procs import storm

from langchain_tricache import TriCache
from tricache import Cache

RESULTS = Path(__file__).parent / "results"


def outage(requests: int, workdir: Path) -> dict[str, Any]:
    """Redis killed at 25 % of the workload and restarted (empty) at 60 %.  Each write's fate
    is checked on the server itself, so the dropped-write counter can be compared exactly."""
    server = RedisServer(workdir)
    server.start()
    cache = Cache(redis_url=server.url, namespace="outage", l1_max_items=1, semantic=False,
                  faq=False)  # fmt: skip
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
    cache = Cache(redis_url=server.url, namespace="slow", semantic=False, faq=False, bloom=False)
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
                  faq=False, bloom=False)  # fmt: skip
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
               faq=False, bloom=False) as fresh:  # fmt: skip
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
    with Cache(**options, bloom=False) as reader:
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
            "hung_threads": sum(r["hung"] for r in reports),
            "crashed_processes": sum(w.exitcode != 0 for w in workers)}  # fmt: skip


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
        served, lookups = _stale_served([writer, holder, _fresh_cache(server.url, bloom=False)])
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
    served, lookups = _stale_served([app, _fresh_cache(server.url, bloom=False)])
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
    cache = Cache(redis_url=server.url, namespace="pause", faq=False, vector_path=workdir / "v")
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
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "a").mkdir()
        (work / "b").mkdir()
        report = {
            "command": " ".join(["python", "benchmarks/reliability.py", *sys.argv[1:]]),
            "outage": outage(int(1000 * scale), work / "a"),
            "slow_redis": slow_redis(int(20 * scale) + 5, work / "b"),
            "corrupt_values": corrupt_values(int(300 * scale)),
            "tenants": tenants(int(20 * scale) + 2, int(50 * scale), work),
            "fuzz": fuzz(int(3000 * scale), work),
            "load": load(10.0 * scale),
            "freshness": freshness(work),
        }
    write(report, args.out, "reliability_quick" if args.quick else "reliability")


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
    text = "\n".join(lines) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
