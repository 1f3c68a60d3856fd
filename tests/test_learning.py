"""Decisions learned from the app's own traffic (``Semantic(learn=Learn(...))``).

The bound itself on labels made up to the point; labels shared through real SQLite and Redis
logs; the tier serving what the labels allow and nothing the guards refuse; floods and
dilution that try to buy a poor threshold; and, after a warm-up of real traffic (CLINC150
queries, a stand-in model answering each with its intent's answer), the look-alike suites.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import redis

from tricache import Cache, Learn, Semantic
from tricache.key.asked import ask
from tricache.semantic.decision import MIN_ANSWERS
from tricache.semantic.learning import (
    Label,
    Learning,
    decode_alias,
    decode_lookups,
    encode_lookups,
    entry_threshold,
    learned_threshold,
    same_answer,
)
from tricache.stores.redis import RedisStore
from tricache.stores.sqlite import SQLiteStore
from tricache.tools.evaluate import read_pairs

from conftest import REDIS_URL, SHARED_DATA

STATIC = 0.92
PROBES = Path(__file__).resolve().parents[1] / "benchmarks" / "probes"


def _labels(n: int, wrong_every: int, low: float = 0.80, answers: int = 40) -> list[Label]:
    """``n`` labels of one pool spread over [low, STATIC), one in ``wrong_every`` wrong."""
    rng = random.Random(n)
    return [
        Label("pool", uuid.uuid4().hex, 1.0, round(rng.uniform(low, STATIC - 0.001), 3),
              i % wrong_every != 0, 1.0, f"answer {i % answers}")
        for i in range(n)
    ]  # fmt: skip


def _bound(labels: list[Label], lookups: float, error_bound: float = 0.01) -> float | None:
    return learned_threshold(labels, error_bound=error_bound, floor=0.77, static=STATIC,
                             lookups=lookups, hits={})  # fmt: skip


def test_labels_that_say_near_misses_were_right_lower_the_threshold() -> None:
    labels = _labels(300, wrong_every=50)  # 2 % wrong among candidates from 0.80 to 0.92
    learned = _bound(labels, lookups=3000)
    assert learned is not None and 0.79 <= learned < STATIC  # down to the lowest label


def test_without_enough_evidence_the_decision_is_the_calibrated_one() -> None:
    assert _bound(_labels(10, wrong_every=50), lookups=3000) is None  # too few labels
    assert _bound(_labels(300, wrong_every=3), lookups=3000) is None  # a third wrong
    assert _bound([], lookups=3000) is None


def test_a_flood_of_one_answer_teaches_nothing() -> None:
    """Near-duplicate questions that all get one fixed answer ("I can't help with that"):
    hundreds of 'right' labels, from one answer — fewer than MIN_ANSWERS."""
    flood = _labels(1000, wrong_every=10**9, answers=1)
    assert _bound(flood, lookups=10_000) is None
    few = _labels(1000, wrong_every=10**9, answers=MIN_ANSWERS - 1)
    assert _bound(few, lookups=10_000) is None


def test_diluting_the_lookups_cannot_buy_a_poor_threshold() -> None:
    """A flood of other lookups shrinks the share of wrong answers, not the share of wrong
    candidates among those added: 30 % wrong is refused however many lookups there are."""
    poor = _labels(400, wrong_every=3)
    assert _bound(poor, lookups=10**7) is None


def test_an_entry_that_got_another_answer_is_not_served_below_that_score() -> None:
    wrong = Label("pool", "p1", 7.0, 0.95, False, 1.0, "a")
    assert entry_threshold([wrong], 7.0, base=0.85) > 0.95
    assert entry_threshold([wrong], 8.0, base=0.85) == 0.85  # another version
    right = [Label("pool", "p1", 7.0, s, True, 1.0, "a") for s in (0.81, 0.84, 0.86)]
    assert entry_threshold(right, 7.0, base=0.92) == 0.92  # right labels never lower it


def test_answers_are_the_same_only_conservatively() -> None:
    assert same_answer("Open Settings, then Security.", "open settings, then security")
    assert not same_answer("Refunds take 14 days.", "Refunds take 30 days.")
    assert not same_answer("It is safe during pregnancy.", "It is not safe during pregnancy.")


CORE = (
    "Use two tildes on each side of the words to strike them through. GitHub renders them as"
    " deleted text in issues, pull requests and comments, and in files it shows."
)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (f"Sure! Here's what you can do:\n\n{CORE}\n\nHope this helps!", f"Great question. {CORE}"),
        (CORE, f"{CORE} Let me know if you have any other questions."),
        (f"Here is how: {CORE}", f"Here's how: {CORE} Good luck!"),
        (f"No problem! {CORE}", f"Sure, {CORE} This is a common question. Hope this helps!"),
        (
            "没问题。在设置里打开安全选项，然后重启手机即可。",
            "您好，在设置里打开安全选项，然后重启手机即可。",
        ),
        (
            "当然可以！在设置里打开安全选项，然后重启手机即可。",
            "在设置里打开安全选项，然后重启手机即可。希望对你有帮助！",
        ),
    ],
)
def test_one_answer_in_other_courtesy_wrappers_is_the_same(a: str, b: str) -> None:
    """An LLM words the same answer with another opening or closing each time (issue #39)."""
    assert same_answer(a, b) and same_answer(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (f"Yes. {CORE}", f"No. {CORE}"),  # a wrapper that answers
        (f"{CORE} It works on iOS only.", CORE),  # a name
        (f"{CORE} Do it 3 times.", f"{CORE} Do it once."),  # a number
        (f"{CORE} This is not supported on mobile.", CORE),  # a negation
        (f"Run `git push --force` first. {CORE}", CORE),  # a literal
        ("Press the left button, then hold it down for a while.",
         "Press the right button, then hold it down for a while."),  # inside a sentence
        ("Open Settings. Then tap Security. Then restart the phone.",
         "Open Settings. Then tap Privacy. Then restart the phone."),  # in the middle
        ("在设置里打开安全选项，然后重启手机即可。", "在设置里关闭安全选项，然后重启手机即可。"),
        (f"{CORE} " + "Then do this and that and more of it, and after all of that, " * 3, CORE),
    ],
)  # fmt: skip
def test_a_wrapper_that_says_something_is_no_wrapper(a: str, b: str) -> None:
    assert not same_answer(a, b) and not same_answer(b, a)


