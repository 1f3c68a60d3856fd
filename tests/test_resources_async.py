"""Resources under cancellation, many event loops and big conversations (issue #14, "Never
slow, never stuck"): coalescing locks, asyncio Redis clients, memo memory."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import ssl
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
import redis
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import BaseMessage
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from pydantic import Field

import langchain_tricache.convert
import tricache.key.request
from langchain_tricache import CachedChatModel
from langchain_tricache.convert import parse_memo_bytes, parse_prompt
from llama_index_tricache import TriCacheLLM
from tricache import Cache, CacheRequest, Redis, Turn
from tricache.key.request import exact_key, memo_bytes
from tricache.stores.redis import RedisStore

from conftest import REDIS_URL, RedisServer, free_port

# Every wait below is bounded far under this: a caller that waited for the coalescing timeout
# (the bug) fails the test by its own bound, not by a tight wall-clock threshold.
COALESCE_TIMEOUT = 60.0
PROMPT = "What is the capital of Peru?"


# Which of a test's calls is running (LangChain runs the model in a task of its own).
CALLER: ContextVar[int] = ContextVar("caller", default=-1)


class SlowChat(FakeListChatModel):
    """langchain-core's fake chat model with a slow ``ainvoke``: it records which call
    (``CALLER``) reached it, sets ``started``, then holds until cancelled (``hold``) or sleeps
    ``delay``."""

    hold: bool = True
    delay: float = 0.0
    calls: int = 0
    callers: list[int] = Field(default_factory=list)
    started: Any = None

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> BaseMessage:
        self.calls += 1
        self.callers.append(CALLER.get())
        if self.started is not None:
            self.started.set()
        if self.hold:
            await asyncio.Event().wait()  # until cancelled
        await asyncio.sleep(self.delay)
        return await super().ainvoke(input, config, **kwargs)


@pytest.fixture
def shared(namespace: str, redis_client: redis.Redis) -> Iterator[Any]:
    """Caches of one namespace on the real Redis, as separate processes would have them (with
    a timeout a storm of connections on a busy test machine does not run out of)."""
    made: list[Cache] = []

    def make() -> Cache:
        made.append(
            Cache(store=Redis(REDIS_URL, timeout=2), namespace=namespace, semantic=False, faq=False)
        )
        return made[-1]

    yield make
    for cache in made:
        cache.close()


def locks(client: redis.Redis, namespace: str) -> int:
    return len(client.keys(f"tricache:{namespace}:lock:*"))


def model_on(cache: Cache, inner: SlowChat) -> CachedChatModel:
    return CachedChatModel(inner=inner, tricache=cache, coalesce_timeout=COALESCE_TIMEOUT)


def calls_of(model: CachedChatModel, n: int) -> list[asyncio.Task[BaseMessage]]:
    """``n`` identical calls, each marked with its index in ``CALLER``."""

    async def call(i: int) -> BaseMessage:
        CALLER.set(i)
        return await model.ainvoke(PROMPT)

    return [asyncio.create_task(call(i)) for i in range(n)]


# cancellation ------------------------------------------------------------------------------
def test_a_cancelled_leader_leaves_no_lock_and_the_next_call_does_not_wait(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    inner = SlowChat(responses=["Lima."])
    model = model_on(shared(), inner)

    async def scenario() -> BaseMessage:
        inner.started = asyncio.Event()
        leader = asyncio.create_task(model.ainvoke(PROMPT))
        await asyncio.wait_for(inner.started.wait(), 10)
        assert locks(redis_client, namespace) == 1
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert locks(redis_client, namespace) == 0
        inner.hold = False
        return await asyncio.wait_for(model.ainvoke(PROMPT), 10)

    reply = asyncio.run(scenario())
    assert reply.content == "Lima." and reply.response_metadata["tricache"]["tier"] == "llm"
    assert inner.calls == 2


def test_a_leader_cancelled_while_taking_the_lock_does_not_leave_it(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    """The store answers the lock request after the caller was cancelled: the lock it took
    is released, not left for the next caller to wait on."""
    cache = shared()
    store: Any = cache.exact.store
    taking = threading.Event()
    real_try_lock = store.try_lock

    def slow_try_lock(name: str, ttl: float) -> bool:
        taking.set()
        time.sleep(0.3)
        return bool(real_try_lock(name, ttl))

    store.try_lock = slow_try_lock
    inner = SlowChat(responses=["Lima."], hold=False)
    model = model_on(cache, inner)

    async def scenario() -> None:
        call = asyncio.create_task(model.ainvoke(PROMPT))
        assert await asyncio.to_thread(taking.wait, 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(scenario())
    assert inner.calls == 0
    deadline = time.monotonic() + 10
    while locks(redis_client, namespace) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert locks(redis_client, namespace) == 0


def test_a_follower_in_another_process_computes_once_the_cancelled_leader_is_gone(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    inner, other_inner = SlowChat(responses=["Lima."]), SlowChat(responses=["Lima."], hold=False)
    model, other = model_on(shared(), inner), model_on(shared(), other_inner)

    async def scenario() -> BaseMessage:
        inner.started = asyncio.Event()
        leader = asyncio.create_task(model.ainvoke(PROMPT))
        await asyncio.wait_for(inner.started.wait(), 10)
        follower = asyncio.create_task(other.ainvoke(PROMPT))
        await asyncio.sleep(0.3)
        assert not follower.done() and other_inner.calls == 0  # waiting on the Redis lock
        leader.cancel()
        return await asyncio.wait_for(follower, 10)

    reply = asyncio.run(scenario())
    assert reply.content == "Lima." and other_inner.calls == 1
    assert locks(redis_client, namespace) == 0


def test_followers_of_a_cancelled_leader_elect_one_new_leader(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    """Twenty identical calls, the leader cancelled: one more call to the model, not nineteen."""
    inner = SlowChat(responses=["Lima."], delay=0.2)
    model = model_on(shared(), inner)

    async def scenario() -> list[Any]:
        inner.started = asyncio.Event()
        calls = calls_of(model, 20)
        await asyncio.wait_for(inner.started.wait(), 10)
        inner.hold = False
        (leader,) = inner.callers
        calls[leader].cancel()
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)

    results = asyncio.run(scenario())
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 1
    assert [r.content for r in results if isinstance(r, BaseMessage)] == ["Lima."] * 19
    assert inner.calls == 2 and locks(redis_client, namespace) == 0


def test_cancellation_storms_leave_no_lock_and_no_task(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    """Hundreds of identical calls, half of them cancelled at random moments (the first leader
    among them); then a round where every call is cancelled.  The rest are answered, nothing
    is left behind, and the next call is answered at once."""
    rng = random.Random(14)
    inner = SlowChat(responses=["Lima."], hold=False, delay=0.3)
    model = model_on(shared(), inner)

    async def storm(n: int, cancelled: int) -> list[Any]:
        loop = asyncio.get_running_loop()
        inner.callers.clear()
        inner.started = asyncio.Event()
        calls = calls_of(model, n)
        await asyncio.wait_for(inner.started.wait(), 10)
        doomed = {calls[inner.callers[0]], *rng.sample(calls, cancelled)}
        for call in doomed:
            loop.call_later(rng.uniform(0, 0.6), call.cancel)
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 20)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return results

    async def scenario() -> tuple[list[Any], int, list[Any], BaseMessage]:
        half = await storm(300, 150)
        calls = inner.calls
        model.tricache.clear()  # the answer is stored: the next storm must miss again
        inner.hold = True  # no call can be answered before it is cancelled
        everyone = await storm(200, 200)
        inner.hold = False
        return half, calls, everyone, await asyncio.wait_for(model.ainvoke(PROMPT), 10)

    half, calls, everyone, after = asyncio.run(scenario())
    answered = [r for r in half if isinstance(r, BaseMessage)]
    assert all(isinstance(r, BaseMessage | asyncio.CancelledError) for r in half)
    assert len(answered) >= 300 - 151 and {r.content for r in answered} == {"Lima."}
    assert all(isinstance(r, asyncio.CancelledError) for r in everyone)
    assert after.content == "Lima."
    assert locks(redis_client, namespace) == 0
    assert calls <= 20  # one per leader cancelled (the first one included), not one per waiter


class HeldLLM(CustomLLM):
    """A LlamaIndex LLM whose ``acomplete`` holds until cancelled while ``hold``."""

    hold: bool = True
    calls: int = 0
    started: Any = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="held")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="Lima.")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        self.calls += 1
        self.started.set()
        if self.hold:
            await asyncio.Event().wait()  # until cancelled
        return CompletionResponse(text="Lima.")


def test_a_cancelled_llama_index_call_leaves_no_lock(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    inner = HeldLLM()
    llm = TriCacheLLM(inner, cache=shared(), coalesce_timeout=COALESCE_TIMEOUT)

    async def scenario() -> CompletionResponse:
        inner.started = asyncio.Event()
        call = asyncio.create_task(llm.acomplete(PROMPT))
        await asyncio.wait_for(inner.started.wait(), 10)
        assert locks(redis_client, namespace) == 1
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert locks(redis_client, namespace) == 0
        inner.hold = False
        return await asyncio.wait_for(llm.acomplete(PROMPT), 10)

    assert asyncio.run(scenario()).text == "Lima." and inner.calls == 2


def test_a_failing_thread_leader_releases_the_redis_lock(
    shared: Any, redis_client: redis.Redis, namespace: str
) -> None:
    class Failing(FakeListChatModel):
        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.2)
            raise RuntimeError("model down")

    model = CachedChatModel(
        inner=Failing(responses=["x"]), tricache=shared(), coalesce_timeout=COALESCE_TIMEOUT
    )
    errors: list[BaseException] = []

    def call() -> None:
        try:
            model.invoke(PROMPT)
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert len(errors) == 4 and locks(redis_client, namespace) == 0


# asyncio clients -----------------------------------------------------------------------------
def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_two_thousand_event_loops_keep_the_open_files_bounded(namespace: str) -> None:
    """``asyncio.run(cache.alookup(...))`` 2,000 times, each reading Redis with the asyncio
    client: each loop's client is closed with its loop, and no ResourceWarning is left.  In a
    process of its own, so no other test's leftovers are counted."""
    import json
    import subprocess
    import sys

    script = f"""
import asyncio, gc, json, os, warnings
from tricache import Cache, Exact, Redis
cache = Cache(store=Redis({REDIS_URL!r}, timeout=1.0), namespace={namespace!r}, semantic=False,
              faq=False, exact=Exact(l1_max_items=1))
requests = [cache.request(f"Question {{i}}?") for i in range(2)]
for request in requests:
    cache.lookup(request)
    cache.update(request, "An answer.")
gc.collect()
before = len(os.listdir("/proc/self/fd"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", ResourceWarning)
    served = sum(asyncio.run(cache.alookup(requests[i % 2])) is not None for i in range(2000))
    gc.collect()
after = len(os.listdir("/proc/self/fd"))
hits = cache.metrics.count("exact", "hits_l2")
cache.clear()
cache.close()
print(json.dumps({{"served": served, "hits_l2": hits, "fds": after - before,
                  "resource_warnings": sum(issubclass(w.category, ResourceWarning)
                                           for w in caught)}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["served"] == report["hits_l2"] == 2000  # each one went to Redis
    assert report["fds"] <= 10
    assert report["resource_warnings"] == 0


def test_aclose_and_close_close_the_asyncio_clients(namespace: str) -> None:
    store = RedisStore(REDIS_URL, timeout=1.0)
    key = f"tricache:{namespace}:x:1"

    async def use_then_aclose() -> tuple[int, int, int]:
        before = open_fds()
        await store.aget(key)
        used = open_fds()
        await store.aclose()  # in the loop, before it shuts down
        closed = open_fds()
        await store.aget(key)  # a new client for this loop
        return before, used, closed

    before, used, closed = asyncio.run(use_then_aclose())
    assert used == before + 1 and closed == before

    idle = asyncio.new_event_loop()  # not running when close() is called
    before = open_fds()
    idle.run_until_complete(store.aget(key))
    assert open_fds() == before + 1
    store.close()
    assert open_fds() == before
    idle.close()


# connecting ------------------------------------------------------------------------------------
def test_a_tls_url_to_a_plain_redis_fails_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``rediss://`` to a server that does not speak TLS: each attempt (the breaker's retries)
    costs the store's timeout, the SSL context redis-py builds for it included (slowed here to
    0.4 s, as a busy machine may load its CA bundle), not the context and then the timeout."""
    real = ssl.create_default_context

    def slow_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        time.sleep(0.4)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", slow_context)
    store = RedisStore(REDIS_URL.replace("redis://", "rediss://"), timeout=0.5)
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(redis.RedisError):
            store.get("tricache:tls:x:1")
        assert time.monotonic() - started < 0.8  # 0.5, not 0.4 + 0.5
    store.close()


