"""At interpreter exit: background work that runs native code ends before Python finalizes.

CPython stops daemon threads wherever they stand once it finalizes.  One inside native code at
that moment (a model loading, spaCy's BLAS, an embedding) can then abort or crash a process
whose script ended cleanly; one running Python code is simply stopped.  Background work runs
its native steps inside ``native()``, which the exit waits for (and refuses to begin once the
exit has begun), and calls ``checkpoint()`` between its steps; objects that run such work
register a hook.  The hooks run when the main thread has ended, before Python joins its
threads, runs its ``atexit`` handlers and finalizes; then the exit waits for the native steps
under way, and no longer.

Work that must outlive the process (counters not yet in the shared store) registers with
``on_terminate`` too: it runs at the exit, and when SIGTERM ends the process (a container
stopped, a worker recycled) before the process dies of the signal, within ``TERM_BUDGET_S``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterator

__all__ = ["TERM_BUDGET_S", "Exiting", "checkpoint", "exiting", "native", "on_exit", "on_terminate"]

log = logging.getLogger("tricache")

_hooks: list[weakref.WeakMethod[Callable[[], None]]] = []
_hooks_lock = threading.Lock()
_exiting = threading.Event()
_native = threading.Condition()
_native_steps = 0  # native steps under way in background threads
_term_hooks: list[weakref.WeakMethod[Callable[[], None]]] = []
_sigterm_installed = False
TERM_BUDGET_S = 2.0  # what SIGTERM's hooks may take before the process dies of it


class Exiting(Exception):
    """The interpreter is exiting: background work stops at this checkpoint."""


def exiting() -> bool:
    """Whether the interpreter has begun to exit (the hooks are running or have run)."""
    return _exiting.is_set()


def checkpoint() -> None:
    """Raise ``Exiting`` once the interpreter is exiting (call between long native steps)."""
    if _exiting.is_set():
        raise Exiting


@contextlib.contextmanager
def native() -> Iterator[None]:
    """A background step in native code (a model or an index loading): the exit waits for it
    to end, and it is refused (``Exiting``) once the exit has begun."""
    global _native_steps
    with _native:
        checkpoint()
        _native_steps += 1
    try:
        yield
    finally:
        with _native:
            _native_steps -= 1
            _native.notify_all()


def on_exit(hook: Callable[[], None]) -> None:
    """Run the bound method ``hook`` at interpreter exit if its object still lives."""
    with _hooks_lock:
        _hooks[:] = [ref for ref in _hooks if ref() is not None]
        _hooks.append(weakref.WeakMethod(hook))  # type: ignore[arg-type]


def on_terminate(hook: Callable[[], None]) -> None:
    """Run the bound method ``hook`` at interpreter exit and when SIGTERM ends the process
    (if its object still lives).  The SIGTERM handler is installed only where SIGTERM has its
    default action and from the main thread; the process then still dies of the signal."""
    with _hooks_lock:
        _term_hooks[:] = [ref for ref in _term_hooks if ref() is not None]
        _term_hooks.append(weakref.WeakMethod(hook))  # type: ignore[arg-type]
    on_exit(hook)
    _install_sigterm()


def _install_sigterm() -> None:
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # the app handles it (its exit runs the ``on_exit`` hooks) or ignores it
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # no signals here (an embedded interpreter)
        return
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: object) -> None:
    # (in a thread: the main thread, interrupted here, may hold a lock a hook needs)
    worker = threading.Thread(target=_run_term_hooks, name="tricache-sigterm", daemon=True)
    worker.start()
    worker.join(TERM_BUDGET_S)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # dies of it, as it would have without tricache


def _run_term_hooks() -> None:
    with _hooks_lock:
        hooks = [ref() for ref in _term_hooks]
    for hook in hooks:
        if hook is not None:
            try:
                hook()
            except Exception as exc:
                log.debug("tricache: SIGTERM hook failed: %s", exc)


def _in_child() -> None:  # a lock held by a parent thread at the fork stays held in the child
    global _hooks_lock, _native, _native_steps
    _hooks_lock = threading.Lock()
    _native, _native_steps = threading.Condition(), 0  # (the parent's threads are not here)


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
    with _native:
        _native.wait_for(lambda: _native_steps == 0, timeout=30.0)


# Before the interpreter joins its threads and runs the ``atexit`` handlers, some of which tear
# down what native code still needs (spaCy segfaulted when waited for from ``atexit``).  This is
# the hook ``concurrent.futures`` uses; ``atexit`` where it is missing.
getattr(threading, "_register_atexit", atexit.register)(_run_hooks)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
