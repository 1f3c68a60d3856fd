"""The replica's matrix index (issue #25): exact searches, scopes, deletions, expiry, its files
across a restart (and damaged ones rebuilt, never misread), and a fork that inherits it.

Vectors are synthetic but shaped like sentence embeddings (a few hundred main directions and
noise), so the sketch the index fits prunes as it does on real ones; scores are checked against
a brute-force float32 reference on the float16 values the index keeps.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from tricache.semantic.index.matrix import CorruptIndex, MatrixIndex
from tricache.semantic.index.replica import ReplicatedIndex
from tricache.semantic.index.vectors import DiskFull
from tricache.stores.sqlite import SQLiteStore

DIM = 512
THRESHOLDS = [0.92, 0.77, 0.5]  # the tier's use-m threshold, its search floor, a low one


def _id(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


def _vectors(count: int, seed: int = 0) -> np.ndarray:
    """Unit vectors around a few hundred topics, with near-duplicates of some."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((48, DIM)) * np.linspace(3, 0.5, 48)[:, None]
    topics = rng.standard_normal((200, 48)) @ basis + 0.3 * rng.standard_normal((200, DIM))
    points = topics[rng.integers(0, 200, count)]
    size = np.linalg.norm(points, axis=1, keepdims=True) / np.sqrt(DIM)
    points = points + 0.6 * size * rng.standard_normal((count, DIM))
    twins = points[::7][: len(points[1::7])]
    points[1::7] = twins + 0.3 * rng.standard_normal(twins.shape) * np.linalg.norm(
        twins, axis=1, keepdims=True
    ) / np.sqrt(DIM)
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def _payload(n: int, scope: str = "s", **extra: Any) -> dict[str, Any]:
    return {
        "scope": scope,
        "namespace": "ns",
        "question": f"question {n}",
        "ref": f"tricache:ns:x:{n:040d}",
        "form": f"{n % 5:032x}",
        "expires_at": time.time() + 3600,
        **extra,
    }


def _fill(index: MatrixIndex, vectors: np.ndarray, scopes: list[str]) -> None:
    points = [
        (_id(n), vectors[n], _payload(n, scopes[n % len(scopes)])) for n in range(len(vectors))
    ]
    for start in range(0, len(points), 500):
        index.upsert_many(points[start : start + 500])


def _reference(
    vectors: np.ndarray, query: np.ndarray, allowed: np.ndarray, limit: int, threshold: float
) -> list[tuple[int, float]]:
    kept = vectors.astype(np.float16).astype(np.float32)
    scores = (kept @ query) / (np.linalg.norm(kept, axis=1) * np.linalg.norm(query))
    order = [int(i) for i in np.argsort(-scores, kind="stable") if allowed[i]]
    return [(i, float(scores[i])) for i in order if scores[i] >= threshold][:limit]


@pytest.fixture
def index(tmp_path: Path) -> Any:
    made = MatrixIndex(tmp_path / "m", DIM, fit_at=256)
    yield made
    made.close()


@pytest.mark.parametrize("fitted", [False, True])
def test_searches_match_a_brute_force_reference(index: MatrixIndex, fitted: bool) -> None:
    vectors = _vectors(3000)
    scopes = ["a", "b", "c"] if fitted else ["a"]
    _fill(index, vectors, scopes)
    if fitted:
        index.fit()
        assert index._arrays.proj is not None
    else:
        index._arrays.proj = index._arrays.sketch = None  # the path before the first fit
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((60, DIM)) * rng.choice([0.2, 0.5, 0.8], (60, 1)) / np.sqrt(DIM)
    queries = vectors[rng.integers(0, len(vectors), 60)] + noise
    found_any = 0
    for query in queries.astype(np.float32):
        for threshold in THRESHOLDS:
            allowed = np.array([scopes[n % len(scopes)] == "a" for n in range(len(vectors))])
            want = _reference(vectors, query, allowed, 5, threshold)
            got = index.search(query, {"scope": "a"}, 5, threshold)
            assert [c.id for c in got] == [_id(i) for i, _ in want], (threshold, got, want)
            for candidate, (n, score) in zip(got, want, strict=True):
                assert abs(candidate.score - score) < 1e-5
                assert candidate.payload == {
                    "question": f"question {n}",
                    "ref": f"tricache:ns:x:{n:040d}",
                }
            found_any += bool(got)
    assert found_any > 30  # the queries do find neighbours


