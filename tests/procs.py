"""Code that runs in child processes of the two-process tests (importable under spawn)."""

from __future__ import annotations

import asyncio
import faulthandler
import hashlib
import random
import threading
import time
from collections import Counter
from multiprocessing.queues import Queue
from typing import Any

from tricache import Cache


def write_entries(options: dict[str, Any], questions: list[str]) -> None:
    with Cache(**options) as cache:
        for q in questions:
            cache.update(cache.request(q), f"answer to {q}")


def write_and_exit(options: dict[str, Any], questions: list[str]) -> None:
    """A short script: write answers, then end at once (no ``close()``)."""
    cache = Cache(**options)
    for q in questions:
        assert cache.update(cache.request(q), f"answer to {q}")


def hold_until_invalidated(options: dict[str, Any], ready: Queue, started: Queue) -> None:
    """Keep a tagged entry hot in L1, then report how long after the parent's invalidation
    (a wall-clock time it sends) the first miss came."""
    _hold_until_gone(options, "what does the handbook say?", ["handbook"], ready, started,
                     ready_says=lambda key: "ready")  # fmt: skip


def serve_until_told(
    options: dict[str, Any], questions: list[str], ready: Queue, go: Queue, out: Queue
) -> None:
    """Answer ``questions`` (tag "handbook") with "old" answers and keep serving them from L1;
    after the parent's invalidation (a wall-clock time sent on ``go``) keep asking for 3 s and
    report every "old" answer served to a lookup begun more than 1.5 s after it."""
    with Cache(**options) as cache:
        requests = [cache.request(q, tags=["handbook"]) for q in questions]
        for request in requests:
            assert cache.lookup(request) is None
            cache.update(request, f"old: {request.query}")
        assert all(cache.lookup(r) is not None for r in requests)
        ready.put("serving")
        invalidated_at = go.get(timeout=60)
        stale_after, last_old, lookups_after = [], 0.0, 0
        while time.time() < invalidated_at + 3:
            for request in requests:
                began = time.time()
                hit = cache.lookup(request)
                if began > invalidated_at + 1.5:
                    lookups_after += 1
                if hit is not None and hit.text.startswith("old"):
                    last_old = began - invalidated_at
                    if began > invalidated_at + 1.5:
                        stale_after.append(round(last_old, 3))
            time.sleep(0.01)
        out.put({"stale_after": stale_after, "last_old_s": last_old,
                 "lookups_after": lookups_after})  # fmt: skip


def open_cache_and_report(path: str, results: Queue) -> None:
    """Open a cache on a path another process uses; ask its question and a paraphrase."""
    with Cache(path=path) as cache:
        report = {"semantic": cache.semantic is not None}
        hit = cache.lookup(cache.request("How do I reset my password?"))
        report["exact_hit"] = hit is not None and hit.tier == "exact"
        hit = cache.lookup(cache.request("How can I reset my password?"))
        report["semantic_hit"] = hit is not None and hit.tier == "semantic" and hit.text == "A"
        results.put(report)


def _sealed(key: str, n: int) -> str:
    """A value that says which key and which write it is, with a checksum over both."""
    body = f"{key}|{n}"
    return f"{body}|{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def _intact(key: str, text: str) -> bool:
    body, _, digest = text.rpartition("|")
    return body.startswith(f"{key}|") and hashlib.sha256(body.encode()).hexdigest()[:16] == digest


