"""A circuit breaker: stop calling a failing store for a while, then try again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..runtime.forks import on_fork

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Opens after ``failures`` consecutive errors; stays open ``backoff`` seconds.

    The back-off doubles (up to ``max_backoff``) each time a trial call after it fails, and
    resets on the first success.  While open, ``allow()`` is False and the caller skips the
    store (a miss, or a dropped write).
    """

    def __init__(
        self,
        failures: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._lock = threading.Lock()
        on_fork(self._after_fork)
        self._consecutive = 0
        self._current_backoff = backoff
        self._open_until = 0.0
        self.opened = 0  # how many times it opened

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._clock() < self._open_until

    def allow(self) -> bool:
        return self._clock() >= self._open_until

    def success(self) -> None:
        if self._consecutive:
            with self._lock:
                self._consecutive = 0
                self._current_backoff = self.backoff

    def failure(self) -> None:
        with self._lock:
            self._consecutive += 1
            if self._consecutive >= self.failures:
                self._open_until = self._clock() + self._current_backoff
                self._current_backoff = min(self._current_backoff * 2, self.max_backoff)
                self._consecutive = self.failures - 1  # a failed trial call reopens at once
                self.opened += 1