def test_log_records_refuse_anything_else() -> None:
    label = Label("pool", "point", 1.5, 0.9, True, 20.0, "digest")
    assert Label.decode(label.encode()) == label
    for junk in (b"", b"\x00garbage", b"\x93\x01\x02\x03", encode_lookups("p", 1, {}) + b"x"):
        assert Label.decode(junk) is None and decode_alias(junk) is None
    assert decode_lookups(encode_lookups("p", 3, {90: 2})) == ("p", 3, {"alone": {90: 2}})
    by_class = {"agree+soft": Counter({88: 1}), "alone": Counter({95: 4})}
    assert decode_lookups(encode_lookups("p", 5, by_class)) == ("p", 5, by_class)
    old = msgpack.packb([2, "p", 3, {90: 2}])  # the first format: hits of class "alone"
    assert decode_lookups(old) == ("p", 3, {"alone": {90: 2}})
    assert decode_lookups(msgpack.packb([3, "p", 3, {"nonsense": {90: 2}}])) is None
    old_label = msgpack.packb([1, "pool", "point", 1.5, 0.9, True, 20.0, "digest"])
    assert Label.decode(old_label) == Label("pool", "point", 1.5, 0.9, True, 20.0, "digest")
    assert (
        Label.decode(Label("p", "x", 1.0, 0.9, True, 1.0, "d", "agree+soft").encode()) is not None
    )
    assert Label.decode(msgpack.packb([2, "p", "x", 1.0, 0.9, True, 1.0, "d", "made-up"])) is None


# the log, in real stores --------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLiteStore | RedisStore]:
    made: SQLiteStore | RedisStore
    if request.param == "redis":
        redis.Redis.from_url(REDIS_URL).ping()
        made = RedisStore(REDIS_URL, timeout=1.0)
    else:
        made = SQLiteStore(tmp_path / "labels.sqlite3")
    yield made
    made.close()


