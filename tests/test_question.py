"""The question inside a templated message: located, and compared only within an identical frame."""

from __future__ import annotations

from pathlib import Path

import pytest

from tricache import Cache
from tricache.key.question import locate

CONTEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower in Paris. It is 330 metres tall and was "
    "designed by the company of Gustave Eiffel. Visitors can take the lift or the stairs."
)
LAYOUTS = [
    "Question: {q}\nContext: {c}\nAnswer:",
    "Use the context below to answer.\n\n{c}\n\nQuestion: {q}",
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
    "context to answer the question.\nQuestion: {q} \nContext: {c} \nAnswer:",
    "Context information is below.\n---------------------\n{c}\n---------------------\n{q}",
    "### Question\n{q}\n\n### Context\n{c}",
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_question_is_found_wherever_the_template_puts_it(layout: str) -> None:
    a = locate(layout.format(q="How tall is the Eiffel Tower?", c=CONTEXT))
    b = locate(layout.format(q="Is the Eiffel Tower tall?", c=CONTEXT))
    c = locate(layout.format(q="How tall is the Eiffel Tower?", c=CONTEXT.replace("330", "300")))
    assert a is not None and b is not None and c is not None
    assert a.question == "How tall is the Eiffel Tower?"
    assert b.question == "Is the Eiffel Tower tall?"
    assert a.frame == b.frame  # same template, same context
    assert a.frame != c.frame  # the context differs: never compared


def test_what_cannot_be_isolated_is_not_located() -> None:
    assert locate("") is None
    assert locate("x" * 3000) is None
    assert locate(f"Context: {CONTEXT}\nAnswer:") is None  # no question line
    assert locate(f"Context: {CONTEXT} Question: How tall is it?") is None  # one line, two parts
    assert locate("def f():\n    return 1") is None  # code
    bare = locate("How tall is the Eiffel Tower?")
    assert bare is not None and bare.frame == ""
    greeted = locate("Hi, quick question: how do I descale a kettle? Thanks!")  # discourse
    assert greeted is not None and greeted.frame == ""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Cache:
    path: Path = tmp_path_factory.mktemp("question") / "c.sqlite3"
    # A module fixture is made before the autouse TRICACHE_WARM=1: warm up here, or the first
    # tests would meet a semantic tier still loading (and miss) on a loaded machine.
    with Cache(path=path, namespace="question", warm=True) as c:
        yield c


@pytest.mark.parametrize("layout", LAYOUTS)
def test_look_alike_questions_over_one_context_are_never_served(cache: Cache, layout: str) -> None:
    pairs = [
        ("How tall is the Eiffel Tower?", "Is the Eiffel Tower tall?"),
        ("Who designed the Eiffel Tower?", "Who painted the Eiffel Tower?"),
        ("Can I take the lift to the top?", "Can I take the stairs to the top?"),
        ("What is the Eiffel Tower made of?", "What is the Eiffel Tower named after?"),
    ]
    for first, second in pairs:
        cache.update(cache.request(layout.format(q=first, c=CONTEXT)), f"answer to {first}")
        hit = cache.lookup(cache.request(layout.format(q=second, c=CONTEXT)))
        assert hit is None or hit.text == f"answer to {second}", (layout, second, hit)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_changed_context_is_never_a_semantic_hit(cache: Cache, layout: str) -> None:
    q = "Is the drug safe during pregnancy?"
    safe = "The drug is safe during pregnancy and while breastfeeding."
    cache.update(cache.request(layout.format(q=q, c=safe)), "safe")
    for changed in (safe.replace("is safe", "is not safe"), safe.replace("drug", "vaccine")):
        assert cache.lookup(cache.request(layout.format(q=q, c=changed))) is None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_paraphrases_and_rewrites_over_one_context_are_served(cache: Cache, layout: str) -> None:
    q = "How do I reset my password?"
    ctx = "Passwords are reset from the account page, under Security, with the Reset button."
    cache.update(cache.request(layout.format(q=q, c=ctx)), "From the account page.")
    for asked in ("how do i reset my password?", "How can I reset my password?"):
        hit = cache.lookup(cache.request(layout.format(q=asked, c=ctx)))
        assert hit is not None and hit.text == "From the account page.", (layout, asked)


@pytest.mark.parametrize(
    "layout",
    [
        "{q}\nContext: {c}",  # the question first, the context last and labelled
        "<question>{q}</question>\n<context>{c}</context>",
        "Use the documents below to answer: {q}\n\nDocument 1: {c}",
        "Question: {q}\n\nContext:\nOur clinic FAQ.\nQuestion: Is it safe? Answer: {c}",
    ],
)
def test_a_context_line_is_never_taken_for_the_question(cache: Cache, layout: str) -> None:
    q = "When should I take the medication?"
    first = "The medication should be taken with meals to avoid stomach problems."
    cache.update(cache.request(layout.format(q=q, c=first)), "with meals")
    changed = first.replace("with meals", "between meals")
    assert cache.lookup(cache.request(layout.format(q=q, c=changed))) is None
