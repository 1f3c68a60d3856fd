"""What shapes a query engine's answer, as one digest (``engine_fingerprint``).

The engine is described by walking its parts: retriever (filters, ``similarity_top_k``, query
mode …), node postprocessors and their settings, response synthesizer (mode, prompts, prompt
helper), LLMs (by :func:`llm_key`) and the index (by its id; what it holds is watched
separately).  LlamaIndex objects are walked attribute by attribute; anything the walk cannot
describe for sure — an object from another library, a lambda or closure, a structure too large —
makes the engine *opaque*: it is then not cached at all.
"""

from __future__ import annotations

import functools
import inspect
import json
from enum import Enum
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.base import BaseIndex
from llama_index.core.llms import LLM
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.index_store.types import BaseIndexStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStore
from pydantic import BaseModel

from tricache.key.request import context_token

from .convert import llm_key

__all__ = ["Opaque", "engine_fingerprint"]

# Plumbing that never changes an answer: callbacks, logging, progress bars, concurrency.
_SKIP = frozenset(
    {"callback_manager", "_callback_manager", "verbose", "_verbose", "show_progress",
     "_show_progress", "use_async", "_use_async"}
)  # fmt: skip
# The index's storage: it answers for the index, whose id is in the fingerprint.
_STORAGE = (BaseDocumentStore, BaseIndexStore, BasePydanticVectorStore, VectorStore)
_MAX_OBJECTS = 5000
_MAX_DEPTH = 40


class Opaque(Exception):
    """A part of the engine whose effect on the answer cannot be described."""


def engine_fingerprint(engine: Any) -> str:
    """A digest of everything ``engine`` answers with; :class:`Opaque` when it can't be had."""
    walk = _Walk()
    described = walk(engine, 0)
    prompts = getattr(engine, "get_prompts", None)
    if callable(prompts):  # every module's prompts, including ones set with update_prompts
        described = [described, walk(prompts(), 0)]
    return context_token(json.dumps(described, sort_keys=True, ensure_ascii=False))


class _Walk:
    """One walk over an engine's object graph (counts objects, detects cycles)."""

    def __init__(self) -> None:
        self.seen = 0
        self.path: set[int] = set()

    def __call__(self, value: Any, depth: int) -> Any:
        self.seen += 1
        if self.seen > _MAX_OBJECTS or depth > _MAX_DEPTH:
            raise Opaque("too large to describe")
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, Enum):
            return [_name(type(value)), self(value.value, depth + 1)]
        if isinstance(value, list | tuple):
            return [self(v, depth + 1) for v in value]
        if isinstance(value, set | frozenset):
            return sorted(json.dumps(self(v, depth + 1), sort_keys=True) for v in value)
        if isinstance(value, dict):
            return {_key(k): self(v, depth + 1) for k, v in value.items()}
        if id(value) in self.path:  # a back reference: the object is described above
            return ["cycle", _name(type(value))]
        self.path.add(id(value))
        try:
            return [_name(type(value)), self._object(value, depth)]
        finally:
            self.path.discard(id(value))

    def _object(self, value: Any, depth: int) -> Any:
        """What identifies an object: its key, id or name, else its attributes."""
        if isinstance(value, LLM):
            return llm_key(value, "query_engine", {})
        if isinstance(value, BaseIndex):
            return value.index_id
        if isinstance(value, _STORAGE):
            return None
        if isinstance(value, type):
            return _schema(value)
        if inspect.ismethod(value):
            return [_function(value.__func__), self(value.__self__, depth + 1)]
        if inspect.isfunction(value):
            return _function(value)
        if isinstance(value, functools.partial):
            return self([value.func, value.args, value.keywords], depth + 1)
        if not _from_llama_index(type(value)):
            raise Opaque(f"{_name(type(value))} is not a LlamaIndex object")
        if isinstance(value, BaseModel):  # fields only: private attributes are derived state
            names = set(type(value).model_fields)
            if isinstance(value, BaseEmbedding):
                names.discard("embeddings_cache")  # a cache of the model's own answers
            return self({n: getattr(value, n) for n in names - _SKIP}, depth + 1)
        if hasattr(value, "__dict__"):
            return self({n: v for n, v in vars(value).items() if n not in _SKIP}, depth + 1)
        raise Opaque(f"{_name(type(value))} has no attributes to describe")


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _key(key: Any) -> str:
    if isinstance(key, str | int | Enum):
        return str(key.value if isinstance(key, Enum) else key)
    raise Opaque(f"a mapping keyed by {type(key).__name__}")


def _schema(cls: type) -> Any:
    """A class by its name, and its JSON schema when it is an output model."""
    if issubclass(cls, BaseModel):
        return [_name(cls), cls.model_json_schema()]
    return _name(cls)


def _function(function: Any) -> str:
    """A function by its name; a lambda, local function or closure cannot be described."""
    if function.__closure__ is not None or "<" in function.__qualname__:
        raise Opaque(f"function {function.__qualname__} cannot be described by its name")
    return f"{function.__module__}.{function.__qualname__}"


def _from_llama_index(cls: type) -> bool:
    """True when ``cls`` or one of its bases is a LlamaIndex class (pure Python, its state in
    its attributes), so that walking the attributes describes it."""
    return any(c.__module__.startswith("llama_index.") for c in cls.__mro__[:-1])
