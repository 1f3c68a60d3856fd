"""The faults of issue #32, each injected into real servers: the slowest lookup (or exit, or
start) during the fault against its budget, the answers lost, the wrong answers served.

Run by ``benchmarks/reliability.py`` (its section "Faults of the last round"); alone:

    python benchmarks/fault_round.py

Each scenario is the red team's attack, measured rather than asserted (the tests assert each
promise: tests/test_only_shared_answers.py, test_hostile_points.py, test_write_ahead.py,
test_feedback_everywhere.py, test_admin_verbs.py, test_never_slow.py, test_redteam_learning.py).
"""

# ruff: noqa: E402, I001  (tests/ goes on sys.path before its helpers are imported)
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from conftest import RedisServer, SearchServer

from tricache.key.asked import ask
from tricache import Cache, Exact, Learn, Semantic
from tricache.semantic import opening
from tricache.semantic.index.replica import decode_point, encode_point
from tricache.semantic.tier import point_id_for
from tricache.stores.sqlite import SQLiteStore
from tricache.semantic.learning import encode_lookups

Row = dict[str, Any]
BUDGET_MS = 50  # the store's timeout: what one lookup may spend on a failing store
PAIRS = [(f"How do I export report number {n} to a spreadsheet?",
          f"How can I export report number {n} to a spreadsheet?") for n in range(20)]  # fmt: skip


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 1)


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def _until(check: Callable[[], bool], timeout: float = 300) -> float | None:
    """Seconds until ``check()`` held (``None``: it never did)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            return None
        time.sleep(0.05)
    return time.monotonic() - started


def _cache(kind: str, work: Path, **kw: Any) -> tuple[Cache, SearchServer | None]:
    """A cache on the replica over SQLite, or on the query engine of a private valkey."""
    if kind == "replica":
        return Cache(path=work / f"{uuid.uuid4().hex}.sqlite3", faq=False, **kw), None
    server = SearchServer(work)
    server.start()
    semantic = kw.pop("semantic", Semantic(index="redis-search"))
    return Cache(redis_url=server.url, faq=False, semantic=semantic, **kw), server


def rewritten_entries(kind: str, work: Path) -> Row:
    """20 answers stored, 10 rewritten as negative and 10 for their own request only; then the
    paraphrase of each is asked: any semantic hit on a rewritten one is a wrong answer."""
    cache, server = _cache(kind, work)
    wrong, slowest = 0, 0.0
    try:
        for n, (asked, _) in enumerate(PAIRS):
            request = cache.request(asked)
            cache.lookup(request)
            cache.update(request, f"Reports > {n} > Export.")
        for n, (asked, _) in enumerate(PAIRS):
            if n % 2:
                cache.update(cache.request(asked), "ERROR: upstream timeout", negative=True)
            else:
                cache.update(cache.request(asked), '{"tool": "export"}', semantic=False)
        for _, paraphrase in PAIRS * 3:
            hit, took = _timed(lambda p=paraphrase: cache.lookup(cache.request(p)))
            slowest = max(slowest, took)
            wrong += hit is not None
    finally:
        cache.close()
        if server is not None:
            server.stop()
    return {"fault": f"answers rewritten as negative or unshared ({kind})",
            "done": "20 answers, each rewritten; 60 paraphrase lookups",
            "slowest_ms": _ms(slowest), "budget_ms": None, "lost": 0, "wrong": wrong}  # fmt: skip


def hung_query_engine(work: Path) -> Row:
    """The valkey that holds both the entries and the index, paused: 8 threads x 10 lookups."""
    cache, server = _cache("query-engine", work, exact=Exact(bloom=False))
    assert server is not None and server.process is not None
    samples: list[float] = []
    try:
        for n, (asked, _) in enumerate(PAIRS[:10]):
            cache.lookup(cache.request(asked))
            cache.update(cache.request(asked), f"{n}")
        os.kill(server.process.pid, signal.SIGSTOP)
        cache.exact.l1.clear()

        def worker(w: int) -> None:
            for i in range(10):
                request = cache.request(PAIRS[(i + w) % 10][1])
                _, took = _timed(lambda r=request: cache.lookup(r))
                samples.append(took)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        cache.close()
        server.stop()
    samples.sort()
    return {"fault": "query engine and store hung (SIGSTOP), 8 threads",
            "done": f"{len(samples)} paraphrase lookups; p50 {_ms(samples[len(samples) // 2])} ms",
            "slowest_ms": _ms(samples[-1]), "budget_ms": BUDGET_MS, "lost": 0,
            "wrong": 0}  # fmt: skip


def hostile_points(kind: str, work: Path) -> Row:
    """Beside a real point, copies of it whose question is 200 KB, or not UTF-8: 20 lookups."""
    cache, server = _cache(kind, work)
    slowest, wrong = 0.0, 0
    try:
        asked, paraphrase = PAIRS[0]
        cache.lookup(cache.request(asked))
        cache.update(cache.request(asked), "Reports > Export.")
        huge = asked[:-1] + " really" * 30_000 + "?"
        ns, point = cache.namespace, point_id_for(cache.key(cache.request(asked)))
        if server is not None:
            raw = redis.Redis(port=server.port)
            key = next(raw.scan_iter(match=f"tricache:{{{ns}}}:v:*{point}"))
            fields = raw.hgetall(key)
            for question in (huge.encode(), b"How do I export \xff\xfe report?"):
                raw.hset(key[: -len(point)] + str(uuid.uuid4()).encode(),
                         mapping={**fields, b"q": question})  # fmt: skip
        else:
            with sqlite3.connect(cache.settings.path) as db:
                (data,) = db.execute("SELECT data FROM points WHERE id = ?", (point,)).fetchone()
            vector, payload = decode_point(data, cache.semantic.embedder.dim, ns)  # type: ignore[union-attr]
            store = cache.store
            assert store is not None
            store.put_point(ns, str(uuid.uuid4()),  # type: ignore[attr-defined]
                            encode_point(vector, {**payload, "question": huge}), 600)  # fmt: skip
            bad = msgpack.packb([1, vector.astype("<f2").tobytes(), {**payload, "question": "x"}])
            store.put_point(ns, str(uuid.uuid4()), bad.replace(b"\xa1x", b"\xa2\xff\xfe"), 600)  # type: ignore[attr-defined]
            cache.semantic.index.sync()  # type: ignore[union-attr]
        for _ in range(20):
            hit, took = _timed(lambda: cache.lookup(cache.request(paraphrase)))
            slowest = max(slowest, took)
            wrong += hit is not None and hit.text != "Reports > Export."
        on = not cache.tiers.breaker.is_open and cache.lookup(cache.request(paraphrase)) is not None
    finally:
        cache.close()
        if server is not None:
            server.stop()
    return {"fault": f"hostile points: a 200 KB question, one not UTF-8 ({kind})",
            "done": f"20 lookups in their scope; semantic tier still serving: {on}",
            "slowest_ms": _ms(slowest), "budget_ms": None, "lost": 0, "wrong": wrong}  # fmt: skip


EXIT_SCRIPT = """
import sys, time
from tricache import Cache
from tricache.semantic import opening

