"""``feedback(correct=False)`` reaches every worker of the namespace, whichever kind of index
each is on (issue #32: a worker that opened while the server lacked the search module stayed
on the replica, and went on serving the match users flagged through a query-engine worker).
Two caches on one real valkey + RediSearch server, one on each kind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tricache import Cache, Semantic

from conftest import SearchServer


def _until(check: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def workers(search_server: SearchServer, tmp_path: Path) -> Iterator[tuple[Cache, Cache]]:
    options = {"redis_url": search_server.url, "namespace": "fb", "faq": False}
    on_replica = Cache(**options, semantic=Semantic(index="replica", vector_path=tmp_path / "v"))
    on_engine = Cache(**options, semantic=Semantic(index="redis-search"))
    assert on_replica.semantic.index.name == "replica"  # type: ignore[union-attr]
    assert on_engine.semantic.index.name == "redis-search"  # type: ignore[union-attr]
    yield on_replica, on_engine
    on_replica.close()
    on_engine.close()


def _both_index(workers: tuple[Cache, Cache], question: str, answer: str) -> None:
    for cache in workers:  # each worker indexes the question in its own kind of index
        request = cache.request(question)
        cache.lookup(request)
        assert cache.update(request, answer)


@pytest.mark.parametrize("flagged_by", ["query-engine", "replica"])
def test_a_flagged_match_leaves_every_kind_of_index(
    workers: tuple[Cache, Cache], flagged_by: str
) -> None:
    on_replica, on_engine = workers
    _both_index(workers, "How long does shipping to Canada take?", "5-7 business days.")
    paraphrase = "How long does shipping to Canada usually take?"
    flagger, other = (on_engine, on_replica) if flagged_by == "query-engine" else workers
    assert _until(lambda: other.lookup(other.request(paraphrase)) is not None)  # it serves
    hit = flagger.lookup(flagger.request(paraphrase))
    assert hit is not None and hit.tier == "semantic"
    flagger.feedback(hit.entry_id, correct=False)
    assert flagger.lookup(flagger.request(paraphrase)) is None
    # the other kind of index lets it go too (a replica within its next sync)
    assert _until(lambda: other.lookup(other.request(paraphrase)) is None)
    exact = other.lookup(other.request("How long does shipping to Canada take?"))
    assert exact is not None and exact.tier == "exact"  # its own question still gets it
