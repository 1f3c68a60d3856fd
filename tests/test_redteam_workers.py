"""Red team of the semantic tier in every worker (issue #17): the store's change log and points
written by someone else, caches made and dropped, and processes that share one store.

Each test is one way found to break a promise of README "Deployment shapes" or
docs/security.md; real Redis servers, SQLite files and processes, no mocked store.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from tricache.semantic.index.replica import ReplicatedIndex, encode_point
from tricache.stores.redis import RedisStore
from tricache.stores.sqlite import SQLiteStore

from conftest import RedisServer


def _replica(store: Any, namespace: str, tmp_path: Path, name: str) -> ReplicatedIndex:
    return ReplicatedIndex(store, namespace, 4, tmp_path / name, sync_s=3600)


def _point(n: int, namespace: str) -> tuple[str, np.ndarray, dict[str, Any]]:
    point_id = f"00000000-0000-0000-0000-{n:012d}"
    payload = {
        "scope": "s",
        "namespace": namespace,
        "question": f"q{n}",
        "ref": f"tricache:{namespace}:x:{n:040d}",
        "expires_at": time.time() + 3600,
    }
    return point_id, np.array([1.0, n + 1.0, 0.5, 0.25], np.float32), payload


# One hostile log entry or point id stopped every replica for good ---------------------------
HOSTILE_LOG_ENTRIES: list[dict[str, bytes]] = [
    {"x": b"no i field"},
    {"i": b"abc"},  # too short
    {"i": b"\xff\xfe" * 18},  # 36 bytes, not UTF-8
    {"i": b"0" * 100},  # too long
    {"i": b"z" * 36},  # the length of a UUID, not one
]


@pytest.mark.parametrize("fields", HOSTILE_LOG_ENTRIES, ids=lambda f: repr(f)[:20])
def test_a_hostile_log_entry_does_not_stop_the_replicas(
    private_redis: RedisServer, tmp_path: Path, fields: dict[str, bytes]
) -> None:
    """Before: ``points_since`` raised (KeyError, UnicodeDecodeError) or the engine refused the
    id (ValueError) on every sync, so no later write or deletion ever reached any replica —
    a match rejected by feedback kept being served by every other process."""
    store = RedisStore(private_redis.url, timeout=0.5)
    writer = _replica(store, "ns", tmp_path, "w")
    reader = _replica(store, "ns", tmp_path, "r")
    for n in range(2):
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    assert reader.count() == 2
    redis.Redis(port=private_redis.port).xadd("tricache:{ns}:plog", fields)  # type: ignore[arg-type]
    writer.upsert(*_point(5, "ns"))
    writer.delete([_point(0, "ns")[0]])  # a wrong match reported in the writer's process
    reader.sync()
    assert reader.count() == 2  # 1 and 5: the deletion and the new point both arrived
    assert reader.corrupt_points == 1
    writer.close()
    reader.close()
    store.close()


def test_a_point_key_that_names_no_point_id_does_not_stop_a_rebuild(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """A key ``tricache:{ns}:p:<not a UUID>`` holding a well-formed point: the rebuild scan
    handed its name to the engine, which raised, so the replica could never be rebuilt."""
    store = RedisStore(private_redis.url, timeout=0.5)
    writer = _replica(store, "ns", tmp_path, "w")
    writer.upsert(*_point(1, "ns"))
    _, vector, payload = _point(2, "ns")
    raw = redis.Redis(port=private_redis.port)
    raw.set("tricache:{ns}:p:" + "z" * 36, encode_point(vector, payload))
    fresh = _replica(store, "ns", tmp_path, "fresh")  # rebuilds from the store at start
    assert fresh.rebuilds == 1 and fresh.count() == 1
    assert fresh.corrupt_points == 1
    for replica in (writer, fresh):
        replica.close()
    store.close()


def test_a_hostile_sqlite_row_does_not_stop_the_replicas(tmp_path: Path) -> None:
    path = tmp_path / "l2.sqlite3"
    store = SQLiteStore(path, sweep_every=3600)
    writer = _replica(store, "ns", tmp_path, "w")
    reader = _replica(store, "ns", tmp_path, "r")
    for n in range(2):
        writer.upsert(*_point(n, "ns"))
    reader.sync()
    _, vector, payload = _point(3, "ns")
    with sqlite3.connect(path) as db:  # another program writes the shared file
        db.execute(
            "INSERT INTO points (namespace, id, data, expires_at) VALUES (?, ?, ?, ?)",
            ("ns", "not-a-uuid", encode_point(vector, payload), time.time() + 3600),
        )
        db.execute(
            "INSERT INTO points (namespace, id, data, expires_at) VALUES (?, ?, NULL, ?)",
            ("ns", "x" * 36, time.time() + 3600),
        )
    writer.upsert(*_point(5, "ns"))
    writer.delete([_point(0, "ns")[0]])
    reader.sync()
    assert reader.count() == 2 and reader.corrupt_points == 2
    fresh = _replica(store, "ns", tmp_path, "fresh")
    assert fresh.count() == 2
    for replica in (writer, reader, fresh):
        replica.close()
    store.close()
