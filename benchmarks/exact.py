"""Exact tier: TriCache's hit and miss paths beside the raw operations they wrap.

Each pair runs interleaved in one process (batch A, batch B, batch A, ...) so machine noise hits
both alike; the table gives the median per-call time of each and their ratio.

    python benchmarks/exact.py [--redis-url redis://127.0.0.1:6379/0] [--out benchmarks/results]

Targets (issue "Core package and the exact tier"): an L1 hit, including normalization and
hashing of a 200-character query, in at most 10 µs; an L2 Redis hit at most 1.3x a raw redis-py
GET + msgpack.unpackb of the same value.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import redis

from tricache import Cache, Exact, TtlPolicy
from tricache.key.entry import CacheEntry, encode_entry

QUERY = (
    "How do I rotate the API keys of my organisation without downtime, and will the old keys "
    "keep working for running jobs until they finish? We use the EU region and SSO login."
)[:200]
ANSWER = "Create the new key first, roll it out, then revoke the old one. " * 30  # ~2 KB


Row = tuple[str, float, str, float]


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def compare(
    a: Callable[[], object], b: Callable[[], object], batches: int, calls: int
) -> tuple[float, float]:
    """Median seconds per call of ``a`` and of ``b``, batches interleaved."""
    ta, tb = [], []
    for _ in range(batches):
        ta.append(per_call(a, calls))
        tb.append(per_call(b, calls))
    return statistics.median(ta), statistics.median(tb)


Runner = Callable[[Callable[[], object], Callable[[], object]], tuple[float, float]]


def l2_rows(name: str, kwargs: dict[str, Any], ns: str, run: Runner) -> list[Row]:
    """An L2 hit beside the raw read of the same value, and a miss with and without Bloom."""
    # An L1 TTL of ~0 sends every lookup to L2, as in a fresh process or for a cold key.
    kwargs = {**kwargs, "semantic": False, "faq": False}  # the exact tier alone
    cache = Cache(namespace=ns, exact=Exact(ttl=TtlPolicy(l1=1e-9), bloom=False), **kwargs)
    request = cache.request(QUERY, system="You are a support bot.", llm_key="model-x|t=0")
    cache.update(request, ANSWER, {"usage": {"total_tokens": 512}})
    assert cache.lookup(request).level == "l2"  # type: ignore[union-attr]
    key = cache.exact.key(request)
    raw: Callable[[], object]
    if name == "redis":
        client = redis.Redis.from_url(kwargs["redis_url"])
        client.set("bench:raw", encode_entry(CacheEntry(ANSWER, {"usage": {"total_tokens": 512}})))
        raw, peer = lambda: msgpack.unpackb(client.get("bench:raw")), "redis-py GET + unpackb"
    else:
        db = sqlite3.connect(kwargs["path"], isolation_level=None)
        sql = "SELECT value FROM entries WHERE key = ? AND expires_at > ?"
        raw = lambda: msgpack.unpackb(db.execute(sql, (key, time.time())).fetchone()[0])  # noqa: E731
        peer = "sqlite3 SELECT + unpackb"
    t_hit, t_raw = run(lambda: cache.lookup(request), raw)
    rows = [(f"L2 {name} hit (Cache.lookup)", t_hit, peer, t_raw)]

    bloomed = Cache(namespace=ns, **kwargs)
    bloomed.lookup(bloomed.request("warm-up"))  # starts the filter's background load
    while not bloomed.exact.bloom.ready:  # type: ignore[union-attr]
        time.sleep(0.01)
    unbloomed = Cache(namespace=ns, exact=Exact(bloom=False), **kwargs)
    misses = [bloomed.request(f"never written {i}") for i in range(1000)]
    a, b = itertools.cycle(misses), itertools.cycle(misses)
    t_bloom, t_plain = run(lambda: bloomed.lookup(next(a)), lambda: unbloomed.lookup(next(b)))
    rows.append((f"L2 {name} miss, Bloom filter", t_bloom, "miss, no Bloom filter", t_plain))
    saved = bloomed.stats()["exact"].get("bloom_skips", 0)
    print(f"{name}: the Bloom filter saved {saved} round trips", file=sys.stderr)
    cache.clear()
    for c in (cache, bloomed, unbloomed):
        c.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--batches", type=int, default=41)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    rows: list[Row] = []
    run = lambda a, b: compare(a, b, args.batches, args.calls)  # noqa: E731
    tmp = Path(tempfile.mkdtemp(prefix="tricache-bench-"))
    ns = f"bench{uuid.uuid4().hex[:8]}"

    # L1 hit vs a plain dict lookup of the same payload
    cache = Cache(store=False, namespace=ns, semantic=False, faq=False)
    request = cache.request(QUERY, system="You are a support bot.", llm_key="model-x|t=0")
    cache.update(request, ANSWER, {"usage": {"total_tokens": 512}})
    plain = {"k": CacheEntry(ANSWER, {"usage": {"total_tokens": 512}})}
    t_l1, t_dict = run(lambda: cache.lookup(request), lambda: plain.get("k"))
    rows.append(("L1 hit (Cache.lookup, 200-char query)", t_l1, "dict.get", t_dict))
    # As an adapter calls it: a new request from new string objects (no cached str hashes).
    half = len(QUERY) // 2

    def fresh_lookup() -> object:
        query = QUERY[:half] + QUERY[half:]  # equal text, a new object
        return cache.lookup(cache.request(query, system=request.system, llm_key="model-x|t=0"))

    t_fresh, t_dict = run(fresh_lookup, lambda: plain.get("k"))
    rows.append(("L1 hit, request built from new strings", t_fresh, "dict.get", t_dict))

    # L2 hits: the tier's full path (decode, staleness checks, L1 fill) vs raw get + unpackb.
    rows += l2_rows("redis", {"redis_url": args.redis_url}, ns, run)
    rows += l2_rows("sqlite", {"path": tmp / "bench.sqlite3"}, ns, run)

    lines = [
        "| path | TriCache µs | peer | peer µs | ratio |",
        "|---|---:|---|---:|---:|",
        *(
            f"| {a} | {ta * 1e6:.2f} | {b} | {tb * 1e6:.2f} | {ta / tb:.2f}x |"
            for a, ta, b, tb in rows
        ),
    ]
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/exact.py " + " ".join(sys.argv[1:])
    (args.out / "exact.md").write_text(
        f"# Exact tier benchmark\n\nCommand: `{command.strip()}`\n\n"
        f"Machine: {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; medians of "
        f"{args.batches} interleaved batches of {args.calls} calls.\n\n{table}\n"
    )


if __name__ == "__main__":
    main()
