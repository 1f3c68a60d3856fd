"""Freshness nothing can undo: each promise of docs/security.md "Freshness", attacked.

Real redis-servers the tests start themselves (a ``maxmemory`` server, restarts with no data,
paused processes), real SQLite files, several caches sharing one store (as processes do) and
real child processes.  Every test asserts that no invalidated answer is served afterwards.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tricache import Cache, Exact, Faq, Redis, Semantic
from tricache.faq.store import FaqEntry
from tricache.ops.breaker import CircuitBreaker

from conftest import RedisServer
from procs import serve_until_told

spawn = multiprocessing.get_context("spawn")
QUESTIONS = [f"what does section {i} of the handbook say?" for i in range(30)]


@pytest.fixture
def server(private_redis: RedisServer) -> RedisServer:
    return private_redis


def _cache(url: str, **kw: Any) -> Cache:
    return Cache(redis_url=url, namespace="fresh", semantic=False, faq=False, **kw)


def _write(cache: Cache, answer: str, tag: str = "handbook") -> None:
    """Answer every question under ``tag`` the way an app does: a lookup that misses, then
    the LLM's answer written back."""
    for q in QUESTIONS:
        request = cache.request(q, tags=[tag])
        assert cache.lookup(request) is None
        cache.update(request, f"{answer}: {q}")


def _served(cache: Cache, tag: str = "handbook") -> list[str]:
    hits = [cache.lookup(cache.request(q, tags=[tag])) for q in QUESTIONS]
    return [hit.text for hit in hits if hit is not None]


def _old(served: list[str]) -> list[str]:
    return [text for text in served if text.startswith("old")]


def _meta_keys(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter(match="tricache:{fresh}:*"))
    finally:
        client.close()