def test_scopes_never_mix_and_forms_are_found_without_a_vector(index: MatrixIndex) -> None:
    vector = _vectors(1)[0]
    index.upsert(_id(1), vector, _payload(1, "tenant-a"))
    index.upsert(_id(2), vector, _payload(2, "tenant-b"))
    assert [c.id for c in index.search(vector, {"scope": "tenant-a"}, 10, 0.5)] == [_id(1)]
    assert [c.id for c in index.search(vector, {"scope": "tenant-b"}, 10, 0.5)] == [_id(2)]
    assert index.search(vector, {"scope": "tenant-c"}, 10, 0.0) == []
    form = _payload(1)["form"]
    assert [c.id for c in index.find({"scope": "tenant-a", "form": form}, 5)] == [_id(1)]
    assert index.find({"scope": "tenant-a", "form": f"{9:032x}"}, 5) == []
    assert index.find({"scope": "tenant-a", "form": "not hex"}, 5) == []
    assert {c.id for c in index.find({"namespace": "ns"}, 5)} == {_id(1), _id(2)}
    with pytest.raises(ValueError):
        index.search(vector, {"tenant": "x"}, 5, 0.5)


def test_a_big_scope_and_many_small_ones_answer_the_same(tmp_path: Path) -> None:
    """One scope holding most rows is searched in one pass over all of them; a small one
    through its rows: both give the reference's answer."""
    vectors = _vectors(4000)
    index = MatrixIndex(tmp_path / "m", DIM, fit_at=256)
    scopes = ["big"] * 9 + [f"small{n}" for n in range(40)]
    points = [(_id(n), vectors[n], _payload(n, scopes[n % 49])) for n in range(len(vectors))]
    index.upsert_many(points)
    index.fit()
    for scope in ("big", "small3"):
        allowed = np.array([scopes[n % 49] == scope for n in range(len(vectors))])
        for query in vectors[:40:3]:
            want = _reference(vectors, query, allowed, 3, 0.77)
            got = index.search(query, {"scope": scope}, 3, 0.77)
            assert [c.id for c in got] == [_id(i) for i, _ in want]
    index.close()


def test_deletions_tombstone_then_reuse_rows_once_on_disk(index: MatrixIndex) -> None:
    vectors = _vectors(50)
    _fill(index, vectors, ["s"])
    rows = index._arrays.n
    index.delete([_id(3), _id(4), "not a uuid"])
    assert index.count() == 48
    assert _id(3) not in {c.id for c in index.search(vectors[3], {"scope": "s"}, 5, 0.5)}
    index.upsert(_id(100), vectors[3], _payload(100))
    assert index._arrays.n == rows + 1  # not reused before the deletion is on disk
    index.flush()
    index.upsert(_id(101), vectors[4], _payload(101))
    assert index._arrays.n == rows + 1  # reused now
    found = index.search(vectors[4], {"scope": "s"}, 1, 0.9)
    assert [c.id for c in found] == [_id(101)]
    index.upsert(_id(101), vectors[5], _payload(101, question="again"))  # replaces
    assert index.count() == 50
    assert index.search(vectors[4], {"scope": "s"}, 1, 0.99) == []
    index.delete_where({"namespace": "ns"})
    assert index.count() == 0 and index.search(vectors[5], {"scope": "s"}, 5, 0.0) == []


def test_an_id_twice_in_a_batch_keeps_its_last_point(index: MatrixIndex) -> None:
    vectors = _vectors(3)
    index.upsert_many([(_id(1), vectors[0], _payload(1)), (_id(1), vectors[1], _payload(1))])
    assert index.count() == 1
    assert [c.id for c in index.search(vectors[1], {"scope": "s"}, 5, 0.99)] == [_id(1)]
    assert index.search(vectors[0], {"scope": "s"}, 5, 0.99) == []
    index.delete([_id(1)])
    assert index.search(vectors[1], {"scope": "s"}, 5, 0.0) == []


def test_expired_points_are_deleted(index: MatrixIndex) -> None:
    vectors = _vectors(4)
    now = time.time()
    for n in range(4):
        index.upsert(_id(n), vectors[n], _payload(n, expires_at=now + (-1 if n % 2 else 60)))
    index.delete_expired(now)
    assert index.count() == 2
    assert {c.id for c in index.find({"scope": "s"}, 10)} == {_id(0), _id(2)}


