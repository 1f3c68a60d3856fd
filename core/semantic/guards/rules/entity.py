"""Entity rule (``entity.name``): every name in one question must be in the other."""

from __future__ import annotations

from ..analysis import Analysis


def entity(a: Analysis, b: Analysis) -> str | None:
    """ "iPhone 15" vs "iPhone 15 Pro", "北京" vs "上海": every name in one question must
    appear in the other."""
    for x, y in ((a, b), (b, a)):
        words = set(y.tokens)
        for name in x.entities:
            if name not in words and name not in y.text:
                return "entity"
    return None
