"""Two real processes sharing one L2: the Bloom filter, invalidation and sharing."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from tricache import Cache

from procs import hold_until_invalidated, write_entries

spawn = multiprocessing.get_context("spawn")


def _wait_bloom_ready(cache: Cache) -> None:
    cache.lookup(cache.request("warm-up"))  # starts the filter's background load
    deadline = time.monotonic() + 10
    while not cache.exact.bloom.ready:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "bloom filter never loaded"
        time.sleep(0.01)


def test_bloom_filter_learns_keys_written_by_another_process(options: dict[str, Any]) -> None:
    questions = [f"question number {i}" for i in range(40)]
    # the exact tier alone: the semantic tier would find the child's questions too (indexed
    # from its journal when the child ended during its warm-up), whatever the filter knows
    with Cache(**options, semantic=False) as parent:
        _wait_bloom_ready(parent)
        assert parent.lookup(parent.request(questions[0])) is None
        skipped_before = parent.stats()["exact"].get("bloom_skips", 0)
        assert skipped_before >= 1  # never written: no round trip

        child = spawn.Process(target=write_entries, args=(options, questions))
        child.start()
        child.join(60)
        assert child.exitcode == 0

        # the parent's filter catches up in the background (its upkeep thread): a few misses
        # at most, then every entry is found
        deadline = time.monotonic() + 5
        found: dict[str, Any] = {}
        while len(found) < len(questions):
            assert time.monotonic() < deadline, "the filter never learned the child's writes"
            for q in questions:
                if q not in found and (hit := parent.lookup(parent.request(q))) is not None:
                    found[q] = hit
            time.sleep(0.05)
        hits = [found[q] for q in questions]
        assert all(
            h is not None and h.text == f"answer to {q}"
            for h, q in zip(hits, questions, strict=True)
        )
        assert {h.level for h in hits} == {"l2"}


def test_invalidation_reaches_another_process_within_a_second(options: dict[str, Any]) -> None:
    ready, started = spawn.Queue(), spawn.Queue()
    child = spawn.Process(target=hold_until_invalidated, args=(options, ready, started))
    child.start()
    try:
        assert ready.get(timeout=60) == "ready"
        with Cache(**options) as parent:
            started.put(time.time())
            parent.invalidate("handbook")
        delay = ready.get(timeout=30)
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert delay is not None and delay < 1.0
