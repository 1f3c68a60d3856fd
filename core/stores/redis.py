"""Shared L2 on Redis or Redis Cluster, with redis-py's sync and asyncio clients.

Layout of a namespace ``ns``:

- ``tricache:ns:x:<digest>`` — entries; the value is a 16-digit watermark in microseconds
  (Redis ``TIME``, stamped by a Lua script) followed by the MessagePack entry;
- ``tricache:{ns}:meta`` — a hash: the epoch, ``seq`` and every version number;
- ``tricache:{ns}:changes`` — a sorted set: each changed name scored by the ``seq`` of its last
  change, plus a member naming the epoch (so a lost set is noticed, not read as "no change");
- ``tricache:ns:wlog`` — a capped stream of written keys, read by other processes' Bloom filters;
- ``tricache:{ns}:p:<id>`` — the semantic tier's vector points (with the entries' TTL), and
  ``tricache:{ns}:plog`` — a capped stream of the point ids that changed (one slot: a script
  changes a point and logs it at once);
- ``tricache:{ns}:labels`` — a capped stream of the labels the semantic tier learns from, and
  ``tricache:{ns}:labels:id`` — the id of that log (a new one after ``clear``: readers start
  over);
- channel ``tricache:ns:events`` — invalidation messages.

The two version keys share a hash tag (one cluster slot) and change only inside Lua scripts, so
a reader never sees half a change.  Entry keys spread over the cluster's slots; every other
operation touches one key.  Timeouts are short and retries off: a slow store must cost a lookup
its budget, not the client's defaults.

redis.asyncio clients belong to one event loop: the store keeps one per running loop, closed
when the loop shuts down (``asyncio.run`` does), by ``aclose()`` in that loop, or by ``close()``
(loops already closed are dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import socket
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..key.request import entry_prefix
from ..runtime.forks import on_fork
from .base import (
    STATS_BUCKET_S,
    STATS_KEPT_S,
    DamagedState,
    LabelBatch,
    PointChanges,
    Record,
    VersionState,
    WrittenKeys,
    batched,
)

__all__ = ["RedisStore"]

log = logging.getLogger(__name__)

_WM_DIGITS = 16
# SET with the server's clock as the watermark: one round trip, no caller clock involved.
_SET_STAMPED = """
local t = redis.call('TIME')
local wm = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('SET', KEYS[1], wm .. ARGV[1], 'PX', ARGV[2])
return wm
"""

# The version state.  KEYS: meta hash, changes set.  Each script first makes sure the state is
# whole; otherwise it starts the epoch given as ARGV[1].  Whole means: both keys of their type,
# the epoch marked in the set, a whole-number seq, and written by this very server process — a
# restart may have loaded an older snapshot (or lost the last second of an AOF), and a failover
# promotes a replica that may lag.  Replies: {epoch, seconds, microseconds, seq, upto, name,
# value, name, value ...}.
_EPOCH = """
local function server()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
end
local function fresh(epoch)
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('HSET', KEYS[1], 'epoch', epoch, 'seq', 0, 'run', server())
  redis.call('ZADD', KEYS[2], 0, '\\0' .. epoch)
  return epoch
end
local function whole()
  if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('TYPE', KEYS[2]).ok ~= 'zset' then
    return nil
  end
  local state = redis.call('HMGET', KEYS[1], 'epoch', 'seq', 'run')
  local epoch, seq, run = state[1], state[2], state[3]
  if not epoch or not seq or not string.match(seq, '^%d+$') or run ~= server() then
    return nil
  end
  if not redis.call('ZSCORE', KEYS[2], '\\0' .. epoch) then return nil end
  return epoch
end
local function current(candidate)
  return whole() or fresh(candidate)