opening.open_semantic = lambda *a, **k: time.sleep(3600)  # still opening at the exit
cache = Cache(redis_url={url!r}, namespace="exit", warm=False)
for n in range(100):
    cache.update(cache.request(f"How do I configure feature number {{n}}?"), f"{{n}}.")
print("stored", flush=True)
sys.stdin.readline()
"""


def exit_while_redis_hangs(work: Path) -> Row:
    """A script stores 100 answers while its tier opens, Redis is paused, the script ends."""
    server = RedisServer(work)
    server.start()
    assert server.process is not None
    script = work / "exit.py"
    script.write_text(EXIT_SCRIPT.format(url=server.url))
    env = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"}
    child = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert child.stdout is not None and child.stdin is not None
    child.stdout.readline()
    os.kill(server.process.pid, signal.SIGSTOP)
    started = time.perf_counter()
    child.stdin.write("end\n")
    child.stdin.flush()
    child.wait(60)
    took = time.perf_counter() - started
    os.kill(server.process.pid, signal.SIGCONT)
    journaled = redis.Redis(port=server.port).llen("tricache:{exit}:journal")
    server.stop()
    return {"fault": "a script ends while Redis hangs (SIGSTOP)",
            "done": "100 answers stored while its tier opened; time from the end of the script"
                    " to the exit", "slowest_ms": _ms(took), "budget_ms": 300,
            "lost": 100 - journaled, "wrong": 0}  # fmt: skip


def _held_open(monkeypatch_until: threading.Event) -> Callable[[], None]:
    """The semantic tier fails to open (retried every 0.2 s) until the event is set;
    returns the undo."""
    real, retry = opening.open_semantic, opening.REOPEN_AFTER_S

    def held(*args: Any, **kwargs: Any) -> Any:
        if not monkeypatch_until.is_set():
            raise opening.Unavailable("held")
        return real(*args, **kwargs)

    opening.open_semantic, opening.REOPEN_AFTER_S = held, 0.2  # type: ignore[assignment]

    def undo() -> None:
        opening.open_semantic, opening.REOPEN_AFTER_S = real, retry  # type: ignore[assignment]

    return undo


def long_journal(work: Path, count: int) -> Row:
    """``count`` answers journaled by a process that never opened the tier; then a warm cache."""
    gate = threading.Event()
    undo = _held_open(gate)
    path = work / "journal.sqlite3"
    try:
        writer = Cache(path=path, faq=False, warm=False)
        for n in range(count):
            writer.update(writer.request(f"What does error code {n} of the sync service mean?"),
                          f"{n}")  # fmt: skip
        writer.close()
        gate.set()
        reader, took = _timed(lambda: Cache(path=path, faq=False, warm=True))
        tier = reader.semantic
        assert tier is not None
        at_return = tier.index.count()
        indexed_in = _until(lambda: tier.index.count() == count)
        lost = count - tier.index.count()
        reader.close()
    finally:
        undo()
    return {"fault": f"{count:,} answers in the journal at start",
            "done": f"Cache(warm=True) returned with {at_return:,} indexed; all in"
                    f" {indexed_in and round(indexed_in, 1)} s more (background)",
            "slowest_ms": _ms(took), "budget_ms": 3000, "lost": lost, "wrong": 0}  # fmt: skip


SIGTERM_SCRIPT = """
import time
from tricache import Cache
from tricache.semantic import opening

