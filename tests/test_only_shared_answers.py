"""An entry rewritten as "no answer" (``negative=True``) or for its own request only
(``semantic=False``) is never served to another question, on every kind of vector index: the
point its earlier answer left resolves to the new entry, and the tier refuses it (issue #32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tricache import Cache, Semantic

from conftest import REDIS_URL, SearchServer

ASKED = "How do I reset my password on the website?"
PARAPHRASE = "How can I reset my password on the website?"


def _caches(kind: str, tmp_path: Path, namespace: str) -> Cache:
    if kind == "sqlite":
        return Cache(path=tmp_path / "c.sqlite3", namespace=namespace, faq=False)
    if kind == "redis":
        return Cache(redis_url=REDIS_URL, namespace=namespace, faq=False,
                     semantic=Semantic(index="replica"))  # fmt: skip
    server = SearchServer(tmp_path)
    server.start()
    _servers.append(server)
    return Cache(redis_url=server.url, namespace=namespace, faq=False,
                 semantic=Semantic(index="redis-search"))  # fmt: skip


_servers: list[SearchServer] = []


@pytest.fixture(autouse=True)
def _stop_servers() -> object:
    yield
    while _servers:
        _servers.pop().stop()


@pytest.mark.parametrize("kind", ["sqlite", "redis", "query-engine"])
@pytest.mark.parametrize("rewrite", ["negative", "unshared"])
def test_a_rewritten_answer_is_never_served_to_a_paraphrase(
    kind: str, rewrite: str, tmp_path: Path, namespace: str, redis_client: object
) -> None:
    cache = _caches(kind, tmp_path, namespace)
    try:
        request = cache.request(ASKED)
        assert cache.lookup(request) is None
        assert cache.update(request, "Click 'Forgot password' on the sign-in page.")
        hit = cache.lookup(cache.request(PARAPHRASE))
        assert hit is not None and hit.tier == "semantic"  # the point is there and serves

        if rewrite == "negative":
            assert cache.update(request, "ERROR: upstream timeout", negative=True)
            assert cache.lookup(request) is None  # the exact tier's promise
        else:  # an answer with tool calls, say: for this very request only
            assert cache.update(request, '{"tool": "reset_password"}', semantic=False)
            exact = cache.lookup(request)
            assert exact is not None and exact.tier == "exact"
        for _ in range(3):  # neither served nor kept: the point is discarded when met
            assert cache.lookup(cache.request(PARAPHRASE)) is None
        assert cache.stats()["semantic"]["unshared"] >= 1

        assert cache.update(request, "Use the 'Forgot password' link.")  # shared again
        hit = cache.lookup(cache.request(PARAPHRASE))
        assert hit is not None and hit.text == "Use the 'Forgot password' link."
    finally:
        cache.close()


def test_an_entry_written_before_the_shared_flag_still_decodes_as_shared() -> None:
    import msgpack

    from tricache.key.entry import SCHEMA_VERSION, decode_entry

    old = msgpack.packb([SCHEMA_VERSION, "text", None, None, "e", 0, {}, False, 0, 0, "", 1.0])
    assert decode_entry(old, 2.0).shared
    wrong = msgpack.packb([SCHEMA_VERSION, "t", None, None, "e", 0, {}, False, 0, 0, "", 1.0, 1])
    with pytest.raises(ValueError):
        decode_entry(wrong, 2.0)
