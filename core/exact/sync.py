"""Version sync: this process's view of a namespace's versions, kept up to date with the store.

Polls ("what changed after the seq I have seen"), pub/sub events, and the changes themselves:
``invalidate`` (a tag), ``bump_kb_version``, ``set_min_watermark``, a cleared namespace (a
new epoch) and entries deleted one by one (``deleted``).  A change made here reaches the other
caches of this process over the same store at once (``_siblings``), the other processes by their
next poll or event.  Whenever the epoch, the knowledge-base version or the floor moves, what
became stale leaves L1; when entries were deleted elsewhere, L1 is emptied (which ones is not in
the change log; L2 still has the rest).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

import msgpack

from ..key.entry import CacheEntry
from ..runtime.steps import Call, Steps, run
from ..stores.base import DamagedState, L2Store, VersionState
from ..stores.memory import TTLLRU
from .bloom import KeyFilter
from .link import TIER, StoreLink, StoreUnavailable
from .upkeep import Upkeep
from .versions import DELETES, KB, MIN_WATERMARK, VersionView, tag_meta

__all__ = ["VersionSync"]

log = logging.getLogger(__name__)


class VersionSync:
    """Keeps ``view`` (one namespace's versions) in step with the store behind ``link``."""

    def __init__(
        self,
        link: StoreLink,
        namespace: str,
        view: VersionView,
        *,
        l1: TTLLRU[CacheEntry],
        bloom: KeyFilter | None,
        upkeep: Upkeep,
    ) -> None:
        self.link = link
        self.namespace = namespace
        self.view = view
        self._l1 = l1  # swept when versions move
        self._bloom = bloom  # loaded once the store first answers
        self._upkeep = upkeep  # reads what a lookup could not judge, off the request path
        self._subscribed = link.store is None or not link.store.has_pubsub
        self._wanted: set[str] = set()  # names a lookup could not judge: the next poll reads them
        self._poll_wanted = False
        self._wanted_lock = threading.Lock()
        self.policy_checked = link.store is None
        self._place = (_location(link.store), namespace)
        _SIBLINGS.setdefault(self._place, weakref.WeakSet()).add(self)

    # before a lookup or a write --------------------------------------------------------------
    def missing(self, tags: tuple[str, ...]) -> list[str] | None:
        """The names a poll must read before a request with ``tags`` (``[]``: just the
        changes), or ``None`` when no store call is needed or allowed now."""
        if self.link.store is None:
            return None
        self._upkeep.start()
        names = [tag_meta(t) for t in self.view.unknown(tags)] if tags else []
        if (not names and self.view.verified()) or not self.link.breaker.allow():
            return None
        return names

    def ready_steps(self, tags: tuple[str, ...]) -> Steps[bool]:
        """Make the view fit for a request with ``tags`` (one poll, when needed and the
        breaker allows); ``False`` when that call failed: the lookup has spent its budget."""
        names = self.missing(tags)
        return names is None or (yield from self.poll_steps(names))

    def learn_soon(self, names: list[str]) -> None:
        """Have the upkeep thread read ``names`` (and the changes) now."""
        with self._wanted_lock:
            self._wanted.update(names)
            self._poll_wanted = True
        self._upkeep.wake()

    def take_wanted(self) -> tuple[bool, list[str]]:
        """(whether a poll was asked for, the names asked for), clearing both."""
        with self._wanted_lock:
            names, self._wanted = sorted(self._wanted), set()
            wanted, self._poll_wanted = self._poll_wanted, False
        return wanted, names

    # polls -----------------------------------------------------------------------------------
    def poll(self, names: list[str] | None = None) -> bool:
        """Bring the versions up to date (plus ``names``); ``False`` when the store failed."""
        return run(self.poll_steps(names))

    def poll_steps(self, names: list[str] | None = None) -> Steps[bool]:
        store = self.link.store
        if store is None:
            return True
        try:
            self._subscribe()
            for _ in range(_POLLS_PER_REFRESH):
                asked, (epoch, after) = (time.time(), time.monotonic()), self.view.position()
                try:
                    state = yield Call(
                        store.poll, store.apoll, self.namespace, epoch, after, names or ()
                    )
                except DamagedState as exc:
                    self._restart_epoch(exc.epoch, str(exc))
                    continue
                if self._take(state, asked, after):
                    break
                names = None
            self._after_poll()
        except Exception as exc:
            self.link.failed("refresh", exc)
            return False
        self.link.breaker.success()
        return True

    def _take(self, state: VersionState, asked: tuple[float, float], after: int) -> bool:
        """Apply one poll's answer; ``True`` when the view is now up to date."""
        if self.view.went_back(state, after) or self.view.retired(state.epoch):
            self._restart_epoch(state.epoch, "fewer changes than seen (an older snapshot?)")
            return False
        self.learn(state, asked)
        return state.upto >= state.seq

    def _after_poll(self) -> None:
        if self._bloom is not None and not self._bloom.ready:
            self._bloom.sync(self.link.store, self.namespace)  # type: ignore[arg-type]  # starts the load
        if not self.policy_checked:
            self._upkeep.wake()  # checks the eviction policy, off the request path

    def check_policy(self) -> None:
        """Once: warn when Redis may evict the version state (the upkeep thread asks)."""
        if self.policy_checked or not self.link.breaker.allow():
            return
        self.policy_checked = True
        try:
            _warn_if_evicting(self.link.store.eviction_policy())  # type: ignore[union-attr]
        except Exception as exc:
            log.debug("tricache: eviction policy unknown (%s)", exc)

    def learn(self, state: VersionState, asked: tuple[float, float] | None = None) -> None:
        view = self.view
        before = (view.epoch, view.kb, view.min_watermark)
        deletes = view.deletes
        if view.apply(state, asked=asked) and before[0]:
            self.link.metrics.incr(TIER, "new_epochs")
        if view.deletes != deletes and view.epoch == before[0]:
            self._empty_l1()
        elif (view.epoch, view.kb, view.min_watermark) != before:
            self.sweep_l1()

    def _empty_l1(self) -> None:
        """Entries were deleted (elsewhere): none of L1 is trusted; L2 has what is left."""
        dropped = len(self._l1)
        self._l1.clear()
        if dropped:
            self.link.metrics.incr(TIER, "l1_invalidated", dropped)

    def sweep_l1(self) -> None:
        fresh = (None, "unknown_tag")  # an unknown tag is read when the entry is next asked for
        dropped = self._l1.remove_if(lambda e: self.view.stale_reason(e) not in fresh)
        if dropped:
            self.link.metrics.incr(TIER, "l1_invalidated", dropped)

    def _restart_epoch(self, epoch: str, why: str) -> None:
        """The store's state cannot be trusted: every entry of ``epoch`` becomes stale."""
        log.warning("tricache: %s version state: %s; starting a new epoch", self.link.name, why)
        self.link.metrics.incr(TIER, "epochs_restarted")
        self.link.store.new_epoch(self.namespace, epoch)  # type: ignore[union-attr]

    # pub/sub ---------------------------------------------------------------------------------
    def _subscribe(self) -> None:
        if not self._subscribed:
            assert self.link.store is not None
            # The listener thread holds its callback: a bound method would keep this object
            # (and the tier's upkeep thread, polling) alive after a cache dropped without
            # close().  When it is collected, the listener ends.  (Not ``close``: from the
            # collector it could run an idle event loop, with whatever that loop still had
            # to do.)
            me = weakref.ref(self)
            self.link.store.subscribe(self.namespace, lambda message: _deliver(me, message))
            weakref.finalize(self, self.link.store.unsubscribe).atexit = False
            self._subscribed = True

    def on_event(self, message: bytes) -> None:
        try:
            epoch, name, value = msgpack.unpackb(message)
            known = self.view.observe(str(epoch), str(name), float(value))
        except Exception:
            self.link.metrics.incr(TIER, "bad_events")
            return
        if not known:  # another epoch (or a new one): ask the store now
            self.learn_soon([])
        elif name in (KB, MIN_WATERMARK):
            self.sweep_l1()
        elif name == DELETES:
            self._empty_l1()

    def _publish(self, event: list[Any]) -> None:
        try:
            self.link.store.publish(self.namespace, msgpack.packb(event))  # type: ignore[union-attr]
        except Exception as exc:  # other processes still learn it by polling
            log.warning("tricache: invalidation event not published: %s", exc)

    def after_fork(self) -> None:
        self._wanted_lock = threading.Lock()
        self._subscribed = self.link.store is None or not self.link.store.has_pubsub

    # changes ---------------------------------------------------------------------------------
    def deleted(self, keys: list[str]) -> None:
        """``keys`` were deleted from the store: they leave the L1 of every cache of this
        process now, and every other process's L1 at its next poll or event (``refresh_s``).
        Raises ``StoreUnavailable`` when the store did not take the change."""
        for sync in self._siblings():
            for key in keys:
                sync._l1.pop(key)
        if self.link.store is not None and keys:
            self.change(DELETES, None, told=True)

    def new_epoch(self) -> None:
        """The namespace was cleared: a new epoch makes whatever survives (in L1s, in a store
        that missed the deletes) stale, in every process."""
        store = self.link.store
        if store is None:
            return
        try:
            epoch = store.new_epoch(self.namespace, None)
        except Exception as exc:
            raise StoreUnavailable(f"{self.link.name} did not take the change: {exc}") from exc
        for sync in self._siblings():
            sync._l1.clear()
            sync.poll()
        self._publish([epoch, "", 0])

    def change(self, name: str, value: float | None, *, told: bool = False) -> float:
        """Change one version (``tag_meta(tag)``, ``KB``: a new value; ``MIN_WATERMARK``: the
        floor ``value``, ``None`` for the store's clock now) in the store, and tell every
        process; returns its value now.  Raises ``StoreUnavailable`` when the store is
        unreachable: an invalidation must not be lost silently.  ``told``: the caches of
        this process have already acted on it."""
        if self.link.store is None:
            state = VersionState(self.view.epoch, time.time(), 0, 0,
                                 {name: self.view.next_local(name, value)})  # fmt: skip
            self.learn(state)
            return state.values[name]
        try:
            for _ in range(2):
                epoch, seen = self.view.position()
                state = self._send_change(name, value)
                if not (state.epoch == epoch and state.seq <= seen):
                    break
                # the store counts fewer changes than this process saw: it lost some (an older
                # snapshot, then this change): nothing of this epoch can be trusted
                self._restart_epoch(epoch, "fewer changes than seen (an older snapshot?)")
        except DamagedState as exc:
            self._restart_epoch(exc.epoch, str(exc))
            state = self._send_change(name, value)
        except Exception as exc:
            raise StoreUnavailable(f"{self.link.name} did not take the change: {exc}") from exc
        for sync in self._siblings():  # other caches of this process learn it now, not at a poll
            if told and state.epoch == sync.view.epoch:  # (their L1s have had it already)
                sync.view.apply(state)
            else:
                sync.learn(state)
        self._publish([state.epoch, name, state.values[name]])
        return state.values[name]

    def _send_change(self, name: str, value: float | None) -> VersionState:
        if name == MIN_WATERMARK:
            return self.link.store.set_floor(self.namespace, value)  # type: ignore[union-attr]
        return self.link.store.bump(self.namespace, name)  # type: ignore[union-attr]

    def _siblings(self) -> list[VersionSync]:
        """The caches of this process over the same store and namespace, this one included."""
        return list(_SIBLINGS.get(self._place, ()))


def _deliver(ref: weakref.ref[VersionSync], message: bytes) -> None:
    sync = ref()
    if sync is not None:
        sync.on_event(message)


def _warn_if_evicting(policy: str | None) -> None:
    """Redis evicting keys that have no TTL can drop the version state: no stale answer
    follows (a new epoch starts), but every cached entry of the namespace is lost with it."""
    if policy and policy.startswith("allkeys"):
        log.warning(
            "tricache: Redis maxmemory-policy is %s: evicting the version state empties the "
            "cache (safely). Use volatile-lru, volatile-ttl or noeviction (docs/security.md).",
            policy,
        )


def _location(store: L2Store | None) -> str:
    """What identifies a store across the caches of one process, however it was spelled: a
    file by its real path (a symlinked folder, ``./``), a server by its address and database
    (``localhost`` is ``127.0.0.1``, no database is ``/0``)."""
    if store is None:
        return f"none:{next(_places)}"  # no store: nothing shared (a unique place)
    url, path = getattr(store, "url", None), getattr(store, "path", None)
    if isinstance(url, str):
        return f"{store.name}:{_server(url)}"
    if path is not None:
        return f"{store.name}:{os.path.realpath(path)}"
    return f"{store.name}:{id(store)}"


def _server(url: str) -> str:
    """A Redis URL as host, port and database (a socket's or an odd URL: as given)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 6379
    except ValueError:
        return url
    if parts.scheme not in ("redis", "rediss"):
        return url
    host = "127.0.0.1" if host in ("localhost", "::1") else host
    database = parts.path.strip("/") or "0"
    return f"{parts.scheme}://{host}:{port}/{database}"


_places = itertools.count()
_POLLS_PER_REFRESH = 4  # a poll returns up to 5,000 changes; a view far behind asks again
_SIBLINGS: dict[tuple[str, str], weakref.WeakSet[VersionSync]] = {}
