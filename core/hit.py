"""A cached answer, where it came from, and what it says about itself to the adapters."""

from __future__ import annotations

from typing import Any

import msgpack

from .key.entry import CacheEntry

__all__ = ["STORED", "Hit", "fresh"]


class _Stored:
    """``Hit(payload=STORED)``: the entry's own payload, copied for the caller when read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "STORED"


STORED: Any = _Stored()


class Hit:
    """A cached answer and where it came from.

    ``payload`` is the caller's own copy.  A hit made with ``payload=STORED`` copies its
    entry's payload when ``payload`` is first read (``fresh``): an adapter that rebuilds its
    answer from ``entry`` without sharing anything with it never pays for that copy."""

    __slots__ = ("_payload", "entry", "entry_id", "key", "level", "matched_question", "score",
                 "text", "tier")  # fmt: skip

    def __init__(
        self,
        *,
        text: str,
        payload: Any,
        tier: str,
        level: str,
        key: str,
        entry: CacheEntry,
        score: float | None = None,
        entry_id: str = "",
        matched_question: str | None = None,
    ) -> None:
        self.text = text
        self._payload = payload
        self.tier = tier  # "exact", "semantic" or "faq"
        self.level = level  # inside the tier: "l1", "l2", the vector index's name, or "sqlite"
        self.key = key  # the request's exact-tier key (what coalescing locks); FAQ: its entry id
        self.entry = entry  # shared with the cache: read it, do not change it
        self.score = score  # similarity, for semantic hits
        self.entry_id = entry_id  # what to pass to Cache.feedback()
        self.matched_question = matched_question  # the cached question a semantic hit matched

    @property
    def payload(self) -> Any:
        """The caller's own copy of the answer's payload."""
        payload = self._payload
        if payload is STORED:
            payload = self._payload = fresh(self.entry.payload)
        return payload

    @payload.setter
    def payload(self, value: Any) -> None:
        self._payload = value

    def _fields(self) -> tuple[Any, ...]:
        return (self.text, self.payload, self.tier, self.level, self.key, self.entry, self.score,
                self.entry_id, self.matched_question)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    # (as the dataclass it was: mutable, so unhashable)
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        names = ("text", "payload", "tier", "level", "key", "entry", "score", "entry_id",
                 "matched_question")  # fmt: skip
        return f"Hit({', '.join(f'{n}={v!r}' for n, v in zip(names, self._fields(), strict=True))})"

    def metadata(self) -> dict[str, Any]:
        """What an answer says about the hit that served it (the adapters put it under
        ``"tricache"``): the tier, where inside it (``level``), the similarity (``score``,
        ``None`` for an exact hit), the entry (``entry_id``, for ``Cache.feedback``) and, for a
        semantic or FAQ hit, the cached question it matched (``matched``)."""
        info = {"tier": self.tier, "level": self.level, "score": self.score,
                "entry_id": self.entry_id}  # fmt: skip
        if self.matched_question is not None:
            info["matched"] = self.matched_question
        return info


def fresh(payload: Any) -> Any:
    """A copy of a stored payload for one caller: the L1 entry is shared by every hit, so a
    caller that edits what it was served must not change what the next one gets."""
    if isinstance(payload, dict | list):
        packed = msgpack.packb(payload, use_bin_type=True, unicode_errors="surrogatepass")
        return msgpack.unpackb(
            packed, raw=False, strict_map_key=False, unicode_errors="surrogatepass"
        )
    return payload
