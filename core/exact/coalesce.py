"""Request coalescing: concurrent identical misses make one LLM call.

The first caller for a key is the leader and computes; the others wait — threads on an event,
coroutines on an asyncio event, other processes on a lock in the shared store — then look the
answer up.  Waiting is bounded by ``timeout``: a waiter whose leader failed, or took too long,
computes on its own; a coroutine whose leader was cancelled takes a new turn at once (the
cancellation said nothing about the request).

A leader releases the store's lock on every way out: an answer, an error, a cancellation —
even one that comes while the lock is being taken or released.  Coroutines take and release
it in worker threads that their cancellation does not stop, and only a lock it took is
released.  Nothing here stores a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from ..stores.base import L2Store

__all__ = ["Coalescer"]

log = logging.getLogger(__name__)

# Store calls of coroutines: a module's own pool, so they outlive a loop's default executor.
_WORKERS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tricache-coalesce")


class _Flight:
    """A coroutine's turn as leader in its loop; its followers wait on ``done``."""

    __slots__ = ("cancelled", "done")

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.cancelled = False  # the leader was cancelled: it left no answer


class Coalescer:
    """``with coalescer.turn(key) as leader:`` — compute when ``leader``; else look up first."""

    def __init__(
        self, store: L2Store | None = None, *, timeout: float = 30.0, poll: float = 0.05
    ) -> None:
        self.store = store
        self.timeout = timeout
        self.poll = poll
        self._threads: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Flight]] = (
            weakref.WeakKeyDictionary()
        )

    @contextlib.contextmanager
    def turn(self, key: str) -> Iterator[bool]:
        with self._lock:
            waiting_on = self._threads.get(key)
            if waiting_on is None:
                mine = self._threads[key] = threading.Event()
        if waiting_on is not None:
            waiting_on.wait(self.timeout)
            yield False
            return
        try:
            taken = self._take(key)
            if taken is False:
                self._wait_for_other_process(key)
                yield False
            else:
                try:
                    yield True
                finally:
                    if taken:
                        self._unlock(key)
        finally:
            with self._lock:
                self._threads.pop(key, None)
            mine.set()

    @contextlib.asynccontextmanager
    async def aturn(self, key: str) -> AsyncIterator[bool]:
        flights = self._loops.setdefault(asyncio.get_running_loop(), {})
        deadline = time.monotonic() + self.timeout
        while (flight := flights.get(key)) is not None:
            await _wait(flight.done, deadline - time.monotonic())
            if not flight.cancelled or time.monotonic() >= deadline:
                yield False
                return
        mine = flights[key] = _Flight()
        try:
            taken = await self._atake(key)
            if taken is False:
                await self._await_other_process(key, deadline)
                yield False
            else:
                try:
                    yield True
                finally:
                    if taken:
                        await self._arelease(key)
        except asyncio.CancelledError:
            mine.cancelled = True
            raise
        finally:
            if flights.get(key) is mine:
                del flights[key]
            mine.done.set()

    # across processes, through the shared store ---------------------------------------------
    def _take(self, key: str) -> bool | None:
        """True: this caller took the store's lock; False: another process holds it;
        ``None``: no lock service (compute, as without coalescing)."""
        if self.store is None:
            return None
        try:
            return self.store.try_lock(_lock_name(key), self.timeout)
        except Exception as exc:
            log.debug("tricache: coalescing lock unavailable: %s", exc)
            return None

    async def _atake(self, key: str) -> bool | None:
        """``_take`` in a worker thread.  A caller cancelled meanwhile does not leave the lock
        behind: the thread releases it once taken."""
        taking = _WORKERS.submit(self._take, key)
        try:
            return await asyncio.shield(asyncio.wrap_future(taking))
        except BaseException:
            taking.add_done_callback(lambda done: self._release_if_taken(done, key))
            raise

    def _release_if_taken(self, taking: Future[bool | None], key: str) -> None:
        if not taking.cancelled() and taking.result():
            _WORKERS.submit(self._unlock, key)

    async def _arelease(self, key: str) -> None:
        """``_unlock`` in a worker thread; cancelling the caller does not stop it."""
        await asyncio.shield(asyncio.wrap_future(_WORKERS.submit(self._unlock, key)))

    def _wait_for_other_process(self, key: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            time.sleep(self.poll)
            if not self._locked(key):
                return

    async def _await_other_process(self, key: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            await asyncio.sleep(self.poll)
            if not await asyncio.wrap_future(_WORKERS.submit(self._locked, key)):
                return

    def _locked(self, key: str) -> bool:
        try:
            return self.store is not None and self.store.is_locked(_lock_name(key))
        except Exception:  # cannot tell: stop waiting
            return False

    def _unlock(self, key: str) -> None:
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.unlock(_lock_name(key))


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Wait for ``event``, ``timeout`` seconds at most.  Not ``asyncio.wait_for``: before
    Python 3.12 it can lose a cancellation that comes as the event is set."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=max(timeout, 0))
    finally:
        waiter.cancel()


def _lock_name(key: str) -> str:
    """Exact keys read ``tricache:<ns>:x:<digest>``; their locks ``tricache:<ns>:lock:<digest>``."""
    return key.replace(":x:", ":lock:", 1)