def storm(options: dict[str, Any], worker: int, seconds: float, results: Queue) -> None:
    """8 threads and an asyncio task mixing lookups, updates and invalidations for ``seconds``.

    Each thread owns its stable keys (so "the last value" of a key is well defined) and reads
    every worker's keys; volatile keys are written under a tag that anyone may invalidate.
    Reports the last value of every stable key, and every torn or foreign value it read."""
    with Cache(**options) as cache:
        stop = time.monotonic() + seconds
        last: dict[str, str] = {}
        bad: list[str] = []
        ops: Counter[str] = Counter()
        lock = threading.Lock()

        def step(rng: random.Random, owner: str, n: int) -> tuple[str, Any, Any]:
            roll = rng.random()
            if roll < 0.35:
                key = f"{owner}k{rng.randrange(15)}"
                return "write", key, _sealed(key, n)
            if roll < 0.45:
                key = f"{owner}v{rng.randrange(5)}"
                return "volatile", key, _sealed(key, n)
            if roll < 0.47:
                return "invalidate", "volatile", None
            key = f"w{rng.randrange(2)}t{rng.randrange(9)}k{rng.randrange(15)}"
            return "read", key, None

        def record(kind: str, key: str, value: Any, result: Any) -> None:
            with lock:
                ops[kind] += 1
                if kind == "write" and result:
                    last[key] = value
                if kind == "read" and result is not None and not _intact(key, result.text):
                    bad.append(f"{key}: {result.text!r}")

        def thread_main(t: int) -> None:
            rng = random.Random(worker * 100 + t)
            owner, n = f"w{worker}t{t}", 0
            while time.monotonic() < stop:
                n += 1
                kind, key, value = step(rng, owner, n)
                tags = ["volatile"] if kind == "volatile" else []
                if kind == "invalidate":
                    cache.invalidate("volatile")
                    result: Any = None
                elif kind == "read":
                    result = cache.lookup(cache.request(key), semantic=False)
                else:
                    result = cache.update(cache.request(key, tags=tags), value, semantic=False)
                record(kind, key, value, result)

        async def async_main() -> None:
            rng = random.Random(worker * 100 + 8)
            owner, n = f"w{worker}t8", 0
            while time.monotonic() < stop:
                n += 1
                kind, key, value = step(rng, owner, n)
                if kind == "invalidate":
                    result: Any = None
                elif kind == "read":
                    result = await cache.alookup(cache.request(key), semantic=False)
                else:
                    tags = ["volatile"] if kind == "volatile" else []
                    result = await cache.aupdate(
                        cache.request(key, tags=tags), value, semantic=False
                    )
                record(kind, key, value, result)

        threads = [threading.Thread(target=thread_main, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        asyncio.run(async_main())
        for thread in threads:
            thread.join(seconds + 30)
        stats = cache.stats()["exact"]
        results.put({"worker": worker, "last": last, "bad": bad, "ops": dict(ops),
                     "dropped_writes": stats.get("dropped_writes", 0),
                     "errors": stats.get("read_errors", 0),
                     "hung": sum(t.is_alive() for t in threads)})  # fmt: skip


def use_inherited_cache(cache: Cache, n: int, results: Queue) -> None:
    """In a child forked after the parent used ``cache``: read the parent's answers, ask look-
    alikes (the inherited vector index must not be touched), write, and report any error."""
    errors: list[str] = []
    exact_hits = 0
    try:
        for i in range(20):
            hit = cache.lookup(cache.request(f"How do I configure feature {i}?"))
            exact_hits += hit is not None and hit.tier == "exact"
            cache.lookup(cache.request(f"How can I configure feature {i}?"))
        for i in range(10):
            request = cache.request(f"written by child {n}" if i == 0 else f"child {n} q {i}")
            cache.lookup(request)
            cache.update(request, f"child {n} answer {i}")
    except Exception as exc:  # reported, not raised: the parent asserts on the report
        errors.append(repr(exc))
    results.put({"child": n, "errors": errors, "exact_hits": exact_hits})


# The semantic tier in every worker (tests/test_workers.py) -------------------------------------
TOPICS = [
    "reset my password",
    "change my email address",
    "delete my account",
    "export my data to CSV",
    "cancel my subscription",
    "enable two-factor authentication",
    "invite a teammate to my workspace",
    "download an invoice",
    "change the language of the app",
    "turn off email notifications",
    "connect my Google calendar",
    "upload a profile picture",
]


def topic_answer(topic: str) -> str:
    """What the stand-in model answers to "How do I <topic>?" (and to its paraphrase)."""
    return "answer " + hashlib.blake2b(topic.encode(), digest_size=6).hexdigest()


def share_semantically(
    options: dict[str, Any], worker: int, workers: int, barrier: Any, results: Queue
) -> None:
    """Write this worker's questions, find every other worker's by a paraphrase (reporting the
    lag), check tenant isolation, then check that an invalidation by worker 0 reaches here."""
    faulthandler.dump_traceback_later(90)  # a worker stuck this long says where
    with Cache(warm=True, **options) as cache:
        results.put(_share(cache, worker, workers, barrier))
    faulthandler.cancel_dump_traceback_later()


def share_with_inherited_cache(cache: Cache, worker: int, workers: int, barrier: Any,
                               results: Queue) -> None:  # fmt: skip
    """The same, in a child forked from a parent that used ``cache``."""
    assert cache.semantic is not None  # reopened in the child (this waits for it)
    results.put(_share(cache, worker, workers, barrier))


def _share(cache: Cache, worker: int, workers: int, barrier: Any) -> dict[str, Any]:
    mine = TOPICS[worker::workers]
    for topic in mine:
        request = cache.request(f"How do I {topic}?", tenant="acme", tags=[f"w{worker}"])
        deadline = time.monotonic() + 60  # on a loaded machine a write may time out (50 ms):
        while not cache.update(request, topic_answer(topic)):  # dropped, so written again
            assert time.monotonic() < deadline, "the store never took the write"
            time.sleep(0.1)
    barrier.wait(120)
    began = time.monotonic()
    others = [t for t in TOPICS if t not in mine]
    lags: dict[str, float] = {}
    wrong, foreign, not_semantic = [], [], []
    while len(lags) < len(others) and time.monotonic() - began < 15:
        for topic in others:
            if topic in lags:
                continue
            hit = cache.lookup(cache.request(f"How can I {topic}?", tenant="acme"))
            if hit is not None:
                lags[topic] = time.monotonic() - began
                if hit.text != topic_answer(topic):
                    wrong.append((topic, hit.text))
                if hit.tier != "semantic":
                    not_semantic.append(topic)
            if cache.lookup(cache.request(f"How can I {topic}?", tenant="globex")) is not None:
                foreign.append(topic)
        time.sleep(0.02)
    barrier.wait(120)
    if worker == 0:
        cache.invalidate("w1")
    barrier.wait(120)
    time.sleep(1.0)  # other processes stop within refresh_s (0.5 s)
    stale = [
        topic
        for topic in TOPICS[1::workers]
        for question in (f"How do I {topic}?", f"How can I {topic}?")
        if cache.lookup(cache.request(question, tenant="acme")) is not None
    ]
    return {
        "worker": worker,
        "found": sorted(lags),
        "missing": sorted(set(others) - set(lags)),
        "max_lag_s": max(lags.values(), default=None),
        "wrong": wrong,
        "foreign": foreign,
        "not_semantic": not_semantic,
        "stale": stale,
    }


def write_until_killed(options: dict[str, Any], ready: Queue) -> None:
    """Index questions as fast as it can until the parent kills it (SIGKILL, mid-write)."""
    cache = Cache(warm=True, **options)
    ready.put("ready")
    n = 0
    while True:
        cache.update(cache.request(f"Where is office number {n} located?"), f"floor {n}")
        n += 1


# An app and the admin tools, each its own process (tests/test_review.py, test_entries.py) -----
def langchain_app(caches: dict[str, dict[str, Any]], inbox: Queue, outbox: Queue) -> None:
    """An app's process: LangChain with ``set_llm_cache(TriCache(**caches["main"]))`` and a
    stand-in chat model (the oracle), plus one model per other cache (``model.cache``).  For
    each ``(cache name, tenant, question)`` it is sent it answers, and reports the tier that
    served it ("model" when the model ran) and the hit's entry id; ``None`` ends it."""
    from langchain_core.globals import set_llm_cache

    from langchain_tricache import TriCache, tenant

    from oracles import ChatOracle

    opened = {name: TriCache(**options) for name, options in caches.items()}
    set_llm_cache(opened["main"])
    models = {name: ChatOracle() if name == "main" else ChatOracle(cache=cache)
              for name, cache in opened.items()}  # fmt: skip
    outbox.put("ready")
    try:
        while (asked := inbox.get(timeout=300)) is not None:
            name, who, question = asked
            model = models[name]
            before = model.calls
            with tenant(who):
                message = model.invoke(question)
            hit = message.response_metadata.get("tricache") or {}
            outbox.put({"tier": "model" if model.calls > before else hit.get("tier"),
                        "entry_id": hit.get("entry_id"), "text": message.content})  # fmt: skip
    finally:
        set_llm_cache(None)
        for cache in opened.values():
            cache.tricache.close()


def admin_verbs(options: dict[str, Any], verbs: list[tuple[str, tuple[Any, ...]]],
                results: Queue) -> None:  # fmt: skip
    """Each of ``verbs`` (``Cache`` method, arguments: a dict last is keywords) on a new
    ``Cache``, in a process that
    looked nothing up; reports each one's result (an ``Entry`` by its question, a list by its
    length) or the error it raised."""
    report: list[tuple[str, str, Any]] = []
    for name, args in verbs:
        kwargs = args[-1] if args and isinstance(args[-1], dict) else {}
        with Cache(**options) as cache:
            try:
                value = getattr(cache, name)(*args[: len(args) - bool(kwargs)], **kwargs)
            except Exception as exc:  # reported: the parent asserts on the report
                report.append((name, "error", f"{type(exc).__name__}: {exc}"))
                continue
        shown = getattr(value, "question", value)
        report.append((name, "ok", len(shown) if isinstance(shown, list) else shown))
    results.put(report)


def hold_until_deleted(options: dict[str, Any], ready: Queue, started: Queue) -> None:
    """Keep an entry hot in L1, send its id, then report how long after the parent deleted it
    (a wall-clock time it sends) the first miss came (``None``: still served after 10 s)."""
    _hold_until_gone(options, "What does the handbook say about leave?", [], ready, started,
                     ready_says=lambda key: key)  # fmt: skip


def _hold_until_gone(
    options: dict[str, Any],
    question: str,
    tags: list[str],
    ready: Queue,
    started: Queue,
    ready_says: Any,
) -> None:
    """An entry hot in L1; ``ready_says(its key)`` on ``ready``; then, from the wall-clock time
    the parent sends on ``started``, the seconds until the first miss (``None`` after 10 s)."""
    with Cache(**options) as cache:
        req = cache.request(question, tags=tags)
        cache.update(req, "page 12")
        for _ in range(5):
            assert cache.lookup(req) is not None
        key = cache.exact.key(req)
        assert cache.exact.l1.get(key) is not None
        ready.put(ready_says(key))
        gone_at = started.get(timeout=20)
        deadline = time.time() + 10
        while time.time() < deadline:
            if cache.lookup(req) is None:
                ready.put(time.time() - gone_at)
                return
            time.sleep(0.005)
        ready.put(None)
