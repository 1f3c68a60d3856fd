"""Request coalescing: concurrent identical misses make one LLM call.

The first caller for a key is the leader and computes; the others wait — threads on an event,
coroutines on an asyncio event, other processes on a lock in the shared store — then look the
answer up.  Waiting is bounded by ``timeout``: a waiter whose leader failed, or took too long,
computes on its own.  Nothing here stores a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator

from .stores.base import L2Store

__all__ = ["Coalescer"]

log = logging.getLogger(__name__)


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
        self._loops: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Event]
        ] = weakref.WeakKeyDictionary()

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
            if self._other_process_leads(key):
                self._wait_for_other_process(key)
                yield False
            else:
                try:
                    yield True
                finally:
                    self._unlock(key)
        finally:
            with self._lock:
                self._threads.pop(key, None)
            mine.set()

    @contextlib.asynccontextmanager
    async def aturn(self, key: str) -> AsyncIterator[bool]:
        events = self._loops.setdefault(asyncio.get_running_loop(), {})
        waiting_on = events.get(key)
        if waiting_on is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiting_on.wait(), self.timeout)
            yield False
            return
        mine = events[key] = asyncio.Event()
        try:
            if await asyncio.to_thread(self._other_process_leads, key):
                await asyncio.to_thread(self._wait_for_other_process, key)
                yield False
            else:
                try:
                    yield True
                finally:
                    await asyncio.to_thread(self._unlock, key)
        finally:
            events.pop(key, None)
            mine.set()

    # across processes, through the shared store ---------------------------------------------
    def _other_process_leads(self, key: str) -> bool:
        if self.store is None:
            return False
        try:
            return not self.store.try_lock(_lock_name(key), self.timeout)
        except Exception as exc:  # no lock service: compute, as without coalescing
            log.debug("tricache: coalescing lock unavailable: %s", exc)
            return False

    def _wait_for_other_process(self, key: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            time.sleep(self.poll)
            try:
                if not self.store.is_locked(_lock_name(key)):  # type: ignore[union-attr]
                    return
            except Exception:
                return

    def _unlock(self, key: str) -> None:
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.unlock(_lock_name(key))


def _lock_name(key: str) -> str:
    """Exact keys read ``tricache:<ns>:x:<digest>``; their locks ``tricache:<ns>:lock:<digest>``."""
    return key.replace(":x:", ":lock:", 1)
