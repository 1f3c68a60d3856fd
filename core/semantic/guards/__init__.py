"""The guards that refuse look-alike questions, and their word lists.

Which file owns what:

- ``analysis.py``: ``Analysis`` (what the guards know about one question), ``analyze`` that
  builds it (memoized), ``use_entity_recognizer``, and the text helpers they use.
- ``rules/``: the rules, one module per family (``literal``, ``polarity``, ``quantity``,
  ``entity``, ``question``, ``structure``, ``mood``, ``person``, ``content``; ``shared``: the
  stem and content words several read).
- ``checks.py``: the table of rules: the ``Guard`` type, ``DEFAULT_GUARDS`` (their order),
  ``RULE_IDS``, ``HARD_RULES``, ``check`` that runs them on two questions,
  ``any_substitution`` and ``warm_up``.
- ``cacheable.py``: ``is_cacheable`` (is a question's answer time- or asker-dependent).
- ``canonical.py``: the canonical form the guards compare (greetings, fillers, thanks off).
- ``entities.py``: the names an analysis holds (rules, or spaCy on top).
- ``segmenter.py``: jieba's tagger over the word tables (``runtime/tables.py``).
- ``lexicon.py``: the English and Chinese word lists, read from ``words/*.txt``.

Imports run one way, each module only from those listed before it: ``lexicon`` and
``segmenter``; ``canonical`` and ``entities``; ``analysis``; ``rules``; ``checks``.
``cacheable`` imports none of them.
"""

from .analysis import Analysis, analyze, use_entity_recognizer
from .cacheable import is_cacheable
from .checks import DEFAULT_GUARDS, Guard, any_substitution, check, warm_up

__all__ = [
    "DEFAULT_GUARDS",
    "Analysis",
    "Guard",
    "analyze",
    "any_substitution",
    "check",
    "is_cacheable",
    "use_entity_recognizer",
    "warm_up",
]
