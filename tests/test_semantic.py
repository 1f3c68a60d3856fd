"""The semantic tier in the full cache: real packaged embedder, real embedded Qdrant engine."""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from tricache import Cache, Exact, Qdrant, Semantic
from tricache.semantic.embed import CachedEmbedder, get_embedder
from tricache.semantic.index.vectors import EdgeIndex

from procs import open_cache_and_report

spawn = multiprocessing.get_context("spawn")


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Cache]:
    with Cache(path=tmp_path / "l2.sqlite3", namespace="sem") as c:
        yield c


def _store(cache: Cache, question: str, answer: str, **kw: object) -> None:
    assert cache.update(cache.request(question, **kw), answer)  # type: ignore[arg-type]


def test_paraphrase_is_served_and_look_alikes_are_not(cache: Cache) -> None:
    _store(cache, "How do I reset my password?", "Use 'Forgot password'.")
    hit = cache.lookup(cache.request("How can I reset my password?"))
    assert hit is not None and hit.tier == "semantic" and hit.level == "replica"
    assert hit.text == "Use 'Forgot password'." and 0.9 <= hit.score <= 1.0  # type: ignore[operator]
    assert hit.matched_question == "How do I reset my password?"
    for look_alike in [
        "How do I not reset my password?",
        "How do I reset my email?",
        "How do I reset my password on iPhone 15?",
    ]:
        assert cache.lookup(cache.request(look_alike)) is None, look_alike
    refusals = cache.stats()["semantic"]
    assert refusals.get("guard_polarity.negation", 0) >= 1


def test_chinese_paraphrase_and_look_alikes(cache: Cache) -> None:
    _store(cache, "怎么开通自动续费？", "在设置里打开自动续费。")
    assert cache.lookup(cache.request("自动续费怎么开通")) is not None
    assert cache.lookup(cache.request("怎么关闭自动续费？")) is None


# Same-meaning rewordings users type: discourse, spelling and spacing variants
REWORDED = [
    ("Can I bring a power bank in my checked luggage?",
     "Um, hi, I was just wondering if I can bring a power bank in my checked luggage? Thanks"),
    ("Can I bring a power bank in my checked luggage?",
     "Quick question if you don't mind: can I bring a power bank in my checked luggage?"),
    ("高铁上有WiFi吗？", "那个，请问高铁上有WiFi吗？谢谢哈"),
    # a procedure on the asker's things is cacheable however it is introduced
    ("How do I cancel my subscription?", "Hey there, how do I cancel my subscription? Thanks"),
    ("Is there WiFi on the train?", "Is there Wi Fi on the train?"),
    ("How much is the PS5?", "how much is the ps 5"),
]  # fmt: skip

# ... and look-alikes with another meaning, which must still be refused
LOOK_ALIKES = [
    ("How do I delete my account?", "Hi, how do I deactivate my account? Thanks"),
    ("How do I delete my account?", "how do i delete my acount temporarily"),
    ("What payment methods do you accept?", "Quick question: what payment methods do you refuse?"),
    ("How does the tax affect prices?", "how does the tax effect prices"),
    ("Can I bring a power bank in my checked luggage?",
     "Quick question if you don't mind: can't I bring a power bank in my checked luggage?"),
    ("How much is the PS5?", "how much is the ps 4"),
    ("高铁上有WiFi吗？", "那个，请问飞机上有WiFi吗？谢谢哈"),
    # a word one letter from another is another word until the traffic says otherwise: no
    # dictionary decides that "windos" meant "Windows" (nor that "lanoxin" meant "lanolin")
    ("How do I reset my Windows password?", "how do i reset my windos pasword"),
    ("Is lanolin safe during pregnancy?", "is lanoxin safe during pregnancy?"),
]  # fmt: skip


@pytest.mark.parametrize(("stored", "asked"), REWORDED)
def test_rewordings_users_type_are_served(cache: Cache, stored: str, asked: str) -> None:
    _store(cache, stored, "the answer")
    hit = cache.lookup(cache.request(asked))
    assert hit is not None and hit.tier == "semantic", asked


@pytest.mark.parametrize(("stored", "asked"), LOOK_ALIKES)
def test_reworded_look_alikes_are_refused(cache: Cache, stored: str, asked: str) -> None:
    _store(cache, stored, "the answer")
    assert cache.lookup(cache.request(asked)) is None, asked


