"""The guards' rules, one module per family (the part of a rule id before the dot,
``checks.RULE_IDS``); ``checks.py`` holds the table that orders them.

- ``literal``: code, symbols, quotes, case, apostrophes (``literal.*``)
- ``polarity``: negation, antonyms, a negation on another verb (``polarity.*``)
- ``quantity``: numbers (``quantity.number``)
- ``entity``: names (``entity.name``)
- ``question``: the question word, fact against yes/no (``question.*``)
- ``structure``: word order and relation words (``structure.*``)
- ``mood``: modality and focus (``mood.*``)
- ``person``: the person meant (``person.addressed``)
- ``content``: content words added or swapped (``content.*``)
- ``shared``: the stem and content words several families read

Each rule is ``(cached, new) -> reason | None`` over two ``guards.Analysis`` objects; English
and Chinese are handled in separate functions or sections of a module.
"""
