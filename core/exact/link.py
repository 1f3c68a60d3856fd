"""The L2 store behind its circuit breaker: one place that counts, logs and remembers failures.

Reads, writes and version polls all go through one ``StoreLink``, so a store that fails one of
them is skipped by the others, and one lookup spends at most one store timeout: a failure
marks the caller's context (its thread or task) until its next lookup begins.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from contextvars import ContextVar

from ..ops.breaker import CircuitBreaker
from ..ops.metrics import Metrics
from ..stores.base import L2Store

__all__ = ["TIER", "StoreLink", "StoreUnavailable", "refused", "store_error"]

log = logging.getLogger(__name__)
TIER = "exact"


class StoreUnavailable(Exception):
    """The store could not say whether an entry is current (down, slow, or unverified)."""


class StoreLink:
    """``store`` (or none), its breaker and its failure accounting."""

    def __init__(self, store: L2Store | None, breaker: CircuitBreaker, metrics: Metrics) -> None:
        self.store = store
        self.breaker = breaker
        self.metrics = metrics
        self._warned_at = -_WARN_EVERY_S

    @property
    def name(self) -> str:
        return self.store.name if self.store is not None else "none"

    def begin_lookup(self) -> None:
        """A lookup begins (in this thread or task): it may spend one store timeout."""
        _trouble.set(False)

    @staticmethod
    def spent() -> bool:
        """True when a store call already failed this lookup: ask the store nothing more."""
        return _trouble.get()

    def available(self) -> bool:
        """True when this lookup may still call the store: nothing failed since it began,
        and the breaker is closed.  (Lookup-scoped: an update is not a lookup.)"""
        return self.store is not None and not _trouble.get() and self.breaker.allow()

    def failed(self, what: str, exc: Exception, *, breaker: bool = True) -> None:
        """A store call failed: counted, logged now and then, and this lookup asks the store
        nothing more.  ``breaker=False``: a call of another tier on the store's server (a
        search); its failure says nothing of the entries' reads, so it does not count towards
        opening their breaker."""
        _trouble.set(True)
        if breaker:
            self.breaker.failure()
        self.metrics.incr(TIER, f"{what}_errors")
        if what == "write":
            self.metrics.incr(TIER, "dropped_writes")
        self.warn("%s store %s failed: %s", self.name, what, exc)
        if what == "read":
            self.metrics.incr(TIER, "misses")

    def warn(self, message: str, *args: object) -> None:
        """A warning at most every 10 s (an outage, or a store full of garbage, is one line
        now and then, not one a lookup); the others at debug level."""
        now = time.monotonic()
        loud = now - self._warned_at >= _WARN_EVERY_S
        if loud:
            self._warned_at = now
        log.log(logging.WARNING if loud else logging.DEBUG, "tricache: " + message, *args)

    def delete(self, key: str) -> None:
        """Delete one key, when the breaker allows (a failure is counted, never raised)."""
        if self.store is None or not self.breaker.allow():
            return
        try:
            self.store.delete([key])
        except Exception as exc:
            self.failed("delete", exc)


def refused(exc: BaseException) -> bool:
    """The store answered, refusing this one write for what it holds (a value or an expiry
    out of its range): not an outage, so no reason to stop asking it."""
    if isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError | OverflowError):
        return True
    if type(exc).__name__ not in ("ResponseError", "DataError") or not store_error(exc):
        return False
    return not str(exc).upper().startswith(_STATE_ERRORS)  # (Redis's own state is fine)


# Redis errors about the server's state, not the command's content: those are an outage.
_STATE_ERRORS = ("OOM", "READONLY", "LOADING", "MASTERDOWN", "NOAUTH", "NOPERM", "WRONGPASS",
                 "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOSCRIPT", "MISCONF",
                 "NOREPLICAS", "EXECABORT", "UNBLOCKED")  # fmt: skip


def store_error(exc: BaseException) -> bool:
    """A server's failure (a timeout, a lost connection, a refusal), not a bug of the caller."""
    return isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("redis")


_WARN_EVERY_S = 10.0
# set when a store call failed in this thread or task since its lookup began: the rest of the
# lookup (the semantic tier's references) asks the store nothing more
_trouble: ContextVar[bool] = ContextVar("tricache_store_trouble", default=False)