opening.open_semantic = lambda *a, **k: time.sleep(3600)  # a warm-up that never ends
cache = Cache(path={path!r}, faq=False, warm=False)
for n in range(600):
    cache.update(cache.request(f"How do I configure feature {{n}} of the dashboard?"), f"{{n}}.")
print("stored", flush=True)
time.sleep(3600)
"""


def sigterm_during_warm_up(work: Path) -> Row:
    """600 answers stored while the tier opens, then SIGTERM (``docker stop``): how many does
    the next process index?"""
    path = work / "sigterm.sqlite3"
    script = work / "sigterm.py"
    script.write_text(SIGTERM_SCRIPT.format(path=str(path)))
    env = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"}
    child = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    assert child.stdout is not None
    child.stdout.readline()
    child.send_signal(signal.SIGTERM)
    child.wait(60)
    reader = Cache(path=path, faq=False, warm=True)
    tier = reader.semantic
    assert tier is not None
    _until(lambda: tier.index.count() == 600, timeout=120)
    lost = 600 - tier.index.count()
    reader.close()
    return {"fault": "600 answers stored while the tier opens, then SIGTERM",
            "done": "the next process indexes what the journal holds", "slowest_ms": None,
            "budget_ms": None, "lost": lost, "wrong": 0}  # fmt: skip


def feedback_across_kinds(work: Path) -> Row:
    """Workers on both kinds of index; a match flagged through one; then asked through both."""
    server = SearchServer(work)
    server.start()
    options = {"redis_url": server.url, "namespace": "fb", "faq": False}
    caches = [Cache(**options, semantic=Semantic(index="replica", vector_path=work / "fb")),
              Cache(**options, semantic=Semantic(index="redis-search"))]  # fmt: skip
    served = asked = 0
    try:
        for n, (question, paraphrase) in enumerate(PAIRS[:10]):
            for cache in caches:
                cache.lookup(cache.request(question))
                cache.update(cache.request(question), f"{n}")
            flagger = caches[n % 2]
            _until(lambda f=flagger, p=paraphrase: f.lookup(f.request(p)) is not None, 10)
            hit = flagger.lookup(flagger.request(paraphrase))
            if hit is not None:
                flagger.feedback(hit.entry_id, correct=False)
        time.sleep(0.5)  # a replica's next sync
        for _, paraphrase in PAIRS[:10]:
            for cache in caches:
                asked += 1
                served += cache.lookup(cache.request(paraphrase)) is not None
    finally:
        for cache in caches:
            cache.close()
        server.stop()
    return {"fault": "a match flagged wrong, workers on both kinds of index",
            "done": f"10 matches flagged; {asked} lookups of them after", "slowest_ms": None,
            "budget_ms": None, "lost": 0, "wrong": served}  # fmt: skip


def label_log(work: Path) -> Row:
    store = SQLiteStore(work / "labels.sqlite3", label_log_length=1000)
    for i in range(3000):
        for ns in ("a", "b"):
            store.add_labels(ns, [encode_lookups(f"pool{i}", 1, {})])
    store.close()
    with sqlite3.connect(work / "labels.sqlite3") as db:
        kept = dict(db.execute("SELECT namespace, count(*) FROM labels GROUP BY namespace"))
    return {"fault": "two namespaces write one SQLite label log (cap 1,000)",
            "done": f"3,000 labels each; kept {kept.get('a')} and {kept.get('b')}",
            "slowest_ms": None, "budget_ms": None, "lost": 0, "wrong": 0}  # fmt: skip


def canned_refusals(work: Path) -> Row:
    """Twelve refusal phrasings for 576 questions of twelve families, then a look-alike."""
    refusals = ["I can't help with that.", "Sorry, I'm unable to assist with this request.",
                "I'm not able to answer that.", "Unfortunately, I can't provide that.",
                "I cannot help with this one.", "As an AI, I can't answer this.",
                "I'm sorry, but I can't help with that request.", "I won't answer that.",
                "That's not something I can help with.", "Apologies, I can't assist here.",
                "I must decline to answer.", "抱歉，我无法回答这个问题。"]  # fmt: skip
    places = ["the library", "the gym", "the pool", "the cafeteria", "the bookstore",
              "the museum", "the lab", "the clinic", "the chapel", "the theater", "the garage",
              "the dorm office"]  # fmt: skip
    asks = ["Is {s} open 24 hours during {p}?", "What time does {s} close during {p}?",
            "Is {s} open late during {p}?", "When does {s} open during {p}?",
            "Does {s} stay open overnight during {p}?",
            "Is {s} open on weekends during {p}?"]  # fmt: skip
    periods = ["finals week", "midterms", "the summer", "winter break", "exam season",
               "orientation week", "reading week", "the holidays"]  # fmt: skip
    cache = Cache(path=work / "canned.sqlite3", faq=False,
                  semantic=Semantic(audit=False, learn=Learn(error_bound=0.01)))  # fmt: skip
    tier = cache.semantic
    assert tier is not None and tier.learning is not None
    tier.learning.rng = random.Random(0)
    traffic = [(n, a.format(s=s, p=p)) for n, s in enumerate(places) for a in asks for p in periods]
    random.Random(1).shuffle(traffic)
    for n, asked in traffic:
        if cache.lookup(cache.request(asked)) is None:
            cache.update(cache.request(asked), refusals[n])
    tier.learning.drain()
    learned = tier.learning.threshold(tier.pool(ask(cache.request("x"), "")), tier.threshold)
    cache.update(cache.request("Is the reading room open 24 hours during finals week?"),
                 "Yes, 24/7 during finals week.")  # fmt: skip
    served = sum(
        cache.lookup(cache.request("Is the reading room open 24 hours during spring break?"))
        is not None
        for _ in range(5)
    )
    cache.close()
    return {"fault": "twelve rotating refusals, then a look-alike",
            "done": f"576 questions; learned threshold {learned:.2f} (calibrated"
                    f" {tier.threshold:.2f})", "slowest_ms": None, "budget_ms": None,
            "lost": 0, "wrong": served}  # fmt: skip


def admin_verbs_on_a_busy_server(work: Path) -> Row:
    server = RedisServer(work)
    server.start()
    cache = Cache(redis_url=server.url, namespace="busy", semantic=False, faq=False)
    for i in range(300):
        request = cache.request(f"question {i}", tags=["docs"])
        cache.lookup(request)
        cache.update(request, f"answer {i}")
    stop = threading.Event()
    sleeper = redis.Redis(port=server.port)

    def keep_busy() -> None:
        while not stop.is_set():
            sleeper.execute_command("DEBUG", "SLEEP", "0.08")
            stop.wait(0.02)

    thread = threading.Thread(target=keep_busy)
    thread.start()
    errors, slowest = 0, 0.0
    verbs = [lambda: cache.invalidate("docs"), cache.bump_kb_version, cache.set_min_watermark,
             cache.evict, cache.clear]  # fmt: skip
    for verb in verbs:
        try:
            _, took = _timed(verb)
            slowest = max(slowest, took)
        except Exception:
            errors += 1
    stop.set()
    thread.join()
    cache.close()
    server.stop()
    return {"fault": "admin verbs on a busy Redis (DEBUG SLEEP 80 ms in every 100)",
            "done": f"invalidate, bump_kb_version, set_min_watermark, evict, clear: {errors}"
                    " raised", "slowest_ms": _ms(slowest), "budget_ms": 5000, "lost": 0,
            "wrong": 0}  # fmt: skip


def run(work: Path, *, quick: bool = False) -> list[Row]:
    os.environ.setdefault("TRICACHE_WARM", "1")
    rows = []
    for name, scenario in [
        ("rewritten-replica", lambda w: rewritten_entries("replica", w)),
        ("rewritten-engine", lambda w: rewritten_entries("query-engine", w)),
        ("hung-engine", hung_query_engine),
        ("hostile-replica", lambda w: hostile_points("replica", w)),
        ("hostile-engine", lambda w: hostile_points("query-engine", w)),
        ("exit", exit_while_redis_hangs),
        ("journal", lambda w: long_journal(w, 1000 if quick else 5000)),
        ("sigterm", sigterm_during_warm_up),
        ("feedback", feedback_across_kinds),
        ("labels", label_log),
        ("canned", canned_refusals),
        ("admin", admin_verbs_on_a_busy_server),
    ]:
        (work / name).mkdir()
        rows.append(scenario(work / name))
    return rows


def table(rows: list[Row]) -> list[str]:
    lines = ["| fault | what was done | slowest (ms) / budget | answers lost | wrong answers |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        slowest = "—" if r["slowest_ms"] is None else f"{r['slowest_ms']}"
        if r["budget_ms"] is not None:
            slowest += f" / {r['budget_ms']}"
        lines.append(f"| {r['fault']} | {r['done']} | {slowest} | {r['lost']} | {r['wrong']} |")
    return lines


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print("\n".join(table(run(Path(tmp), quick="--quick" in sys.argv))))
