"""Quantity rule (``quantity.number``): the numbers must be the same, playing the same
parts."""

from __future__ import annotations

import re

from ..analysis import Analysis


def number(a: Analysis, b: Analysis) -> str | None:
    """ "order 12345" vs "order 12346", "3 days" vs "30 days", "三天" vs "3天" are fine; the
    same numbers in another order ("What percentage of 80 is 20?" / "… of 20 is 80?",
    "20是30的百分之几" / "30是20的百分之几") play other parts."""
    if a.numbers != b.numbers:
        return "number"
    if len(a.numbers) > 1 and _DIGITS.findall(a.text) != _DIGITS.findall(b.text):
        return "number"
    return None


_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")
