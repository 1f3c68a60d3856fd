"""A circuit breaker: stop calling a failing store for a while, then try again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..runtime.forks import on_fork

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Opens after ``failures`` consecutive errors; stays open ``backoff`` seconds.

    Then one caller is let through (the trial: the first ``allow()`` after the back-off); the
    others are refused until it reports, or for ``trial_s`` at most (a caller that never does).
    A failed trial opens it again for twice as long (up to ``max_backoff``); a success closes it
    and resets the back-off.  Failures reported while it is open change nothing: calls that were
    in flight when the store stopped answering are one outage, not one per thread.  While open,
    ``allow()`` is False and the caller skips the store (a miss, or a dropped write).
    """

    def __init__(
        self,
        failures: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        trial_s: float = 1.0,
    ) -> None:
        self.failures = failures
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.trial_s = trial_s
        self._clock = clock
        self._lock = threading.Lock()
        on_fork(self._after_fork)
        self._consecutive = 0
        self._current_backoff = backoff
        self._open_until = 0.0  # 0: closed; else open (or a trial under way) until then
        self._trial = False
        self.opened = 0  # how many times it opened

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._clock() < self._open_until

    def allow(self) -> bool:
        """True when the store may be called now: closed, or this caller takes the trial."""
        until = self._open_until
        if not until:
            return True
        now = self._clock()
        if now < until:
            return False
        with self._lock:
            if not self._open_until:  # closed meanwhile
                return True
            if now < self._open_until:  # another caller took the trial
                return False
            self._open_until = now + self.trial_s
            self._trial = True
            return True

    def success(self) -> None:
        if self._consecutive or self._open_until:
            with self._lock:
                self._consecutive = 0
                self._current_backoff = self.backoff
                self._open_until = 0.0
                self._trial = False

    def failure(self) -> None:
        with self._lock:
            now = self._clock()
            if self._trial or (self._open_until and now >= self._open_until):
                self._trial = False  # the trial failed: open again at once, for longer
                self._open(now)
            elif self._open_until:  # a call that began before it opened: the same outage
                return
            else:
                self._consecutive += 1
                if self._consecutive >= self.failures:
                    self._open(now)

    def _open(self, now: float) -> None:
        self._open_until = now + self._current_backoff
        self._current_backoff = min(self._current_backoff * 2, self.max_backoff)
        self.opened += 1
