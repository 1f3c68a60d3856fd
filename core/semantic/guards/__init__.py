"""The guards that refuse look-alike questions, and their word lists.

Which file owns what:

- ``analysis.py``: ``Analysis`` (what the guards know about one question), ``analyze`` that
  builds it (memoized), ``use_entity_recognizer``, and the text helpers they use.
- ``checks.py``: the guards: the ``Guard`` type, each guard, ``DEFAULT_GUARDS``, ``check``
  that runs them on two questions, ``any_substitution`` and ``warm_up``.
- ``roles.py``: the guards on who is meant (``person``, ``negated_verb``).
- ``cacheable.py``: ``is_cacheable`` (is a question's answer time- or asker-dependent).
- ``canonical.py``: the canonical form the guards compare (greetings, fillers, thanks off).
- ``entities.py``: the names an analysis holds (rules, or spaCy on top).
- ``segmenter.py``: jieba's tagger over the word tables (``runtime/tables.py``).
- ``lexicon.py``: the English and Chinese word lists.

Imports run one way, each module only from those listed before it: ``lexicon`` and
``segmenter``; ``canonical`` and ``entities``; ``analysis``; ``roles``; ``checks``.
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
