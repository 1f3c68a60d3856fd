"""A delete, a feedback and an invalidation reach every cache of the process at once, and the
other processes within ``refresh_s`` (issue 38, item 6): a second ``Cache`` of the app (another
framework object, the review page in-process, a worker thread's own) that deleted an answer
left the first one's L1 serving it for up to a minute."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import pytest

from tricache import Cache

from conftest import REDIS_URL
from procs import hold_until_deleted

pytestmark = pytest.mark.usefixtures("redis_client")
Q = "What does the handbook say about leave?"

CacheFactory = Callable[..., Cache]


def _hot(cache: Cache, question: str = Q) -> str:
    """The id of an entry ``cache`` now serves from its L1."""
    request = cache.request(question)
    for _ in range(3):
        hit = cache.lookup(request)
        assert hit is not None
    assert hit.level == "l1"
    return hit.entry_id


@pytest.mark.parametrize("how", ["delete", "feedback"])
def test_a_delete_reaches_every_cache_of_the_process_at_once(
    make_cache: CacheFactory, how: str
) -> None:
    app, admin = make_cache(), make_cache()
    assert app.update(app.request(Q), "page 12")
    assert app.update(app.request("What is the dress code?"), "smart casual")
    entry_id = _hot(app)
    kept = _hot(app, "What is the dress code?")
    _hot(admin)  # (its own L1 holds it too)
    if how == "delete":
        admin.delete(entry_id)
    else:
        admin.feedback(entry_id, correct=False)
    assert app.lookup(app.request(Q)) is None  # no sleep: the same process
    assert admin.lookup(admin.request(Q)) is None
    assert app.lookup(app.request("What is the dress code?")).entry_id == kept  # type: ignore[union-attr]


def test_a_rejected_semantic_match_leaves_every_cache_at_once(namespace: str) -> None:
    options: dict[str, Any] = {"namespace": namespace, "redis_url": REDIS_URL, "warm": True}
    app, reviewer = Cache(**options), Cache(**options)
    try:
        if app.semantic is None or reviewer.semantic is None:
            pytest.fail("the semantic tier did not open")
        assert app.update(app.request("How do I reset my password?"), "Settings, then Security.")
        paraphrase = "how can i reset my password"
        deadline = time.monotonic() + 10
        while (hit := reviewer.lookup(reviewer.request(paraphrase))) is None:
            assert time.monotonic() < deadline, "the reviewer's replica never had the point"
            time.sleep(0.05)
        assert hit.tier == "semantic"
        assert app.lookup(app.request(paraphrase)) is not None
        reviewer.feedback(hit.entry_id, correct=False)
        assert app.lookup(app.request(paraphrase)) is None  # at once, not at the next sync
        assert app.lookup(app.request("How do I reset my password?")) is not None
    finally:
        app.close()
        reviewer.close()


def test_another_process_lets_a_deleted_entry_go_within_refresh_s(
    options: dict[str, Any], backend: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, started = ctx.Queue(), ctx.Queue()
    options = {**options, "semantic": False}
    child = ctx.Process(target=hold_until_deleted, args=(options, ready, started))
    child.start()
    try:
        key = ready.get(timeout=60)
        with Cache(**options) as admin:
            deleted_at = time.time()
            admin.delete(key)
            started.put(deleted_at)
        lag = ready.get(timeout=30)
    finally:
        child.join(timeout=30)
    assert lag is not None, "the other process kept serving the deleted entry"
    assert lag < 0.5 * 4 + 1.0  # refresh_s (0.5 s) and a poll, with room for a loaded machine


def test_a_delete_learned_during_a_read_does_not_put_the_entry_back(
    make_cache: CacheFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup whose L2 read was under way when the delete came serves what it read (it
    began first), but does not keep it in L1, which the delete has just emptied."""
    app, admin = make_cache(), make_cache()
    request = app.request(Q)
    assert app.update(request, "page 12")
    key = app.key(request)
    app.exact.l1.clear()
    store, read = app.exact.store, app.exact.store.get  # type: ignore[union-attr]

    def racing(wanted: str) -> object:
        record = read(wanted)  # the entry as it was when the read began
        admin.delete(key)  # the delete lands before the read returns
        return record

    monkeypatch.setattr(store, "get", racing)
    assert app.lookup(request) is not None  # (the read began before the delete)
    monkeypatch.undo()
    assert app.exact.l1.get(key) is None
    assert app.lookup(request) is None