end
local function reply(epoch, upto, names)
  local t = redis.call('TIME')
  local seq = redis.call('HGET', KEYS[1], 'seq') or '0'
  local out = {epoch, t[1], t[2], seq, upto or seq}
  if #names > 0 then
    local values = redis.call('HMGET', KEYS[1], unpack(names))
    for i, name in ipairs(names) do
      out[#out + 1] = name
      out[#out + 1] = values[i] or '0'
    end
  end
  return out
end
"""
# ARGV: candidate epoch, known epoch, after, limit, names...
_POLL = (
    _EPOCH
    + """
local epoch = current(ARGV[1])
local after = ARGV[2] == epoch and tonumber(ARGV[3]) or 0
local changed = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. after, '+inf', 'WITHSCORES',
                           'LIMIT', 0, tonumber(ARGV[4]))
local names, upto = {}, nil
for i = 1, #changed, 2 do names[#names + 1] = changed[i] end
if #changed >= 2 * tonumber(ARGV[4]) then upto = changed[#changed] end
for i = 5, #ARGV do names[#names + 1] = ARGV[i] end
return reply(epoch, upto, names)
"""
)
# ARGV: candidate epoch, name, value ('' = add one; 'now' = the store's clock).  A version is
# checked before it is changed (a damaged one starts a new epoch); the floor never goes down.
_CHANGE = (
    _EPOCH
    + """
local epoch = current(ARGV[1])
local old = redis.call('HGET', KEYS[1], ARGV[2])
if ARGV[3] == '' then
  if old and not string.match(old, '^%d+$') then epoch = fresh(ARGV[1]) end
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
else
  local value = ARGV[3]
  if value == 'now' then
    local t = redis.call('TIME')
    value = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
  end
  local number = tonumber(old)
  if number and number == number and number > tonumber(value) then value = old end
  redis.call('HSET', KEYS[1], ARGV[2], value)
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('ZADD', KEYS[2], seq, ARGV[2])
return reply(epoch, nil, {ARGV[2]})
"""
)
# ARGV: new epoch, the epoch it replaces ('' = whatever it is)
_NEW_EPOCH = (
    _EPOCH
    + """
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if ARGV[2] == '' or epoch == ARGV[2] or not epoch then return fresh(ARGV[1]) end
return current(ARGV[1])
"""
)
# Points: KEYS log, point keys...; ARGV log length, (value, ttl ms) per key — a value of ''
# deletes.  Each change is logged in the same script: a reader of the log misses none.
_CHANGE_POINTS = """
for i = 2, #KEYS do
  local value, ttl = ARGV[2 * i - 2], ARGV[2 * i - 1]
  if value == '' then redis.call('DEL', KEYS[i]) else
    redis.call('SET', KEYS[i], value, 'PX', ttl) end
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'i', string.sub(KEYS[i], -36))
end
"""
_SCRIPTS = {
    "set": _SET_STAMPED,
    "poll": _POLL,
    "change": _CHANGE,
    "new_epoch": _NEW_EPOCH,
    "points": _CHANGE_POINTS,
}
_CHANGES_PER_POLL = 5000
_JOURNAL_LENGTH = 100_000  # drafts waiting to be indexed, per namespace (~0.5 KB each)
_MAX_CONNECTIONS = 100  # per client (one sync, one per event loop)


class _RedisClients:
    """The clients: a sync one for lookups (the store's timeout), a bulk one off the request
    path (a longer timeout), one asyncio client per event loop, closed with its loop."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        timeout: float = 0.05,
        cluster: bool = False,
        write_log_length: int = 200_000,
        point_log_length: int = 100_000,
        label_log_length: int = 100_000,
    ) -> None:
        self.url = url
        self.cluster = cluster
        self.timeout = timeout
        self._options: dict[str, Any] = dict(
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            **_DRIVER,
        )
        self._log_length = write_log_length
        self._point_log_length = point_log_length
        self._label_log_length = label_log_length
        self._sync_client: Any = None
        self._bulk_client: Any = None
        self._lock = threading.Lock()
        # loop -> (client, the async generator that closes it when the loop shuts down)
        self._async: dict[asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]] = {}
        self._listener: threading.Thread | None = None
        self._stopped = threading.Event()
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """In a forked child: no listener thread and no event loop came along; redis-py opens
        new connections by itself when it sees another pid."""
        self._lock = threading.Lock()
        self._listener, self._stopped = None, threading.Event()
        self._async = {}

    @property
    def _sync(self) -> Any:
        """The sync client, made on first use: a cluster client connects as it is made, and
        a store that is down must cost a miss, not fail the constructor."""
        if self._sync_client is None:
            with self._lock:
                if self._sync_client is None:
                    client = self._client(redis, **self._options)
                    client.tricache = _register(client)
                    self._sync_client = client
        return self._sync_client

    @property
    def _bulk(self) -> Any:
        """A sync client for work off the request path (a replica's rebuild and log reads,
        the admin verbs): a longer timeout, so a loaded server slows it instead of failing."""
        if self._bulk_client is None:
            with self._lock:
                if self._bulk_client is None:
                    timeout = max(self.timeout, _BULK_TIMEOUT_S)
                    options = {**self._options, "socket_timeout": timeout}
                    client = self._client(redis, **options)
                    client.tricache = _register(client)
                    self._bulk_client = client
        return self._bulk_client

    def _client(self, module: Any, **options: Any) -> Any:
        if self.cluster:
            return module.RedisCluster.from_url(self.url, **options)
        if module is redis and self.url.startswith("rediss://"):
            options["connection_class"] = _TLSWithinBudget
        # More concurrent calls than connections wait for a free one, up to the timeout,
        # rather than fail at once ("Too many connections" past redis-py's 100).
        pool = module.BlockingConnectionPool.from_url(
            self.url, max_connections=_MAX_CONNECTIONS, timeout=self.timeout, **options
        )
        return module.Redis.from_pool(pool)

    def _aclient(self) -> Any:
        """The running loop's asyncio client, made on first use in that loop."""
        loop = asyncio.get_running_loop()
        held = self._async.get(loop)
        if held is not None:
            return held[0]
        client = self._client(redis.asyncio, **self._options)
        client.tricache = _register(client)
        keeper = self._closes_with_loop(loop, client)
        with contextlib.suppress(StopIteration):  # run to its ``yield``: the loop now tracks it
            keeper.__anext__().send(None)
        with self._lock:
            self._drop_closed_loops()
            self._async[loop] = (client, keeper)
        return client

    async def _closes_with_loop(
        self, loop: asyncio.AbstractEventLoop, client: Any
    ) -> AsyncGenerator[None, None]:
        """Waits at ``yield`` while ``loop`` lives.  A loop finalizes the async generators
        started in it when it shuts down (``loop.shutdown_asyncgens()``, which ``asyncio.run``
        calls), and so closes ``client`` while it can still run its coroutines."""
        try:
            yield
        finally:
            with self._lock:
                if self._async.get(loop, (None,))[0] is client:
                    del self._async[loop]
            with contextlib.suppress(Exception):
                await client.aclose()

    def _drop_closed_loops(self) -> None:
        """Forget the clients of loops closed without shutting down their async generators
        (their sockets close when collected)."""
        for loop in [loop for loop in self._async if loop.is_closed()]:
            del self._async[loop]

    async def aclose(self) -> None:
        """Close the running loop's asyncio client (another one is made if the store is used
        again in that loop)."""
        held = self._async.get(asyncio.get_running_loop())
        if held is not None:
            await held[1].aclose()

    def close(self) -> None:
        """Close the sync client and the event listener, and what can be closed of the asyncio
        clients from here: those of running loops are closed in their loop (``aclose()`` in
        the loop waits for it), those of idle loops by running it, those of closed loops are
        dropped."""
        self._stopped.set()
        for client in (self._sync_client, self._bulk_client):
            if client is not None:
                client.close()
        with self._lock:
            self._drop_closed_loops()
            held = list(self._async.items())
        for loop, (_, keeper) in held:
            closing = _finish(keeper)
            try:
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(closing, loop)
                else:
                    loop.run_until_complete(closing)
            except RuntimeError:  # closed or started meanwhile, another loop running here
                closing.close()


