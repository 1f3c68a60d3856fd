"""Request coalescing: concurrent identical misses make one LLM call.

The first caller for a key in a process heads its *flight*; the others of that process join it
— threads on threading primitives, coroutines on asyncio ones, per event loop — and the heads
of other processes meet on a lock in the shared store.  A head that took the lock (or found no
lock service) is the leader and calls the model; a head that found another process's lock
waits for it, then looks the answer up.

What a flight shares in its process (the flow, ``flow.py``, decides what may be shared):

- an answer: the leader hands it to its followers (``Flight.hand``), so an answer that is not
  stored — a time-dependent question, a store that refused it — still costs one call; an
  answer it does not hand (an error, a failed or empty answer) leaves each follower to look up
  and call the model itself, woken as soon as the leader is done;
- a stream: the head publishes each chunk as it passes it on, and its followers replay them as
  they come (``Flight.replay``), then end as it ends — with its error when it failed, with
  ``LeaderLeft`` when it was left unfinished (cancelled, or its reader stopped) after it began.

Waiting is bounded by ``timeout``: a follower whose leader took too long computes on its own;
a coroutine whose leader was cancelled before it answered takes a new turn at once (the
cancellation said nothing about the request).  A stream's follower waits as long as the head is
waiting on the model (the same wait it would have), and ``timeout`` for a head that does not
read on.

A head releases the store's lock on every way out: an answer, an error, a cancellation —
even one that comes while the lock is being taken or released.  Coroutines take and release
it in worker threads that their cancellation does not stop, and only a lock it took is
released.  Nothing here stores anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from ..stores.base import L2Store

__all__ = ["NOTHING", "Coalescer", "Flight", "LeaderLeft"]

log = logging.getLogger(__name__)

# Store calls of coroutines: a module's own pool, so they outlive a loop's default executor.
_WORKERS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tricache-coalesce")

NOTHING: Final[Any] = object()  # a leader handed nothing


class LeaderLeft(RuntimeError):
    """The stream this call replayed was left unfinished by the call that led it (cancelled,
    or its reader stopped): the rest of it will not come."""


class _State:
    """One flight in this process: what its head shares, and how its followers are woken."""

    def __init__(self) -> None:
        self.value: Any = NOTHING  # the answer handed
        self.chunks: list[Any] = []  # the stream published so far
        self.opened = False  # the head knows what it streams: ``hit`` (None: the model)
        self.hit: Any = None
        self.pulling = False  # the head is waiting for its stream's next chunk
        self.ended = False
        self.complete = False  # its stream ran to its end
        self.error: BaseException | None = None  # what its stream raised
        self.cancelled = False  # (a coroutine's) cancelled before it answered

    def notify(self) -> None:
        raise NotImplementedError


class _ThreadState(_State):
    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait(self, ready: Any, timeout: float) -> bool:
        """Wait until ``ready()``, ``timeout`` seconds at most; its value."""
        with self.changed:
            return bool(self.changed.wait_for(ready, max(timeout, 0)))


class _LoopState(_State):
    """A coroutine's flight: touched on its loop's thread only (``abandon`` goes through
    ``call_soon_threadsafe``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.changed = asyncio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait(self, ready: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not ready() and (left := deadline - time.monotonic()) > 0:
            await _wait(self.changed, left)
        return bool(ready())


def _copy(value: Any) -> Any:
    """A caller's own copy of what another caller got (the framework may edit what it is
    given: LangChain sets a message's id)."""
    try:
        return copy.deepcopy(value)
    except Exception:  # (an odd provider object) shared as it is
        return value


class Flight:
    """A caller's place in a flight: ``leader`` (call the model), ``head`` (the first of its
    process: it shares what it gets with the others, the followers)."""

    def __init__(
        self,
        coalescer: Coalescer,
        name: tuple[str, str, Hashable],
        state: _State,
        *,
        head: bool,
        leader: bool = False,
        taken: bool = False,
    ) -> None:
        self._coalescer, self._name, self._state = coalescer, name, state
        self.head, self.leader = head, leader
        self._taken = taken  # the store's lock, to release
        self._left = not head  # a follower holds nothing

    # an answer -------------------------------------------------------------------------------
    def hand(self, value: Any) -> None:
        """(head) Give ``value`` to the followers; they are woken at once."""
        if not self.head or self._left:
            return
        copied = _copy(value)
        self._state.value = copied
        self._state.notify()

    def handed(self) -> Any:
        """(follower) The head's answer, as this caller's own copy; ``NOTHING`` when none."""
        value = self._state.value
        return NOTHING if self.head or value is NOTHING else _copy(value)

    # a stream ---------------------------------------------------------------------------------
    def opened(self, hit: Any = None) -> None:
        """(head) Say what it streams: ``hit``, or ``None`` for the model."""
        self._state.hit, self._state.opened = hit, True
        self._state.notify()

    def publish(self, chunk: Any) -> None:
        """(head) A chunk of its stream, for the followers (copied before its reader sees it)."""
        self._state.chunks.append(_copy(chunk))
        self._state.notify()

    def pulling(self, waiting: bool) -> None:
        """(head) Whether it waits on its stream now: its followers wait as long as it does."""
        self._state.pulling = waiting

    def follow(self) -> Any:
        """(follower) Once the head opened its stream: the hit it replays (``None``: the
        model); ``NOTHING`` when it left first or took too long.  Raises what it raised."""
        state = self._state
        assert isinstance(state, _ThreadState)
        while not state.wait(self._more(-1), self._coalescer.timeout) and state.pulling:
            pass  # (the head waits on another process: as long as it does)
        return self._followed()

    async def afollow(self) -> Any:
        """``follow`` for a coroutine."""
        state = self._state
        assert isinstance(state, _LoopState)
        while not await state.wait(self._more(-1), self._coalescer.timeout) and state.pulling:
            pass
        return self._followed()

    def _followed(self) -> Any:
        state = self._state
        if state.opened:
            return state.hit
        if state.error is not None:
            raise state.error
        return NOTHING

    def replay(self) -> Iterator[Any]:
        """(follower) The head's stream, its chunks as they come, ending as it ends."""
        state, i = self._state, 0
        assert isinstance(state, _ThreadState)
        while True:
            if i < len(state.chunks):
                yield _copy(state.chunks[i])
                i += 1
            elif state.ended:
                self._ending()
                return
            elif not state.wait(self._more(i), self._coalescer.timeout) and not state.pulling:
                raise LeaderLeft("the stream this call shares stopped coming")

    async def areplay(self) -> AsyncIterator[Any]:
        """``replay`` for a coroutine."""
        state, i = self._state, 0
        assert isinstance(state, _LoopState)
        while True:
            if i < len(state.chunks):
                yield _copy(state.chunks[i])
                i += 1
            elif state.ended:
                self._ending()
                return
            elif not await state.wait(self._more(i), self._coalescer.timeout) and not state.pulling:
                raise LeaderLeft("the stream this call shares stopped coming")

    def _more(self, i: int) -> Any:
        """Ready: a chunk after the ``i``-th, or the end (``-1``: the head opened its stream)."""
        state = self._state
        if i < 0:
            return lambda: state.opened or state.ended
        return lambda: len(state.chunks) > i or state.ended

    def _ending(self) -> None:
        state = self._state
        if state.error is not None:
            raise state.error
        if not state.complete:
            raise LeaderLeft("the stream this call shares was left unfinished")

    # the way out -------------------------------------------------------------------------------
    def leave(self, error: BaseException | None = None, *, complete: bool = False) -> None:
        """(head) Its turn is over: ``complete`` (a stream that ran to its end), ``error`` (what
        it raised; a stream's followers get it), else left.  Releases the store's lock."""
        if not self._mark_left(error, complete):
            return
        try:
            if self._taken:
                self._coalescer._unlock(self._name[0])
        finally:
            self._coalescer._ended(self._name, self._state)

    async def aleave(self, error: BaseException | None = None, *, complete: bool = False) -> None:
        """``leave`` for a coroutine: the lock released in a worker thread that its
        cancellation does not stop."""
        if not self._mark_left(error, complete):
            return
        try:
            if self._taken:
                await self._coalescer._arelease(self._name[0])
        finally:
            self._coalescer._ended(self._name, self._state)

    def abandon(self) -> None:
        """(head) Left from anywhere, without waiting: a stream never read, collected."""
        if not self._mark_left(None, False):
            return
        state = self._state
        if self._taken:
            _WORKERS.submit(self._coalescer._unlock, self._name[0])
        if isinstance(state, _LoopState):
            with contextlib.suppress(RuntimeError):  # (its loop is closed: its flights too)
                state.loop.call_soon_threadsafe(self._coalescer._ended, self._name, state)
        else:
            self._coalescer._ended(self._name, state)

    def _mark_left(self, error: BaseException | None, complete: bool) -> bool:
        if self._left:
            return False
        self._left = True
        state = self._state
        if isinstance(error, asyncio.CancelledError):
            state.cancelled = True
        elif isinstance(error, Exception):
            state.error = error
        state.complete = complete
        return True


class Coalescer:
    """``with coalescer.turn(key) as leader:`` — compute when ``leader``; else look up first.
    ``flight(key, kind, view)`` (``aflight``) is the same turn as a ``Flight``, which shares
    an answer or a stream with the callers of this process that wait for it."""

    def __init__(
        self, store: L2Store | None = None, *, timeout: float = 30.0, poll: float = 0.05
    ) -> None:
        self.store = store
        self.timeout = timeout
        self.poll = poll
        self._threads: dict[tuple[str, str, Hashable], _ThreadState] = {}
        self._lock = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str, Hashable], _LoopState]
        ] = weakref.WeakKeyDictionary()

    @contextlib.contextmanager
    def turn(self, key: str) -> Iterator[bool]:
        with self.flight(key) as flight:
            yield flight.leader

    @contextlib.asynccontextmanager
    async def aturn(self, key: str) -> AsyncIterator[bool]:
        async with self.aflight(key) as flight:
            yield flight.leader

    @contextlib.contextmanager
    def flight(
        self, key: str, kind: str = "answer", view: Hashable = None, local: bool = False
    ) -> Iterator[Flight]:
        """This caller's place in the flight of ``key`` (see ``join``), left on the way out."""
        flight = self.join(key, kind, view, local)
        try:
            yield flight
        except BaseException as exc:
            flight.leave(exc)
            raise
        flight.leave()

    @contextlib.asynccontextmanager
    async def aflight(
        self, key: str, kind: str = "answer", view: Hashable = None, local: bool = False
    ) -> AsyncIterator[Flight]:
        """``flight`` for a coroutine."""
        flight = await self.ajoin(key, kind, view, local)
        try:
            yield flight
        except BaseException as exc:
            await flight.aleave(exc)
            raise
        await flight.aleave()

    def join(
        self, key: str, kind: str = "answer", view: Hashable = None, local: bool = False
    ) -> Flight:
        """A place in the flight of ``key`` among the threads of this process: callers of one
        ``kind`` (an answer, a stream) and one ``view`` (the versions they began under) share.
        A follower of an answer returns once the head handed it or was done (``timeout`` at
        most); one of a stream at once.  ``local``: no lock in the store (another process
        could not find the answer).  A head must ``leave``."""
        name = (key, kind, view)
        with self._lock:
            state = self._threads.get(name)
            if state is None:
                mine = self._threads[name] = _ThreadState()
        if state is not None:
            if kind != "stream":
                state.wait(lambda: state.ended or state.value is not NOTHING, self.timeout)
            return Flight(self, name, state, head=False)
        taken: bool | None = None
        try:
            taken = None if local else self._take(key)
            if taken is False:
                mine.pulling = True  # (its followers wait as long as it does)
                self._wait_for_other_process(key)
                mine.pulling = False
        except BaseException:
            if taken:
                self._unlock(key)
            self._ended(name, mine)
            raise
        return Flight(self, name, mine, head=True, leader=taken is not False, taken=bool(taken))

    async def ajoin(
        self, key: str, kind: str = "answer", view: Hashable = None, local: bool = False
    ) -> Flight:
        """``join`` among the coroutines of this event loop.  A follower whose head was
        cancelled before it answered takes a new turn (it may lead)."""
        loop = asyncio.get_running_loop()
        flights = self._loops.setdefault(loop, {})
        name = (key, kind, view)
        deadline = time.monotonic() + self.timeout
        while (state := flights.get(name)) is not None:
            if kind == "stream":
                return Flight(self, name, state, head=False)
            ready = lambda s=state: s.ended or s.value is not NOTHING  # noqa: E731
            await state.wait(ready, deadline - time.monotonic())
            if not state.cancelled or time.monotonic() >= deadline:
                return Flight(self, name, state, head=False)
        mine = flights[name] = _LoopState(loop)
        taken: bool | None = None
        try:
            taken = None if local else await self._atake(key)
            if taken is False:
                mine.pulling = True
                await self._await_other_process(key, deadline)
                mine.pulling = False
        except BaseException as exc:
            mine.cancelled = isinstance(exc, asyncio.CancelledError)
            if taken:
                await self._arelease(key)
            self._ended(name, mine)
            raise
        return Flight(self, name, mine, head=True, leader=taken is not False, taken=bool(taken))

    def _ended(self, name: tuple[str, str, Hashable], state: _State) -> None:
        """A head's flight is over: new callers start their own; its followers are woken."""
        if isinstance(state, _LoopState):
            flights = self._loops.get(state.loop, {})
            if flights.get(name) is state:
                del flights[name]
        else:
            with self._lock:
                if self._threads.get(name) is state:
                    del self._threads[name]
        state.ended = True
        state.notify()

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