def test_tenants_never_see_each_other(cache: Cache) -> None:
    _store(cache, "How do I upgrade my plan?", "alice: Pro", tenant="alice")
    assert cache.lookup(cache.request("How can I upgrade my plan?", tenant="bob")) is None
    assert cache.lookup(cache.request("How can I upgrade my plan?", tenant="alice")) is not None
    # tenants that differ only in characters a model cannot encode stay apart
    _store(cache, "How do I upgrade my plan?", "surrogate tenant", tenant="t\ud800")
    hit = cache.lookup(cache.request("How can I upgrade my plan?", tenant="t\udbff"))
    assert hit is None


def test_follow_ups_match_only_within_their_conversation(cache: Cache) -> None:
    chat_a = [("user", "Tell me about the Pro plan"), ("assistant", "It costs $20.")]
    chat_b = [("user", "Tell me about the Basic plan"), ("assistant", "It costs $5.")]
    _store(cache, "Does it include support?", "Pro includes support.", history=chat_a)
    assert cache.lookup(cache.request("Is support included?", history=chat_b)) is None
    assert cache.lookup(cache.request("Is support included?")) is None  # first turn
    hit = cache.lookup(cache.request("Is support included?", history=chat_a))
    assert hit is not None and hit.text == "Pro includes support."


def test_other_llm_and_other_system_prompt_do_not_match(cache: Cache) -> None:
    _store(cache, "How do I reset my password?", "A", llm_key="model-a", system="Be brief.")
    question = "How can I reset my password?"
    other_llm = cache.request(question, llm_key="model-b", system="Be brief.")
    other_system = cache.request(question, llm_key="model-a", system="Be verbose.")
    assert cache.lookup(other_llm) is None and cache.lookup(other_system) is None
    assert cache.lookup(cache.request(question, llm_key="model-a", system="Be brief.")) is not None


def test_time_dependent_questions_are_not_cached_by_default(cache: Cache) -> None:
    assert not cache.update(cache.request("What's the weather in Paris today?"), "Sunny.")
    assert cache.lookup(cache.request("What's the weather in Paris today?")) is None
    assert cache.stats()["exact"]["skipped_time_dependent"] == 2


def test_time_dependent_questions_skip_the_semantic_tier(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "t.sqlite3", exact=Exact(cache_time_dependent=True)) as cache:
        _store(cache, "What's the weather in Paris today?", "Sunny.")
        assert cache.lookup(cache.request("What is the weather in Paris today?")) is None
        assert cache.stats()["semantic"]["skipped_uncacheable"] >= 1
        # the exact tier serves an exact repeat, when asked to cache such questions
        assert cache.lookup(cache.request("what's the weather in Paris today")) is not None


def test_a_custom_cacheability_classifier_replaces_the_rules(tmp_path: Path) -> None:
    def never_about_prices(question: str) -> bool:
        return "price" not in question.lower()

    with Cache(path=tmp_path / "c.sqlite3", cacheable=never_about_prices) as cache:
        assert not cache.update(cache.request("What is the price of the Pro plan?"), "$20")
        assert cache.lookup(cache.request("What is the price of the Pro plan?")) is None
        _store(cache, "What's the weather like in Paris today?", "Sunny")  # the rules' "today"
        assert cache.lookup(cache.request("What is the weather like in Paris today?")) is not None


def test_semantic_entries_survive_a_restart(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "l2.sqlite3", namespace="sem") as first:
        _store(first, "How do I export my data to CSV?", "Settings > Export.")
    with Cache(path=tmp_path / "l2.sqlite3", namespace="sem") as second:
        hit = second.lookup(second.request("How can I export my data to CSV?"))
        assert hit is not None and hit.tier == "semantic"


def test_stale_responses_are_not_served_and_their_points_go(cache: Cache) -> None:
    _store(cache, "How do I export my data to CSV?", "Settings > Export.")
    assert cache.semantic is not None
    paraphrase = cache.request("How can I export my data to CSV?")
    assert cache.lookup(paraphrase) is not None
    cache.exact.l1.clear()
    points_before = cache.semantic.index.count()
    cache.bump_kb_version()
    assert cache.lookup(paraphrase) is None
    deadline = time.monotonic() + 10  # hidden at once, deleted by the replica's next sync
    while cache.semantic.index.count() != points_before - 1:
        assert time.monotonic() < deadline, "the stale point stayed"
        time.sleep(0.05)


