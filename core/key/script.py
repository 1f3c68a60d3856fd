"""Which script a text is written in: the one definition of "Chinese" every module uses.

``HAN`` is a regular-expression class body (CJK Unified Ideographs, Extension A and the
Compatibility Ideographs), for the patterns that build on it; ``CJK`` matches one such
character.  A text with one is read as Chinese (``lang``): word rules, segmentation (jieba)
and the learning's pools follow it.
"""

from __future__ import annotations

import re

__all__ = ["CJK", "HAN", "has_cjk", "lang"]

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK = re.compile(f"[{HAN}]")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese character."""
    return CJK.search(text) is not None


def lang(text: str) -> str:
    """``"zh"`` for a text with a Chinese character, else ``"en"``."""
    return "zh" if has_cjk(text) else "en"
