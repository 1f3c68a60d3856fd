"""Chain-level caching: cache a whole chain's output for the same input to the same chain.

A hit in a RAG chain skips retrieval as well as the LLM.  Tag the entries with the knowledge
base (``tags=["kb:docs"]``) and ``cache.invalidate("kb:docs")`` — or ``cache.bump_kb_version()``
— when the index changes.

The key holds the whole input and a fingerprint of the chain (its prompts, models, bound
settings and functions, and the values those read from their module, taken when the chain is
wrapped: see :mod:`.fingerprint`).  What a step reads that changes later — a setting, the
clock, a file — is not in it: such values belong in the input.

The user's question — a ``str`` input, or the ``question``/``query``/``input`` field — may also
match look-alike questions in the semantic tier, only ever among calls whose other fields are
all the same.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    BaseMessage,
    message_to_dict,
)
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import ensure_config
from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from tricache import Cache, CacheRequest
from tricache.key.options import entry_options, options_from
from tricache.key.request import context_token
from tricache.verbs import CacheVerbs

from .cache import current_tenant
from .codec import CHAIN
from .fingerprint import opaque_part, runnable_fingerprint

__all__ = ["CachedRunnable", "with_tricache"]

log = logging.getLogger(__name__)

_QUESTION_FIELDS = ("question", "query", "input")


class CachedRunnable(CacheVerbs, RunnableSerializable[Any, Any]):
    """``runnable`` with its output cached; see :func:`with_tricache`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    runnable: Runnable[Any, Any]
    tricache: Cache
    key: Callable[[Any], str] | None = None
    name_for_key: str = ""
    tags_for_entries: Sequence[str] = ()
    category: str | None = None
    semantic: bool = True
    fingerprint: str | None = None  # the user's name for this chain and its version
    _llm_key: str | None = PrivateAttr(default=None)

    @field_validator("tags_for_entries", mode="before")
    @classmethod
    def _tags_not_a_string(cls, tags: Any) -> Any:
        if isinstance(tags, str | bytes):
            raise TypeError("tags must be a list of tags, not one string: tags=[tag]")
        return tags

    def model_post_init(self, __context: Any) -> None:
        structure = runnable_fingerprint(self.runnable)
        if structure is None and self.fingerprint is None:
            log.warning(
                "tricache: not caching %s: it holds %s, which has no reliable fingerprint; "
                "pass fingerprint='<this chain and its version>' to cache it",
                self.runnable.get_name(), opaque_part(self.runnable),
            )  # fmt: skip
        else:
            self._llm_key = "chain:" + json.dumps([self.name_for_key, self.fingerprint, structure])

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        request, semantic = self._request(input, config, kwargs)
        ask = partial(self.runnable.invoke, input, self._inner_config(config), **kwargs)
        if request is None:
            return ask()
        out = self.tricache.answer(request, ask, CHAIN.answer, CHAIN.served, semantic=semantic,
                                   faq=False, ttl=_ttl_of(config),
                                   category=self.category)  # fmt: skip
        return out.answer

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        request, semantic = self._request(input, config, kwargs)
        ask = partial(self.runnable.ainvoke, input, self._inner_config(config), **kwargs)
        if request is None:
            return await ask()
        out = await self.tricache.aanswer(request, ask, CHAIN.answer, CHAIN.served,
                                          semantic=semantic, faq=False, ttl=_ttl_of(config),
                                          category=self.category)  # fmt: skip
        return out.answer

    def _inner_config(self, config: RunnableConfig | None) -> RunnableConfig | None:
        """``config`` for the wrapped chain: what it caches inside (a model's answers, through
        ``set_llm_cache``) is written under this chain's tags too, and asks for answers written
        under them: ``invalidate(tag)`` then reaches every level, not only this output."""
        if not self.tags_for_entries:
            return config
        config = ensure_config(config)
        metadata = dict(config.get("metadata") or {})
        given = metadata.get("tricache_tags")
        given = list(given) if isinstance(given, list | tuple) else ([] if given is None else given)
        if isinstance(given, list):  # (anything else is the caller's error, raised where read)
            metadata["tricache_tags"] = list(dict.fromkeys([*given, *self.tags_for_entries]))
        return {**config, "metadata": metadata}

    def _request(
        self, input: Any, config: RunnableConfig | None, kwargs: dict[str, Any]
    ) -> tuple[CacheRequest | None, bool]:
        """The request for this call and whether look-alike questions may answer it; ``None``
        when the chain or this input cannot be keyed (the call is then not cached)."""
        if self._llm_key is None:
            return None, False
        question, rest = (self.key(input), None) if self.key is not None else _split(input)
        call = {"input": rest, "configurable": (config or {}).get("configurable"), "kwargs": kwargs}
        try:
            context = _canonical(call)
        except (TypeError, ValueError, RecursionError):  # no canonical form: not cacheable
            return None, False
        with entry_options(**options_from(ensure_config(config).get("metadata"))):
            request = self.tricache.request(
                context if question is None else question,
                system=context_token(context),  # every other field, exactly, in the key
                tenant=current_tenant(),
                llm_key=self._llm_key,
                category=self.category,
                tags=self.tags_for_entries,
            )
        return request, self.semantic and question is not None


