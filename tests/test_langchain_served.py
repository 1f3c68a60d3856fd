"""A hit's generations are built from the entry once and copied for every hit: each copy is
what a validated rebuild of the payload would be, and shares nothing mutable with the cache
or with another hit; a core hit copies its payload only when the payload is read."""

from __future__ import annotations

import asyncio
import gc
import itertools
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, Generation

from langchain_tricache import TriCache
from langchain_tricache.convert import (
    _SERVED,
    generations_from_payload,
    generations_of,
    payload_from_generations,
)
from tricache import Cache
from tricache.hit import STORED, Hit, fresh
from tricache.key.entry import CacheEntry

TIER = {"tier": "exact", "level": "l1", "score": None, "entry_id": "k"}


def _rich() -> AIMessage:
    return AIMessage(
        content="Rotate the key, then revoke the old one.",
        additional_kwargs={"refusal": None, "nested": {"list": [1, {"deep": "x"}]}},
        response_metadata={"model_name": "m", "logprobs": {"content": [{"t": "a"}]}},
        tool_calls=[
            {
                "name": "rotate",
                "args": {"keys": ["a", "b"], "opts": {"n": 1}},
                "id": "c1",
                "type": "tool_call",
            }
        ],
        invalid_tool_calls=[
            {"name": "bad", "args": "{", "id": "c2", "error": "json", "type": "invalid_tool_call"}
        ],
        usage_metadata={
            "input_tokens": 3,
            "output_tokens": 4,
            "total_tokens": 7,
            "input_token_details": {"cache_read": 1},
        },
        name="helper",
        an_extra_field={"kept": ["as", "an", "extra"]},
    )


