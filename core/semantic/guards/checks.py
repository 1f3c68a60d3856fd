"""The guards: the table of rules that refuse a semantic candidate whose question looks alike
but means something else, and what runs them.

Each rule is a small function ``(cached, new) -> reason | None`` over two ``Analysis``
objects, in a module of its family (``rules/<family>.py``: the part of its id before the dot);
the first reason wins.  All of them err on the side of refusing: a refused hit costs one LLM
call, a wrong hit costs a wrong answer.

Conversation context is not a guard here: the semantic tier only ever compares questions asked
in the same context (its search is filtered on the context fingerprint).

Owns the table: the ``Guard`` type, ``DEFAULT_GUARDS`` (the order the rules run in),
``RULE_IDS``, ``HARD_RULES``, ``WORD_RULES``, ``check`` and ``verdicts`` that run them on two
questions, and ``warm_up``.  The ``Analysis`` they compare is built in ``analysis``;
``is_cacheable`` is in ``cacheable``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ...key.canonical import canonical
from ...key.forms import folded, unify
from ...key.script import CJK
from ...key.words import is_lower_case_word
from ...runtime.exit import checkpoint
from .analysis import Analysis, analyze
from .rules.content import added_content, any_substitution, substitution
from .rules.entity import entity
from .rules.literal import apostrophe, case, literal
from .rules.mood import focus, modality
from .rules.person import person
from .rules.polarity import antonym, antonym_stems, negated_verb, negation
from .rules.quantity import number
from .rules.question import question_form, wh_word
from .rules.shared import content_stems, unmatched, within
from .rules.structure import order, relation

__all__ = [
    "DEFAULT_GUARDS",
    "HARD_RULES",
    "RULE_IDS",
    "WORD_RULES",
    "Guard",
    "any_substitution",
    "check",
    "current_name",
    "differing_words",
    "group_explains",
    "rule_id",
    "verdicts",
    "warm_up",
    "words_covered",
]


def warm_up() -> None:
    """Load the models and word lists the guards use (jieba's tagger, the English word lists,
    spaCy when asked for) now rather than on the first lookup, which would wait for them.
    Raises ``Exiting`` between steps once the interpreter exits."""
    checkpoint()
    analyze("Warm up the guards before the first lookup?")
    checkpoint()
    analyze("先加载分词词典")
    checkpoint()
    is_lower_case_word("warm")
    checkpoint()
    antonym_stems()
    checkpoint()
    unify("how do i log in", "How do I login?")


# The table of rules --------------------------------------------------------------------------
Guard = Callable[[Analysis, Analysis], "str | None"]

DEFAULT_GUARDS: tuple[Guard, ...] = (
    literal,
    case,
    apostrophe,
    negation,
    antonym,
    number,
    entity,
    wh_word,
    question_form,
    order,
    relation,
    modality,
    focus,
    person,
    negated_verb,
    added_content,
    substitution,
)

# Every rule's id, ``family.rule``: what labels, the audit and the golden file
# (tests/golden/rule_verdicts.tsv) call it.  A guard of the app's own is ``custom.<name>``.
RULE_IDS: dict[Guard, str] = {
    literal: "literal.token",
    case: "literal.case",
    apostrophe: "literal.apostrophe",
    negation: "polarity.negation",
    antonym: "polarity.antonym",
    negated_verb: "polarity.negated_verb",
    number: "quantity.number",
    entity: "entity.name",
    wh_word: "question.word",
    question_form: "question.form",
    order: "structure.order",
    relation: "structure.relation",
    modality: "mood.modality",
    focus: "mood.focus",
    person: "person.addressed",
    added_content: "content.added",
    substitution: "content.substituted",
}

# Rules whose refusal marks a provable difference (a literal or code token, its case or
# apostrophe, a negation, an antonym, a number, a name): they refuse whatever the traffic
# shows.  The others are priors the app's own answers may overrule (``semantic/decision.py``).
HARD_RULES = frozenset(
    {
        "literal.token", "literal.case", "literal.apostrophe", "polarity.negation",
        "polarity.antonym", "quantity.number", "entity.name",
    }
)  # fmt: skip


def rule_id(guard: Guard) -> str:
    """A guard's rule id (``RULE_IDS``): the one name of a rule in verdicts, metrics
    (``guard_<id>``), the audit log and the docs."""
    return RULE_IDS.get(guard) or f"custom.{getattr(guard, '__name__', 'guard')}"


# What the audit logs of earlier versions called a refusal, before every path said the id.
_EARLIER_NAMES = {
    "literal": "literal.token", "case": "literal.case", "apostrophe": "literal.apostrophe",
    "negation": "polarity.negation", "antonym": "polarity.antonym", "number": "quantity.number",
    "entity": "entity.name", "question_word": "question.word", "wh_word": "question.word",
    "question_form": "question.form", "order": "structure.order",
    "relation": "structure.relation", "modality": "mood.modality", "focus": "mood.focus",
    "person": "person.addressed", "negated_verb": "polarity.negated_verb",
    "added_content": "content.added", "substitution": "content.substituted",
}  # fmt: skip


def current_name(name: str) -> str:
    """A rule named as an earlier version's audit log names it, by its id (other names, such as
    ``threshold``, as they are)."""
    return _EARLIER_NAMES.get(name, name)


def verdicts(
    cached: str,
    new: str,
    guards: Sequence[Guard] = DEFAULT_GUARDS,
    *,
    all_rules: bool = False,
    first: bool = False,
) -> tuple[str, ...]:
    """The ids of the rules that refuse the pair: the evidence the learned decision reads.
    The hard rules run first and the first that refuses is the answer (nothing overrules it);
    otherwise every soft rule's verdict, in order (``first``: the first only).
    ``all_rules``: every rule's, hard ones included (the golden file)."""
    a, b = _analyses(cached, new)
    if not all_rules:
        for guard in guards:
            if rule_id(guard) in HARD_RULES and guard(a, b) is not None:
                return (rule_id(guard),)
        guards = [g for g in guards if rule_id(g) not in HARD_RULES]
    fired = (rule_id(guard) for guard in guards if guard(a, b) is not None)
    return tuple(itertools.islice(fired, 1) if first else fired)


