"""Issue #39: answer groups and the neighbours' agreement, in the default decision.

The questions the LLM answered alike form a group (the ``answer`` of their points); a candidate
that stored neighbours of its group agree with may be served under the calibrated threshold,
the hard rules still in front.  Every test drives a real ``Cache`` (SQLite, the packaged
embedder) the way an app does: a lookup, the model's answer stored on a miss."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tricache import Cache, Hit, Semantic
from tricache.tools.evaluate import read_pairs

from conftest import SHARED_DATA

PROBES = Path(__file__).resolve().parents[1] / "benchmarks" / "probes"
CHARGE = "Why was I charged a fee when I took cash out of the ATM?"
GROUP = [
    "Why did the ATM withdrawal cost me a fee?",
    "Why is there a fee on my ATM cash withdrawal?",
    "Why was I charged for withdrawing cash at the ATM?",
]
PARAPHRASE = "Why did I get a fee for an ATM withdrawal?"  # a word rule refuses it
FEE_ANSWER = "A fee applies to withdrawals above the monthly free allowance."


def _cache(path: Path, **semantic: object) -> Cache:
    return Cache(path=path, faq=False, semantic=Semantic(audit=False, **semantic))  # type: ignore[arg-type]


def _ask(cache: Cache, question: str, answer: str, **key: str) -> str | None:
    """As an app: the cached answer's tier, or ``None`` after the model's ``answer`` is stored."""
    request = cache.request(question, **key)
    hit = cache.lookup(request)
    if hit is not None:
        return hit.tier
    cache.update(request, answer)
    return None


def test_an_answer_worded_differently_joins_its_neighbours_group(tmp_path: Path) -> None:
    """A miss answered with the same content as its nearest candidate's answer joins that
    candidate's group; another answer starts a group of its own; a refusal joins none."""
    with _cache(tmp_path / "g.sqlite3") as cache:
        _ask(cache, CHARGE, FEE_ANSWER)
        _ask(cache, GROUP[0], FEE_ANSWER.replace("applies to", "is charged on"))
        _ask(cache, GROUP[1], "Your account is overdrawn.")
        _ask(cache, GROUP[2], "I'm sorry, I can't help with that.")
        points = {p.payload["question"]: p.payload["answer"]
                  for p in cache.semantic.index.find({}, 50)}  # type: ignore[union-attr]  # fmt: skip
        assert points[GROUP[0]] == points[CHARGE]
        assert points[GROUP[1]] != points[CHARGE]
        assert points.get(GROUP[2], "") != points[CHARGE]


def test_one_answer_in_other_courtesy_wrappers_joins_the_group(tmp_path: Path) -> None:
    """An LLM wraps one answer in another opening or closing each time: the answers join one
    group; the same wrappers around an answer with another number do not."""
    long_answer = (FEE_ANSWER + " The allowance is shown in the app under Account, Limits, and"
                   " resets on the first day of each month.")  # fmt: skip
    with _cache(tmp_path / "w.sqlite3") as cache:
        _ask(cache, CHARGE, "Sure! Here's what you need to know: " + long_answer)
        _ask(cache, GROUP[0], long_answer + " Hope this helps!")
        _ask(cache, GROUP[1], "Great question. " + long_answer.replace("first", "15th"))
        points = {p.payload["question"]: p.payload["answer"]
                  for p in cache.semantic.index.find({}, 50)}  # type: ignore[union-attr]  # fmt: skip
        assert points[GROUP[0]] == points[CHARGE]
        assert points[GROUP[1]] != points[CHARGE]


def test_agreeing_neighbours_serve_a_paraphrase_the_rules_alone_refuse(tmp_path: Path) -> None:
    """Four stored paraphrases got one answer; a fifth, which a word rule refuses against
    each alone, is served with agreement and not without it."""
    served = {}
    for on in (True, False):
        with _cache(tmp_path / f"{on}.sqlite3", agreement=on) as cache:
            for question in [CHARGE, *GROUP]:
                _ask(cache, question, FEE_ANSWER)
            hit = cache.lookup(cache.request(PARAPHRASE))
            served[on] = hit is not None and hit.text == FEE_ANSWER
    assert served == {True: True, False: False}


