"""Points written straight into the store by someone else, in the scope of a real question:
a question of 2 MB, one that is not UTF-8.  The lookup skips them before any guard reads them,
serves the good point beside them, and the semantic tier stays on (issue #32: a 2 MB question
took the guards 7-11 s a lookup; bytes that were not UTF-8 opened the breaker for good)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import msgpack
import pytest
import redis

from tricache import Cache, Semantic
from tricache.semantic.index.replica import decode_point, encode_point
from tricache.semantic.tier import point_id_for

from conftest import REDIS_URL, SearchServer

ASKED = "What is the boiling point of water at sea level?"
PARAPHRASE = "What's the boiling point of water at sea level?"
HUGE = "What is the boiling point of water " + "at sea level " * 16_000 + "?"  # ~200 KB


def _hostile_copies(cache: Cache, kind: str, url: str | None) -> int:
    """Copies of the point of ASKED (same vector, scope and ref) whose question is hostile;
    returns how many were written."""
    ns = cache.namespace
    point = point_id_for(cache.key(cache.request(ASKED)))
    questions = [HUGE.encode(), b"What is the boiling \xff\xfe point of water at sea level?"]
    if kind == "query-engine":
        raw = redis.Redis.from_url(url)
        key = next(k for k in raw.scan_iter(match=f"tricache:{{{ns}}}:v:*{point}"))
        fields = raw.hgetall(key)
        for question in questions:
            raw.hset(key[: -len(point)] + str(uuid.uuid4()).encode(),
                     mapping={**fields, b"q": question})  # fmt: skip
        return len(questions)
    store = cache.store
    assert store is not None
    if url is None:  # SQLite: the points table
        with sqlite3.connect(cache.settings.path) as db:
            (data,) = db.execute(
                "SELECT data FROM points WHERE namespace = ? AND id = ?", (ns, point)
            ).fetchone()
    else:
        data = redis.Redis.from_url(url).get(f"tricache:{{{ns}}}:p:{point}")
    vector, payload = decode_point(data, cache.semantic.embedder.dim, ns)
    store.put_point(ns, str(uuid.uuid4()), encode_point(vector, {**payload, "question": HUGE}),
                    600)  # fmt: skip
    # not UTF-8 cannot go through encode_point (msgpack str): the raw map, with bytes in it
    bad = msgpack.packb([1, vector.astype("<f2").tobytes(), {**payload, "question": "x"}])
    bad = bad.replace(b"\xa1x", b"\xa2\xff\xfe")
    store.put_point(ns, str(uuid.uuid4()), bad, 600)
    return 2


@pytest.mark.parametrize("kind", ["sqlite", "redis", "query-engine"])
def test_hostile_points_are_skipped_before_the_guards_and_the_tier_stays_on(
    kind: str, tmp_path: Path, namespace: str, redis_client: object
) -> None:
    server = None
    if kind == "sqlite":
        cache = Cache(path=tmp_path / "c.sqlite3", namespace=namespace, faq=False)
        url = None
    elif kind == "redis":
        url = REDIS_URL
        cache = Cache(redis_url=url, namespace=namespace, faq=False,
                      semantic=Semantic(index="replica"))  # fmt: skip
    else:
        server = SearchServer(tmp_path)
        server.start()
        url = server.url
        cache = Cache(redis_url=url, namespace=namespace, faq=False,
                      semantic=Semantic(index="redis-search"))  # fmt: skip
    try:
        request = cache.request(ASKED)
        assert cache.lookup(request) is None
        assert cache.update(request, "100 °C (212 °F).")
        _hostile_copies(cache, kind, url)
        index = cache.semantic.index
        if hasattr(index, "sync"):
            index.sync()
        from tricache.semantic.guards import checks

        seen: list[int] = []
        real = checks.check

        def spy(cached: str, asked: str, *a: object, **k: object) -> object:
            seen.append(len(cached))
            return real(cached, asked, *a, **k)

        import tricache.semantic.tier as tier_module

        tier_module.check = spy  # type: ignore[assignment]
        try:
            for _ in range(3):
                hit = cache.lookup(cache.request(PARAPHRASE))
                assert hit is not None and hit.text == "100 °C (212 °F)."
        finally:
            tier_module.check = real  # type: ignore[assignment]
        assert seen and max(seen) < 200  # no guard read a hostile question
        stats = cache.stats()
        assert not stats["semantic"].get("errors")  # the tier never failed: no breaker
        assert not cache.tiers.breaker.is_open
        skipped = getattr(index, "hostile_points", 0) + getattr(index, "corrupt_points", 0)
        assert skipped + stats["semantic"].get("hostile_points", 0) >= 2
    finally:
        cache.close()
        if server is not None:
            server.stop()
