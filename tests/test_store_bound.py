"""A bound on the embedded store (issue #33, part 3): ``Exact(max_entries=, max_bytes=)`` keep
the SQLite file's entries within it, the least recently used evicted first — as LangChain's
``InMemoryCache(maxsize=)`` does in memory, for every process sharing the file."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tricache import Cache, Exact
from tricache.stores.sqlite import SQLiteStore


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