# Questions a model answers with a bare yes or no: alike answers show nothing of the questions
VERDICTS = {
    "Is a whale a mammal?": "Yes.", "Is a dolphin a mammal?": "Yes.",
    "Is a bat a mammal?": "Yes.", "Is a shark a fish?": "Yes.", "Is a salmon a fish?": "Yes.",
    "Can I bring a laptop in my carry-on?": "Yes.",
    "Can I bring a power bank in my carry-on?": "Yes.",
    "Can I bring a laptop in my checked luggage?": "Yes.",
    "Can I bring a camera in my checked luggage?": "Yes.",
    "鲸鱼是哺乳动物吗": "是。", "海豚是哺乳动物吗": "是。", "蝙蝠是哺乳动物吗": "是。",
    "鲨鱼是鱼吗": "是。", "三文鱼是鱼吗": "是。",
}  # fmt: skip
OPPOSITES = {
    "Is a whale a fish?": "No.",
    "Is a dolphin a fish?": "No.",
    "Is a shark a mammal?": "No.",
    "Can I bring a power bank in my checked luggage?": "No.",
    "鲨鱼是哺乳动物吗": "不是。",
}


def test_a_bare_yes_or_no_forms_no_group(tmp_path: Path) -> None:
    """Neighbours that all got "Yes." served "Yes." to a recombination of their words whose
    answer is "No." ("Is a whale a fish?" next to whale/dolphin/bat mammals and shark/salmon
    fish): a bare verdict fits every question of its shape, so it is no group."""
    with _cache(tmp_path / "v.sqlite3") as cache:
        for question, answer in VERDICTS.items():
            _ask(cache, question, answer)
        points = [p.payload.get("answer", "")
                  for p in cache.semantic.index.find({}, 50)]  # type: ignore[union-attr]  # fmt: skip
        assert len(points) == len(VERDICTS) and not any(points)
        served = {q: hit.text for q in OPPOSITES if (hit := cache.lookup(cache.request(q)))}
        assert served == {}


def test_no_group_serves_across_tenants_or_models(tmp_path: Path) -> None:
    """Agreement never crosses a scope: the group of one tenant (or model) lends nothing to
    another's question."""

    def ask(question: str, **scope: str) -> Hit | None:
        request = cache.request(question, **scope)  # type: ignore[arg-type]
        return cache.lookup(request)

    with _cache(tmp_path / "t.sqlite3") as cache:
        for question in [CHARGE, *GROUP]:
            request = cache.request(question, tenant="acme")
            if cache.lookup(request) is None:
                cache.update(request, FEE_ANSWER)
        assert ask(PARAPHRASE, tenant="globex") is None
        assert ask(PARAPHRASE, tenant="acme", llm_key="another-model") is None
        hit = ask(PARAPHRASE, tenant="acme")
        assert hit is not None and hit.text == FEE_ANSWER