class _RedisEntries(_RedisClients):
    """Entries (``EntryStore``): reads and writes (scripts keep the write log and the points
    in step), the LRU's recency, scans.  A write follows an LLM call (seconds): two round
    trips cost nothing there, and Redis Cluster refuses a script inside a pipeline."""

    def get(self, key: str) -> Record | None:
        return _read(self._sync, key)

    # A write follows an LLM call (seconds): two round trips cost nothing there, and Redis
    # Cluster refuses a script inside a pipeline.
    def set(self, key: str, value: bytes, ttl: float) -> float:
        client = self._sync
        watermark = client.tricache["set"](keys=[key], args=[value, max(1, int(ttl * 1000))])
        client.xadd(_wlog(key), {"k": key}, maxlen=self._log_length, approximate=True)
        return int(watermark) / 1e6

    def delete(self, keys: Sequence[str]) -> None:
        """One key (the request path: within the timeout), or many (eviction: the bulk
        client's longer one)."""
        client = self._sync if len(keys) <= 1 else self._bulk
        for key in keys:  # one key a command: cluster-safe
            client.delete(key)

    def touch(self, keys: Sequence[str]) -> None:
        """``keys`` were just served from a level in front of Redis (L1): ``TOUCH`` them, so
        an LRU ``maxmemory-policy`` sees them used (one pipeline; off the request path)."""
        if not keys:
            return
        with self._bulk.pipeline(transaction=False) as pipe:
            for key in keys:  # one key a command: cluster-safe
                pipe.touch(key)
            pipe.execute()

    async def aget(self, key: str) -> Record | None:
        try:
            return _record(await self._aclient().get(key))
        except redis.ResponseError as exc:
            return _not_an_entry(exc)

    async def aset(self, key: str, value: bytes, ttl: float) -> float:
        client = self._aclient()
        watermark = await client.tricache["set"](keys=[key], args=[value, max(1, int(ttl * 1000))])
        await client.xadd(_wlog(key), {"k": key}, maxlen=self._log_length, approximate=True)
        return int(watermark) / 1e6

    async def adelete(self, keys: Sequence[str]) -> None:
        client = self._aclient()
        for key in keys:
            await client.delete(key)

    def keys(self, namespace: str) -> Iterator[str]:
        for raw in self._bulk.scan_iter(match=entry_prefix(namespace) + "*", count=1000):
            yield raw.decode() if isinstance(raw, bytes) else raw

    def scan(self, namespace: str) -> Iterator[tuple[str, Record]]:
        for key in self.keys(namespace):
            record = _read(self._bulk, key)
            if record is not None:  # expired between SCAN and GET
                yield key, record

    def written_since(self, namespace: str, cursor: str) -> WrittenKeys:
        stream = f"tricache:{namespace}:wlog"
        pipe = self._sync.pipeline(transaction=False)
        pipe.xinfo_stream(stream)
        pipe.xrange(stream, min=f"({cursor}" if cursor else "-", max="+", count=2000)
        info, entries = pipe.execute(raise_on_error=False)
        if isinstance(entries, Exception):
            raise entries
        if isinstance(info, Exception):  # no stream yet: nothing was written
            return WrittenKeys([], cursor, True)
        complete = not cursor or _continues(info, cursor)
        keys = [key for _, fields in entries if (key := _logged_key(fields)) is not None]
        new_cursor = entries[-1][0].decode() if entries else cursor
        return WrittenKeys(keys, new_cursor, complete, len(entries) - len(keys))

    def clear(self, namespace: str) -> int:
        count = 0
        for raw in self._bulk.scan_iter(match=f"tricache:{namespace}:*", count=1000):
            count += self._bulk.delete(raw)
        self._bulk.delete(_label_log_id(namespace), _label_log(namespace))  # id first
        self._bulk.delete(_journal(namespace))
        return count


