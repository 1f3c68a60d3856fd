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

__all__ = ["hold_across_fork", "inherited", "on_fork"]

_hooks: list[weakref.WeakMethod[Callable[[], None]]] = []
_hooks_lock = threading.Lock()
_inherited: list[Any] = []  # what the parent opened: never used, closed or freed in a child
_held: list[tuple[weakref.ref[Any], tuple[str, ...]]] = []  # (owner, names of its locks)
_taken: list[Any] = []  # the locks taken for the fork under way


def on_fork(hook: Callable[[], None]) -> None:
    """Run the bound method ``hook`` in every child forked while its object lives."""
    with _hooks_lock:
        _hooks[:] = [ref for ref in _hooks if ref() is not None]
        _hooks.append(weakref.WeakMethod(hook))  # type: ignore[arg-type]


def hold_across_fork(owner: Any, *lock_names: str) -> None:
    """Take ``owner``'s locks (by attribute name) before a fork and give them back after it,
    in both processes: no thread is then inside what they guard (SQLite's own mutexes, held by
    a thread that is not copied, would hang the child's first connection)."""
    with _hooks_lock:
        _held[:] = [(ref, names) for ref, names in _held if ref() is not None]
        _held.append((weakref.ref(owner), lock_names))


def _before() -> None:
    for ref, names in list(_held):
        owner = ref()
        for name in names if owner is not None else ():
            lock = getattr(owner, name)
            if lock.acquire(timeout=5):  # best effort: a fork is never blocked for long
                _taken.append(lock)


def _after_in_parent() -> None:
    while _taken:
        _taken.pop().release()


def inherited(*things: Any) -> None:
    """Keep what the parent opened (connections, index shards) alive and untouched in the
    child: freeing it could flush or close files the parent still writes."""
    _inherited.extend(things)


def _in_child() -> None:
    global _hooks_lock
    _hooks_lock = threading.Lock()
    _after_in_parent()  # the same locks, taken by the thread that forked: released here too
    for ref in list(_hooks):
        hook = ref()
        if hook is not None:
            hook()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_in_child)