@pytest.mark.timeout(900)
def test_after_a_warm_up_no_look_alike_is_served_next_to_agreeing_neighbours(
    tmp_path: Path,
) -> None:
    """3,000 CLINC150 queries warm a pool up (groups of every intent); then every look-alike
    pair of the probe suites, in that very pool, never gets the answer of the question it
    looks like; and look-alikes planted next to two paraphrases answered alike (a blind
    round's clusters, issue #35) are served at most once in the 131."""
    path = SHARED_DATA / "clinc150" / "clinc150_test.tsv"
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    traffic = [r.split("\t") for r in path.read_text("utf-8").splitlines()[1:]]
    random.Random(0).shuffle(traffic)
    with _cache(tmp_path / "warm.sqlite3") as cache:
        hits = 0
        for _, text, intent, *_ in traffic[:3000]:
            answer = f"[{text}] is out of scope." if intent == "oos" else f"About {intent}."
            hits += _ask(cache, text, answer) == "semantic"
        assert hits > 150  # the groups serve (without agreement: about 3 in 100)
        pairs = [p for name in ("lookalikes_evidence", "form_variants", "form_redteam",
                                "reworded_pairs")
                 for p in read_pairs(PROBES / f"{name}.tsv") if p.label == 0]  # fmt: skip
        for i, pair in enumerate(pairs):
            cache.update(cache.request(pair.q1), f"the answer to look-alike {i}")
        wrong = [(pair.q1, pair.q2) for i, pair in enumerate(pairs)
                 if (hit := cache.lookup(cache.request(pair.q2))) is not None
                 and hit.text == f"the answer to look-alike {i}"]  # fmt: skip
        assert len(pairs) >= 400 and wrong == []
        clusters = (PROBES / "clusters" / "heldout12_issue35.tsv").read_text("utf-8")
        served = []
        for i, line in enumerate(clusters.splitlines()[1:]):
            first, second, asked, label, kind = line.split("\t")
            if label != "0":
                continue
            for question in (first, second):
                _ask(cache, question, f"the answer of cluster {i}", llm_key=f"cluster {i}")
            hit = cache.lookup(cache.request(asked, llm_key=f"cluster {i}"))
            if hit is not None and hit.text == f"the answer of cluster {i}":
                served.append((kind, asked))
        assert len(served) <= 1, served


def test_groups_live_in_the_store_for_every_process_and_a_wrong_verdict_shrinks_them(
    tmp_path: Path,
) -> None:
    """The groups one process formed serve in another process started afterwards (they are
    in the points, not in memory); a wrong verdict on an agreement hit takes that match out,
    and the question is not served from it again."""
    path = tmp_path / "shared.sqlite3"
    with _cache(path) as cache:
        for question in [CHARGE, *GROUP]:
            _ask(cache, question, FEE_ANSWER)
    script = (
        "import json, sys\n"
        "from tricache import Cache, Semantic\n"
        f"with Cache(path={str(path)!r}, faq=False, semantic=Semantic(audit=True)) as c:\n"
        f"    hit = c.lookup(c.request({PARAPHRASE!r}))\n"
        "    by = c.semantic.audit.recent(1)[0]['served_by']\n"
        "    print(json.dumps([hit and hit.text, by, hit and hit.entry_id]))\n"
    )
    env = {**os.environ, "TRICACHE_WARM": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=300, check=True).stdout  # fmt: skip
    text, by, entry_id = json.loads(out.strip().splitlines()[-1])
    assert (text, by) == (FEE_ANSWER, "agreement")
    with _cache(path) as cache:
        cache.feedback(entry_id, correct=False)
        hit = cache.lookup(cache.request(PARAPHRASE))
        assert hit is None or hit.entry_id != entry_id


def test_the_review_page_shows_each_candidates_answer_group(tmp_path: Path) -> None:
    """A person reviewing an agreement hit sees how many neighbours agreed and the group each
    candidate's answer belongs to."""
    from starlette.testclient import TestClient

    from tricache.tools.review import review_app

    with Cache(path=tmp_path / "r.sqlite3", faq=False, semantic=Semantic()) as cache:
        for question in [CHARGE, *GROUP]:
            _ask(cache, question, FEE_ANSWER)
        assert cache.lookup(cache.request(PARAPHRASE)) is not None
        audit = cache.semantic.audit  # type: ignore[union-attr]
        decision = audit.recent(1)[0]  # type: ignore[union-attr]
        groups = {c["group"] for c in decision["candidates"]}
        assert len(groups) == 1 and "" not in groups
        page = TestClient(review_app(cache, audit), base_url="http://127.0.0.1").get("/")
        assert page.status_code == 200
        assert "agreeing" in page.text and f"answer group {groups.pop()[:8]}" in page.text
