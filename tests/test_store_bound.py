"""A bound on the embedded store (issue #33, part 3): ``Exact(max_entries=, max_bytes=)`` keep
the SQLite file's entries within it, the least recently used evicted first — as LangChain's
``InMemoryCache(maxsize=)`` does in memory, for every process sharing the file."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
import redis

from tricache import Cache, Exact
from tricache.stores.sqlite import SQLiteStore

from conftest import REDIS_URL
from procs import write_and_exit, write_entries


def _wait(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_least_recently_used_go_first(tmp_path: Path) -> None:
    now = [1000.0]
    store = SQLiteStore(tmp_path / "l2.sqlite3", clock=lambda: now[0], sweep_every=3600,
                        max_entries=10)  # fmt: skip
    try:
        for i in range(10):
            now[0] += 1
            store.set(f"k{i}", b"x" * 10, ttl=3600)
        now[0] += 1
        assert store.get("k0") is not None and store.get("k1") is not None  # used again
        for i in range(10, 15):
            now[0] += 1
            store.set(f"k{i}", b"x" * 10, ttl=3600)
        while store.sweep():  # (the sweeper, woken by the writes, may have begun already)
            pass
        kept = {f"k{i}" for i in range(15) if store.get(f"k{i}") is not None}
        assert kept == {"k0", "k1", *(f"k{i}" for i in range(7, 15))}
        assert store.evicted == 5 and store.size() == (10, 100)
        assert store.sweep() == 0  # within the bound: nothing more
    finally:
        store.close()


def test_a_byte_bound_counts_the_stored_values(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "l2.sqlite3", sweep_every=3600, max_bytes=5000)
    try:
        for i in range(20):
            store.set(f"k{i}", bytes(1000), ttl=3600)
        store.set("small", b"s", ttl=3600)
        while store.sweep():
            pass
        entries, size = store.size()
        assert size <= 5000 and entries == 5  # the newest: four of 1000 bytes and "small"
        assert store.get("small") is not None and store.get("k19") is not None
    finally:
        store.close()


def test_600_writes_from_two_caches_stay_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    bounded = Exact(max_entries=100)
    first = Cache(path=path, exact=bounded, semantic=False, faq=False)
    second = Cache(path=path, exact=bounded, semantic=False, faq=False)
    try:
        for i in range(600):
            cache = first if i % 2 else second
            assert cache.update(cache.request(f"What is item number {i} in the list?"), f"a{i}")
        store = first.exact.store
        assert isinstance(store, SQLiteStore)
        # every tenth of the bound written wakes a sweeper: no minute-long wait
        assert _wait(lambda: store.size()[0] <= 100), store.size()
        third = Cache(path=path, semantic=False, faq=False)  # a fresh L1: what the file holds
        try:
            served = [third.lookup(third.request(f"What is item number {i} in the list?"))
                      for i in range(600)]  # fmt: skip
            assert all(h is None for h in served[:450])  # the oldest are gone
            assert sum(h is not None for h in served) <= 100
            for i, hit in enumerate(served):
                assert hit is None or hit.text == f"a{i}"
        finally:
            third.close()
        evicted = first.stats()["store"]["l2_evicted"] + second.stats()["store"]["l2_evicted"]
        assert evicted >= 500
    finally:
        first.close()
        second.close()


def test_a_few_writes_past_the_bound_are_swept_soon(tmp_path: Path) -> None:
    """Fewer than a tenth of the bound written after a sweep: the sweeper still runs about a
    second after them, not at its next period (an hour here)."""
    store = SQLiteStore(tmp_path / "l2.sqlite3", sweep_every=3600, max_entries=100)
    try:
        for i in range(100):
            store.set(f"k{i}", b"x", ttl=3600)
        assert _wait(lambda: store.size()[0] == 100)
        time.sleep(1.5)  # (the sweeps those writes woke are done)
        store.sweep()  # nothing left unswept
        for i in range(100, 105):
            store.set(f"k{i}", b"x", ttl=3600)
        assert _wait(lambda: store.size()[0] <= 100, timeout=10), store.size()
    finally:
        store.close()


def test_a_file_of_the_previous_version_opens_and_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:  # the schema before the bound
        db.execute(
            "CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL"
            " UNIQUE, value BLOB NOT NULL, watermark REAL NOT NULL, expires_at REAL NOT NULL)"
        )
        db.executemany(
            "INSERT INTO entries (key, value, watermark, expires_at) VALUES (?, ?, ?, ?)",
            [(f"old{i}", b"v", time.time(), time.time() + 3600) for i in range(5)],
        )
    store = SQLiteStore(path, sweep_every=3600, max_entries=3)
    try:
        assert store.get("old4") is not None
        store.set("new", b"n", ttl=3600)
        store.sweep()
        assert store.size()[0] == 3
        assert store.get("new") is not None and store.get("old4") is not None  # used lately
    finally:
        store.close()
    SQLiteStore(path, sweep_every=3600).close()  # opened again: nothing left to migrate


def test_the_bound_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be from 1"):
        Exact(max_entries=0)
    with pytest.raises(TypeError, match="whole number"):
        Exact(max_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="maxmemory"):
        Cache(redis_url="redis://127.0.0.1:6379/0", exact=Exact(max_entries=10))


# Issue #38: the bound holds for the processes it exists for ---------------------------------
spawn = multiprocessing.get_context("spawn")


def _entries(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM entries").fetchone()[0])


def _questions(start: int, n: int) -> list[str]:
    return [f"What is item number {i} in the list?" for i in range(start, start + n)]


def test_short_scripts_one_after_another_stay_within_the_bound(tmp_path: Path) -> None:
    """Four scripts write 150 answers each and end at once (no close, no sweep): the file
    holds 150, then 200 — the newest — never 300, 450, 600 (#38, item 10)."""
    path = tmp_path / "shared.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=200), "semantic": False, "faq": False}
    for n in range(4):
        script = spawn.Process(target=write_and_exit, args=(options, _questions(150 * n, 150)))
        script.start()
        script.join(120)
        assert script.exitcode == 0
        assert _entries(path) == min(150 * (n + 1), 200)
    with Cache(path=path, semantic=False, faq=False) as reader:
        newest = [reader.lookup(reader.request(q)) for q in _questions(450, 150)]
        assert all(hit is not None for hit in newest)  # the last script's answers all stayed


def test_processes_writing_at_once_never_exceed_the_bound(tmp_path: Path) -> None:
    """Two processes write 1,500 answers each at once: the file never holds more than the
    bound while they write (read every few milliseconds), nor after (#38, item 10)."""
    path = tmp_path / "shared.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=200), "semantic": False, "faq": False}
    SQLiteStore(path).close()  # the file exists before they start: it is read from here
    writers = [
        spawn.Process(target=target, args=(options, _questions(1500 * n, 1500)))
        for n, target in enumerate((write_and_exit, write_entries))  # one ends without close()
    ]
    for writer in writers:
        writer.start()
    seen, most = 0, 0
    with closing(sqlite3.connect(path)) as db:
        while any(writer.is_alive() for writer in writers):
            count = db.execute("SELECT count(*) FROM entries").fetchone()[0]
            seen, most = seen + 1, max(most, count)
            time.sleep(0.005)
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    assert most <= 200 and seen > 10, (most, seen)
    assert _entries(path) == 200


def test_the_entry_l1_serves_is_not_evicted_as_unused(tmp_path: Path) -> None:
    """An answer served 300 times from one process's L1 is the most recently used in the
    file, not the least: another process's writes evict the 100 never-read entries first,
    and a fresh process still finds it (#38, item 11)."""
    path = tmp_path / "shared.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=101), "semantic": False, "faq": False}
    with Cache(**options) as app:  # type: ignore[arg-type]
        hot = app.request("What are the opening hours of the main office?")
        assert app.update(hot, "9 to 5")
        for question in _questions(0, 100):  # never read again
            assert app.update(app.request(question), "cold")
        key = app.exact.key(hot)
        written = _used_at(path, key)
        for _ in range(300):
            hit = app.lookup(hot)
            assert hit is not None and hit.text == "9 to 5"
        assert app.stats()["exact"]["hits_l1"] >= 300  # the store saw none of these reads
        # told in the background (batched), within about a second
        assert _wait(lambda: _used_at(path, key) > written), "the L1 hits never reached the file"
        other = spawn.Process(target=write_and_exit, args=(options, _questions(100, 50)))
        other.start()
        other.join(120)
        assert other.exitcode == 0
    assert _entries(path) == 101
    with Cache(path=path, semantic=False, faq=False) as fresh:
        hit = fresh.lookup(fresh.request("What are the opening hours of the main office?"))
        assert hit is not None and hit.text == "9 to 5"
        cold = [fresh.lookup(fresh.request(q)) for q in _questions(0, 100)]
        assert sum(h is not None for h in cold) == 50  # the 50 oldest cold ones went


def _used_at(path: Path, key: str) -> float:
    with closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT used_at FROM entries WHERE key = ?", (key,)).fetchone()
    return float(row[0]) if row else 0.0


def test_l1_hits_reach_redis_lru_clock(namespace: str, redis_client: redis.Redis) -> None:
    """On Redis the store's LRU (``maxmemory-policy`` allkeys/volatile-lru) sees L1 hits too:
    a key served from L1 only is ``TOUCH``ed, its idle time starts again (#38, item 11)."""
    with Cache(redis_url=REDIS_URL, namespace=namespace, semantic=False, faq=False) as app:
        request = app.request("What are the opening hours of the main office?")
        assert app.update(request, "9 to 5")
        key = app.exact.key(request)
        assert _wait(lambda: redis_client.object("idletime", key) >= 2, timeout=10)
        for _ in range(300):
            hit = app.lookup(request)
            assert hit is not None and hit.level == "l1"
        assert _wait(lambda: redis_client.object("idletime", key) == 0, timeout=5)


def test_an_evicted_entry_takes_its_semantic_point_along(tmp_path: Path) -> None:
    """``max_entries=100`` bounds the semantic points too: 300 answers leave 100 points in
    the file and a deletion logged for each of the others, so the writer's replica and a new
    process's hold 100 (#38, item 12)."""
    path = tmp_path / "shared.sqlite3"
    options = {"path": path, "exact": Exact(max_entries=100), "faq": False}
    with Cache(**options) as app:  # type: ignore[arg-type]
        questions = [f"How do I configure feature number {i} of the product?" for i in range(300)]
        for question in questions:
            assert app.update(app.request(question), f"answer {question}")
        assert _wait(lambda: _entries(path) <= 100)
        with closing(sqlite3.connect(path)) as db:
            live = db.execute("SELECT count(*) FROM points WHERE data IS NOT NULL").fetchone()[0]
            gone = db.execute("SELECT count(*) FROM points WHERE data IS NULL").fetchone()[0]
        assert (_entries(path), live, gone) == (100, 100, 200)
        assert app.semantic is not None
        app.semantic.index.sync()  # (its background thread would, within sync_s)
        assert app.semantic.index.count() == 100
    with Cache(**options) as fresh:  # type: ignore[arg-type]
        assert fresh.semantic is not None and fresh.semantic.index.count() == 100
