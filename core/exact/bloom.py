"""A Bloom filter of the keys written to L2, so keys never written skip the round trip.

Each process keeps its own filter (rbloom).  It learns the keys that *other* processes wrote
from the store's write log (a Redis stream, or SQLite's growing row ids): when the filter says
"absent" and its last sync is older than ``sync_s`` (50 ms), the exact tier has its upkeep
thread read the log (never the request path).  Another process's entry is therefore missed for
about ``sync_s`` plus one catch-up, never for good — a late entry costs one LLM call, never a
wrong answer.  Until the first full load finishes (in a background thread) the filter answers
"maybe" for every key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator

from rbloom import Bloom

from ..ops.metrics import Metrics
from ..runtime.forks import on_fork
from ..stores.base import L2Store
from .link import TIER

__all__ = ["KeyFilter"]

log = logging.getLogger(__name__)


def _key_hash(key: str) -> int:
    """Keys end in a hex digest already: reuse 128 bits of it (stable across processes)."""
    try:
        return int(key[-32:], 16) - 2**127
    except ValueError:  # not one of our keys: fall back to a stable digest
        from hashlib import blake2b

        return int.from_bytes(blake2b(key.encode(), digest_size=16).digest(), "big") - 2**127


class KeyFilter:
    """Keys that may be in L2; ``might_contain`` is False only for keys surely never written.
    Log records that name no key are passed over, counted in ``metrics`` (``wlog_skipped``)."""

    def __init__(
        self,
        capacity: int = 1_000_000,
        error_rate: float = 0.01,
        sync_s: float = 0.05,
        metrics: Metrics | None = None,
    ) -> None:
        self.capacity = capacity
        self.metrics = metrics or Metrics()
        self.error_rate = error_rate
        self.sync_s = sync_s
        self._synced_at = 0.0
        self._bloom = Bloom(capacity, error_rate, _key_hash)
        self._cursor = ""
        self._ready = False
        self._loading = False
        self._added_while_loading: list[str] = []
        self._closed = threading.Event()  # the store is closing: no load starts or goes on
        self._loader: threading.Thread | None = None
        self._lock = threading.Lock()  # one catch-up at a time (it reads the store)
        # every call into the filter: rbloom hashes with a Python function, so another thread
        # can run in the middle of an update, and a read or add then would find it borrowed
        self._filter_lock = threading.Lock()
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """A load running in the parent has no thread here: this process loads its own."""
        self._lock, self._filter_lock = threading.Lock(), threading.Lock()
        self._loading = False
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    def might_contain(self, key: str) -> bool:
        if not self._ready:
            return True
        with self._filter_lock:
            return key in self._bloom

    def add(self, key: str) -> None:
        with self._filter_lock:
            self._bloom.add(key)
            if self._loading:  # a new filter is being built: it must have this key too
                self._added_while_loading.append(key)

    def close(self, timeout: float = 1.0) -> None:
        """The store is about to close: no load starts, one under way stops at its next batch
        (waited for, at most ``timeout`` seconds), and a read it then fails is no warning."""
        self._closed.set()
        loader = self._loader
        if loader is not None and loader is not threading.current_thread():
            loader.join(timeout)

    def sync_due(self) -> bool:
        return time.monotonic() - self._synced_at >= self.sync_s

    def sync(self, store: L2Store, namespace: str) -> None:
        """Learn the keys written since the last sync; start the full load if not ready."""
        if not self._ready:
            self._start_load(store, namespace)
            return
        with self._lock:
            try:
                complete = self._follow_log(store, namespace, self._bloom)
            finally:  # a failed catch-up waits its turn like a good one
                self._synced_at = time.monotonic()
        if not complete or self._bloom.approx_items > self.capacity:
            why = "full" if complete else "write log gap"
            log.info("tricache: bloom filter rebuilding (%s)", why)
            self._ready = False
            self._start_load(store, namespace)

    def load(self, store: L2Store, namespace: str) -> None:
        """Build a new filter from the store (blocking), then put it in place; the log is
        followed from its tail."""
        with self._lock:
            fresh = Bloom(self.capacity, self.error_rate, _key_hash)
            self._cursor = ""
            complete = self._follow_log(store, namespace, fresh)
            if not complete:  # the log was trimmed: the full key list is the only truth
                for keys in _batches(store.keys(namespace)):
                    self._check_open()
                    fresh.update(keys)
            with self._filter_lock:
                fresh.update(self._added_while_loading)
                self._bloom, self._added_while_loading = fresh, []
            self._synced_at = time.monotonic()
            self._ready = True

    def _follow_log(self, store: L2Store, namespace: str, bloom: Bloom) -> bool:
        """Read the log to its end, a batch at a time, pausing between batches: the request
        threads (and an event loop) get the interpreter back while a big backlog is read.
        The store is read outside the filter's lock; each batch goes in under it."""
        complete = True
        while True:
            self._check_open()
            batch = store.written_since(namespace, self._cursor)
            complete = complete and batch.complete
            if batch.skipped:
                self.metrics.incr(TIER, "wlog_skipped", batch.skipped)
                log.debug("tricache: %d write log records name no key: skipped", batch.skipped)
            with self._filter_lock:
                bloom.update(batch.keys)
            self._cursor = batch.cursor
            if not batch.keys and not batch.skipped:
                return complete
            time.sleep(0.002)

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise _Closed

    def _start_load(self, store: L2Store, namespace: str) -> None:
        if self._loading or self._closed.is_set():
            return
        self._loading = True

        def run() -> None:
            try:
                self.load(store, namespace)
            except _Closed:
                pass
            except Exception as exc:  # stays not ready: every key is a "maybe"
                if self._closed.is_set():  # the store closed under it: nothing went wrong
                    log.debug("tricache: bloom filter load ended by close: %s", exc)
                else:
                    log.warning("tricache: bloom filter load failed: %s", exc)
            finally:
                self._loading = False

        self._loader = threading.Thread(target=run, name="tricache-bloom-load", daemon=True)
        self._loader.start()


class _Closed(Exception):
    """The filter was closed while loading (the load stops; nothing failed)."""


def _batches(keys: Iterable[str], size: int = 2000) -> Iterator[list[str]]:
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
