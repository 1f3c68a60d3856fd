"""Normalization: remove differences of form, keep every difference of meaning.

What goes: Unicode compatibility forms (full-width letters, digits and punctuation), case,
runs of white space, spaces between CJK characters, invisible format characters, control
characters and trailing punctuation.  What stays: negations, numbers, ids, entities, word order
and internal punctuation — two texts that differ in any of these never share a key.

Volatile fragments (timestamps, UUIDs, long hex ids) are replaced by placeholders in the
*context* (system prompt, history), where apps inject them per request.  In the user's question
only timestamps precise to the second are replaced by default: an id the user typed is meaning,
just like "order 12345".
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize", "replace_timestamps", "replace_volatile"]

# Zero-width and other invisible characters that never carry meaning in a prompt.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"))
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CJK = r"\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_SPACE_BETWEEN_CJK = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])")
# Sentence-final punctuation, ASCII and CJK (NFKC has already folded the full-width forms).
_TRAILING = " .?!。？！…,，;；:：~～、"

_TIMESTAMP = re.compile(
    r"(?:\b\d{4}[-/]\d{1,2}[-/]\d{1,2}[t ]|\b)"  # optional date part
    r"\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?"  # time of day, to the second
    r"(?:z\b|\s?[+-]\d{2}:?\d{2}\b|\s?(?:utc|gmt)\b)?"
)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
# 16+ hex characters mixing digits and letters: trace ids, session ids, digests.
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{16,}\b")


def replace_timestamps(text: str) -> str:
    """Replace timestamps precise to the second (``2026-11-29T10:13:31Z``) with ``<ts>``."""
    return _TIMESTAMP.sub("<ts>", text) if ":" in text else text


def replace_volatile(text: str) -> str:
    """Replace timestamps, UUIDs and long hex ids with placeholders (expects folded text)."""
    text = _UUID.sub("<uuid>", text)
    text = _HEX_ID.sub("<hex>", text)
    return replace_timestamps(text)


def normalize(text: str, *, volatile: bool = False) -> str:
    """Return the canonical form of ``text`` used in exact keys.

    ``volatile=True`` also replaces UUIDs and long hex ids (use it for context, or for apps
    that inject request ids into the user's turn).
    """
    # Every step is skipped when a cheap test shows it has nothing to do: this runs per lookup.
    folded = unicodedata.normalize("NFKC", text)
    ascii_only = folded.isascii()
    if not ascii_only:
        folded = folded.translate(_INVISIBLE)
    if not folded.isprintable():
        folded = _CONTROL.sub(" ", folded)
    folded = " ".join(folded.casefold().split())
    if not ascii_only:
        folded = _SPACE_BETWEEN_CJK.sub("", folded)
    folded = replace_volatile(folded) if volatile else replace_timestamps(folded)
    stripped = folded.rstrip(_TRAILING)
    # "?" and "!" alone are different prompts: keep the punctuation when nothing else is left.
    return stripped or folded
