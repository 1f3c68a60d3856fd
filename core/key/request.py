"""The request every tier reads, and the exact key derived from it."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b

import msgpack

from ..runtime.memo import ENTRY_BYTES, Memo, text_size
from .material import is_material
from .normalize import normalize

__all__ = [
    "CacheRequest",
    "Turn",
    "context_fingerprint",
    "context_token",
    "decode_request",
    "encode_request",
    "entry_prefix",
    "exact_key",
    "is_entry_key",
    "memo_bytes",
    "normalize_query",
    "text_bytes",
]

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier message of a conversation: its role, its text, and ``meta``, every other
    field that can change the answer as canonical text (name, tool calls …; "" when none)."""

    role: str
    content: str
    meta: str = ""


@dataclass(frozen=True, slots=True)
class CacheRequest:
    """One normalized view of an LLM call (DESIGN.md, "What makes a key").

    Wrong types raise ``TypeError`` here, at the boundary, so nothing deeper has to guess.
    """

    query: str
    system: str = ""
    history: tuple[Turn, ...] = ()
    namespace: str = "default"
    tenant: str = "default"
    llm_key: str = ""
    category: str | None = None
    tags: tuple[str, ...] = field(default=())
    query_meta: str = ""  # the question message's other fields (its author's name …)
    # (cache version, volatile, exact key) of the last ``exact_key``: a request is immutable,
    # and an adapter that memoizes its requests looks the same one up again and again
    _key: tuple[str, bool, str] | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not (
            type(self.query) is str
            and type(self.system) is str
            and type(self.tenant) is str
            and type(self.llm_key) is str
        ):  # one fast test for the common case; the slow path names the culprit
            for name in ("query", "system", "tenant", "llm_key"):
                _require_str(name, getattr(self, name))
        if not isinstance(self.namespace, str) or not _NAME.match(self.namespace):
            raise ValueError(
                f"namespace must be 1-64 characters of [A-Za-z0-9_.-], got {self.namespace!r}"
            )
        if self.category is not None:
            _require_str("category", self.category)
        if type(self.query_meta) is not str:
            _require_str("query_meta", self.query_meta)
        if self.history != ():
            object.__setattr__(self, "history", _turns(self.history))
        if self.tags != ():
            object.__setattr__(self, "tags", _tags(self.tags))


def _require_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"CacheRequest.{name} must be str, got {type(value).__name__}")


def _turns(history: Iterable[object]) -> tuple[Turn, ...]:
    if isinstance(history, str | bytes) or not isinstance(history, Iterable):
        raise TypeError(
            f"CacheRequest.history must be a sequence of turns, got {type(history).__name__}"
        )
    turns = []
    for item in history:
        if isinstance(item, Turn):
            turn = item
        elif isinstance(item, Sequence) and len(item) in (2, 3):
            turn = Turn(*item)
        else:
            raise TypeError(
                f"CacheRequest.history items must be Turn or (role, content), got {item!r:.80}"
            )
        _require_str("history role", turn.role)
        _require_str("history content", turn.content)
        _require_str("history meta", turn.meta)
        turns.append(turn)
    return tuple(turns)


def _tags(tags: Iterable[object]) -> tuple[str, ...]:
    if isinstance(tags, str | bytes):
        raise TypeError("CacheRequest.tags must be a sequence of str, not a string")
    out: set[str] = set()
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"CacheRequest.tags items must be non-empty str, got {tag!r:.80}")
        out.add(tag)
    return tuple(sorted(out))


def encode_request(request: CacheRequest) -> bytes:
    """The request as MessagePack (to finish its write in another process)."""
    history = [[t.role, t.content, t.meta] for t in request.history]
    r = request
    fields = [r.query, r.system, history, r.namespace, r.tenant, r.llm_key, r.category,
              list(r.tags), r.query_meta]  # fmt: skip
    return bytes(msgpack.packb([1, *fields], unicode_errors="surrogatepass"))


def decode_request(data: bytes) -> CacheRequest | None:
    """The request ``data`` holds, or ``None`` for anything else (a hostile or old value)."""
    try:
        fields = msgpack.unpackb(data, raw=False, unicode_errors="surrogatepass")
        if not (isinstance(fields, list) and len(fields) == 10 and fields[0] == 1):
            return None
        query, system, history, namespace, tenant, llm_key, category, tags, meta = fields[1:]
        turns = tuple(Turn(*t) for t in history)
        return CacheRequest(query, system, turns, namespace, tenant, llm_key, category,
                            tuple(tags), meta)  # fmt: skip
    except Exception:  # wrong types raise in CacheRequest itself
        return None


def text_bytes(text: str) -> bytes:
    """UTF-8 that also encodes lone surrogates, so distinct strings never collide."""
    return text.encode("utf-8", "surrogatepass")


