"""Property tests over arbitrary prompts: never a crash, never a hit for what was not stored."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tricache import Cache
from tricache.key.normalize import normalize

STORED = ["How do I reset my password?", "怎么重置密码？", "order 12345", ""]
prompts = st.one_of(
    st.text(),  # any code point, lone surrogates and control characters included
    st.sampled_from(STORED).map(lambda s: s.upper()),
    st.sampled_from(STORED).map(lambda s: s + "!"),
    st.text(alphabet="0123456789 order", max_size=12),
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prompt=prompts, tenant=st.sampled_from(["a", "b"]))
def test_lookup_never_raises_and_only_hits_what_was_stored(
    tmp_path: Path, prompt: str, tenant: str
) -> None:
    cache = _cache(tmp_path)
    hit = cache.lookup(cache.request(prompt, tenant=tenant))
    stored = {normalize(s) for s in STORED}
    if hit is None:
        assert tenant == "b" or normalize(prompt) not in stored
    elif hit.tier == "exact":
        assert tenant == "a" and normalize(prompt) in stored
        assert hit.text == f"answer {normalize(prompt)}"
    else:  # a semantic hit: only the stored question it matched, which differs in form only
        assert tenant == "a" and hit.matched_question is not None
        assert hit.text == f"answer {normalize(hit.matched_question)}"
        same = normalize(prompt).casefold().rstrip("!?")
        assert same == normalize(hit.matched_question).casefold().rstrip("!?")


_caches: dict[Path, Cache] = {}


def _cache(tmp_path: Path) -> Cache:
    if tmp_path not in _caches:
        cache = Cache(path=tmp_path / "p.sqlite3", namespace="props")
        for s in STORED:
            cache.update(cache.request(s, tenant="a"), f"answer {normalize(s)}")
        _caches[tmp_path] = cache
    return _caches[tmp_path]


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text())
def test_different_normal_forms_never_share_a_key(a: str, b: str) -> None:
    cache = Cache(store=False)
    if normalize(a) != normalize(b):
        assert cache.exact.key(cache.request(a)) != cache.exact.key(cache.request(b))