def test_exact_only_and_negative_entries_are_not_indexed(cache: Cache) -> None:
    assert cache.update(cache.request("Call the hours tool for Paris"), "{tool}", semantic=False)
    assert cache.update(cache.request("Something with no answer"), "", negative=True)
    assert cache.semantic is not None and cache.semantic.index.count() == 0
    assert cache.lookup(cache.request("Call the hours tool for Paris please")) is None


def test_feedback_removes_a_wrong_semantic_match(cache: Cache) -> None:
    _store(cache, "How do I delete a project?", "Project settings > Delete.")
    hit = cache.lookup(cache.request("How can I delete a project?"))
    assert hit is not None and hit.tier == "semantic"
    cache.feedback(hit.entry_id, correct=False)
    assert cache.lookup(cache.request("How can I delete a project?")) is None
    # the exact entry still answers its own question
    assert cache.lookup(cache.request("How do I delete a project?")) is not None
    audit = cache.semantic.audit  # type: ignore[union-attr]
    assert audit is not None
    rows = audit.recent(5, "feedback")
    assert rows[0]["correct"] == 0 and rows[0]["cached_question"] == "How do I delete a project?"
    with pytest.raises(ValueError):
        cache.feedback("", correct=True)


def test_audit_records_hits_and_refusals(cache: Cache) -> None:
    _store(cache, "How do I enable dark mode?", "Settings > Display.")
    cache.lookup(cache.request("How can I enable dark mode?"))
    cache.lookup(cache.request("How do I disable dark mode?"))
    rows = cache.semantic.audit.recent(2)  # type: ignore[union-attr]
    refused, hit = rows[0], rows[1]
    assert hit["hit"] and hit["score"] > 0.9 and "polarity.negation" in hit["guards"]
    assert refused["hit"] is None and "polarity.antonym" in refused["rejected"].values()
    assert refused["question"] == "How do I disable dark mode?"  # in full: tricache review
    assert refused["candidates"][0]["question"] == "How do I enable dark mode?"


def test_category_raises_the_bar_for_high_risk_domains(cache: Cache) -> None:
    assert cache.semantic is not None
    base = cache.semantic.threshold
    assert cache.semantic.threshold_for("medical") > base > cache.semantic.threshold_for("chitchat")


def test_a_reranker_can_refuse_candidates(tmp_path: Path) -> None:
    calls: list[tuple[str, Sequence[str]]] = []

    def strict(query: str, questions: Sequence[str]) -> list[float]:
        calls.append((query, questions))
        return [0.0 for _ in questions]

    with Cache(path=tmp_path / "r.sqlite3", semantic=Semantic(reranker=strict)) as cache:
        _store(cache, "How do I reset my password?", "A")
        assert cache.lookup(cache.request("How can I reset my password?")) is None
        assert calls and calls[0][1] == ["How do I reset my password?"]
        assert cache.stats()["semantic"]["guard_rerank"] == 1


def test_the_reranker_threshold_is_the_callers(tmp_path: Path) -> None:
    def lukewarm(query: str, questions: Sequence[str]) -> list[float]:
        return [0.3 for _ in questions]

    for rerank_threshold, served in ((0.5, False), (0.2, True)):
        path = tmp_path / f"r{rerank_threshold}.sqlite3"
        semantic = Semantic(reranker=lukewarm, rerank_threshold=rerank_threshold)
        with Cache(path=path, semantic=semantic) as cache:
            _store(cache, "How do I reset my password?", "A")
            hit = cache.lookup(cache.request("How can I reset my password?"))
            assert (hit is not None) is served


@pytest.mark.parametrize("query", ["", "   ", "\ud800 reset password", "a" * 1_000_000, "\x00\x07"])
def test_bad_input_is_a_safe_miss(cache: Cache, query: str) -> None:
    _store(cache, "How do I reset my password?", "A")
    request = cache.request(query)
    assert cache.lookup(request) is None
    assert cache.update(request, "answer") is True
    assert cache.stats().get("cache", {}) == {}  # no error was swallowed on the way


def test_a_second_process_has_the_semantic_tier_too(tmp_path: Path) -> None:
    with Cache(path=tmp_path / "l2.sqlite3") as holder:
        _store(holder, "How do I reset my password?", "A")  # the shard is now open here
        results = spawn.Queue()
        child = spawn.Process(
            target=open_cache_and_report, args=(str(tmp_path / "l2.sqlite3"), results)
        )
        child.start()
        report = results.get(timeout=120)
        child.join(60)
    assert child.exitcode == 0
    assert report["semantic"] is True  # its own replica of the points in the shared SQLite
    assert report["exact_hit"] is True
    assert report["semantic_hit"] is True  # the other process's entry, found by a paraphrase


