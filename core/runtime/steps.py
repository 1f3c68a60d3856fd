"""Logic written once, run sync or async (the sans-I/O style of h11 and httpcore).

A step function is a generator: it does no I/O itself, it yields what it needs done and is sent
the result (or has the exception thrown in)::

    def _get(self, key: str) -> Steps[Record | None]:
        record = yield Call(self.store.get, self.store.aget, key)  # one or the other
        ...
        return record

    def get(self, key): return run(self._get(key))
    async def aget(self, key): return await arun(self._get(key))

``Call(fn, afn, *args)`` runs ``fn(*args)`` in ``run`` and ``await afn(*args)`` in ``arun``
(both typed: mypy checks they return the same); ``Off(fn, *args)`` runs ``fn(*args)`` in
``run`` and in a worker thread in ``arun`` (CPU work: the event loop stays free);
``Enter(cm, acm, *args)`` enters the context manager ``cm(*args)`` (``acm(*args)``, async) and
sends what it yields; it is left when the steps end, with their exception if they raised.

What differs between the two, by design: under ``arun`` the step body itself runs on the event
loop (anything slow belongs in a ``Call`` or an ``Off``), and an ``Off`` runs in a copy of the
caller's context (a context variable it sets stays in the thread).  An exception from a call is
thrown into the step at its ``yield``; a cancellation (or any ``BaseException``) is not: the
steps are closed, so their ``finally`` blocks run at once, and it propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Generic, TypeVar

__all__ = ["Call", "Enter", "Off", "Steps", "arun", "run"]

T = TypeVar("T")


class Call(Generic[T]):
    """Call ``fn(*args)``; the async runner awaits ``afn(*args)``."""

    __slots__ = ("afn", "args", "fn")

    def __init__(self, fn: Callable[..., T], afn: Callable[..., Awaitable[T]], *args: Any) -> None:
        self.fn, self.afn, self.args = fn, afn, args


class Enter(Generic[T]):
    """Enter ``cm(*args)``; the async runner enters ``acm(*args)``.  Held until the steps end."""

    __slots__ = ("acm", "args", "cm")

    def __init__(
        self,
        cm: Callable[..., AbstractContextManager[T]],
        acm: Callable[..., AbstractAsyncContextManager[T]],
        *args: Any,
    ) -> None:
        self.cm, self.acm, self.args = cm, acm, args


class Off:
    """Run ``fn(*args)``: here in sync code, in a worker thread in async code."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args


Steps = Generator["Call[Any] | Off | Enter[Any]", Any, T]


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` with blocking calls."""
    result: Any = None
    error: Exception | None = None
    held: contextlib.ExitStack | None = None  # made at the first ``Enter`` (most hold none)
    try:
        while True:
            done, need = _advance(steps, result, error)
            if done:
                return need  # type: ignore[no-any-return]
            result, error = None, None
            try:
                if isinstance(need, Enter):
                    held = held or contextlib.ExitStack()
                    result = held.enter_context(need.cm(*need.args))
                else:  # a Call or an Off: here, both a plain call
                    result = need.fn(*need.args)
            except Exception as exc:
                error = exc
    except BaseException as exc:
        steps.close()
        if held is not None:  # what the steps entered sees why they ended
            held.__exit__(type(exc), exc, exc.__traceback__)
        raise
    finally:
        steps.close()  # (a no-op once they ended)
        if held is not None:
            held.close()  # (a no-op after an error: left already)


async def arun(steps: Steps[T]) -> T:
    """Drive ``steps`` from async code: store calls awaited, CPU work in a thread."""
    result: Any = None
    error: Exception | None = None
    async with contextlib.AsyncExitStack() as held:
        try:
            while True:
                done, need = _advance(steps, result, error)
                if done:
                    return need  # type: ignore[no-any-return]
                result, error = None, None
                try:
                    if isinstance(need, Call):
                        result = await need.afn(*need.args)
                    elif isinstance(need, Enter):
                        result = await held.enter_async_context(need.acm(*need.args))
                    else:
                        result = await asyncio.to_thread(need.fn, *need.args)
                except Exception as exc:
                    error = exc
        finally:
            steps.close()  # a cancellation: the steps' ``finally`` blocks run now


def _advance(steps: Steps[Any], result: Any, error: Exception | None) -> tuple[bool, Any]:
    """(True, the return value) when ``steps`` ended, else (False, what it needs next)."""
    try:
        return False, steps.throw(error) if error is not None else steps.send(result)
    except StopIteration as done:
        return True, done.value
