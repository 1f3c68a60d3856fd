"""Background upkeep: work a tier needs done regularly, kept off the request path.

One daemon thread per owner runs ``owner.upkeep()`` every ``period`` seconds, or at once when
asked (``wake``).  The thread holds only a weak reference: an owner nobody uses any more is
collected and its thread ends.  After a fork the child has no thread; the first ``start`` there
makes a new one.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Protocol

from ..runtime.forks import on_fork

__all__ = ["Upkeep"]

log = logging.getLogger(__name__)


class _Owner(Protocol):
    def upkeep(self) -> None: ...


class Upkeep:
    """``start()`` once (idempotent, fork-aware), ``wake()`` to run soon, ``stop()`` to end."""

    def __init__(self, owner: _Owner, period: float, name: str) -> None:
        self._owner = weakref.ref(owner)
        self.period = period
        self.name = name
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._pid = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # the thread itself is started again by ``start``

    def start(self) -> None:
        if self._pid == os.getpid() or self._stopped.is_set():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._wake = threading.Event()  # a fork copied the parent's state: start clean
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, wait: float = 0.0) -> None:
        """No more runs; wait at most ``wait`` seconds for one under way (what it reads may be
        about to close)."""
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    def _run(self) -> None:
        wake, pid = self._wake, os.getpid()
        while not self._stopped.is_set() and pid == os.getpid():
            wake.wait(self.period)
            wake.clear()
            owner = self._owner()
            if owner is None or self._stopped.is_set():
                return
            try:
                owner.upkeep()
            except Exception:  # a bug here must not end the thread silently
                log.exception("tricache: %s failed", self.name)
            del owner
