"""The tier loader: opens the semantic tier and the FAQ, off the request path, and keeps the
answers written while the semantic tier opens.

The embedder, the vector index and the FAQ take seconds to open.  By default a daemon thread
opens them (``open_in_background``) and until then they miss (``warming_skips``);
``Cache(warm=True)`` opens them before returning (``open_now``).  A tier that could not be
opened (a Qdrant server down) is tried again after ``REOPEN_AFTER_S``, an FAQ file that
appears later within a second, both in the background.  Answers written meanwhile wait in a
bounded queue to be indexed; at exit what is left goes to the L2 store's journal
(``stores/base.py`` ``WriteJournal``), which the next process to open the semantic tier
indexes (and every process re-reads every 5 s).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .exact.tier import ExactTier
from .exact.upkeep import Upkeep
from .key.asked import Asked, ask
from .key.entry import CacheEntry
from .key.request import decode_request, encode_request
from .ops.breaker import CircuitBreaker
from .ops.metrics import Metrics, failed
from .runtime.exit import Exiting, exiting, native
from .runtime.forks import inherited, on_fork
from .runtime.home import data_dir
from .settings import Resolved
from .stores.base import WriteJournal

if TYPE_CHECKING:
    from .faq.store import FaqStore
    from .semantic.tier import SemanticTier

__all__ = ["TierLoader"]

log = logging.getLogger(__name__)


class TierLoader:
    """Owns the opening of one cache's semantic tier and FAQ, and what waits for them."""

    def __init__(
        self,
        settings: Resolved,
        exact: ExactTier,
        *,
        namespace: str,
        cacheable: Callable[[str], bool],
        volatile_context: bool,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.exact = exact
        self.namespace = namespace
        self.metrics = metrics
        self._cacheable = cacheable
        self._volatile_context = volatile_context
        self.semantic: SemanticTier | None = None  # open (None: off, or not open yet)
        self.faq: FaqStore | None = None  # open (None: off, no file yet, or not open yet)
        self.semantic_on = settings.semantic is not None
        self.breaker = CircuitBreaker()  # the semantic tier's, for lookups and writes alike
        self._open_lock = threading.Lock()
        self._retry_at = 0.0  # the semantic tier failed to open: not before then
        self._faq_checked_at = float("-inf")  # no FAQ file then: not looked for again at once
        self._lock = threading.Lock()
        self._running = False
        self._pid = os.getpid()
        self._done = threading.Event()
        self._deferred: deque[tuple[Asked, CacheEntry]] = deque(maxlen=200)
        self.took_s: float | None = None  # how long the last warm-up took
        self._thread: threading.Thread | None = None
        self._journal_upkeep = Upkeep(self, 5.0, "tricache-journal")
        self._told = False  # that a lookup met the tiers still opening (logged once)
        on_fork(self.after_fork)

    # what the request path asks (never opens anything itself) ------------------------------
    def ready_semantic(self) -> SemanticTier | None:
        """The semantic tier when open; else ``None`` (a miss, counted) and the warm-up runs."""
        if not self.semantic_on:
            return None
        if self.semantic is None:
            self._not_ready("semantic")
        return self.semantic

    def ready_faq(self) -> FaqStore | None:
        """The FAQ when open and not empty; else ``None`` (looked for again within a second)."""
        if self.settings.faq is None:
            return None
        if self.faq is None:
            now = time.monotonic()
            if not self._done.is_set() or now - self._faq_checked_at > 1.0:
                self._faq_checked_at = now  # (a file made later is found within a second)
                self._not_ready("faq")
            return None
        return self.faq if self.faq.count() else None

    def index_answer(self, asked: Asked, entry: CacheEntry) -> None:
        """The semantic tier indexes this answer's question now, or once it is open."""
        tier = self.ready_semantic()
        if tier is None:
            if self.semantic_on:  # still opening: indexed once it is (the oldest go when full)
                self._deferred.append((asked, entry))
                self._not_ready("semantic")
            return
        if not self.breaker.allow():
            return
        try:
            ttl = self.exact.policy.base_ttl(entry.category, negative=entry.negative)
            tier.add(asked.request, asked.key, entry, ttl, located=asked.located)
            self.breaker.success()
        except Exception as exc:
            self.breaker.failure()
            self.metrics.incr("semantic", "dropped_writes")
            failed(self.metrics, "semantic update", exc)

    def _not_ready(self, tier: str) -> None:
        if not self._done.is_set() or self._pid != os.getpid():
            self.metrics.incr(tier, "warming_skips")
            if not self._told:  # once: why the first paraphrases miss
                self._told = True
                log.info(
                    "tricache: the %s tier is still opening (a second or two): it misses until "
                    "then (stats: warming_skips); Cache(warm=True) opens it before returning",
                    tier,
                )
        elif tier == "semantic" and time.monotonic() < self._retry_at:
            return
        self.open_in_background()

    # opening -------------------------------------------------------------------------------
    def open_semantic(self) -> SemanticTier | None:
        """The semantic tier, opened now if it is not; ``None`` when off or unavailable (a
        server down: tried again after ``REOPEN_AFTER_S``)."""
        if self.semantic is None and self.semantic_on:
            if time.monotonic() < self._retry_at:
                return None
            with self._open_lock:
                if self.semantic is None and self.semantic_on:
                    self._open_semantic()
        return self.semantic

    def _open_semantic(self) -> None:
        from .semantic.opening import REOPEN_AFTER_S, Unavailable, open_semantic

        settings = self.settings
        assert settings.semantic is not None
        try:
            self.semantic = open_semantic(
                settings.semantic,
                store=self.exact.store,
                namespace=self.namespace,
                vector_path=settings.semantic.vector_path or _vector_dir(settings.path),
                cacheable=self._cacheable,
                volatile_context=self._volatile_context,
                faq_learn=settings.faq.learn if settings.faq is not None else None,
                resolve=self.exact.fetch,
                metrics=self.metrics,
            )
        except Unavailable:  # e.g. the Qdrant server is down: try again later
            self.metrics.incr("semantic", "open_errors")
            self._retry_at = time.monotonic() + REOPEN_AFTER_S
            return
        if self.semantic is None:
            self.semantic_on = False  # said once in the log; stays off

    def open_faq(self, *, create: bool = False) -> FaqStore | None:
        """The FAQ, opened now when its file exists (``create``: made when it does not)."""
        faq = self.settings.faq
        if self.faq is None and faq is not None:
            path = self.faq_path()
            if create or path.exists():
                from .faq.store import FaqStore
                from .semantic.embed import get_embedder

                semantic = self.settings.semantic
                embedder = get_embedder(semantic.embedder if semantic is not None else None)
                self.faq = FaqStore(
                    path, namespace=self.namespace, embedder=embedder, threshold=faq.threshold
                )
        return self.faq

    def faq_path(self) -> Path:
        faq = self.settings.faq
        path = self.settings.path
        if faq is not None and faq.path:
            return Path(faq.path)
        if path:
            return Path(path).with_name(f"{Path(path).stem}-faq.sqlite3")
        return data_dir() / "faq.sqlite3"

    # the warm-up ---------------------------------------------------------------------------
    def open_in_background(self) -> None:
        """Warm up in a daemon thread (again after a fork, or when something stayed closed)."""
        with self._lock:
            if (self._running and self._pid == os.getpid()) or exiting():
                return
            self._running, self._pid = True, os.getpid()
        self._thread = threading.Thread(target=self.open_now, name="tricache-warm-up", daemon=True)
        self._thread.start()

    def open_now(self) -> None:
        """Open everything now (blocking): what a ``warm=True`` cache does when it is made."""
        started = time.perf_counter()
        try:
            tier = self.open_semantic()  # the embedder, the vector index, the guards' lists
            if self.settings.faq is not None:
                with native():
                    self.open_faq()  # (when its file exists)
            while tier is not None and self._deferred:
                with native():  # (refused once the exit began: it journals what is left)
                    for asked, entry in self._take_deferred(1):
                        self.index_answer(asked, entry)
            if tier is not None:  # and what processes that ended before opening it left
                self._finish_journal()
                self._journal_upkeep.start()
        except Exception as exc:  # the tiers stay closed; the exact tier works on
            if not exiting():  # (stopped at a checkpoint, or an import refused at exit)
                log.warning("tricache: warm-up failed: %s", exc)
        finally:
            self.took_s = round(time.perf_counter() - started, 2)
            self._done.set()
            with self._lock:
                self._running = False

    def stop(self, timeout: float = 30.0) -> None:
        """Leave what waits to be indexed to the next process (the store's journal) and wait
        for a warm-up under way (at exit, it stops at its next checkpoint)."""
        self._journal_upkeep.stop()
        waiting = self._take_deferred(len(self._deferred))
        store = self._journal()
        if waiting and store is not None:
            try:
                requests = [encode_request(asked.request) for asked, _ in waiting]
                store.journal(self.namespace, requests)
            except Exception as exc:  # a store down: those questions go unindexed
                log.warning("tricache: %d answers left unindexed (%s)", len(waiting), exc)
        thread = self._thread  # (none in a forked child: the parent's is not copied)
        if thread is not None and thread is not threading.current_thread() and not exiting():
            thread.join(timeout)  # (at exit: only a native step under way is waited for)

    def _take_deferred(self, n: int) -> list[tuple[Asked, CacheEntry]]:
        """Up to ``n`` answers waiting to be indexed (the warm-up and ``stop`` both take)."""
        taken: list[tuple[Asked, CacheEntry]] = []
        with contextlib.suppress(IndexError):
            while len(taken) < n:
                taken.append(self._deferred.popleft())
        return taken

    # the journal ---------------------------------------------------------------------------
    def upkeep(self) -> None:
        """Now and then: index what other processes left in the journal."""
        if self.semantic is None:
            return
        try:
            self._finish_journal()
        except Exiting:
            pass
        except Exception as exc:  # a store busy or closing: the journal keeps what is left
            self.metrics.incr("semantic", "journal_errors")
            log.debug("tricache: journal not read: %s", exc)

    def _journal(self) -> WriteJournal | None:
        store = self.exact.store
        return store if isinstance(store, WriteJournal) else None

    def _finish_journal(self) -> None:
        """Index the answers that processes stored and could not index before they ended
        (each as its entry stands now: one gone since is skipped)."""
        store = self._journal()
        while store is not None:
            with native():  # (an exit leaves the rest in the journal)
                records = store.take_journal(self.namespace, 100)
                for request in filter(None, map(decode_request, records)):
                    if request.namespace != self.namespace:
                        continue
                    asked = ask(request, self.exact.key(request))
                    entry = self.exact.current(asked)
                    if entry is not None and not entry.negative:
                        self.index_answer(asked, entry)
            if len(records) < 100:
                return

    # the end -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the warm-up, then close the semantic tier (before the store: it sends its last
        deletions there) and the FAQ."""
        self.stop()
        tier = self.semantic
        if tier is not None:
            if tier.learning is not None:
                tier.learning.close()
            tier.index.close()
            if tier.audit is not None:
                tier.audit.close()
        if self.faq is not None:
            self.faq.close()

    def after_fork(self) -> None:
        """In a forked child: the parent's vector index and FAQ connection are left alone
        (kept open, never used) and opened again here, in the background."""
        self._open_lock = threading.Lock()
        if self.semantic is not None:
            inherited(self.semantic)
            self.semantic = None
        if self.faq is not None:
            inherited(self.faq)
            self.faq = None
        self._lock = threading.Lock()
        self._done.clear()
        self._running, self._thread = False, None


def _vector_dir(path: str | Path | None) -> Path | None:
    """Beside an explicit SQLite file, or ``None`` for the data directory's default."""
    return Path(path).with_name(Path(path).stem + "-vectors") if path else None