def test_every_process_reads_the_labels_and_a_clear_starts_over(
    store: SQLiteStore | RedisStore, namespace: str
) -> None:
    first = store.labels_since(namespace, "")
    assert first.labels == []
    store.add_labels(namespace, [b"one", b"two"])
    batch = store.labels_since(namespace, first.cursor)
    assert batch.labels == [b"one", b"two"] and batch.reset  # a log begun after the cursor
    store.add_labels(namespace, [b"three"])
    later = store.labels_since(namespace, batch.cursor)
    assert later.labels == [b"three"] and not later.reset
    store.clear(namespace)
    store.add_labels(namespace, [b"four"])
    after = store.labels_since(namespace, later.cursor)
    assert after.reset and after.labels == [b"four"]  # cleared: whoever reads starts over
    store.clear(namespace)


# through the cache -----------------------------------------------------------------------------
def _cache(path: Path, **learn: float) -> Cache:
    cache = Cache(path=path, faq=False, semantic=Semantic(audit=False, learn=Learn(**learn)))
    assert cache.semantic is not None and cache.semantic.learning is not None
    cache.semantic.learning.rng = random.Random(0)  # which hits are explored: every run alike
    return cache


def _teach(cache: Cache, pool: str, labels: list[Label]) -> Learning:
    learning = cache.semantic.learning  # type: ignore[union-attr]
    assert learning is not None
    learning.add([Label(pool, x.point, x.version, x.score, x.same, 1.0, x.answer) for x in labels])
    learning.drain()
    return learning


def test_the_labels_of_one_worker_teach_the_others(tmp_path: Path) -> None:
    """Two caches on one SQLite file: labels recorded by one lower the threshold of both
    (here 300 labels, 2 % wrong, and 3,000 lookups logged)."""
    path = tmp_path / "shared.sqlite3"
    with _cache(path) as writer, _cache(path) as reader:
        request = writer.request("How do I reset my password?")
        pool = writer.semantic.pool(ask(request, ""))  # type: ignore[union-attr]
        learning = _teach(writer, pool, _labels(300, wrong_every=50))
        learning.store.add_labels("default", [encode_lookups(pool, 3000, {})])  # type: ignore[union-attr]
        learning.drain()
        other = reader.semantic.learning  # type: ignore[union-attr]
        assert other is not None
        other.drain()
        assert other.threshold(pool, STATIC) < STATIC
        assert learning.threshold(pool, STATIC) == other.threshold(pool, STATIC)
        writer.clear()
        other.drain()
        assert other.threshold(pool, STATIC) == STATIC  # cleared: labels gone everywhere


def test_a_learned_threshold_serves_and_says_so_and_the_guards_still_refuse(
    tmp_path: Path,
) -> None:
    with _cache(tmp_path / "c.sqlite3", explore=0.001) as cache:
        cached = cache.request("How do I reset my password?")
        assert cache.update(cached, "Open Settings.")
        pool = cache.semantic.pool(ask(cached, ""))  # type: ignore[union-attr]
        learning = _teach(cache, pool, _labels(300, wrong_every=50))
        learning.store.add_labels("default", [encode_lookups(pool, 3000, {})])  # type: ignore[union-attr]
        learning.drain()
        learned = learning.threshold(pool, STATIC)
        assert learned < STATIC
        asked = cache.request("Resetting my password: how?")  # 0.90 with use-m
        tier = cache.semantic
        assert tier is not None
        score = float(tier.embedder.embed(["How do I reset my password?"])[0]
                      @ tier.embedder.embed(["Resetting my password: how?"])[0])  # fmt: skip
        assert learned <= score < STATIC, (learned, score)
        hit = cache.lookup(asked)
        assert hit is not None and hit.text == "Open Settings."
        assert cache.stats()["semantic"]["hits_learned"] == 1
        assert cache.lookup(cache.request("How do I reset his password?")) is None  # relation


