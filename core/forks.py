"""After a fork: what a child process must not share with its parent.

A child inherits its parent's open files, connections and locks, but none of its threads.  A
lock a parent thread held at the fork stays held forever in the child; a database or index file
written through a connection both processes hold gets corrupted.  Objects holding such things
register a hook; in the child each hook runs once, right after the fork, before any other code
(gunicorn ``--preload``, ``multiprocessing`` with the fork start method).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["inherited", "on_fork"]

_hooks: list[weakref.WeakMethod[Callable[[], None]]] = []
_hooks_lock = threading.Lock()
_inherited: list[Any] = []  # what the parent opened: never used, closed or freed in a child


def on_fork(hook: Callable[[], None]) -> None:
    """Run the bound method ``hook`` in every child forked while its object lives."""
    with _hooks_lock:
        _hooks[:] = [ref for ref in _hooks if ref() is not None]
        _hooks.append(weakref.WeakMethod(hook))  # type: ignore[arg-type]


def inherited(*things: Any) -> None:
    """Keep what the parent opened (connections, index shards) alive and untouched in the
    child: freeing it could flush or close files the parent still writes."""
    _inherited.extend(things)


def _in_child() -> None:
    global _hooks_lock
    _hooks_lock = threading.Lock()
    for ref in list(_hooks):
        hook = ref()
        if hook is not None:
            hook()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