# losing the version state -------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-random"])
def test_eviction_of_the_version_state_serves_no_invalidated_answer(
    tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(tmp_path, ["--maxmemory", "3mb", "--maxmemory-policy", policy])
    server.start()
    try:
        writer = _cache(server.url)
        _write(writer, "old")
        deadline = time.monotonic() + 10  # said once, at start, by the background thread
        while "maxmemory-policy is " + policy not in caplog.text:
            assert time.monotonic() < deadline, "no warning about the eviction policy"
            time.sleep(0.05)
        assert writer.invalidate("handbook") == 1
        # write junk until the version state is evicted
        client = redis.Redis.from_url(server.url)
        entries = list(client.scan_iter(match="tricache:fresh:x:*"))
        raw = {k: client.get(k) for k in entries}
        for i in range(20_000):
            client.set(f"junk:{i}", b"x" * 4096)
            if i % 50 == 0 and not _meta_keys(server.url):
                break
        assert not _meta_keys(server.url), "the version state was never evicted"
        # the old entries outlive it (put back those the policy evicted too)
        client.delete(*client.scan_iter(match="junk:*"))
        for key, value in raw.items():
            client.set(key, value, px=3_600_000, nx=True)
        client.close()
        fresh = Cache(  # reads every survivor from Redis
            store=Redis(server.url, timeout=1.0),
            namespace="fresh",
            semantic=False,
            faq=False,
            exact=Exact(bloom=False),
        )
        assert _old(_served(fresh)) == []
        assert _old(_served(writer)) == []  # its L1 too
        # counting from 0 again is harmless: the old entries belong to another epoch
        assert writer.invalidate("handbook") == 1
        assert _old(_served(fresh)) == [] and _old(_served(writer)) == []
        deadline = time.monotonic() + 10  # the old entries were read, and refused (a loaded
        while not fresh.stats()["exact"].get("stale_epoch"):  # machine may first time out)
            assert time.monotonic() < deadline, fresh.stats()
            assert _old(_served(fresh)) == []
            time.sleep(0.1)
    finally:
        server.stop()


def test_a_restart_with_no_data_makes_every_older_answer_stale_in_every_cache(
    server: RedisServer,
) -> None:
    a, b = _cache(server.url), _cache(server.url)
    a.invalidate("handbook")  # version 1
    _write(a, "old")
    assert len(_served(b)) == len(QUESTIONS)  # now in b's L1 as well
    server.stop()
    server.start()  # empty
    a.exact.breaker = CircuitBreaker()  # (the restart cost both caches their breaker)
    b.exact.breaker = CircuitBreaker()
    assert a.invalidate("handbook") == 1  # the same number again, in a new epoch
    time.sleep(0.6)  # b's next poll
    assert _old(_served(a)) == [] and _old(_served(b)) == []


def test_deleting_the_state_by_hand_is_a_new_epoch(server: RedisServer) -> None:
    a, b = _cache(server.url), _cache(server.url)
    _write(a, "old")
    assert len(_served(b)) == len(QUESTIONS)
    client = redis.Redis.from_url(server.url)
    client.delete(*_meta_keys(server.url))  # someone ran DEL (or FLUSHDB on the wrong db)
    client.close()
    time.sleep(0.6)
    assert _served(a) == [] and _served(b) == []


def test_a_store_restored_from_an_older_snapshot_is_noticed(server: RedisServer) -> None:
    a = _cache(server.url)
    for n in range(3):
        a.invalidate(f"doc:{n}")
    _write(a, "old", tag="doc:2")
    client = redis.Redis.from_url(server.url)
    client.hset("tricache:{fresh}:meta", mapping={"seq": 1, "tag:doc:2": 0})  # rolled back
    client.close()
    time.sleep(0.6)
    assert _served(a, tag="doc:2") == []
    assert a.stats()["exact"]["epochs_restarted"] == 1


def test_clear_keeps_invalidation_working_everywhere(server: RedisServer) -> None:
    a, b = _cache(server.url), _cache(server.url)
    _write(a, "old")
    assert len(_served(b)) == len(QUESTIONS)
    a.clear()
    time.sleep(0.6)
    assert _served(b) == []  # b's L1 went with the clear
    _write(a, "mid")
    assert len(_served(b)) == len(QUESTIONS)
    a.invalidate("handbook")
    time.sleep(0.6)
    assert _served(a) == [] and _served(b) == []


# answers computed across an invalidation ----------------------------------------------------
@pytest.mark.parametrize("change", ["invalidate", "bump_kb_version", "set_min_watermark"])
def test_an_answer_computed_while_its_data_changed_is_not_stored(
    server: RedisServer, change: str
) -> None:
    app, admin = _cache(server.url), _cache(server.url)
    request = app.request(QUESTIONS[0], tags=["handbook"])
    assert app.lookup(request) is None  # the request begins
    time.sleep(0.01)
    getattr(admin, change)(*(["handbook"] if change == "invalidate" else []))
    app.update(request, "old: computed from the previous handbook")  # the LLM returns
    assert app.lookup(request) is None
    assert _cache(server.url).lookup(request) is None
    assert app.stats()["exact"]["stale_writes"] == 1


def test_concurrent_identical_requests_each_keep_their_own_start(server: RedisServer) -> None:
    """Two threads ask the same question; the invalidation lands between their starts.  The
    earlier answer is refused, the later one is stored."""
    import threading

    app, admin = _cache(server.url), _cache(server.url)
    request = app.request(QUESTIONS[0], tags=["handbook"])
    first_started, invalidated, results = threading.Event(), threading.Event(), {}

    def early() -> None:
        assert app.lookup(request) is None
        first_started.set()
        invalidated.wait(5)
        results["early"] = app.update(request, "old: early")

    thread = threading.Thread(target=early)
    thread.start()
    first_started.wait(5)
    admin.invalidate("handbook")
    time.sleep(0.6)
    assert app.lookup(request) is None  # the later request begins after the change
    assert app.update(request, "new: late") is True
    invalidated.set()
    thread.join(5)
    assert results["early"] is False
    assert app.lookup(request).text == "new: late"  # type: ignore[union-attr]


def test_with_tricache_does_not_store_an_output_computed_across_an_invalidation(
    server: RedisServer,
) -> None:
    from langchain_core.runnables import RunnableLambda

    from langchain_tricache import with_tricache

    cache, admin = _cache(server.url), _cache(server.url)
    handbook = {"text": "old text"}
    calls = []

    def answer(question: str) -> str:
        calls.append(question)
        text = handbook["text"]
        if len(calls) == 1:  # the docs change while the first call runs
            handbook["text"] = "new text"
            admin.invalidate("kb:handbook")
        return f"{question} -> {text}"

    chain = with_tricache(RunnableLambda(answer), cache, fingerprint="v1", tags=["kb:handbook"])
    assert chain.invoke("what is the policy?") == "what is the policy? -> old text"
    assert chain.invoke("what is the policy?") == "what is the policy? -> new text"
    assert chain.invoke("what is the policy?") == "what is the policy? -> new text"
    assert len(calls) == 2  # the second answer was stored and served


# other processes ------------------------------------------------------------------------------
@pytest.mark.parametrize("disruption", ["none", "restart_empty", "delete_state", "clear"])
def test_another_process_serves_no_invalidated_answer(server: RedisServer, disruption: str) -> None:
    options = {"redis_url": server.url, "namespace": "fresh", "semantic": False, "faq": False}
    ready, go, out = spawn.Queue(), spawn.Queue(), spawn.Queue()
    child = spawn.Process(target=serve_until_told, args=(options, QUESTIONS, ready, go, out))
    child.start()
    try:
        assert ready.get(timeout=60) == "serving"  # the child holds "old" answers in L1
        if disruption == "restart_empty":
            server.stop()
            server.start()
        elif disruption == "delete_state":
            client = redis.Redis.from_url(server.url)
            client.delete(*_meta_keys(server.url))
            client.close()
        admin = _cache(server.url)
        if disruption == "clear":
            admin.clear()
        admin.invalidate("handbook")
        go.put(time.time())
        report = out.get(timeout=60)
    finally:
        child.join(30)
    assert child.exitcode == 0
    # within one poll (0.5 s) plus a breaker back-off after a restart, never longer than 2.5 s
    assert report["stale_after"] == [], report
    assert report["lookups_after"] > 0


# feedback -------------------------------------------------------------------------------------
def test_feedback_cannot_touch_the_version_state_or_another_namespace(
    server: RedisServer,
) -> None:
    cache = _cache(server.url)
    _write(cache, "old")
    cache.invalidate("handbook")
    for bad in [
        "tricache:{fresh}:meta",
        "tricache:fresh:meta",
        "tricache:{fresh}:changes",
        "tricache:other:x:" + "0" * 40,
        "tricache:fresh:x:" + "0" * 39,
        "tricache:fresh:x:*",
        "faq:1",
        "s:tricache:{fresh}:meta",
        "",
    ]:
        with pytest.raises(ValueError):
            cache.feedback(bad, correct=False)
    assert _meta_keys(server.url)
    assert _old(_served(_cache(server.url))) == []
    with pytest.raises(TypeError):
        cache.feedback(None, correct=False)  # type: ignore[arg-type]


def test_feedback_on_an_exact_hit_deletes_that_entry_only(server: RedisServer) -> None:
    cache = _cache(server.url)
    _write(cache, "new")
    hit = cache.lookup(cache.request(QUESTIONS[0], tags=["handbook"]))
    assert hit is not None
    cache.feedback(hit.entry_id, correct=False)
    assert len(_served(_cache(server.url))) == len(QUESTIONS) - 1


def test_feedback_on_a_wrong_faq_answer_stops_it_for_that_question(tmp_path: Path) -> None:
    faq = tmp_path / "faq.sqlite3"
    a = Cache(path=tmp_path / "a.sqlite3", faq=Faq(path=faq), semantic=False)
    a.add_faq([FaqEntry("How do I delete my account?", "Settings > Account > Delete.")])
    hit = a.lookup(a.request("How do I delete my account?"))
    assert hit is not None and hit.tier == "faq"
    b = Cache(path=tmp_path / "b.sqlite3", faq=Faq(path=faq), semantic=False)  # another worker
    b.feedback(hit.entry_id, correct=False)
    assert a.lookup(a.request("How do I delete my account?")) is None
    assert b.lookup(b.request("How do I delete my account?")) is None
    with pytest.raises(ValueError):
        b.feedback("faq:1", correct=False)


# the FAQ changed by another process ----------------------------------------------------------
def test_a_faq_replaced_by_another_process_is_what_every_process_answers(
    tmp_path: Path,
) -> None:
    faq = tmp_path / "faq.sqlite3"
    worker = Cache(path=tmp_path / "w.sqlite3", faq=Faq(path=faq), semantic=False)
    worker.add_faq(
        [
            FaqEntry("How can I reset my password?", "Use 'Forgot password' on the login page."),
            FaqEntry("How do I change my email address?", "Settings > Email."),
        ]
    )
    hit = worker.lookup(worker.request("How can I reset my password?"))
    assert hit is not None and hit.text.startswith("Use 'Forgot password'")
    admin = Cache(path=tmp_path / "admin.sqlite3", faq=Faq(path=faq), semantic=False)
    admin.faq.clear()  # type: ignore[union-attr]
    admin.add_faq(
        [
            FaqEntry("How do I delete my account?", "Settings > Account > Delete forever."),
            FaqEntry("How can I reset my password?", "Ask your administrator."),
        ]
    )
    hit = worker.lookup(worker.request("How can I reset my password?"))
    assert hit is not None and hit.text == "Ask your administrator."


# many tags ------------------------------------------------------------------------------------
def test_tags_have_no_cap_and_a_poll_reads_only_what_changed(tmp_path: Path) -> None:
    path = tmp_path / "exact.sqlite3"
    a = Cache(path=path, semantic=False, faq=False)
    b = Cache(path=path, semantic=False, faq=False)
    for n in range(10_050):
        a.invalidate(f"doc:{n}")
    request = b.request("what does doc 10049 say?", tags=["doc:10049"])
    assert b.lookup(request) is None
    assert b.update(request, "old text") is True
    assert b.lookup(request).text == "old text"  # type: ignore[union-attr]
    assert a.invalidate("doc:10049") == 2
    time.sleep(0.6)
    assert b.lookup(request) is None
    store, view = b.exact.store, b.exact.versions
    assert store is not None
    state = store.poll("default", view.epoch, view.seq)
    assert state.values == {}  # nothing changed since b's last poll: nothing read
    a.invalidate("doc:7")
    assert store.poll("default", view.epoch, view.seq).values == {"tag:doc:7": 2.0}


# the store's clock ----------------------------------------------------------------------------
def test_the_watermark_is_on_the_store_clock_whatever_the_client_clocks(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tricache.exact.sync
    import tricache.exact.versions

    class Behind:  # this host's clock runs two minutes late
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        @staticmethod
        def time() -> float:
            return time.time() - 120

    late, admin = _cache(server.url), _cache(server.url)
    monkeypatch.setattr(tricache.exact.versions, "time", Behind())
    monkeypatch.setattr(tricache.exact.sync, "time", Behind())
    _write(late, "old")
    floor = admin.set_min_watermark()  # the store's "now"
    assert abs(floor - time.time()) < 5
    time.sleep(0.6)
    assert _served(late) == [] and _served(_cache(server.url)) == []
    _write(late, "new")  # begun after the floor, on the late host: served
    assert len(_served(late)) == len(QUESTIONS) == len(_served(_cache(server.url)))


# outages --------------------------------------------------------------------------------------
def test_a_cache_that_cannot_reach_the_store_stops_serving_within_two_seconds(
    server: RedisServer,
) -> None:
    cache = _cache(server.url)
    _write(cache, "new")
    assert len(_served(cache)) == len(QUESTIONS)
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)  # hangs: another process could invalidate
    try:
        time.sleep(2.2)
        started = time.perf_counter()
        assert _served(cache) == []
        assert time.perf_counter() - started < 1.0  # misses, not waits
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    deadline = time.monotonic() + 15  # the breaker's back-off (1 s), then a poll: on a loaded
    while len(_served(cache)) < len(QUESTIONS):  # machine, later than a fixed second
        assert time.monotonic() < deadline, "the cache never served again"
        time.sleep(0.2)


def test_an_outage_deletes_no_semantic_point(server: RedisServer, tmp_path: Path) -> None:
    cache = Cache(
        redis_url=server.url,
        namespace="fresh",
        faq=False,
        semantic=Semantic(vector_path=tmp_path / "v"),
    )
    pairs = {
        "How do I reset my password?": "How can I reset my password?",
        "How do I export my data to CSV?": "How can I export my data to CSV?",
        "How do I change my billing address?": "How can I change my billing address?",
    }
    for question in pairs:
        request = cache.request(question)
        assert cache.lookup(request) is None
        cache.update(request, f"answer: {question}")
    assert all(cache.lookup(cache.request(p)) for p in pairs.values())
    index = cache.semantic.index  # type: ignore[union-attr]
    points = index.count()
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        for _ in range(3):
            for paraphrase in pairs.values():
                cache.exact.l1.clear()
                assert cache.lookup(cache.request(paraphrase)) is None
            time.sleep(0.4)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert index.count() == points
    time.sleep(1.1)
    cache.exact.breaker = CircuitBreaker()
    served = [cache.lookup(cache.request(p)) for p in pairs.values()]
    assert all(hit is not None and hit.tier == "semantic" for hit in served)


def test_payloads_with_integer_keys_round_trip_between_caches(server: RedisServer) -> None:
    a, b = _cache(server.url), _cache(server.url)
    payload = {"llm_output": {"logit_bias": {50256: -100, 1: 2.5}}, "ids": [1, 2]}
    request = a.request("what is the bias?")
    assert a.lookup(request) is None
    a.update(request, "text", payload)
    hit = b.lookup(request)
    assert hit is not None and hit.payload == payload
    assert b.stats()["exact"].get("corrupt", 0) == 0


# restores, damage, and the rest of what a red team tried ------------------------------------
@pytest.mark.parametrize("then", ["invalidate", "clear"])
def test_a_restart_from_an_older_snapshot_brings_nothing_back(
    server: RedisServer, then: str
) -> None:
    """The dump is taken before the change; Redis then restarts from it (an RDB restore, or an
    AOF that lost its last second).  Even a later change that brings ``seq`` back to what the
    processes had seen cannot hide it: a restarted server is a new epoch."""
    a = _cache(server.url)
    _write(a, "old")
    client = redis.Redis.from_url(server.url)
    client.save()
    client.close()
    a.clear() if then == "clear" else a.invalidate("handbook")
    server.stop()
    server.start()  # loads the dump: the old answers and the old versions
    a.exact.breaker = CircuitBreaker()
    a.invalidate("unrelated")  # the same seq the processes had seen, another change
    assert _old(_served(_cache(server.url, exact=Exact(bloom=False)))) == []
    time.sleep(0.6)
    assert _old(_served(a)) == []
    _write(a, "new")  # and the cache works again
    assert len(_served(a)) == len(QUESTIONS)


@pytest.mark.parametrize(
    ("damage", "change"),
    [
        ({"seq": "abc"}, "invalidate"),
        ({"tag:handbook": "nan"}, "invalidate"),
        ({"tag:handbook": "1.5"}, "invalidate"),
        ({"kb": "inf"}, "bump_kb_version"),
        ({"min_wm": "not a time"}, "set_min_watermark"),
        ({"epoch": ""}, "invalidate"),
    ],
)
def test_a_damaged_version_state_is_a_new_epoch_not_an_outage(
    server: RedisServer, damage: dict[str, str], change: str
) -> None:
    a, b, admin = _cache(server.url), _cache(server.url), _cache(server.url)
    _write(a, "old")
    assert len(_served(b)) == len(QUESTIONS)
    client = redis.Redis.from_url(server.url)
    client.hset("tricache:{fresh}:meta", mapping=damage)
    client.close()
    getattr(admin, change)(*(["handbook"] if change == "invalidate" else []))  # does not raise
    time.sleep(0.6)
    assert _old(_served(b)) == [] and _old(_served(a)) == []
    _write(a, "new")
    time.sleep(0.6)
    assert len(_served(b)) == len(QUESTIONS)  # and no outage: it works again by itself


def test_version_keys_of_the_wrong_type_are_a_new_epoch(server: RedisServer) -> None:
    a = _cache(server.url)
    _write(a, "old")
    client = redis.Redis.from_url(server.url)
    client.delete("tricache:{fresh}:meta", "tricache:{fresh}:changes")
    client.set("tricache:{fresh}:meta", "not a hash")
    client.close()
    time.sleep(0.6)
    assert _served(a) == []
    _write(a, "new")
    assert len(_served(a)) == len(QUESTIONS)


def test_two_caches_of_one_process_learn_an_invalidation_at_once(server: RedisServer) -> None:
    a, b = _cache(server.url), _cache(server.url)
    _write(a, "old")
    assert len(_served(b)) == len(QUESTIONS)
    a.invalidate("handbook")  # no sleep: b is in the same process
    assert _served(b) == []


def test_a_stream_drained_in_another_thread_keeps_the_versions_it_began_with(
    server: RedisServer,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    app, admin = _cache(server.url), _cache(server.url)
    request = app.request(QUESTIONS[0], tags=["handbook"])
    assert app.lookup(request) is None
    began = app.began(request)
    admin.invalidate("handbook")
    with ThreadPoolExecutor(1) as pool:  # a web server drains the stream in a worker
        stored = pool.submit(app.update, request, "old: streamed", began=began).result()
    assert stored is False and app.lookup(request) is None


def test_the_floor_never_goes_down(server: RedisServer) -> None:
    a = _cache(server.url)
    _write(a, "old")
    high = a.set_min_watermark()
    assert a.set_min_watermark(high - 3600) == high
    assert _served(_cache(server.url, exact=Exact(bloom=False))) == []
    with pytest.raises(ValueError):
        a.set_min_watermark(float("nan"))


def test_changes_to_an_unreachable_store_raise_a_tricache_error(tmp_path: Path) -> None:
    from tricache import StoreUnavailable

    server = RedisServer(tmp_path)  # never started
    cache = _cache(server.url)
    for change in (cache.clear, cache.bump_kb_version, lambda: cache.invalidate("x")):
        with pytest.raises(StoreUnavailable):
            change()
    with pytest.raises(StoreUnavailable):
        cache.set_min_watermark()


def test_a_lookup_under_a_hung_store_makes_one_store_call(server: RedisServer) -> None:
    """A tag this process never saw needs a read before its answer can be stamped; when the
    lookup's L2 read has just timed out, it is not tried (one timeout per lookup)."""
    import threading

    cache = _cache(server.url, exact=Exact(bloom=False))
    assert cache.lookup(cache.request("warm-up")) is None  # versions verified
    sleeper = threading.Thread(
        target=lambda: redis.Redis.from_url(server.url).execute_command("DEBUG", "SLEEP", 1)
    )
    sleeper.start()
    time.sleep(0.1)
    before = cache.stats()["exact"]
    assert cache.lookup(cache.request("a new question", tags=["never-seen"])) is None
    after = cache.stats()["exact"]
    sleeper.join()
    errors = [k for k in after if k.endswith("_errors")]
    assert sum(after[k] - before.get(k, 0) for k in errors) == 1


@pytest.mark.parametrize("spelling", ["localhost", "no database", "symlinked folder"])
def test_caches_on_one_store_spelled_two_ways_hear_each_other_at_once(
    tmp_path: Path, redis_client: redis.Redis, namespace: str, spelling: str
) -> None:
    """Two caches of one process on one store see each other's invalidations as soon as the
    call returns, however the store was named: by another spelling they waited for a poll."""
    if spelling == "symlinked folder":
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        places = [
            {"path": tmp_path / "real" / "c.sqlite3"},
            {"path": tmp_path / "link" / "c.sqlite3"},
        ]
    else:
        other = "redis://localhost:6379/0" if spelling == "localhost" else "redis://127.0.0.1:6379"
        places = [{"redis_url": "redis://127.0.0.1:6379/0"}, {"redis_url": other}]
    a, b = (Cache(namespace=namespace, semantic=False, faq=False, **place) for place in places)
    try:
        for _ in range(3):
            request = a.request("Which plans include SSO?", tags=["pricing"])
            if a.lookup(request) is None:
                a.update(request, "The old price list.")
            assert a.lookup(a.request("Which plans include SSO?", tags=["pricing"])) is not None
            b.invalidate("pricing")
            assert a.lookup(a.request("Which plans include SSO?", tags=["pricing"])) is None
    finally:
        a.close()
        b.close()