def context_fingerprint(request: CacheRequest, *, volatile: bool = False) -> str:
    """Digest of everything around the question: the system prompt, every earlier turn (role,
    text and other fields) and the question message's own fields, each normalized.

    Two requests with the same fingerprint were asked in the same context; the semantic tier
    compares questions only then.  ``volatile=True`` folds timestamps and ids in the context
    (for apps that declare the context they inject per request volatile).
    """
    h = blake2b(digest_size=16)
    h.update(_piece(request.system, volatile))
    for turn in request.history:
        h.update(b"\x1e" + _piece(turn.role, False) + _piece(turn.content, volatile))
        h.update(_piece(turn.meta, False))
    h.update(b"\x1d" + _piece(request.query_meta, False))
    return h.hexdigest()


def _piece(text: str, volatile: bool) -> bytes:
    """The digest of one normalized piece of context, memoized: a conversation repeats its
    earlier turns on every call."""
    if not text:
        return _EMPTY_PIECE
    memo, key = _PIECES[volatile], text if len(text) <= _SHORT else _long_key(text)
    found = memo.get(key)
    if found is None:
        found = blake2b(text_bytes(normalize(text, volatile=volatile)), digest_size=16).digest()
        memo.put(key, found, ENTRY_BYTES + text_size(key, found))
    return found


def context_token(text: str) -> str:
    """A digest of ``text`` to put in a request's ``system`` (a retrieved context, an index
    id …).  Base32, not hex: normalization turns long hex ids and UUIDs into placeholders, which
    would make every such digest look alike."""
    digest = blake2b(text_bytes(text), digest_size=20).digest()
    return "ctx-" + base64.b32encode(digest).decode("ascii").lower()


def keyed_query(request: CacheRequest) -> str:
    """The question as the exact key holds it: normalized, or as typed (bar line ends) when it
    is material the model works on (``material.py``: "Translate the user's message …")."""
    if is_material(request.system, request.query):
        return request.query.replace("\r\n", "\n")
    return normalize_query(request.query)


def normalize_query(query: str) -> str:
    """``normalize`` with a memo (repeats are what a cache sees most, and a lookup and its
    write-back key the same prompt); queries over 512 KB are normalized each time."""
    if len(query) > _MEMO_MAX_CHARS:
        return normalize(query)
    key = query if len(query) <= _SHORT else _long_key(query)
    found = _QUERIES.get(key)
    if found is None:
        found = normalize(query)
        _QUERIES.put(key, found, ENTRY_BYTES + text_size(key, found))
    return found


def exact_key(request: CacheRequest, *, cache_version: str = "1", volatile: bool = False) -> str:
    """The exact-tier key: a readable prefix and a blake2b digest, never the prompt text.  It
    covers the whole request: namespace, tenant, the model and its settings, the whole context
    (``context_fingerprint``) and the normalized question.  Kept on the request, for the
    next time it is looked up."""
    kept = request._key
    if kept is not None and kept[0] == cache_version and kept[1] == volatile:
        return kept[2]
    key = _digested_key(request, cache_version, volatile)
    object.__setattr__(request, "_key", (cache_version, volatile, key))
    return key


def _digested_key(request: CacheRequest, cache_version: str, volatile: bool) -> str:
    parts = (
        cache_version,
        request.namespace,
        request.tenant,
        request.llm_key,
        context_fingerprint(request, volatile=volatile),
        keyed_query(request),
    )
    # length-prefixed parts: no two different requests produce the same material
    material = "".join([f"{len(p)}:{p}" for p in parts])
    digest = blake2b(text_bytes(material), digest_size=20).hexdigest()
    return entry_prefix(request.namespace) + digest


def entry_prefix(namespace: str) -> str:
    """What every exact-tier key of ``namespace`` starts with (the stores scan by it)."""
    return f"tricache:{namespace}:x:"


def is_entry_key(key: str, namespace: str) -> bool:
    """True when ``key`` has the form of an exact-tier key of ``namespace``."""
    prefix = entry_prefix(namespace)
    return key.startswith(prefix) and _DIGEST.fullmatch(key[len(prefix) :]) is not None


_DIGEST = re.compile(r"[0-9a-f]{40}")


# Memos bounded by bytes.  A short text is its own key; a longer one is keyed on its digest
# (bytes: never equal to a text), so it costs 16 bytes here, not its length.
_PIECES: tuple[Memo[bytes], Memo[bytes]] = (Memo(4 * 2**20), Memo(4 * 2**20))  # [volatile]
_QUERIES: Memo[str] = Memo(16 * 2**20)
_SHORT = 256
_EMPTY_PIECE = blake2b(b"", digest_size=16).digest()  # normalize("") is ""
_MEMO_MAX_CHARS = 512 * 1024


def _long_key(text: str) -> bytes:
    return blake2b(text_bytes(text), digest_size=16).digest()


def memo_bytes() -> int:
    """Bytes held by the memos of context pieces and normalized queries (``Cache.stats()``)."""
    return _PIECES[0].bytes + _PIECES[1].bytes + _QUERIES.bytes