def test_searches_take_no_lock_while_a_write_is_under_way(index: MatrixIndex) -> None:
    vector = _vectors(1)[0]
    index.upsert(_id(1), vector, _payload(1))
    with index._write_lock:
        done: list[Any] = []
        reader = threading.Thread(target=lambda: done.append(index.search(vector, {}, 1, 0.5)))
        reader.start()
        reader.join(10)
        assert done and [c.id for c in done[0]] == [_id(1)]


def test_bad_points_are_refused_whole(index: MatrixIndex) -> None:
    vector = _vectors(1)[0]
    for point_id, bad, payload in [
        ("not-a-uuid", vector, _payload(1)),
        (_id(1), np.zeros(DIM, np.float32), _payload(1)),
        (_id(1), np.full(DIM, np.nan, np.float32), _payload(1)),
        (_id(1), vector[:10], _payload(1)),
        (_id(1), vector, _payload(1, scope=7)),
        (_id(1), vector, _payload(1, expires_at=float("nan"))),
    ]:
        with pytest.raises(ValueError):
            index.upsert_many([(_id(2), vector, _payload(2)), (point_id, bad, payload)])
    assert index.count() == 0


# on disk -----------------------------------------------------------------------------------
def test_a_reopened_index_answers_as_before(tmp_path: Path) -> None:
    vectors = _vectors(3000)
    index = MatrixIndex(tmp_path / "m", DIM, fit_at=256)
    _fill(index, vectors, ["a", "b"])
    index.delete([_id(n) for n in range(0, 3000, 10)])
    index.fit()
    before = [index.search(q, {"scope": "a"}, 5, 0.77) for q in vectors[:60]]
    index.close()
    again = MatrixIndex(tmp_path / "m", DIM, fit_at=256)
    assert again.count() == 2700
    assert [again.search(q, {"scope": "a"}, 5, 0.77) for q in vectors[:60]] == before
    assert again._arrays.proj is not None  # fitted at load
    again.close()


def test_what_was_not_flushed_is_lost_never_misread(tmp_path: Path) -> None:
    """A process that dies between flushes: the index comes back as its last flush left it
    (the store's log brings back the rest); a row freed since is never taken by another id."""
    vectors = _vectors(20)
    index = MatrixIndex(tmp_path / "m", DIM)
    _fill(index, vectors[:10], ["s"])
    index.flush()
    index.delete([_id(0)])
    index.upsert(_id(50), vectors[15], _payload(50))  # after the flush: lost
    index._close_fds()  # the process dies: no flush, no close
    again = MatrixIndex(tmp_path / "m", DIM)
    assert again.count() == 10
    assert [c.id for c in again.search(vectors[0], {"scope": "s"}, 1, 0.99)] == [_id(0)]
    assert again.search(vectors[15], {"scope": "s"}, 1, 0.99) == []
    again.close()


def test_the_journal_is_rewritten_when_it_outgrows_the_index(tmp_path: Path) -> None:
    vectors = _vectors(400)
    index = MatrixIndex(tmp_path / "m", DIM)
    for _ in range(30):
        _fill(index, vectors, ["s"])
        index.flush()
    assert index._journal_name != "journal-0"
    assert sorted(p.name for p in (tmp_path / "m").iterdir() if p.name.startswith("journal"))
    assert [p.name for p in (tmp_path / "m").glob("journal-*")] == [index._journal_name]
    index.close()
    again = MatrixIndex(tmp_path / "m", DIM)
    assert again.count() == 400
    assert [c.id for c in again.search(vectors[7], {"scope": "s"}, 1, 0.99)] == [_id(7)]
    again.close()


def _damage(path: Path, name: str) -> None:
    if name == "vectors":
        data = bytearray((path / "vectors").read_bytes())
        data[-500:-490] = b"\x7f" * 10  # the last row (a live one)
        (path / "vectors").write_bytes(bytes(data))
    elif name == "journal":
        journal = next(path.glob("journal-*"))
        journal.write_bytes(journal.read_bytes()[:-7])
    elif name == "meta":
        (path / "meta").write_bytes(b"\x93garbage")
    elif name == "format":
        (path / "meta").write_bytes(msgpack.packb({"format": 99}))