class _RedisVersions(_RedisClients):
    """The version state (``VersionStore``).  The admin verbs (invalidate, a new
    knowledge-base version, a floor, clear, evict) run on the bulk client: a busy server
    slows them, never fails them as it would a lookup."""

    def poll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        args = [_new_epoch_id(), epoch, after, _CHANGES_PER_POLL, *names]
        return _state(self._sync.tricache["poll"](keys=_version_keys(namespace), args=args))

    async def apoll(
        self, namespace: str, epoch: str, after: int, names: Sequence[str] = ()
    ) -> VersionState:
        args = [_new_epoch_id(), epoch, after, _CHANGES_PER_POLL, *names]
        script = self._aclient().tricache["poll"]
        return _state(await script(keys=_version_keys(namespace), args=args))

    def bump(self, namespace: str, name: str) -> VersionState:
        return self._change(namespace, name, "")

    def set_floor(self, namespace: str, value: float | None) -> VersionState:
        return self._change(namespace, "min_wm", "now" if value is None else repr(float(value)))

    # The admin verbs (invalidate, a new knowledge-base version, a floor, clear, evict) run
    # on the bulk client: a busy server slows them, never fails them as it would a lookup.
    def _change(self, namespace: str, name: str, value: str) -> VersionState:
        args = [_new_epoch_id(), name, value]
        return _state(self._bulk.tricache["change"](keys=_version_keys(namespace), args=args))

    def new_epoch(self, namespace: str, replacing: str | None) -> str:
        args = [_new_epoch_id(), replacing or ""]
        epoch = self._bulk.tricache["new_epoch"](keys=_version_keys(namespace), args=args)
        return epoch.decode() if isinstance(epoch, bytes) else str(epoch)

    def eviction_policy(self) -> str | None:
        try:
            found = self._sync.config_get("maxmemory-policy")
        except redis.ResponseError:  # CONFIG disabled (managed services): nothing to say
            return None
        if self.cluster and found and all(isinstance(v, dict) for v in found.values()):
            found = next(iter(found.values()))  # one answer per node: they share a config
        value = (found or {}).get("maxmemory-policy")
        return value.decode() if isinstance(value, bytes) else value


