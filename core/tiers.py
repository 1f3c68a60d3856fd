"""The tier loader: opens the semantic tier and the FAQ, off the request path, and sees that
every answer's question reaches the semantic index.

The embedder, the vector index and the FAQ take seconds to open.  By default a daemon thread
opens them (``open_in_background``) and until then they miss (``warming_skips``);
``Cache(warm=True)`` opens them before returning (``open_now``).  A tier that could not be
opened (a Qdrant server down) is tried again after ``REOPEN_AFTER_S``, an FAQ file that
appears later within a second, both in the background.

An answer whose question cannot be indexed at once (the tier still opening, its index down)
is written ahead: drafted without a model (``semantic/points.py``) and put in the L2 store's
journal (``stores/base.py`` ``WriteJournal``) as it is stored, so nothing waits in memory for
an exit that may never run cleanly.  Whichever process has the tier open catches up from the
journal in the background (``upkeep``, every 5 s and when woken), a batch at a time; only a
cache without a journal (L1 only) or with its store down keeps drafts in memory, bounded and
counted (``unindexed``) past ``_MEMORY``.
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

from .exact.link import StoreUnavailable, store_error
from .exact.tier import ExactTier
from .exact.upkeep import Upkeep
from .key.asked import Asked
from .key.entry import CacheEntry
from .ops.breaker import CircuitBreaker
from .ops.metrics import Metrics
from .runtime.exit import Exiting, exiting, native
from .runtime.forks import inherited, on_fork
from .runtime.home import data_dir
from .semantic import points
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
        # whether a question may be cached, as every tier judges it (``Asked.cacheable``)
        self.judge = cacheable
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
        self._unjournaled: deque[bytes] = deque()  # drafts no journal took (see the module)
        self._catching_up = threading.Lock()
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
        """The semantic tier indexes this answer's question now; when it cannot (still
        opening, its index failing), the question is written ahead to the journal."""
        ttl = self.exact.policy.base_ttl(entry.category, negative=entry.negative)
        draft = points.draft(asked, entry, ttl, judge=self.judge, volatile=self._volatile_context)
        if draft is None:
            return
        tier = self.ready_semantic()
        if tier is not None and self.breaker.allow():
            try:
                tier.index_drafts([tier.grouped(draft, entry.text, self.exact.fetch)])
                self.breaker.success()
                return
            except Exception as exc:
                self.breaker.failure()
                self.metrics.incr("semantic", "index_errors")
                if tier.index_on_store and store_error(exc):  # the store's own server:
                    # counted; the exact tier's breaker is its own calls' (an index write that
                    # failed, e.g. while the engine re-indexes, must not switch L2 off)
                    self.exact.link.failed("index", exc, breaker=False)
                else:
                    self.exact.link.warn("semantic index write failed (journaled): %s", exc)
        if self.semantic_on:
            self._write_ahead([points.encode(draft)])

    def _write_ahead(self, records: list[bytes]) -> None:
        """Into the store's journal; kept here (bounded, counted) when there is none or the
        store is down, for the upkeep to place later."""
        store = self._journal()
        if store is not None and self.exact.breaker.allow():
            try:
                dropped = store.journal(self.namespace, records)
                self.metrics.incr("semantic", "journaled", len(records))
                if dropped:  # the journal's cap (100,000 a namespace) dropped the oldest
                    self.metrics.incr("semantic", "unindexed", dropped)
                if self.semantic is not None:
                    self._journal_upkeep.wake()  # (an index that failed: tried again soon)
                return
            except Exception as exc:
                self.exact.link.failed("journal", exc)
        over = len(self._unjournaled) + len(records) - _MEMORY
        for _ in range(max(0, over)):
            self._unjournaled.popleft()
        if over > 0:
            self.metrics.incr("semantic", "unindexed", over)
        self._unjournaled.extend(records)
        self._journal_upkeep.start()

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
    def open_semantic(self, *, catch_up_now: float = 0.0) -> SemanticTier | None:
        """The semantic tier, opened now if it is not; ``None`` when off or unavailable (a
        server down: tried again after ``REOPEN_AFTER_S``).  Once it opens, what waits to be
        indexed is indexed: for ``catch_up_now`` seconds here, the rest in the background."""
        if self.semantic is None and self.semantic_on:
            if time.monotonic() < self._retry_at:
                return None
            with self._open_lock:
                if self.semantic is None and self.semantic_on:
                    self._open_semantic()
                    if self.semantic is not None:
                        if catch_up_now:
                            self.catch_up(catch_up_now)
                        self._journal_upkeep.start()
                        self._journal_upkeep.wake()
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
                cacheable=self.judge,
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
            # the embedder, the vector index, the guards' lists; and what waits to be
            # indexed: some now, the rest in the background (a long journal never blocks)
            self.open_semantic(catch_up_now=_WARM_CATCH_UP_S)
            if self.settings.faq is not None:
                with native():
                    self.open_faq()  # (when its file exists)
        except Exception as exc:  # the tiers stay closed; the exact tier works on
            if not exiting():  # (stopped at a checkpoint, or an import refused at exit)
                log.warning("tricache: warm-up failed: %s", exc)
        finally:
            self.took_s = round(time.perf_counter() - started, 2)
            self._done.set()
            with self._lock:
                self._running = False

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the drafts still held here to the store's journal (one try, within the
        store's timeout) and wait for a warm-up under way (at exit, it stops at its next
        checkpoint)."""
        self._journal_upkeep.stop()
        waiting = self._take_unjournaled(len(self._unjournaled))
        store = self._journal()
        if waiting and store is not None and self.exact.breaker.allow():
            try:
                store.journal(self.namespace, waiting)
                waiting = []
            except Exception as exc:  # a store down: those questions go unindexed
                log.warning("tricache: %d answers left unindexed (%s)", len(waiting), exc)
        if waiting:
            self.metrics.incr("semantic", "unindexed", len(waiting))
        thread = self._thread  # (none in a forked child: the parent's is not copied)
        if thread is not None and thread is not threading.current_thread() and not exiting():
            thread.join(timeout)  # (at exit: only a native step under way is waited for)

    def _take_unjournaled(self, n: int) -> list[bytes]:
        taken: list[bytes] = []
        with contextlib.suppress(IndexError):
            while len(taken) < n:
                taken.append(self._unjournaled.popleft())
        return taken

    # the journal ---------------------------------------------------------------------------
    def upkeep(self) -> None:
        """Now and then: index what waits (this process's drafts, the journal), a bounded
        round at a time; with no tier open, move this process's drafts to the journal."""
        try:
            if self.semantic is None:
                if self._unjournaled and self.exact.breaker.allow():
                    self._write_ahead(self._take_unjournaled(len(self._unjournaled)))
                return
            if not self.catch_up(_ROUND_S):
                self._journal_upkeep.wake()  # more waits: the next round at once
        except Exiting:
            pass
        except Exception as exc:  # a store busy or closing: the journal keeps what is left
            self.metrics.incr("semantic", "journal_errors")
            log.debug("tricache: journal not read: %s", exc)

    def _journal(self) -> WriteJournal | None:
        store = self.exact.store
        return store if isinstance(store, WriteJournal) else None

    def catch_up(self, budget_s: float = float("inf")) -> bool:
        """Index what waits to be indexed, for at most about ``budget_s``: this process's
        drafts, then the journal, a batch at a time (each as its entry stands now: one gone
        since is dropped).  True when nothing is left."""
        tier = self.semantic
        if tier is None or not self.breaker.allow():
            return False
        if not self._catching_up.acquire(blocking=False):
            return False  # (another thread is at it)
        try:
            return self._catch_up(tier, time.monotonic() + budget_s)
        except StoreUnavailable:  # the store or the index failed: written ahead again
            return False
        finally:
            self._catching_up.release()

    def _catch_up(self, tier: SemanticTier, deadline: float) -> bool:
        """``catch_up``'s rounds, until ``deadline`` (monotonic)."""
        while self._unjournaled:
            if time.monotonic() > deadline:
                return False
            with native():  # (an exit waits for a batch under way)
                self._index_records(tier, self._take_unjournaled(_BATCH))
        store = self._journal()
        while store is not None:
            if time.monotonic() > deadline:
                return False
            with native():
                records = store.take_journal(self.namespace, _BATCH)
                self._index_records(tier, records)
            if len(records) < _BATCH:
                break
        return True

    def _index_records(self, tier: SemanticTier, records: list[bytes]) -> None:
        """Index the drafts ``records`` hold whose entries are current and shared; the ones
        whose entry cannot be read now, or that the index refuses, are written ahead again."""
        ready, later = [], []
        for data in records:
            draft = points.decode(data, self.namespace)
            if draft is None:  # hostile, damaged, or of another version: skipped, counted
                self.metrics.incr("semantic", "journal_skipped")
                continue
            try:
                entry = self.exact.current(draft["ref"], tuple(draft.get("tags") or ()))
            except StoreUnavailable:
                later.append(data)
                continue
            if entry is not None and entry.shared and not entry.negative:
                draft.update(watermark=entry.watermark, kb_version=entry.kb_version)
                ready.append((data, draft))
        try:
            tier.index_drafts([draft for _, draft in ready])
            self.breaker.success()
            self.metrics.incr("semantic", "journal_indexed", len(ready))
        except Exception as exc:
            self.breaker.failure()
            self.metrics.incr("semantic", "index_errors")
            later += [data for data, _ in ready]
            self.exact.link.warn("semantic index write failed (journaled again): %s", exc)
        if later:
            self._write_ahead(later)
            raise StoreUnavailable(f"{len(later)} drafts wait for the store or the index")

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
        self._catching_up = threading.Lock()
        self._unjournaled.clear()  # (the parent places its own)


_MEMORY = 10_000  # drafts held here when no journal takes them (the oldest dropped, counted)
_BATCH = 32  # drafts indexed at a time (an exit waits for one batch at most)
_WARM_CATCH_UP_S = 1.0  # what Cache(warm=True) spends on the journal before returning
_ROUND_S = 2.0  # one round of the upkeep's catching up


def _vector_dir(path: str | Path | None) -> Path | None:
    """Beside an explicit SQLite file, or ``None`` for the data directory's default."""
    return Path(path).with_name(Path(path).stem + "-vectors") if path else None