@pytest.mark.parametrize("damaged", ["vectors", "journal", "meta", "format"])
def test_damaged_files_are_refused(tmp_path: Path, damaged: str) -> None:
    index = MatrixIndex(tmp_path / "m", DIM)
    _fill(index, _vectors(20), ["s"])
    index.close()
    _damage(tmp_path / "m", damaged)
    with pytest.raises(CorruptIndex):
        MatrixIndex(tmp_path / "m", DIM)


@pytest.mark.parametrize("damaged", ["vectors", "journal", "meta", "qdrant"])
def test_a_damaged_or_old_slot_is_rebuilt_from_the_store(tmp_path: Path, damaged: str) -> None:
    store = SQLiteStore(tmp_path / "l2.sqlite3")
    vectors = _vectors(30)
    replica = ReplicatedIndex(store, "ns", DIM, tmp_path / "r", sync_s=3600)
    for n in range(30):
        replica.upsert(_id(n), vectors[n], _payload(n))
    replica.sync()
    shard = replica.path
    replica.close()
    if damaged == "qdrant":  # a slot of an earlier version: a qdrant-edge shard
        state = tmp_path / "r" / "slot-0" / "state"
        state.write_bytes(msgpack.packb({"cursor": "1", "shard": shard.name}))
        for name in list(shard.iterdir()):
            name.unlink()
        (shard / "edge_config.json").write_text("{}")
    else:
        _damage(shard, damaged)
    again = ReplicatedIndex(store, "ns", DIM, tmp_path / "r", sync_s=3600)
    assert again.path != shard and not shard.exists()  # a new replica, from the store
    assert again.count() == 30
    for n in (29, 4):  # (29's row is the damaged one)
        found = again.search(vectors[n], {"scope": "s"}, 1, 0.99)
        assert [c.id for c in found] == [_id(n)] and found[0].score > 0.999
    again.close()
    last = ReplicatedIndex(store, "ns", DIM, tmp_path / "r", sync_s=3600)
    assert last.rebuilds == 0 and last.count() == 30  # the rebuilt slot is sound
    last.close()
    store.close()


# a fork ------------------------------------------------------------------------------------
def test_a_forked_child_neither_writes_nor_flushes_its_parents_index(tmp_path: Path) -> None:
    vectors = _vectors(40)
    index = MatrixIndex(tmp_path / "m", DIM)
    _fill(index, vectors[:20], ["s"])
    pid = os.fork()
    if pid == 0:  # the child: reads work, writes refuse, flush and close do nothing
        code = 0
        try:
            if [c.id for c in index.search(vectors[3], {"scope": "s"}, 1, 0.99)] != [_id(3)]:
                code = 2
            try:
                index.upsert(_id(99), vectors[30], _payload(99))
                code = 3
            except RuntimeError:
                pass
            index.flush()
            index.close()
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    index.upsert_many([(_id(n), vectors[n], _payload(n)) for n in range(20, 40)])  # it goes on
    index.close()
    again = MatrixIndex(tmp_path / "m", DIM)
    assert again.count() == 40
    assert [c.id for c in again.search(vectors[30], {"scope": "s"}, 1, 0.99)] == [_id(30)]
    again.close()


def test_a_disk_without_room_refuses_writes_and_searches_go_on(tmp_path: Path) -> None:
    """Below its floor of free space the index is not made, and one made before writes
    nothing more (DiskFull: the replica drops and counts the write) but answers from what it
    holds."""
    with pytest.raises(DiskFull):
        MatrixIndex(tmp_path / "full", DIM, min_free_bytes=2**62)
    vectors = _vectors(20)
    index = MatrixIndex(tmp_path / "idx", DIM)
    try:
        index.upsert(_id(0), vectors[0], _payload(0))
        index._room.min_free = 2**62  # the disk fills up
        index._room.full = True  # (checked at every write once full, at most once a second before)
        with pytest.raises(DiskFull):
            index.upsert(_id(1), vectors[1], _payload(1))
        assert index.count() == 1
        assert [c.id for c in index.search(vectors[0], {"scope": "s"}, 1, 0.9)] == [_id(0)]
    finally:
        index.close()