def test_qdrant_server_path_with_the_same_payload_and_filters(tmp_path: Path) -> None:
    from qdrant_client import QdrantClient

    client = QdrantClient(location=":memory:")  # qdrant-client's own engine, same API as a server
    with Cache(
        path=tmp_path / "l2.sqlite3", semantic=Semantic(index=Qdrant(client=client))
    ) as cache:
        _store(cache, "How do I reset my password?", "A", tenant="x")
        hit = cache.lookup(cache.request("How can I reset my password?", tenant="x"))
        assert hit is not None and hit.level == "qdrant"
        assert cache.lookup(cache.request("How can I reset my password?", tenant="y")) is None
        assert cache.lookup(cache.request("How do I not reset my password?", tenant="x")) is None
        points = client.scroll(cache.semantic.index.collection, limit=10)[0]  # type: ignore[union-attr]
        payload = points[0].payload
        expected = "namespace tenant llm_key ctx question ref kb_version watermark expires_at"
        assert set(payload) >= {*expected.split(), "verified", "lang"}


def test_unreachable_qdrant_server_leaves_the_exact_tier_working(tmp_path: Path) -> None:
    from conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with Cache(path=tmp_path / "l2.sqlite3", semantic=Semantic(index=Qdrant(url))) as cache:
        request = cache.request("How do I reset my password?")
        assert cache.update(request, "A")  # exact tier stored it; the semantic write is skipped
        assert cache.lookup(cache.request("How can I reset my password?")) is None
        assert cache.lookup(request).tier == "exact"  # type: ignore[union-attr]
        assert cache.semantic is None  # retried later, not now
        assert cache.stats()["semantic"]["open_errors"] == 1


def test_embedded_index_shares_one_shard_per_process(tmp_path: Path) -> None:
    a = EdgeIndex(tmp_path / "v", 4)
    b = EdgeIndex(tmp_path / "v", 4)  # a second cache in the same process
    a.upsert("00000000-0000-0000-0000-000000000001", np.ones(4, np.float32), {"x": "1"})
    assert b.count() == 1
    a.close()
    assert b.count() == 1  # still open for b
    b.close()


def test_embedder_lru_embeds_each_text_once() -> None:
    class Counting:
        name, dim = "counting", 3

        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            self.calls.append(list(texts))
            return np.ones((len(texts), 3), np.float32)

    inner = Counting()
    cached = CachedEmbedder(inner, maxsize=2)
    cached.embed(["a", "b", "a"])
    cached.embed(["a", "b"])
    assert inner.calls == [["a", "b"]]
    cached.embed(["c"])  # evicts "a"
    cached.embed(["a"])
    assert inner.calls[-1] == ["a"]


@pytest.mark.parametrize("name", ["use-m", "e5-small-q4", "all-MiniLM-L6-v2"])
def test_packaged_embedders_load_offline_and_rank_paraphrases_first(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = get_embedder(name)
    vectors = embedder.embed(
        ["How do I reset my password?", "How can I reset my password?", "Best pizza in Rome"]
    )
    assert vectors.shape == (3, embedder.dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_unknown_embedder_falls_back_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    from tricache.semantic.tier import UNCALIBRATED_THRESHOLD, SemanticTier

    class Plain:
        name, dim = "my-model", 3

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.ones((len(texts), 3), np.float32)

    with caplog.at_level(logging.WARNING):
        tier = SemanticTier(index=None, embedder=Plain())  # type: ignore[arg-type]
    assert tier.threshold == UNCALIBRATED_THRESHOLD and "calibrate" in caplog.text


def test_a_lone_surrogate_in_a_prompt_never_stops_the_audit_log(cache: Cache) -> None:
    """A prompt may carry a lone surrogate, which SQLite cannot hold as text: its row is
    written with U+FFFD in its place, and the decisions after it are still recorded."""
    _store(cache, "How do I enable dark mode?", "Settings > Display.")
    assert cache.lookup(cache.request("How do I enable dark mode?\ud800")) is None
    assert cache.lookup(cache.request("How can I enable dark mode?")) is not None
    rows = cache.semantic.audit.recent(5)  # type: ignore[union-attr]
    assert rows[0]["question"] == "How can I enable dark mode?" and rows[0]["hit"]