def test_a_miss_is_labelled_by_the_llm_answer_and_a_hit_never(tmp_path: Path) -> None:
    with _cache(tmp_path / "c.sqlite3", explore=0.001) as cache:
        learning = cache.semantic.learning  # type: ignore[union-attr]
        assert learning is not None
        assert cache.update(cache.request("How do I reset my password?"), "Open Settings.")
        near = cache.request("I need to reset my password")  # 0.91: under the threshold
        assert cache.lookup(near) is None  # under the threshold: a miss with a candidate
        cache.update(near, "Open Settings.")  # the LLM gave the cached answer: a label
        learning.drain()
        labels = [x for pool in learning.evidence.pools() for x in learning.evidence.labels(pool)]
        assert len(labels) == 1 and labels[0].same
        hit_request = cache.request("How do I reset my password?")
        assert cache.lookup(hit_request) is not None
        cache.update(hit_request, "something else")  # after a hit: no label from it
        learning.drain()
        assert sum(len(learning.evidence.labels(p)) for p in learning.evidence.pools()) == 1


def test_exploration_asks_the_llm_and_labels_the_hit(tmp_path: Path) -> None:
    with _cache(tmp_path / "c.sqlite3", explore=0.5) as cache:
        learning = cache.semantic.learning  # type: ignore[union-attr]
        assert learning is not None
        learning.rng = random.Random(1)
        cache.update(cache.request("How do I reset my password?"), "Open Settings.")
        asked = [cache.request(f"How do I reset my password? {'Thanks! ' * i}") for i in range(8)]
        served = 0
        for request in asked:
            if cache.lookup(request) is None:
                cache.update(request, "Open Settings.")
            else:
                served += 1
        learning.drain()
        explored = cache.stats()["semantic"].get("explorations", 0)
        assert explored >= 1 and served >= 1 and explored + served == len(asked)
        weights = [x.weight for p in learning.evidence.pools() for x in learning.evidence.labels(p)]
        assert weights and all(w == 2.0 for w in weights)  # 1 / the exploration rate


def test_tenants_learn_apart(tmp_path: Path) -> None:
    with _cache(tmp_path / "c.sqlite3") as cache:
        tier = cache.semantic
        assert tier is not None
        alice = tier.pool(ask(cache.request("q", tenant="alice"), ""))
        bob = tier.pool(ask(cache.request("q", tenant="bob"), ""))
        assert alice != bob
        learning = _teach(cache, alice, _labels(300, wrong_every=50))
        learning.store.add_labels("default", [encode_lookups(alice, 3000, {})])  # type: ignore[union-attr]
        learning.drain()
        assert learning.threshold(alice, STATIC) < STATIC
        assert learning.threshold(bob, STATIC) == STATIC


# after a warm-up of real traffic, the look-alike suites ---------------------------------------
@pytest.mark.slow  # a stream of 3,000 queries, then the probe suites
def test_after_a_warm_up_of_traffic_no_look_alike_is_served(tmp_path: Path) -> None:
    """3,000 CLINC150 queries (a stand-in model answers each with its intent's answer) teach
    the pool a threshold under the calibrated one; then every look-alike pair of the probe
    suites, in that very pool, never gets the answer of the question it looks like."""
    path = SHARED_DATA / "clinc150" / "clinc150_test.tsv"
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    rows = path.read_text("utf-8").splitlines()[1:]
    traffic = [r.split("\t") for r in rows]
    random.Random(0).shuffle(traffic)
    with _cache(tmp_path / "warm.sqlite3") as cache:
        learning = cache.semantic.learning  # type: ignore[union-attr]
        assert learning is not None
        for _, text, intent, *_ in traffic[:3000]:
            request = cache.request(text)
            if cache.lookup(request) is None:
                answer = f"[{text}] is out of scope." if intent == "oos" else f"About {intent}."
                cache.update(request, answer)
                learning.drain()
        pool = cache.semantic.pool(ask(cache.request("q"), ""))  # type: ignore[union-attr]
        assert learning.thresholds(pool, STATIC)  # the traffic moved a class's threshold
        pairs = [
            p
            for name in ("lookalikes_evidence", "form_variants", "form_redteam", "reworded_pairs")
            for p in read_pairs(PROBES / f"{name}.tsv")
            if p.label == 0
        ]
        for i, pair in enumerate(pairs):
            cache.update(cache.request(pair.q1), f"the answer to look-alike {i}")
        wrong = [
            (pair.q1, pair.q2)
            for i, pair in enumerate(pairs)
            if (hit := cache.lookup(cache.request(pair.q2))) is not None
            and hit.text == f"the answer to look-alike {i}"
        ]
        assert len(pairs) >= 400 and wrong == []
        # paraphrase clusters of a blind round (issue #35): two paraphrases stored with one
        # answer, their neighbours agree; a look-alike of both is asked (a naive agreement
        # served 18 of 131 after this very warm-up)
        clusters = (PROBES / "clusters" / "heldout12_issue35.tsv").read_text("utf-8")
        rows = [line.split("\t") for line in clusters.splitlines()[1:]]
        served = []
        for i, (first, second, asked, label, kind) in enumerate(rows):
            if label != "0":
                continue
            for question in (first, second):
                request = cache.request(question, llm_key=f"cluster {i}")
                if cache.lookup(request) is None:
                    cache.update(request, f"the answer of cluster {i}")
            hit = cache.lookup(cache.request(asked, llm_key=f"cluster {i}"))
            if hit is not None and hit.text == f"the answer of cluster {i}":
                served.append((kind, asked))
        assert len(rows) > 190 and len(served) <= 1, served  # (1 % of the 131)