# The rules that refuse for the content words that differ: a difference the app's answers show
# harmless (``decision.py``, equivalences) keeps them from refusing it again in that pool.
WORD_RULES = frozenset({"content.substituted", "content.added"})


def differing_words(cached: str, new: str) -> str:
    """The content words (stemmed) only one of the two questions has, as one key: each
    side's sorted, the two sides sorted ("" on a side with none): the same difference in
    other questions gives the same key."""
    a, b = _analyses(cached, new)
    sides = sorted(" ".join(sorted(words)) for words in (unmatched(a, b), unmatched(b, a)))
    return "|".join(sides)


def words_covered(new: str, cached: str, other: str) -> bool:
    """Whether every content word ``new`` has and ``cached`` lacks is a word of ``other``:
    the question's wording is one the paraphrases already use."""
    a, b = _analyses(cached, new)
    extra = unmatched(b, a)
    if not extra:
        return True
    c, _ = _analyses(other, new)
    return extra <= set(content_stems(c))


def group_explains(new: str, cached: str, others: Sequence[str]) -> bool:
    """Whether the content words ``new`` and ``cached`` differ in are differences the other
    questions of ``cached``'s answer group already show harmless: each word only ``new``
    has is a word of one of them, and each word only ``cached`` has is missing from one of
    them ("… for children" next to a group that only ever asks "… for adults" is not)."""
    a, b = _analyses(cached, new)
    only_new, only_cached = unmatched(b, a), unmatched(a, b)
    if not (only_new or only_cached):
        return True
    seen = [_analyses(other, new)[0] for other in others]
    has = [(set(content_stems(x)), x) for x in seen]

    def holds(word: str, stems: set[str], x: Analysis) -> bool:
        return word in stems or bool(CJK.match(word) and within(word, x))

    return all(any(holds(w, st, x) for st, x in has) for w in only_new) and all(
        any(not holds(w, st, x) for st, x in has) for w in only_cached
    )


def _analyses(cached: str, new: str) -> tuple[Analysis, Analysis]:
    """What the guards compare of two questions (see ``check``)."""
    typed_a, typed_b = folded(cached), folded(new)
    compared_a, compared_b = unify(canonical(typed_a), canonical(typed_b))
    return analyze(compared_a, typed_a), analyze(compared_b, typed_b)


def check(
    cached: str, new: str, guards: Sequence[Guard] = DEFAULT_GUARDS
) -> tuple[str | None, tuple[str, ...]]:
    """Run ``guards`` on two questions: (the id of the first rule that refuses or ``None``,
    the ids of the rules run).

    The guards compare the canonical questions (``folded``: the canonical form; then
    ``canonical``: no greetings, fillers or thanks) with the compounds one writes in parts and
    the other as one word written alike (``forms.unify``).  Nothing else is rewritten: a word
    that looks like a typo of another is another word until the app's traffic says otherwise."""
    a, b = _analyses(cached, new)
    ran = []
    for guard in guards:
        ran.append(rule_id(guard))
        if guard(a, b) is not None:
            return ran[-1], tuple(ran)
    return None, tuple(ran)