def test_tls_round_trips(tmp_path: Path, namespace: str) -> None:
    """A Redis that speaks TLS: the budgeted connect reads and writes, sync and async."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    server = RedisServer(
        tmp_path,
        ["--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
         "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"],
    )  # fmt: skip
    server.start()
    try:
        store = RedisStore(f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none", timeout=2)
        entry = f"tricache:{namespace}:x:1"
        store.set(entry, b"over TLS", 60)
        assert store.get(entry) is not None and store.get(entry).value == b"over TLS"  # type: ignore[union-attr]
        found = asyncio.run(store.aget(entry))
        assert found is not None and found.value == b"over TLS"
        store.close()
    finally:
        server.stop()


# memory ------------------------------------------------------------------------------------
def kept_by(run: Callable[[], None]) -> int:
    """Bytes allocated while ``run()`` ran, by code it called, and still held after it (what
    other threads allocate meanwhile is not counted)."""
    tracemalloc.start(6)  # deep enough to reach run() from each allocation below
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


def test_the_fingerprint_memos_are_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """4,096 conversations of ~50 KB each: the memos keep digests of long texts, so what
    they hold stays within their byte bounds, and ``memo_bytes()`` says what they hold."""
    # normalization is not what is measured here: a cheap stand-in that still makes a copy
    upper = lambda text, volatile=False: text.upper()  # noqa: E731
    monkeypatch.setattr(tricache.key.request, "normalize", upper)
    filler = "中" + "x" * 998  # two bytes a character: a memo that keeps texts shows at once
    for memo in (*tricache.key.request._PIECES, tricache.key.request._QUERIES):
        memo.clear()  # what is evicted must have been traced, or the comparison is off

    def conversations() -> None:
        for i in range(4096):
            history = tuple(Turn("human" if j % 2 else "ai", f"{i}.{j}{filler}") for j in range(25))
            exact_key(CacheRequest(f"{i} {filler}", system="Be brief.", history=history))

    grown = kept_by(conversations)
    assert memo_bytes() <= 24 * 2**20  # the memos' bounds: 2 x 4 MiB of pieces, 16 MiB of queries
    assert grown <= memo_bytes() + 2**20  # the counter does not under-report
    assert grown < 24 * 2**20  # not the 200 MB these conversations weigh


KINDS = ["SystemMessage", *["HumanMessage", "AIMessage"] * 6, "HumanMessage"]


def test_the_langchain_prompt_memo_is_bounded_by_bytes() -> None:
    """4,096 distinct chat prompts of ~14 KB: parsed prompts are kept within 16 MiB."""
    turn = "y" * 1000
    langchain_tricache.convert._PARSED.clear()  # as above: evicted items must be traced

    def prompts() -> None:
        for i in range(4096):
            messages = [
                {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", kind],
                 "kwargs": {"content": f"{i}.{j} {turn}", "type": "x"}}
                for j, kind in enumerate(KINDS)
            ]  # fmt: skip
            assert parse_prompt(json.dumps(messages)).query.startswith(f"{i}.13")

    grown = kept_by(prompts)
    assert parse_memo_bytes() <= 16 * 2**20
    assert grown <= parse_memo_bytes() + 2**20