class _RedisLogs(_RedisClients):
    """What the processes share besides entries: counters (``StatsLog``), unfinished writes
    (``WriteJournal``), labels (``LabelLog``) and the semantic tier's points (``PointLog``)."""

    def add_stats(self, namespace: str, bucket: int, counts: dict[str, int]) -> None:
        key = _stats(namespace, bucket)  # (within the request path's timeout: a close waits)
        pipe = self._sync.pipeline(transaction=False)
        for name, n in counts.items():
            if n:
                pipe.hincrby(key, name, int(n))
        pipe.expire(key, STATS_KEPT_S)
        pipe.execute()

    def read_stats(self, namespace: str, since: int) -> dict[str, int]:
        now = int(self._bulk.time()[0]) // STATS_BUCKET_S
        pipe = self._bulk.pipeline(transaction=False)
        for bucket in range(max(since, now - STATS_KEPT_S // STATS_BUCKET_S), now + 1):
            pipe.hgetall(_stats(namespace, bucket))
        totals: dict[str, int] = {}
        for found in pipe.execute(raise_on_error=False):
            for name, n in _counters(found):
                totals[name] = totals.get(name, 0) + n
        return totals

    def journal(self, namespace: str, records: Sequence[bytes]) -> int:
        """(On the write path: within the store's timeout.)"""
        pipe = self._sync.pipeline(transaction=False)
        pipe.rpush(_journal(namespace), *records)
        pipe.ltrim(_journal(namespace), -_JOURNAL_LENGTH, -1)
        length, _ = pipe.execute()
        return max(0, int(length) - _JOURNAL_LENGTH)

    def take_journal(self, namespace: str, limit: int) -> list[bytes]:
        taken = self._bulk.lpop(_journal(namespace), limit)
        return [bytes(x) for x in taken or ()]

    def add_labels(self, namespace: str, labels: Sequence[bytes]) -> None:
        """Append to the log (made with an id of its own when missing)."""
        pipe = self._bulk.pipeline(transaction=False)
        pipe.set(_label_log_id(namespace), secrets.token_hex(8), nx=True)
        for data in labels:
            pipe.xadd(_label_log(namespace), {"l": data}, maxlen=self._label_log_length)
        pipe.execute()

    def labels_since(self, namespace: str, cursor: str) -> LabelBatch:
        log_id, _, after = cursor.partition("/")
        pipe = self._bulk.pipeline(transaction=False)
        pipe.get(_label_log_id(namespace))
        pipe.xrange(_label_log(namespace), min=f"({after}" if after else "-", count=_LABELS)
        current, entries = pipe.execute()
        current = _text(current) if current is not None else ""
        if current != log_id:  # cleared, lost or new: read this log from its start
            entries = self._bulk.xrange(_label_log(namespace), min="-", count=_LABELS)
            after = ""
        labels = [fields[b"l"] for _, fields in entries if b"l" in fields]
        last = _text(entries[-1][0]) if entries else after
        return LabelBatch(labels, f"{current}/{last}", current != log_id, len(entries) >= _LABELS)

    def put_point(self, namespace: str, point_id: str, data: bytes, ttl: float) -> None:
        self._change_points(namespace, [(point_id, data, max(1, int(ttl * 1000)))])

    def delete_points(self, namespace: str, point_ids: Sequence[str]) -> None:
        """(Off the request path: feedback, a replica's sync thread.)"""
        changes = [(point_id, b"", 0) for point_id in point_ids]
        self._change_points(namespace, changes, self._bulk)

    def _change_points(
        self, namespace: str, changes: Sequence[tuple[str, bytes, int]], client: Any = None
    ) -> None:
        for point_id, _, _ in changes:
            if len(point_id) != _POINT_ID_CHARS:
                raise ValueError(f"not a point id: {point_id!r}")
        if changes:
            keys = [_point_log(namespace), *(_point_key(namespace, c[0]) for c in changes)]
            args = [self._point_log_length, *(x for c in changes for x in c[1:])]
            (client or self._sync).tricache["points"](keys=keys, args=args)

    def delete_search_points(self, namespace: str, point_ids: Sequence[str]) -> None:
        """Delete the query engine's hashes of these points, in every vector space it has
        held (a worker on the replica forgets for the workers on the query engine)."""
        spaces = [_text(x) for x in self._bulk.smembers(vector_spaces(namespace))]
        keys = [vector_prefix(namespace, space) + i for space in spaces for i in point_ids]
        for batch in batched(iter(keys), 500):  # one slot (the namespace's tag): cluster-safe
            self._bulk.unlink(*batch)

    def clear_points(self, namespace: str) -> None:
        """Points first, then the log: a reader that loses the log rebuilds from what is left."""
        for batch in batched(self._point_keys(namespace), 500):
            self._bulk.unlink(*batch)
        self._bulk.unlink(_point_log(namespace))

    def point_head(self, namespace: str) -> str:
        """The log's last id; with no log, a new one begun with a mark (no point id), so that
        a log lost and made again after this cursor is told apart from this one."""
        stream = _point_log(namespace)
        try:
            return _text(self._bulk.xinfo_stream(stream)["last-generated-id"])
        except redis.ResponseError:  # no log
            pass
        try:
            mark = self._bulk.xadd(stream, {"h": b""}, maxlen=self._point_log_length)
        except redis.ResponseError:  # full under ``noeviction``: the first log reads from 0
            return "0-0"
        return _text(mark)

    def scan_points(self, namespace: str) -> Iterator[tuple[str, bytes]]:
        for batch in batched(self._point_keys(namespace), 500):
            for key, value in zip(batch, self._bulk.mget(batch), strict=True):
                if value is not None:  # expired between SCAN and MGET
                    yield key[-_POINT_ID_CHARS:], value

    def points_since(self, namespace: str, cursor: str) -> PointChanges:
        if not cursor:  # never read: only a rebuild knows where to start
            return PointChanges([], cursor, False)
        stream = _point_log(namespace)
        pipe = self._bulk.pipeline(transaction=False)
        pipe.xinfo_stream(stream)
        pipe.xrange(stream, min=f"({cursor}", max="+", count=_POINTS_PER_READ)
        info, entries = pipe.execute(raise_on_error=False)
        if isinstance(info, Exception) or isinstance(entries, Exception):
            if isinstance(info, redis.ResponseError):  # no log: complete if there never was one
                return PointChanges([], cursor, cursor == "0-0")
            raise entries if isinstance(entries, Exception) else info
        if not _continues(info, cursor):
            return PointChanges([], cursor, False)
        ids = list(dict.fromkeys(_logged_id(f) for _, f in entries if b"h" not in f))
        values = self._bulk.mget([_point_key(namespace, i) for i in ids]) if ids else []
        new_cursor = _text(entries[-1][0]) if entries else cursor
        return PointChanges(list(zip(ids, values, strict=True)), new_cursor, True)

    def _point_keys(self, namespace: str) -> Iterator[str]:
        pattern = _glob_escape(f"tricache:{{{namespace}}}:p:") + "*"
        for raw in self._bulk.scan_iter(match=pattern, count=1000):
            yield _text(raw)


class _RedisCoordination(_RedisClients):
    """Locks with a TTL (``LockStore``: request coalescing across processes) and pub/sub
    (``Bus``): a listener thread per store."""

    def try_lock(self, name: str, ttl: float) -> bool:
        return bool(self._sync.set(name, b"1", nx=True, px=max(1, int(ttl * 1000))))

    def unlock(self, name: str) -> None:
        self._sync.delete(name)

    def is_locked(self, name: str) -> bool:
        return bool(self._sync.exists(name))

    def publish(self, namespace: str, message: bytes) -> None:
        self._sync.publish(f"tricache:{namespace}:events", message)

    def subscribe(self, namespace: str, callback: Callable[[bytes], None]) -> None:
        """Call ``callback`` with each event, from a daemon thread that connects (and
        reconnects) by itself, so no caller ever waits on the channel."""
        with self._lock:
            if self._listener is not None:
                return
            self._listener = threading.Thread(
                target=self._listen,
                args=(f"tricache:{namespace}:events", callback),
                name="tricache-events",
                daemon=True,
            )
            self._listener.start()

    def unsubscribe(self) -> None:
        self._stopped.set()  # the listener ends within a second

    def _listen(self, channel: str, callback: Callable[[bytes], None]) -> None:
        while not self._stopped.is_set():
            client = None
            try:
                client = self._client(redis, socket_timeout=5, socket_connect_timeout=1)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(channel)
                while not self._stopped.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None:
                        callback(message["data"])
            except Exception as exc:  # events missed meanwhile are caught up by polling
                log.debug("tricache: event channel error (%s); reconnecting", exc)
                self._stopped.wait(1.0)
            finally:
                if client is not None:
                    client.close()


class RedisStore(_RedisEntries, _RedisVersions, _RedisLogs, _RedisCoordination):
    """L2 on Redis (``redis://``, ``rediss://``, ``unix://``) or Redis Cluster."""

    name = "redis"
    has_pubsub = True


class _TLSWithinBudget(redis.connection.SSLConnection):
    """A TLS connection made within ``socket_connect_timeout`` in all: TCP connect, the SSL
    context redis-py builds on each attempt (it loads the CA bundle: 15-50 ms) and the
    handshake.  The asyncio client bounds the whole connect with one timeout already."""

    def _connect(self) -> Any:
        budget = self.socket_connect_timeout
        deadline = None if budget is None else time.monotonic() + budget
        sock = redis.connection.Connection._connect(self)  # TCP, within the budget
        timed = _Deadline(sock.family, sock.type, sock.proto, fileno=sock.detach())
        timed.deadline = deadline
        try:
            tls = self._wrap_socket_with_ssl(timed)
        except (OSError, redis.RedisError):
            timed.close()
            raise
        tls.settimeout(self.socket_timeout)
        return tls


class _Deadline(socket.socket):
    """A socket whose timeout is what is left of ``deadline`` when asked: ``ssl`` asks once,
    when it wraps the socket (after the context is built), and the handshake has that time."""

    deadline: float | None

    def gettimeout(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.001)


async def _finish(generator: AsyncGenerator[None, None]) -> None:
    await generator.aclose()


def _driver() -> dict[str, Any]:
    """Who we are, given once: left to redis-py, each new connection reads its version from
    the package metadata (files: a blocking call on an event loop)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py before 7
        return {"lib_name": "redis-py", "lib_version": redis.__version__}
    return {"driver_info": DriverInfo(name="redis-py", lib_version=redis.__version__)}


_DRIVER = _driver()


def _register(client: Any) -> dict[str, Any]:
    return {name: client.register_script(body) for name, body in _SCRIPTS.items()}


def _version_keys(namespace: str) -> list[str]:
    return [f"tricache:{{{namespace}}}:meta", f"tricache:{{{namespace}}}:changes"]


def _new_epoch_id() -> str:
    return secrets.token_hex(8)


def _state(reply: list[Any]) -> VersionState:
    """Parse a script's reply; ``DamagedState`` when a stored number is not one."""
    text = [v.decode() if isinstance(v, bytes) else str(v) for v in reply]
    epoch, seconds, micros, seq, upto, *pairs = text
    values = {}
    for name, raw in zip(pairs[::2], pairs[1::2], strict=True):
        try:
            value = float(raw)
        except ValueError:
            raise DamagedState(epoch, f"{name}={raw[:40]!r}") from None
        if not math.isfinite(value) or (name != "min_wm" and not value.is_integer()):
            raise DamagedState(epoch, f"{name}={raw[:40]!r}")
        values[name] = value
    clock = int(seconds) + int(micros) / 1e6
    return VersionState(epoch, clock, int(seq), int(float(upto)), values)


def _record(value: bytes | None) -> Record | None:
    """Split a stored value into (entry bytes, watermark); ``None`` stays ``None``.

    A value without a valid watermark header comes back with watermark 0: the entry codec then
    rejects it as corrupt (or the staleness check as too old).
    """
    if value is None:
        return None
    head = value[:_WM_DIGITS]
    if len(head) == _WM_DIGITS and head.isdigit():
        return Record(value[_WM_DIGITS:], int(head) / 1e6)
    return Record(value, 0.0)


def _read(client: Any, key: str) -> Record | None:
    """The record stored under ``key`` (``None``: none)."""
    try:
        return _record(client.get(key))
    except redis.ResponseError as exc:
        return _not_an_entry(exc)


def _not_an_entry(exc: redis.ResponseError) -> Record:
    """A key of another type where an entry belongs (a hash, a list: written by hand) reads
    as a value the entry codec rejects, so the tier deletes it as corrupt, as it does a
    string of garbage; the store's other refusals are raised."""
    if not _wrong_type(exc):
        raise exc
    return Record(b"", 0.0)


def _wrong_type(exc: object) -> bool:
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("WRONGTYPE")


def _counters(found: dict[Any, Any] | Exception) -> Iterator[tuple[str, int]]:
    """The counters of one stats bucket (its ``HGETALL``); what a hand wrote there, a bucket
    of another type or a value that is no whole number (``NaN``, ``1.5``), is left out, so it
    cannot break the figures."""
    if _wrong_type(found):
        return
    if isinstance(found, Exception):
        raise found
    for name, raw in found.items():
        try:
            yield _text(name), int(raw)
        except ValueError:  # (a name that is not UTF-8 too)
            continue


def _wlog(key: str) -> str:
    return key[: key.index(":x:")] + ":wlog"


_POINT_ID_CHARS = 36  # a UUID's text
_BULK_TIMEOUT_S = 5.0
_POINTS_PER_READ = 2000


def _point_key(namespace: str, point_id: str) -> str:
    return f"tricache:{{{namespace}}}:p:{point_id}"


def _point_log(namespace: str) -> str:
    return f"tricache:{{{namespace}}}:plog"


def _label_log(namespace: str) -> str:
    return f"tricache:{{{namespace}}}:labels"


def vector_prefix(namespace: str, space: str) -> str:
    """Where the query engine's hashes of ``namespace`` and one vector space (its slug) live
    (``semantic/index/search.py``)."""
    return f"tricache:{{{namespace}}}:v:" + (f"{space}:" if space else "")


def vector_spaces(namespace: str) -> str:
    """The set of vector spaces the query engine has held points of, for ``namespace``."""
    return f"tricache:{{{namespace}}}:vspaces"


def _stats(namespace: str, bucket: int) -> str:
    return f"tricache:{{{namespace}}}:stats:{bucket}"


def _journal(namespace: str) -> str:
    return f"tricache:{{{namespace}}}:journal"


def _label_log_id(namespace: str) -> str:
    return f"tricache:{{{namespace}}}:labels:id"


_LABELS = 5000  # labels per read


def _continues(info: dict[Any, Any], cursor: str) -> bool:
    """Whether the stream described by ``info`` still holds every entry after ``cursor``.

    It does while it holds an entry at or before the cursor (trimming drops the oldest first).
    Otherwise only when the cursor was read before the stream began ("0-0") and nothing was
    ever trimmed from it: a stream deleted and made again (evicted, the server restarted
    empty) starts after the cursor too.  (Redis does not count trimmed entries in
    ``max-deleted-entry-id``, only XDEL'd ones: ``entries-added`` tells.)"""
    at = _stream_id(cursor or "0-0")
    first = info.get("first-entry")
    if first and _stream_id(first[0]) <= at:
        return True
    return at == (0, 0) and int(info.get("entries-added", -1)) == int(info.get("length", 0))


def _logged_key(fields: dict[bytes, bytes]) -> str | None:
    """The key a write log record names; ``None`` for a hostile record (no key, not UTF-8),
    which the reader passes over instead of stopping the log at it."""
    try:
        return fields[b"k"].decode()
    except (KeyError, UnicodeDecodeError):
        return None


def _logged_id(fields: dict[bytes, bytes]) -> str:
    """The point id a log entry names, as text; a hostile entry (no id, not UTF-8) gives one
    the replica refuses and counts, instead of stopping the log's reader at it."""
    return fields.get(b"i", b"").decode("utf-8", "replace")


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _stream_id(raw: bytes | str) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
