"""Logic written once, run sync or async (the sans-I/O style of h11 and httpcore).

A step function is a generator: it does no I/O itself, it yields what it needs done and is sent
the result (or has the exception thrown in)::

    def _get(self, key: str) -> Steps[Record | None]:
        record = yield Call(self.store, "get", key)   # store.get(key) / await store.aget(key)
        ...
        return record

    def get(self, key): return run(self._get(key))
    async def aget(self, key): return await arun(self._get(key))

``Call(obj, "name", *args)`` runs ``obj.name(*args)`` in ``run`` and ``await obj.aname(*args)``
in ``arun``; ``Off(fn, *args)`` runs ``fn(*args)`` in ``run`` and in a worker thread in
``arun`` (CPU work: the event loop stays free).

What differs between the two, by design: under ``arun`` the step body itself runs on the event
loop (anything slow belongs in a ``Call`` or an ``Off``), and an ``Off`` runs in a copy of the
caller's context (a context variable it sets stays in the thread).  An exception from a call is
thrown into the step at its ``yield``; a cancellation (or any ``BaseException``) is not: the
steps are closed, so their ``finally`` blocks run at once, and it propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, TypeVar

__all__ = ["Call", "Off", "Steps", "arun", "run"]

T = TypeVar("T")


class Call:
    """Call ``obj.name(*args)``; the async runner awaits ``obj.a<name>(*args)``."""

    __slots__ = ("args", "name", "obj")

    def __init__(self, obj: Any, name: str, *args: Any) -> None:
        self.obj, self.name, self.args = obj, name, args


class Off:
    """Run ``fn(*args)``: here in sync code, in a worker thread in async code."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args


Steps = Generator["Call | Off", Any, T]


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` with blocking calls."""
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            done, need = _advance(steps, result, error)
            if done:
                return need  # type: ignore[no-any-return]
            result, error = None, None
            try:
                if isinstance(need, Call):
                    result = getattr(need.obj, need.name)(*need.args)
                else:
                    result = need.fn(*need.args)
            except Exception as exc:
                error = exc
    finally:
        steps.close()  # (a no-op once they ended)


async def arun(steps: Steps[T]) -> T:
    """Drive ``steps`` from async code: store calls awaited, CPU work in a thread."""
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            done, need = _advance(steps, result, error)
            if done:
                return need  # type: ignore[no-any-return]
            result, error = None, None
            try:
                if isinstance(need, Call):
                    result = await getattr(need.obj, "a" + need.name)(*need.args)
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
