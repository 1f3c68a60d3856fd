"""At interpreter exit: background work that runs native code ends before Python finalizes.

CPython stops daemon threads wherever they stand once it finalizes.  One inside native code at
that moment (a model loading, spaCy's BLAS, an embedding) can then abort or crash a process
whose script ended cleanly.  Long background work calls ``checkpoint()`` between its steps;
objects that run such work register a hook that waits for it.  The hooks run when the main
thread has ended, before Python joins its threads, runs its ``atexit`` handlers and finalizes.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["Exiting", "checkpoint", "exiting", "on_exit"]

log = logging.getLogger("tricache")

_hooks: list[weakref.WeakMethod[Callable[[], None]]] = []
_hooks_lock = threading.Lock()
_exiting = threading.Event()


class Exiting(Exception):
    """The interpreter is exiting: background work stops at this checkpoint."""


def exiting() -> bool:
    """Whether the interpreter has begun to exit (the hooks are running or have run)."""
    return _exiting.is_set()


def checkpoint() -> None:
    """Raise ``Exiting`` once the interpreter is exiting (call between long native steps)."""
    if _exiting.is_set():
        raise Exiting


def on_exit(hook: Callable[[], None]) -> None:
    """Run the bound method ``hook`` at interpreter exit if its object still lives."""
    with _hooks_lock:
        _hooks[:] = [ref for ref in _hooks if ref() is not None]
        _hooks.append(weakref.WeakMethod(hook))  # type: ignore[arg-type]


def _in_child() -> None:  # a lock held by a parent thread at the fork stays held in the child
    global _hooks_lock
    _hooks_lock = threading.Lock()


def _run_hooks() -> None:
    _exiting.set()
    with _hooks_lock:
        hooks = [ref() for ref in _hooks]
    for hook in hooks:
        if hook is None:
            continue
        try:
            hook()
        except Exception as exc:  # the exit goes on
            log.debug("tricache: exit hook failed: %s", exc)


# Before the interpreter joins its threads and runs the ``atexit`` handlers, some of which tear
# down what native code still needs (spaCy segfaulted when waited for from ``atexit``).  This is
# the hook ``concurrent.futures`` uses; ``atexit`` where it is missing.
getattr(threading, "_register_atexit", atexit.register)(_run_hooks)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
