"""A configured store that could not be opened: down until it opens, never skipped.

A SQLite file locked by another process (a long transaction, a ``VACUUM``), unreadable or
damaged when the cache starts is an outage of the store every process shares, not a reason to
run without it: a process that ran on its own memory would serve what others invalidated, and
report its own invalidations done when they reached no one.  ``Reopening`` stands in for the
store: each call raises ``StoreNotOpen`` (an ``OSError``: what a store that does not answer
raises, so the cache serves nothing it cannot verify and the admin verbs raise
``StoreUnavailable``), while a daemon thread opens it again every ``every`` seconds; once it
opens, every call goes to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Reopening", "StoreNotOpen"]

log = logging.getLogger("tricache")


class StoreNotOpen(ConnectionError):
    """The store could not be opened (yet)."""


class Reopening:
    """``opened()`` once it succeeds; until then a store that does not answer."""

    has_pubsub = False

    def __init__(
        self,
        opened: Callable[[], Any],
        kind: type,
        error: BaseException,
        *,
        name: str,
        path: Path,
        every: float = 2.0,
    ) -> None:
        self.name, self.path = name, path
        self._opened, self._kind, self._every = opened, kind, every
        self._error: BaseException = error
        self._store: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._open, name="tricache-reopen", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        while not self._stop.wait(self._every):
            try:
                store = self._opened()
            except Exception as exc:  # (still locked, unreadable, damaged: tried again)
                self._error = exc
                continue
            if self._stop.is_set():
                store.close()
                return
            self._store = store
            log.warning("tricache: L2 store %s opened", self.path)
            return

    def __getattr__(self, name: str) -> Any:
        """The open store's attribute; before it opens, a method that raises
        ``StoreNotOpen`` when called (``AttributeError`` for anything the store lacks)."""
        store = self._store
        if store is not None:
            return getattr(store, name)
        if not callable(getattr(self._kind, name, None)):
            raise AttributeError(name)
        error = self._error

        def not_open(*args: Any, **kwargs: Any) -> Any:
            raise StoreNotOpen(f"{self.name} store {self.path} is not open: {error}")

        return not_open

    def close(self) -> None:
        """Stop opening it; close it if it opened."""
        self._stop.set()
        store = self._store
        if store is not None:
            store.close()