# the FAQ learns the same way ------------------------------------------------------------------
def test_a_question_the_llm_answers_with_a_curated_answer_gets_it_next_time(tmp_path: Path) -> None:
    """ "怎么开发票" scores 0.77 against the curated "如何开具发票？" (under the FAQ's 0.80): a
    miss.  The LLM's answer is the curated one: the question becomes a verified paraphrase of
    that entry, for its tenant — served next time under any model, never to another tenant."""
    from tricache import Faq
    from tricache.faq.store import FaqEntry

    with Cache(
        path=tmp_path / "f.sqlite3",
        semantic=Semantic(audit=False),
        faq=Faq(learn=Learn(explore=0.001)),
    ) as cache:
        cache.add_faq([FaqEntry("如何开具发票？", "在订单页点击申请发票。")])
        asked = cache.request("怎么开发票", tenant="shop", llm_key="model-a")
        assert cache.lookup(asked) is None
        cache.update(asked, "在订单页点击申请发票。")  # the LLM said what the FAQ says
        cache.semantic.learning.drain()  # type: ignore[union-attr]
        again = cache.request("怎么开发票", tenant="shop", llm_key="model-b")
        hit = cache.lookup(again)
        assert hit is not None and hit.tier == "faq" and hit.text == "在订单页点击申请发票。"
        assert cache.stats()["faq"]["hits_verified"] == 1
        elsewhere = cache.request("怎么开发票", tenant="other", llm_key="model-b")
        assert cache.lookup(elsewhere) is None  # another tenant learns for itself
        wrong = cache.request("怎么开收据", tenant="shop", llm_key="model-c")
        assert cache.lookup(wrong) is None  # a look-alike of the learned question is not


def test_the_audit_says_what_served_and_plots_the_thresholds(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tricache.tools.cli import app

    with Cache(
        path=tmp_path / "a.sqlite3", faq=False, semantic=Semantic(learn=Learn(explore=0.001))
    ) as cache:
        cache.update(cache.request("How do I reset my password?"), "Open Settings.")
        assert cache.lookup(cache.request("How can I reset my password?")) is not None
        audit_log = cache.semantic.audit  # type: ignore[union-attr]
        assert audit_log is not None
        audit_log.flush()
        log_path = audit_log.path
    result = CliRunner().invoke(
        app, ["audit", "--path", str(log_path), "--plot", str(tmp_path / "t.png")]
    )
    assert result.exit_code == 0, result.output
    assert '"served_by": "threshold"' in result.output and '"threshold": 0.92' in result.output
    assert (tmp_path / "t.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "options",
    [{"error_bound": 0}, {"error_bound": 1.5}, {"explore": 0}, {"floor": 2}, {"judge": 3}],
)
def test_bad_settings_fail_when_the_cache_is_made(options: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        Learn(**options)  # type: ignore[arg-type]