def with_tricache(
    runnable: Runnable[Any, Any],
    cache: Cache | CacheVerbs,
    *,
    key: Callable[[Any], str] | None = None,
    name: str | None = None,
    tags: Sequence[str] = (),
    category: str | None = None,
    semantic: bool = True,
    fingerprint: str | None = None,
) -> CachedRunnable:
    """Cache ``runnable``'s output, keyed on the whole input and the chain's fingerprint.

    Look-alike questions (the semantic tier) may answer a ``str`` input or one whose
    ``question``, ``query`` or ``input`` field is a string, among calls identical in every
    other field.  An input with no canonical JSON form (messages and documents have one) is
    not cached.  ``key=lambda x: ...`` keys on that text instead of the input.  A chain with a
    part that cannot be fingerprinted (a vector store, a client …) is not cached unless
    ``fingerprint=`` names it (change it whenever the chain changes; it is in the key of any
    chain).  ``name`` separates
    chains sharing one cache; ``tags`` (a list) let ``cache.invalidate(tag)`` drop every output
    computed from a knowledge base that changed."""
    if isinstance(tags, str | bytes):
        raise TypeError("tags must be a list of tags, not one string: tags=[tag]")
    core = getattr(cache, "tricache", cache)  # a TriCache (or any adapter) holds its Cache
    if not isinstance(core, Cache):
        raise TypeError(f"with_tricache takes a Cache or a TriCache, not {type(cache).__name__}")
    return CachedRunnable(
        runnable=runnable,
        tricache=core,
        key=key,
        name_for_key=name or "",
        tags_for_entries=tuple(tags),
        category=category,
        semantic=semantic,
        fingerprint=fingerprint,
    )


def _ttl_of(config: RunnableConfig | None) -> Any:
    """The lifetime a run asks for (``config={"metadata": {"tricache_ttl": 600}}``)."""
    return options_from(ensure_config(config).get("metadata")).get("ttl")


# input → key ---------------------------------------------------------------------------------
def _split(value: Any) -> tuple[str | None, Any]:
    """The user's question in ``value`` (``None`` when it has none) and everything else."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict):
        for name in _QUESTION_FIELDS:
            if isinstance(value.get(name), str):
                others = {k: v for k, v in value.items() if k != name}
                return value[name], {"question_field": name, "others": others}
    return None, {"whole": value}


def _canonical(value: Any) -> str:
    """One text for one value: JSON with sorted keys, messages and LangChain objects as
    their serialized form; ``TypeError`` for anything else."""
    return json.dumps(
        value, default=_input_part, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def _input_part(obj: Any) -> Any:
    if isinstance(obj, BaseMessage):  # without the run's own ids and provider reports
        message = message_to_dict(obj)
        for name in ("id", "response_metadata", "usage_metadata"):
            message["data"].pop(name, None)
        return {"\x00message": message}
    if isinstance(obj, Serializable) and obj.is_lc_serializable():
        serialized = obj.to_json()
        if serialized.get("type") == "constructor":
            return {"\x00lc": serialized}
    if isinstance(obj, BaseModel):
        kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
        return {"\x00model": kind, "data": obj.model_dump(mode="json")}
    raise TypeError(f"no canonical form for {type(obj).__qualname__}")
