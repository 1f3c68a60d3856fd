"""Files at rest and the SQLite request path (issue #14): private files, keyed audit hashes,
lookups that never wait behind a writer, expired rows swept off the request path."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tricache import Cache, Exact
from tricache.faq.store import FaqEntry
from tricache.runtime.home import data_dir, private_tree
from tricache.semantic.audit import AuditLog
from tricache.stores.sqlite import SQLiteStore


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Nothing private by accident: files would be created 0666, directories 0777."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def used_cache(open_umask: None) -> Iterator[Cache]:
    """A default cache (all in TRICACHE_HOME) whose every file exists: exact, semantic with
    its audit log, FAQ; still open, so the SQLite -wal and -shm files are there too."""
    cache = Cache(namespace="files")
    cache.add_faq([FaqEntry("How do I reset my password?", "Use the sign-in page link.")])
    cache.update(cache.request("How do I enable dark mode?"), "Settings > Display.")
    hit = cache.lookup(cache.request("How can I enable dark mode?"))
    assert hit is not None and hit.tier == "semantic"
    assert cache.lookup(cache.request("How do I reset my password?")).tier == "faq"  # type: ignore[union-attr]
    cache.feedback(hit.entry_id, correct=False)
    cache.semantic.audit.flush()  # type: ignore[union-attr]
    yield cache
    cache.close()


def test_every_file_tricache_creates_is_private(used_cache: Cache) -> None:
    home = data_dir()
    vectors = home / "vectors"
    assert _mode(home) == 0o700
    seen = set()
    for parent, dirs, files in os.walk(home):
        if Path(parent).is_relative_to(vectors):
            continue  # the vector engine's own files: below
        for name in dirs:
            if Path(parent, name) != vectors:
                assert _mode(Path(parent, name)) == 0o700, Path(parent, name)
        for name in files:
            assert _mode(Path(parent, name)) == 0o600, Path(parent, name)
            seen.add(name)
    for name in ("exact", "faq"):  # WAL mode
        assert {f"{name}.sqlite3", f"{name}.sqlite3-wal", f"{name}.sqlite3-shm"} <= seen, seen
    assert {"audit.sqlite3", "secret"} <= seen, seen


def test_the_vector_index_directory_is_private(used_cache: Cache) -> None:
    """The engine creates its files itself (0644 here): they are private through their
    directory, 0700, and made 0600 when the index is opened again."""
    assert used_cache.semantic is not None
    index_dir = Path(used_cache.semantic.index.path)  # type: ignore[attr-defined]
    assert _mode(index_dir.parent) == 0o700 and _mode(index_dir) == 0o700


def test_private_tree_makes_what_a_library_left_private(tmp_path: Path, open_umask: None) -> None:
    root = tmp_path / "index"
    (root / "segments").mkdir(parents=True)
    (root / "segments" / "data.bin").write_bytes(b"x")
    (root / "config.json").write_text("{}")
    private_tree(root)
    for path in (root, root / "segments"):
        assert _mode(path) == 0o700
    for path in (root / "config.json", root / "segments" / "data.bin"):
        assert _mode(path) == 0o600


def test_loose_files_of_ours_are_tightened_once_and_others_left_alone(
    open_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    home = Path(os.environ["TRICACHE_HOME"])
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    exact = home / "exact.sqlite3"
    sqlite3.connect(exact).close()
    exact.chmod(0o644)
    (home / "exact.sqlite3-wal").touch(0o666)
    foreign = home / "faq.sqlite3"
    sqlite3.connect(foreign).close()
    foreign.chmod(0o644)
    can_chown = os.getuid() == 0
    if can_chown:
        os.chown(foreign, 65534, 65534)
    caplog.set_level(logging.WARNING, logger="tricache.runtime.home")
    with Cache(namespace="loose", semantic=False) as cache:
        cache.update(cache.request("q"), "a")
        assert _mode(exact) == 0o600 and _mode(home / "exact.sqlite3-wal") == 0o600
        assert _mode(home / "exact.sqlite3-shm") == 0o600  # new: SQLite gives it exact's mode
        if can_chown:
            assert cache.faq is None  # an empty FAQ file, opened without error
    assert _mode(home) == 0o700
    tightened = [r for r in caplog.records if "made private" in r.getMessage()]
    assert any(str(exact) in r.getMessage() for r in tightened)
    if can_chown:
        assert _mode(foreign) == 0o644  # not ours: said, not changed
        assert any("not ours" in r.getMessage() for r in caplog.records)
    caplog.clear()
    exact.chmod(0o644)  # loosened again: tightened again, not logged again
    Cache(namespace="loose", semantic=False).close()
    assert _mode(exact) == 0o600
    assert not [r for r in caplog.records if str(exact) in r.getMessage()]


# audit hashes -------------------------------------------------------------------------------
_HASH_IN_CHILD = """
import sys
from tricache.semantic.audit import AuditLog
log = AuditLog(sys.argv[1])
log.record({"query_hash": sys.argv[2]})
log.close()
print(log.recent(1)[0]["query_hash"])
"""


def _audit_hashes(home: Path, value: str, processes: int) -> list[str]:
    """The stored hash of ``value`` from ``processes`` processes started at once on ``home``."""
    env = {**os.environ, "TRICACHE_HOME": str(home)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _HASH_IN_CHILD, str(home / f"audit-{i}.sqlite3"), value],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    outputs = [child.communicate(timeout=120)[0].strip() for child in children]
    assert all(child.returncode == 0 for child in children)
    return outputs


def test_audit_hashes_are_keyed_per_installation(tmp_path: Path) -> None:
    question = "How do I reset my password?"
    unkeyed = hashlib.blake2b(question.encode(), digest_size=16).hexdigest()
    one = _audit_hashes(tmp_path / "one", unkeyed, processes=3)  # racing to create the secret
    other = _audit_hashes(tmp_path / "other", unkeyed, processes=1)
    assert len(set(one)) == 1, "processes of one installation must agree"
    assert one[0] != other[0], "two installations must not"
    assert unkeyed not in (one[0], other[0])
    secret = tmp_path / "one" / "secret"
    assert len(secret.read_bytes()) == 32 and _mode(secret) == 0o600
    assert [p.name for p in (tmp_path / "one").iterdir() if p.name.startswith(".secret")] == []


def test_a_damaged_secret_is_replaced(tmp_path: Path) -> None:
    home = Path(os.environ["TRICACHE_HOME"])
    home.mkdir()
    (home / "secret").write_bytes(b"short")
    log = AuditLog(tmp_path / "audit.sqlite3")
    secret = (home / "secret").read_bytes()
    assert len(secret) == 32
    assert log.query_hash("x") == AuditLog(tmp_path / "a.sqlite3", secret=secret).query_hash("x")


# the request path ---------------------------------------------------------------------------
def test_lookups_do_not_wait_for_a_write_stuck_behind_another_writer(tmp_path: Path) -> None:
    """Another connection holds SQLite's write lock; a write of this process waits for it
    (here: made to wait up to 30 s).  Lookups and version polls answer meanwhile."""
    path = tmp_path / "l2.sqlite3"
    cache = Cache(path=path, namespace="busy", semantic=False, exact=Exact(bloom=False))
    request = cache.request("q")
    cache.update(request, "a")
    cache.exact.l1.clear()
    store = cache.exact.store
    assert isinstance(store, SQLiteStore)
    store._db.execute("PRAGMA busy_timeout = 30000")  # a write that waits and waits
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    writing = threading.Thread(target=store.set, args=("tricache:busy:x:1", b"v", 60))
    writing.start()
    try:
        deadline = time.monotonic() + 10
        while not store._lock.locked() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert store._lock.locked(), "the write never started"
        answers: list[object] = []
        done = threading.Event()

        def look_up() -> None:
            cache.exact._next_refresh = 0.0  # a version poll too
            answers.append(cache.lookup(request))
            answers.append(store.poll("busy", "", 0))
            done.set()

        threading.Thread(target=look_up, daemon=True).start()
        assert done.wait(20), "the lookup waited behind the write"
        assert writing.is_alive() and blocker.in_transaction  # the lock was held throughout
        assert answers[0] is not None and answers[0].text == "a"  # type: ignore[attr-defined]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        writing.join()
        cache.close()


def test_expired_rows_are_swept_in_bounded_batches_off_the_request_path(tmp_path: Path) -> None:
    path = tmp_path / "l2.sqlite3"
    store = SQLiteStore(path, sweep_every=3600)  # its sweeper sleeps through this test
    expired = 200_000
    with closing(sqlite3.connect(path)) as db, db:
        db.executemany(
            "INSERT INTO entries (key, value, watermark, expires_at) VALUES (?, ?, 0, 1)",
            ((f"tricache:old:x:{i}", b"v") for i in range(expired)),
        )
    count = "SELECT count(*) FROM entries"
    store.set("tricache:new:x:1", b"v", 60)
    assert store._db.execute(count).fetchone()[0] == expired + 1  # the write swept nothing
    assert store.sweep() == store.sweep_batch  # one bounded batch
    store.close()
    assert not store._sweeper.is_alive()

    sweeping = SQLiteStore(path, sweep_every=0.01)
    try:
        deadline = time.monotonic() + 120
        while sweeping._db.execute(count).fetchone()[0] > 1 and time.monotonic() < deadline:
            assert sweeping.get("tricache:new:x:1") is not None
            time.sleep(0.05)
        assert sweeping._db.execute(count).fetchone()[0] == 1
    finally:
        sweeping.close()
