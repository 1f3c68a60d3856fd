"""Which script a text is written in: the one definition of "Chinese" every module uses.

``HAN`` is a regular-expression class body (CJK Unified Ideographs, Extension A and the
Compatibility Ideographs), for the patterns that build on it; ``CJK`` matches one such
character.  A text with one is read as Chinese (``lang``): word rules, segmentation (jieba)
and the learning's pools follow it.  ``writing`` names the script a question is asked in, for
the tiers that serve one question's answer to another: an answer is in its question's script.
"""

from __future__ import annotations

import re

__all__ = ["CJK", "HAN", "has_cjk", "lang", "writing"]

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK = re.compile(f"[{HAN}]")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese character."""
    return CJK.search(text) is not None


def lang(text: str) -> str:
    """``"zh"`` for a text with a Chinese character, else ``"en"``."""
    return "zh" if has_cjk(text) else "en"


# Scripts other than Latin, the first found naming a text's (kana before Han: Japanese)
_SCRIPTS = (
    ("kana", re.compile("[\u3040-\u30ff]")),
    ("hangul", re.compile("[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")),
    ("han", CJK),
    ("cyrillic", re.compile("[\u0400-\u04ff]")),
    ("greek", re.compile("[\u0370-\u03ff]")),
    ("arabic", re.compile("[\u0600-\u06ff]")),
    ("hebrew", re.compile("[\u0590-\u05ff]")),
    ("thai", re.compile("[\u0e00-\u0e7f]")),
    ("devanagari", re.compile("[\u0900-\u097f]")),
)


def writing(text: str) -> str:
    """The script ``text`` is written in: ``"latin"``, or the first other one it holds
    ("Docker是什么" is ``"han"``, "Что такое Linux?" ``"cyrillic"``)."""
    return next((name for name, script in _SCRIPTS if script.search(text)), "latin")
