"""Every answer's question reaches the semantic index, whatever the process does next (issue
#32: past 200 answers stored while the tier opened, the rest were dropped for good, uncounted;
a SIGTERM left nothing in the journal; an exit against a hung Redis waited 5 s; 5,000 journaled
requests held ``Cache(warm=True)`` for 26-50 s; an 8 MB journaled request was analysed again).

The tier's opening is held back by a gate where a test needs it "still opening": a seam in
the test, the stores and the index are real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tricache import Cache
from tricache.semantic import opening, points

from conftest import REDIS_URL, RedisServer

QUESTIONS = [f"How do I configure feature number {n} of the billing dashboard?" for n in range(600)]


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The semantic tier fails to open (a server down: tried again after a while) until the
    gate is set; the retry comes after 0.2 s instead of 30."""
    opened = threading.Event()
    real = opening.open_semantic

    def held(*args: object, **kwargs: object) -> object:
        if not opened.is_set():
            raise opening.Unavailable("held by the test")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(opening, "open_semantic", held)
    monkeypatch.setattr(opening, "REOPEN_AFTER_S", 0.2)
    yield opened
    opened.set()


def _until(check: Callable[[], bool], timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _options(backend: str, tmp_path: Path, namespace: str) -> dict[str, object]:
    if backend == "redis":
        return {"redis_url": REDIS_URL, "namespace": namespace, "faq": False}
    return {"path": str(tmp_path / "c.sqlite3"), "namespace": namespace, "faq": False}


def test_600_answers_stored_while_the_tier_opens_are_all_indexed(
    backend: str, tmp_path: Path, namespace: str, redis_client: object, gate: threading.Event
) -> None:
    options = _options(backend, tmp_path, namespace)
    cache = Cache(**options, warm=False)  # type: ignore[arg-type]
    try:
        for n, question in enumerate(QUESTIONS):
            assert cache.update(cache.request(question), f"Settings > Billing > {n}.")
        assert cache.tiers.semantic is None  # the case under test: not open
        assert cache.stats()["semantic"]["journaled"] == 600  # written ahead, every one
        gate.set()
        assert _until(lambda: cache.semantic is not None)  # (a lookup would open it too)
        tier = cache.tiers.semantic
        assert _until(lambda: tier.index.count() == 600), tier.index.count()
        assert "unindexed" not in cache.stats()["semantic"]
        hit = cache.lookup(
            cache.request("How can I configure feature number 417 of the billing dashboard?")
        )
        assert hit is not None and hit.text == "Settings > Billing > 417."
    finally:
        cache.clear()
        cache.close()


def test_the_next_process_indexes_what_one_that_never_opened_the_tier_stored(
    backend: str, tmp_path: Path, namespace: str, redis_client: object, gate: threading.Event
) -> None:
    options = _options(backend, tmp_path, namespace)
    writer = Cache(**options, warm=False)  # type: ignore[arg-type]
    for n, question in enumerate(QUESTIONS[:300]):
        assert writer.update(writer.request(question), f"Settings > Billing > {n}.")
    assert writer.stats()["semantic"]["journaled"] == 300, writer.stats()
    writer.close()  # it never opened the tier: its drafts are in the store's journal
    gate.set()
    with Cache(**options, warm=True) as reader:  # type: ignore[arg-type]
        tier = reader.semantic
        assert tier is not None
        assert _until(lambda: tier.index.count() == 300, timeout=20), (
            tier.index.count(),
            reader.stats(),
        )
        reader.clear()


SIGTERM_SCRIPT = """
import sys, time
from tricache import Cache
from tricache.semantic import opening

opening.open_semantic = lambda *a, **k: time.sleep(3600)  # a warm-up that never ends
cache = Cache({options}, warm=False)
for n in range(600):
    question = f"How do I configure feature number {{n}} of the billing dashboard?"
    cache.update(cache.request(question), f"Settings > Billing > {{n}}.")
print("stored", flush=True)
time.sleep(3600)
"""


def test_answers_of_a_process_killed_by_sigterm_are_indexed_by_the_next(
    backend: str, tmp_path: Path, namespace: str, redis_client: object
) -> None:
    """``docker stop`` sends SIGTERM, whose default handler ends the process at once: no exit
    hook runs.  What it stored is in the journal already."""
    options = _options(backend, tmp_path, namespace)
    script = tmp_path / "writer.py"
    script.write_text(
        SIGTERM_SCRIPT.format(options=", ".join(f"{k}={v!r}" for k, v in options.items()))
    )
    env = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"}
    writer = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "stored"
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(60)
    assert writer.returncode == -signal.SIGTERM
    with Cache(**options, warm=True) as reader:  # type: ignore[arg-type]
        tier = reader.semantic
        assert tier is not None
        assert _until(lambda: tier.index.count() == 600), tier.index.count()
        hit = reader.lookup(
            reader.request("How can I configure feature number 5 of the billing dashboard?")
        )
        assert hit is not None and hit.text == "Settings > Billing > 5."
        reader.clear()


HUNG_EXIT_SCRIPT = """
import sys, time
from tricache import Cache
from tricache.semantic import opening

opening.open_semantic = lambda *a, **k: time.sleep(3600)  # still opening at the exit
cache = Cache(redis_url={url!r}, namespace="exit", warm=False)
for n in range(100):
    cache.update(cache.request(f"How do I configure feature number {{n}}?"), f"{{n}}.")
print("stored", flush=True)
sys.stdin.readline()  # the test pauses the server, then lets the script end
"""


def test_a_script_ends_at_once_while_redis_hangs(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """Nothing waits for the exit: what it stored is journaled already (the exit once wrote it
    through the bulk client's 5 s timeout, and lost it anyway)."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG_EXIT_SCRIPT.format(url=private_redis.url))
    env = {k: v for k, v in os.environ.items() if k != "TRICACHE_WARM"}
    writer = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "stored"
    assert private_redis.process is not None
    os.kill(private_redis.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        writer.stdin.write("end\n")
        writer.stdin.flush()
        writer.wait(60)
        took = time.monotonic() - started
    finally:
        os.kill(private_redis.process.pid, signal.SIGCONT)
    assert writer.returncode == 0
    assert took < 2.5, took  # (5 s and more before: a hang, not a slow machine)
    import redis

    journal = redis.Redis(port=private_redis.port).llen("tricache:{exit}:journal")
    assert journal == 100  # nothing lost either


def test_a_long_journal_never_holds_a_warm_cache_and_a_hostile_record_is_skipped(
    tmp_path: Path, gate: threading.Event
) -> None:
    """5,000 journaled answers: ``Cache(warm=True)`` returns after a bounded share of them and
    the rest are indexed in the background; an 8 MB record is skipped unread."""
    options = {"path": str(tmp_path / "c.sqlite3"), "faq": False}
    writer = Cache(**options, warm=False)  # type: ignore[arg-type]
    for n in range(5000):
        writer.update(writer.request(f"What does error code {n} of the sync service mean?"), f"{n}")
    writer.store.journal(writer.namespace, [b"\x92\x02" + b"x" * 8_000_000])  # type: ignore[union-attr]
    writer.close()
    gate.set()
    with Cache(**options, warm=True) as reader:  # type: ignore[arg-type]
        tier = reader.semantic
        assert tier is not None
        assert tier.index.count() < 5000  # it returned before the whole journal was indexed
        assert _until(lambda: tier.index.count() == 5000, timeout=300), tier.index.count()
        assert _until(lambda: reader.stats()["semantic"].get("journal_skipped") == 1)


def test_a_journaled_draft_is_checked_like_a_stored_point() -> None:
    ns = "ns"
    good = {
        "scope": "s", "question": "How do I reset it?", "ref": "tricache:ns:x:" + "0" * 40,
        "namespace": ns, "form": "f", "expires_at": 1.0, "tags": ["a"],
    }  # fmt: skip
    assert points.decode(points.encode(good), ns) == good
    hostile = [
        {**good, "namespace": "other"},
        {**good, "ref": "tricache:other:x:" + "0" * 40},  # another namespace's entry
        {**good, "question": "q" * 5000},  # longer than the tier writes
        {**good, "question": "bad \ud800"},  # a lone surrogate
        {**good, "expires_at": float("nan")},
        {**good, "tags": [b"x"]},
        {**good, "question": None},
    ]
    import msgpack

    for payload in hostile:
        data = msgpack.packb([2, payload], use_bin_type=True, unicode_errors="surrogatepass")
        assert points.decode(data, ns) is None, payload
    assert points.decode(b"\xff" * 10, ns) is None
    assert points.decode(msgpack.packb([1, "an old record"]), ns) is None
