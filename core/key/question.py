"""Where the question sits in a message, so that the semantic tier compares questions alone.

A prompt template often puts the user's question in one message with other text: instructions,
retrieved context, labels.  Two such messages may share an answer only when everything but the
question is identical.  :func:`locate` finds the question's span and returns it with the
*frame*, a digest of the normalized message with the question cut out.  The frame goes into the
semantic tier's scope, so a candidate is only ever found among entries whose frame — the
template, the context, every other line — is identical; the embedding and the guards see the
question alone.

Where the question is, in order:

1. a message of one line (or one paragraph without line labels) is the question;
2. otherwise, the one segment under a label that names the question ("Question:", "Q:",
   "Query:", "问题：", "<question>…</question>" …, inline or on the line before); with several
   such segments (a transcript, a context holding its own Q&A) which one is asked is unclear;
3. otherwise, the last line, when it ends with a question mark and carries no label or tag
   (a chat question asked after the context it refers to).

A question longer than ``max_chars``, or in code, is not located: the message is served to
itself only (the exact tier).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from hashlib import blake2b

from .normalize import normalize
from .script import HAN

__all__ = ["Located", "locate"]

# Labels that name the question slot of a template (compared case-insensitively, without
# spaces).  A label that names anything else (context, answer, an "Input:" to transform …) is
# not a question.
_QUESTION_LABELS = frozenset(
    "question q query ask user human userquestion userquery yourquestion "
    "followupquestion followup followupmessage questiontoanswer 问题 提问 用户问题 问 查询 用户"
    .split()
)  # fmt: skip
_NAME = r"[^\W\d_][\w '’-]{0,30}?|[" + HAN + "]{1,6}"
# "Question: …" at the start of a line (markdown emphasis allowed: "**Question:**")
_LABEL = re.compile(rf"^\s*[*_]*({_NAME})[*_]*\s*[:：][*_]*\s*")
# A line that is only a label: "Question:", "### Question", "<Follow Up Message>", "[Query]"
_HEADER = re.compile(
    rf"^\s*(?:#+\s*({_NAME})\s*[:：]?|<({_NAME})>|\[({_NAME})\]|[*_]*({_NAME})[*_]*\s*[:：][*_]*)\s*$"
)
# "<question>…</question>" on one line
_TAGGED = re.compile(rf"^\s*<({_NAME})>(.*?)</\1>\s*$")
# A question label inside a line ("… context. Question: …"): the line is not one question
# (but "Hi, quick question: …" is discourse, the words before "question" say)
_DISCOURSE = "".join(
    rf"(?<!\b{w})" for w in "quick simple small short silly stupid dumb another one a".split()
)
_INLINE = re.compile(
    rf"(?<=\S){_DISCOURSE}\s+(?:question|query|q)\s*[:：]|\S\s*问题[:：]", re.IGNORECASE
)
_PLACEHOLDER = "\ue000"  # where the question was, in the frame


@dataclass(frozen=True, slots=True)
class Located:
    question: str  # as typed
    frame: str  # digest of the rest of the message ("" when the message is the question)


def locate(message: str, max_chars: int = 2000) -> Located | None:
    """The question in ``message`` and its frame, or ``None`` when it cannot be isolated.
    Memoized (a lookup and its write-back locate the same message); messages over 512 KB are
    not located."""
    if len(message) <= 16_384:
        return _locate(message, max_chars)
    return _locate_long(message, max_chars) if len(message) <= _MAX_MESSAGE else None


@lru_cache(maxsize=2048)
def _locate(message: str, max_chars: int) -> Located | None:
    return _find(message, max_chars)


@lru_cache(maxsize=16)
def _locate_long(message: str, max_chars: int) -> Located | None:
    """Long templated prompts (a RAG prompt with many documents), few at a time."""
    return _find(message, max_chars)


_MAX_MESSAGE = 512 * 1024  # past this, the semantic tier stays out (exact only)


def _find(message: str, max_chars: int) -> Located | None:
    stripped = message.strip()
    if "\n" not in stripped:
        if not 0 < len(stripped) <= max_chars or _INLINE.search(stripped):
            return None
        return Located(stripped, "")
    spans = _labelled(stripped)
    if len(spans) > 1:  # several questions (a transcript, a context with its own Q&A): unclear
        return None
    span = spans[0] if spans else _last_line(stripped)
    if span is None:
        return None
    start, end = span
    question = stripped[start:end].strip()
    if not question or len(question) > max_chars or "```" in stripped[:start]:
        return None
    frame = normalize(stripped[:start] + _PLACEHOLDER + stripped[end:])
    digest = blake2b(frame.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return Located(question, digest)


def _labelled(text: str) -> list[tuple[int, int]]:
    """The spans of the segments under a question label: "Question: …", a "### Question"
    header line and the line after it, "<question>…</question>"."""
    spans = []
    pos = 0
    after_header = False
    for line in text.split("\n"):
        end = pos + len(line)
        label = _LABEL.match(line)
        tag = _TAGGED.match(line)
        if label is not None and _names_question(label.group(1)) and line[label.end() :].strip():
            spans.append((pos + label.end(), end))  # "Question: <the question>"
        elif tag is not None and _names_question(tag.group(1)):
            spans.append((pos + tag.start(2), pos + tag.end(2)))
        elif after_header and line.strip():
            spans.append((pos, end))
        after_header = _names_question(_header(line))
        pos = end + 1
    return spans


def _last_line(text: str) -> tuple[int, int] | None:
    """The span of the last line when it reads as the question asked after a context: it ends
    with a question mark and carries no label or tag (a "Context: …" or "<doc>…" line is not
    a question); indented lines are code."""
    start = text.rfind("\n") + 1
    line = text[start:].rstrip()
    if line[:1] in (" ", "\t", "<", "[", "#") or _LABEL.match(line) or _INLINE.search(line):
        return None
    return (start, len(text)) if line[-1:] in ("?", "？") else None


def _header(line: str) -> str:
    """The label of a line that is only a label, else ""."""
    match = _HEADER.match(line)
    return next((g for g in match.groups() if g), "") if match else ""


def _names_question(label: str) -> bool:
    return bool(label) and "".join(label.split()).casefold() in _QUESTION_LABELS
