"""A cached answer and its MessagePack codec.

The stored value never contains pickled objects: adapters put plain data (str, numbers, lists,
dicts, bytes) in ``payload``.  The write time is not part of the encoded value: the store stamps
it with its own clock (Redis ``TIME``, or the local clock in embedded mode).  The entry's
``watermark`` is the earlier of that and ``started``, the store's clock when the request began:
an answer is as old as the data it was computed from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

__all__ = ["SCHEMA_VERSION", "CacheEntry", "CorruptEntry", "decode_entry", "encode_entry"]

SCHEMA_VERSION = 3
MAX_ASKED = 300  # characters of the question an entry keeps (what ``entries()`` shows)


class CorruptEntry(ValueError):
    """A stored value that does not decode into a current ``CacheEntry``."""


@dataclass(slots=True)
class CacheEntry:
    """The answer text, the adapter's payload and the versions its request began under."""

    text: str
    payload: Any = None
    category: str | None = None
    epoch: str = ""
    kb_version: int = 0
    tag_versions: dict[str, int] = field(default_factory=dict)
    negative: bool = False
    hits: int = 0
    watermark: float = 0.0  # min(started, the store's write time); see the module docstring
    tokens: int = 0  # what the answer cost the LLM (prompt + completion), for savings metrics
    model: str = ""  # which model, for the price table
    started: float = 0.0  # the store's clock when the request began (0: unknown)
    # may answer other questions (a semantic or FAQ match): False for an answer stored with
    # ``semantic=False`` (tool calls, partial answers), which only its own request may get
    shared: bool = True
    asked: str = ""  # the question it answers, as asked (at most 300 characters): for listing
    ttl: float = 0.0  # the lifetime the caller gave it (0: its category's, the TtlPolicy's)


def encode_entry(entry: CacheEntry) -> bytes:
    """Encode ``entry`` (all but the watermark) as MessagePack; ``TypeError`` on non-plain data."""
    return msgpack.packb(
        [
            SCHEMA_VERSION,
            entry.text,
            entry.payload,
            entry.category,
            entry.epoch,
            entry.kb_version,
            entry.tag_versions,
            entry.negative,
            entry.hits,
            entry.tokens,
            entry.model,
            entry.started,
            entry.shared,
            entry.asked,
            entry.ttl,
        ],
        use_bin_type=True,
        unicode_errors="surrogatepass",
    )


def decode_entry(data: bytes, watermark: float) -> CacheEntry:
    """Decode a stored value; any malformed or foreign value raises ``CorruptEntry``."""
    try:
        fields = msgpack.unpackb(
            data, raw=False, strict_map_key=False, unicode_errors="surrogatepass"
        )
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CorruptEntry(f"undecodable value: {exc}") from None
    if not isinstance(fields, list) or len(fields) not in (12, 15) or fields[0] != SCHEMA_VERSION:
        raise CorruptEntry("unknown schema")
    if len(fields) == 12:  # written before ``shared``: every such entry was indexed as shared
        fields += [True, "", 0.0]
    (_, text, payload, category, epoch, kb_version, tag_versions, negative, hits, tokens, model,
     started, shared, asked, ttl) = fields  # fmt: skip
    if not (
        isinstance(text, str)
        and (category is None or isinstance(category, str))
        and isinstance(epoch, str)
        and isinstance(kb_version, int)
        and isinstance(tag_versions, dict)
        and all(isinstance(k, str) and isinstance(v, int) for k, v in tag_versions.items())
        and isinstance(negative, bool)
        and isinstance(hits, int)
        and isinstance(tokens, int)
        and isinstance(model, str)
        and isinstance(started, float | int)
        and not isinstance(started, bool)
        and isinstance(shared, bool)
        and isinstance(asked, str)
        and isinstance(ttl, float | int)
        and not isinstance(ttl, bool)
        and 0 <= ttl < 1e12
    ):
        raise CorruptEntry("fields of the wrong type")
    if started > 0:
        watermark = min(watermark, float(started))
    return CacheEntry(
        text, payload, category, epoch, kb_version, tag_versions, negative, hits, watermark,
        tokens, model, float(started), shared, asked[:MAX_ASKED], float(ttl),
    )  # fmt: skip