PAYLOADS = {
    "plain chat": [ChatGeneration(message=AIMessage("Hello."))],
    "rich chat": [
        ChatGeneration(
            message=_rich(), generation_info={"finish_reason": "stop", "more": {"a": [1]}}
        )
    ],
    "chunk": [ChatGeneration(message=AIMessageChunk(content="part", response_metadata={"a": 1}))],
    "content blocks": [
        ChatGeneration(
            message=AIMessage(
                content=[{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
            )
        )
    ],
    "text": [Generation(text="plain", generation_info={"finish_reason": "stop", "l": [1]})],
    "text without info": [Generation(text="plain")],
    "two": [ChatGeneration(message=AIMessage("a")), ChatGeneration(message=AIMessage("b"))],
}


def _same(a: Any, b: Any) -> None:
    """``a`` and ``b`` are the same generation: equal, same class, same fields set (the
    message's too), the same serialization."""
    assert type(a) is type(b) and a == b
    assert a.model_fields_set == b.model_fields_set
    assert dumps(a) == dumps(b)
    if isinstance(a, ChatGeneration):
        assert type(a.message) is type(b.message)
        assert a.message.model_fields_set == b.message.model_fields_set
        assert a.message.__pydantic_extra__ == b.message.__pydantic_extra__
        assert a.text == b.text and type(a.text) is type(b.text)


def _containers(value: Any, found: list[Any]) -> list[Any]:
    """Every dict and list inside ``value`` (a model's fields and extras included)."""
    if hasattr(value, "__pydantic_fields_set__"):
        for field in (value.__dict__, value.__pydantic_extra__ or {}):
            for item in field.values():
                _containers(item, found)
        return found
    if isinstance(value, dict):
        found.append(value)
        for item in value.values():
            _containers(item, found)
    elif isinstance(value, list):
        found.append(value)
        for item in value:
            _containers(item, found)
    return found


@pytest.mark.parametrize("name", sorted(PAYLOADS))
@pytest.mark.parametrize("tier", [TIER, None], ids=["tagged", "untagged"])
def test_served_generations_are_the_validated_rebuild(name: str, tier: Any) -> None:
    payload = payload_from_generations(PAYLOADS[name])
    entry = CacheEntry("text", payload=payload)
    for _ in range(3):  # the first builds the shapes, the others copy them
        served = generations_of(entry, tier)
        rebuilt = generations_from_payload(fresh(payload), tier)
        assert len(served) == len(rebuilt)
        for a, b in zip(served, rebuilt, strict=True):
            _same(a, b)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_served_generations_share_nothing_mutable(name: str) -> None:
    payload = payload_from_generations(PAYLOADS[name])
    before = fresh(payload)
    entry = CacheEntry("text", payload=payload)
    one, two = generations_of(entry, dict(TIER)), generations_of(entry, dict(TIER))  # (per hit)
    ids_two = {id(c) for c in _containers(two, [])}
    ids_payload = {id(c) for c in _containers(payload, [])}
    mine = _containers(one, [])
    assert mine and not {id(c) for c in mine} & (ids_two | ids_payload)
    assert all(a is not b for a, b in zip(one, two, strict=True))
    for container in mine:  # the app changes everything it was served
        if isinstance(container, dict):
            container["changed"] = True
        else:
            container.append("changed")
    assert entry.payload == before
    for a, b in zip(generations_of(entry, TIER), generations_from_payload(fresh(before), TIER),
                    strict=True):  # fmt: skip
        _same(a, b)


def test_a_payload_not_ours_still_raises() -> None:
    with pytest.raises(ValueError):
        generations_of(CacheEntry("text", payload={"v": 2}), TIER)


def test_a_hit_copies_its_entrys_payload_when_read() -> None:
    entry = CacheEntry("text", payload={"a": [1, {"b": 2}]})
    hit = Hit(text="text", payload=STORED, tier="exact", level="l1", key="k", entry=entry)
    payload = hit.payload
    assert payload == entry.payload and payload is not entry.payload
    assert hit.payload is payload  # one copy per hit
    assert Hit(text="text", payload=STORED, tier="exact", level="l1", key="k", entry=entry) == hit
    payload["a"][1]["b"] = 3
    assert entry.payload == {"a": [1, {"b": 2}]}
    given = Hit(text="t", payload={"x": 1}, tier="faq", level="app", key="k", entry=entry)
    assert given.payload == {"x": 1} and given != hit
    assert "payload={'a': [1, {'b': 3}]}" in repr(hit)


@pytest.fixture
def tricache(tmp_path: Path) -> Iterator[TriCache]:
    with Cache(path=tmp_path / "c.sqlite3", semantic=False, faq=False) as core:
        yield TriCache(cache=core)


def test_an_app_that_edits_its_answer_never_changes_the_next_hit(tricache: TriCache) -> None:
    model = GenericFakeChatModel(messages=itertools.repeat(_rich()), cache=tricache)
    prompt = [SystemMessage("Be brief."), HumanMessage("How do I rotate my keys?")]
    first = model.invoke(prompt)
    served = model.invoke(prompt)
    assert served.response_metadata["tricache"]["tier"] == "exact"
    for container in _containers(served, []):
        if isinstance(container, dict):
            container["changed"] = True
        else:
            container.append("changed")
    again = model.invoke(prompt)
    assert again.response_metadata["tricache"]["tier"] == "exact"
    assert again.additional_kwargs == first.additional_kwargs
    assert again.tool_calls == first.tool_calls and again.usage_metadata is not None
    assert again.an_extra_field == {"kept": ["as", "an", "extra"]}  # type: ignore[attr-defined]
    assert "changed" not in again.response_metadata


def test_the_wrapper_serves_fresh_messages_too(tmp_path: Path) -> None:
    from langchain_tricache import CachedChatModel

    with Cache(path=tmp_path / "w.sqlite3", semantic=False, faq=False) as core:
        inner = GenericFakeChatModel(messages=itertools.repeat(_rich()))
        model = CachedChatModel(inner=inner, tricache=core)
        first = model.invoke("How do I rotate my keys?")
        served = model.invoke("How do I rotate my keys?")
        assert served.response_metadata["tricache"]["tier"] == "exact"
        for container in _containers(served, []):
            if isinstance(container, dict):
                container["changed"] = True
            else:
                container.append("changed")
        again = model.invoke("How do I rotate my keys?")
        assert again.response_metadata["tricache"]["tier"] == "exact"
        assert again.additional_kwargs == first.additional_kwargs
        assert again.tool_calls == first.tool_calls
        assert "changed" not in again.response_metadata


def _kept_by(run: Any) -> int:
    """Bytes allocated while ``run()`` ran, by code it called, and still held after it."""
    tracemalloc.start(12)  # deep enough to reach run() from what pydantic allocates
    try:
        gc.collect()
        before = tracemalloc.take_snapshot()
        run()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    by_run = [tracemalloc.Filter(True, __file__, all_frames=True)]
    diff = after.filter_traces(by_run).compare_to(before.filter_traces(by_run), "filename")
    return sum(stat.size_diff for stat in diff)


@pytest.mark.parametrize("tokens", [0, 40])
def test_the_served_shapes_are_bounded_by_bytes(tokens: int) -> None:
    """Entries served once each, plain or with per-token log probabilities (many small dicts):
    the memo of their shapes keeps within 16 MiB and counts at least what it holds."""
    _SERVED.clear()

    def hits() -> None:
        for i in range(1500 if tokens else 5000):  # (each several times what 16 MiB holds)
            message = AIMessage(
                f"answer {i} " + "x" * 300,
                response_metadata={
                    "logprobs": [
                        {"token": f"t{j}", "logprob": -0.5, "top": []} for j in range(tokens)
                    ]
                },
            )
            payload = payload_from_generations([ChatGeneration(message=message)])
            generations_of(CacheEntry(f"answer {i}", payload=payload), dict(TIER))

    grown = _kept_by(hits)
    assert _SERVED.bytes <= 16 * 2**20
    assert grown <= _SERVED.bytes + 2**20  # the count does not under-report
    _SERVED.clear()


def test_an_answer_nested_deeper_than_recursion_goes_is_served_whole() -> None:
    deep: Any = "bottom"
    for _ in range(250):  # 500 levels: within what MessagePack writes (511)
        deep = {"d": [deep]}
    message = AIMessage("deep", additional_kwargs={"nested": deep})
    entry = CacheEntry("deep", payload=payload_from_generations([ChatGeneration(message=message)]))
    served = generations_of(entry, dict(TIER))  # (a copy by recursion raised: rebuilt whole)
    rebuilt = generations_from_payload(fresh(entry.payload), dict(TIER))
    assert (
        served == rebuilt
        and served[0].message.model_fields_set == rebuilt[0].message.model_fields_set
    )
    assert (
        served[0].message.additional_kwargs["nested"]
        is not entry.payload["generations"][0]["message"]["data"]["additional_kwargs"]["nested"]
    )


def test_an_answer_langchain_served_from_its_own_cache_is_stored_readable(tmp_path: Path) -> None:
    """LangChain marks what its cache served with ``usage_metadata={"total_cost": 0}``, which
    an AIMessage cannot be validated with: stored as it is, the entry could never be read
    back (every call a miss).  The incomplete usage is left out of what is stored."""
    from langchain_core.caches import InMemoryCache

    from langchain_tricache import CachedChatModel

    inner = GenericFakeChatModel(messages=itertools.repeat(AIMessage("Rome.")),
                                 cache=InMemoryCache())  # fmt: skip
    inner.invoke("Capital of Italy?")  # LangChain's cache holds it now
    cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
    model = CachedChatModel(inner=inner, tricache=cache)
    first = model.invoke("Capital of Italy?")
    assert first.content == "Rome." and first.usage_metadata == {"total_cost": 0}
    again = model.invoke("Capital of Italy?")
    assert again.content == "Rome." and again.response_metadata["tricache"]["tier"] == "exact"
    assert "corrupt" not in cache.metrics.snapshot()["exact"]
    cache.close()


@pytest.mark.parametrize("streamed", ["stream", "astream"])
def test_a_stream_langchain_served_from_its_own_cache_reaches_the_app(
    tmp_path: Path, streamed: str
) -> None:
    """The same message streamed: a model without native streaming answers ``stream`` with
    one whole message, which the wrapper turns into a chunk.  LangChain's ``{"total_cost":
    0}`` cannot be validated as a chunk's usage either: the stream raised into the app."""
    from langchain_core.caches import InMemoryCache

    from langchain_tricache import CachedChatModel

    inner = GenericFakeChatModel(messages=itertools.repeat(AIMessage("Rome.")),
                                 cache=InMemoryCache(), disable_streaming=True)  # fmt: skip
    inner.invoke("Capital of Italy?")  # LangChain's cache holds it now
    cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
    model = CachedChatModel(inner=inner, tricache=cache)

    def said() -> list[Any]:
        if streamed == "stream":
            return list(model.stream("Capital of Italy?"))
        return asyncio.run(_collected(model.astream("Capital of Italy?")))

    first = said()
    assert "".join(str(c.content) for c in first) == "Rome."
    again = said()
    assert "".join(str(c.content) for c in again) == "Rome."
    assert again[0].response_metadata["tricache"]["tier"] == "exact"
    cache.close()


async def _collected(chunks: Any) -> list[Any]:
    return [c async for c in chunks]
