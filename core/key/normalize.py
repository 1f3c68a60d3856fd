"""Normalization: remove differences of form only where they cannot change meaning.

The rule, in general terms (DESIGN.md, "Normalization"):

- **prose** — words of letters or numbers with ordinary sentence punctuation — is re-spaced
  between its words, and its case is folded where case carries no information: a text typed in
  capitals only, the capital of a sentence's first word; a capital inside a sentence (Polish /
  polish, US / us, I / i) is kept;
- everything else is kept **verbatim**, every character and the spaces beside it: code
  (inline, fenced, indented lines, lines with tabs), quoted strings, identifiers and tokens
  mixing letters with digits or symbols (``ls -R``, ``\\W``, base64, ``iPhone``), math;
- characters of prose words: canonical composition (NFC), full-width ASCII to ASCII,
  zero-width spaces, soft hyphens and byte-order marks removed; nothing else is folded
  (superscripts, ß, ligatures, joiners stay); spaces between Chinese words go;
- only a final "?" (or a run of them) or a single final "." — and their CJK forms — attached
  to a prose word is dropped;
- nothing in the text becomes a placeholder, unless the caller declares it volatile
  (``volatile=True``: timestamps, UUIDs and long hex ids, for context an app injects per
  request).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from .forms import (
    CODE_LINE,
    CONTRACTIONS,
    about_characters,
    about_words,
    fold_token,
    restore_apostrophes,
    space_beside_han,
)
from .script import CJK

__all__ = ["Form", "form", "normalize", "replace_timestamps", "replace_volatile"]

# A line cut into verbatim spans (inline code, double-quoted strings, single-quoted strings that
# do not open inside a word, so "don't" is a word), runs of spaces, and tokens.
_SPACES = " \u00a0\u1680\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))
_PIECES = re.compile(
    rf"`[^`]*`|\"[^\"]*\"|“[^”]*”|(?<!\w)'[^']*'(?!\w)|[{_SPACES}]+"
    rf"|[^{_SPACES}`\"“']+(?:'[^{_SPACES}`\"“']+)*|."
)
# A prose word: letters (with inner apostrophes or hyphens), or a plain number; then ordinary
# sentence punctuation.  Anything else in a line is kept as typed.
_WORD = re.compile(r"[(¿¡]?([^\W\d_]+(?:['’-][^\W\d_]+)*|\d+(?:[.,]\d+)*)[.,;:!?)。，？！、；：]*")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
# A final "?" (or a run of them) or "." attached to a word: "rm -rf ." keeps its dot.
_FINAL = re.compile(r"(?<=[^\W_]|[)\"'”`])(?:[?？]+|(?<!\.)[.。])$")

_TIMESTAMP = re.compile(
    r"(?:\b\d{4}[-/]\d{1,2}[-/]\d{1,2}[tT ]|\b)"  # optional date part
    r"\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?"  # time of day, to the second
    r"(?:[zZ]\b|\s?[+-]\d{2}:?\d{2}\b|\s?(?:UTC|GMT|utc|gmt)\b)?"
)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
# 16+ hex characters mixing digits and letters: trace ids, session ids, digests.
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{16,}\b")


def replace_timestamps(text: str) -> str:
    """Replace timestamps precise to the second (``2026-11-29T10:13:31Z``) with ``<ts>``."""
    return _TIMESTAMP.sub("<ts>", text) if ":" in text else text


def replace_volatile(text: str) -> str:
    """Replace timestamps, UUIDs and long hex ids with placeholders."""
    text = _UUID.sub("<uuid>", text)
    text = _HEX_ID.sub("<hex>", text)
    return replace_timestamps(text)


def normalize(text: str, *, volatile: bool = False) -> str:
    """The canonical form of ``text`` used in exact keys (see the module's rule).

    ``volatile=True`` also replaces timestamps, UUIDs and long hex ids: only for text the app
    declares volatile (context it injects per request), never for the user's own words.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if volatile:
        text = replace_volatile(text)
    stripped = text.strip()
    if "\n" in stripped:  # blank lines go, the first line's indentation stays (code)
        stripped = _LEADING_BLANK_LINES.sub("", text.rstrip())
    if not stripped:
        return text
    one_case = _one_case(stripped)
    # a question about words or characters asks about their very form (forms.about_words)
    form = _Form(not about_words(stripped), not about_characters(stripped))
    lines = []
    in_fence = False
    starts = True  # the next prose line starts a sentence
    prose_last = False
    for line in stripped.split("\n"):
        fence = line.lstrip().startswith("```")
        in_fence ^= fence
        if fence or in_fence or line[:1] in (" ", "\t") or "\t" in line:  # code or data
            lines.append(line.rstrip())
            starts, prose_last = True, False
        elif not line.strip():
            lines.append("")
            starts, prose_last = True, False
        else:
            line, starts = _prose_line(line, one_case, starts, form)
            lines.append(line)
            prose_last = True
    if prose_last:  # "ok?." → "ok"; never on a line of code ("var name: String?")
        last = lines[-1]
        while (final := _FINAL.sub("", last)) != last:
            last = final
        lines[-1] = last
    return "\n".join(lines) or stripped


def _one_case(text: str) -> bool:
    """True for a text typed in capitals only: its case tells nothing.  Not a Chinese text
    whose Latin words are in capitals ("SWIFT代码在哪里查"): those are names and acronyms."""
    return text.upper() == text and text.lower() != text and not CJK.search(text)


class _Form(NamedTuple):
    apostrophes: bool  # put back the apostrophe of "dont", "whats"; fold a sentence's capital
    # and a text in capitals only
    width: bool  # fold full-width forms and spaces beside Chinese characters


def _prose_line(line: str, one_case: bool, start: bool, form: _Form) -> tuple[str, bool]:
    """Fold a line's prose words (characters, and case where it tells nothing); re-space
    between prose words only: spaces next to code, a quoted string or a symbol stay as typed,
    and every character of those too, but for their width (``ＳＦ１２３`` is ``SF123``; code
    and quoted strings keep theirs).
    Spaces beside Chinese characters go.  Returns the line and whether a sentence ended it."""
    pieces = _PIECES.findall(line.strip(_SPACES))
    width = form.width and not _CODE_LINE.search(line)  # "if x > 1：" keeps its colon
    folded = [p if p[0] in _SPACES or _is_code(p) or not width else _fold(p) for p in pieces]
    out: list[str] = []
    for i, piece in enumerate(pieces):
        if piece[0] in _SPACES:
            before, after = folded[i - 1], folded[i + 1]
            if form.width and _beside_chinese(before, pieces[i - 1], after, pieces[i + 1]):
                out.append("")  # no spaces in Chinese text: 小红书 app = 小红书app
            elif not (_is_prose(before) and _is_prose(after)):
                out.append(piece)  # beside code or a symbol: as typed
            else:
                out.append(" ")
            continue
        match = _WORD.fullmatch(folded[i])
        if match is None:
            out.append(folded[i])  # code, a quoted string, a symbol: every character counts
            start = False
            continue
        word = match.group(1)
        prose = folded[i]
        if form.apostrophes and word.lower() in CONTRACTIONS:
            prose = restore_apostrophes(prose)  # "dont" is "don't"
        sentence = start and form.apostrophes  # (not in a question about words: "… March")
        if (one_case and form.apostrophes) or (
            sentence and word[:1].isupper() and word[1:] == word[1:].lower()
        ):  # (a question about words keeps its case, capitals only or not)
            out.append(prose.lower())
        else:
            out.append(prose)
        start = _ends_sentence(piece)
    return _SPACE_BEFORE_QUESTION_MARK.sub("", "".join(out)), start


def _fold(token: str) -> str:
    """A token's characters in their canonical form (``forms.fold_characters``: width,
    invisible characters, curly apostrophes, NFC)."""
    return token if token.isascii() else fold_token(token)


def _is_code(piece: str) -> bool:
    """Inline code, a quoted string, or a token that reads as code (a call, a quote or a
    backslash inside it: ``len('a\u200bb')``, ``print（1）``): kept as typed."""
    if piece[0] in "`\"“'" or "\\" in piece or '"' in piece or "'" in piece:
        return True
    return ("(" in piece or "（" in piece) and _CALL.search(piece) is not None


def _beside_chinese(before: str, raw_before: str, after: str, raw_after: str) -> bool:
    if not (before and after) or not space_beside_han(before[-1], after[0]):
        return False
    return not (_is_code(raw_before) or _is_code(raw_after))


_CODE_LINE = CODE_LINE
_CALL = re.compile(r"[A-Za-z_][\w.]{0,64}[(（]")
_SPACE_BEFORE_QUESTION_MARK = re.compile(r"(?<=\w) +(?=[?？]+$)")


def _is_prose(piece: str) -> bool:
    return _WORD.fullmatch(piece) is not None


def _ends_sentence(token: str) -> bool:
    """True after "?", "!" or a lower-case word of four letters or more and "." — not after
    an abbreviation ("U.S.", "Mr.", "vs.", "etc.") or a list number ("10.")."""
    if token[-1:] in "!?！？。":
        return True
    core = token.rstrip(")")
    if not core.endswith("."):
        return False
    core = core.rstrip(".")
    return len(core) >= 4 and core.isalpha() and core.islower()


# Ordinary sentence punctuation: any other symbol makes a token literal (code, math, emoji).
_PLAIN = frozenset(".,;:!?'\"()-–—’“”…。，？！、；：（）《》「」·•‧%")
_FLAG = re.compile(r"--?\w")  # a command-line flag: -R, --force


@dataclass(frozen=True, slots=True)
class Form:
    """What normalization keeps of a question's form, for the semantic guards: the literal
    tokens (symbols, code, flags, emoji, non-decimal digits — never paraphrased) and, when the
    text was typed with case, each prose word's case."""

    literals: tuple[str, ...]  # sorted
    cased: frozenset[tuple[str, str]]  # (casefolded word, its normalized form)
    has_case: bool  # typed in mixed case (an all-lower or all-capital text tells no case)


def form(text: str) -> Form:
    """The form features of ``text`` (see :class:`Form`).  A word whose capital grammar
    decides (a sentence's first word) tells nothing of its case and is left out."""
    literals = []
    cased = set()
    start = True
    for token in normalize(text).split():
        if _FLAG.match(token) or any(
            not (c.isalnum() or c in _PLAIN) or (c.isdigit() and not c.isdecimal()) for c in token
        ):
            literals.append(token.rstrip("?.？。"))
    for line in text.split("\n"):
        start = True
        for token in line.split():
            match = _WORD.fullmatch(token)
            if match is not None and not start:
                cased.add((match.group(1).casefold(), match.group(1)))
            start = _ends_sentence(token) or token[-1:] in ":："
    letters = [c for c in text if c.isalpha() and c.lower() != c.upper()]
    has_case = any(c.isupper() for c in letters) and any(c.islower() for c in letters)
    return Form(tuple(sorted(literals)), frozenset(cased), has_case)
