"""What the semantic tier indexes for one answer: a point's payload, made without the tier.

A *draft* is a point without its vector: the question's folded form, the scope it may be
matched in, and the exact entry it names (``ref``).  Making one needs no model, so an answer
stored while the tier is still opening (or while its index is down) is drafted at once and
written ahead to the store's journal; whoever opens the tier embeds the drafts and indexes
them (``tiers.py``).  A draft read back from a shared store is checked like a stored point:
plain values only, a question no longer than the tier writes, this namespace's entry.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgpack

from ..key.asked import Asked
from ..key.entry import CacheEntry
from ..key.forms import folded, form_key
from ..key.normalize import normalize
from ..key.question import Located
from ..key.request import CacheRequest, context_fingerprint, entry_prefix
from ..stores.base import point_id_for

__all__ = [
    "MAX_STORED_QUESTION",
    "Draft",
    "answer_digest",
    "comparable",
    "draft",
    "point_id_for",
    "scope",
]

# The longest question a point may hold: the tier locates questions of at most 2,000
# characters and folds them (a contraction gains an apostrophe), so a longer one was written by
# someone else.  Readers skip such a point before any guard reads it (a 2 MB question took the
# guards 7-11 s per lookup).
MAX_STORED_QUESTION = 4096
_FORMAT = 2  # of a journaled draft (1: the whole request, analysed again when read)
_MAX_DRAFT_BYTES = 32 * 1024  # a question of at most 4,096 characters, its digests and tags

# A draft's payload: what a point of the semantic tier holds, bar the vector.
Draft = dict[str, Any]


def scope(request: CacheRequest, located: Located, *, volatile: bool) -> dict[str, str]:
    """Who may match whom: namespace, tenant, LLM, the conversation around the message and
    the frame around the question in it, each stored, and ``scope`` — one digest of all, the
    single keyword every search filters on (one indexed match is cheaper than five).  Tenant
    and LLM key are stored as digests: any string is a valid tenant, and two different ones
    must never compare equal."""
    fields = {
        "namespace": request.namespace,
        "tenant": digest(request.tenant),
        "llm_key": digest(request.llm_key),
        "ctx": context_fingerprint(request, volatile=volatile),
        "frame": located.frame,
    }
    return {**fields, "scope": digest("\x1f".join(fields.values()))}


def draft(
    asked: Asked,
    entry: CacheEntry,
    ttl: float,
    *,
    judge: Callable[[str], bool],
    volatile: bool,
) -> Draft | None:
    """The payload of the point that indexes ``entry``'s question (``asked``: its ``ref`` is
    the exact key), or ``None`` when it is not one to match other questions against (no
    question, time-dependent, negative, unshared).  ``judge``: whether a question may be cached
    (``Asked.cacheable``)."""
    located = asked.located
    if entry.negative or not entry.shared:
        return None
    if skip_reason(located, partial(asked.cacheable, judge)) is not None:
        return None
    assert located is not None
    question = asked.folded
    if len(question) > MAX_STORED_QUESTION:  # (what readers would skip)
        return None
    from .answers import uninformative  # (numpy and the guards load with the semantic tier)

    return {
        **scope(asked.request, located, volatile=volatile),
        "question": question,
        "form": form_key(question),
        "lang": asked.lang,
        "category": entry.category or "",
        "tags": list(asked.request.tags),
        "kb_version": entry.kb_version,
        "watermark": entry.watermark,
        "expires_at": time.time() + ttl,
        "verified": False,
        "ref": asked.key,
        # which answer it points at (a digest): neighbours holding one answer agree, unless
        # it says nothing of its question (a refusal, a bare "Yes."): those form no group
        "answer": "" if uninformative(entry.text) else answer_digest(entry.text),
    }


def skip_reason(located: Located | None, cacheable: Callable[[], bool]) -> str | None:
    """Why a question stays out of the semantic tier, or ``None``; ``cacheable()`` is the
    verdict on it (``Asked.cacheable``), asked only when there is a question."""
    if located is None or not comparable(located.question):
        return "no_question"  # empty, too long, code, not isolated, or no words at all
    if not cacheable():
        return "uncacheable"
    return None


def encode(payload: Draft) -> bytes:
    return bytes(msgpack.packb([_FORMAT, payload], use_bin_type=True))


def decode(data: bytes, namespace: str) -> Draft | None:
    """The draft ``data`` holds, or ``None`` for anything else: too big, another format, not
    plain values, a question longer than the tier writes, another namespace's entry."""
    if not isinstance(data, bytes) or len(data) > _MAX_DRAFT_BYTES:
        return None
    try:
        fields = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if not (isinstance(fields, list) and len(fields) == 2 and fields[0] == _FORMAT):
        return None
    payload = fields[1]
    if not isinstance(payload, dict) or not all(_plain(v) for v in payload.values()):
        return None
    text = ("scope", "question", "ref", "namespace", "form")
    if not all(isinstance(payload.get(k), str) for k in text):
        return None
    expires = payload.get("expires_at")
    if not isinstance(expires, float | int) or isinstance(expires, bool) or math.isnan(expires):
        return None
    question = payload["question"]
    if payload["namespace"] != namespace or not payload["ref"].startswith(entry_prefix(namespace)):
        return None
    if len(question) > MAX_STORED_QUESTION or not comparable(question):
        return None
    return payload


def answer_digest(text: str) -> str:
    """A short digest of an answer's canonical form: equal for answers that differ in form
    only (case, spacing, width)."""
    folded_text = normalize(folded(text)).casefold()
    return hashlib.blake2b(folded_text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def comparable(question: str) -> bool:
    """A question the embedder and the guards can judge: it has a letter or a digit, and no
    lone surrogate (which would reach them as "?", not as what was typed)."""
    if not any(c.isalnum() for c in question):
        return False
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)
