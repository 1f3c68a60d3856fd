"""A compact in-process vector index that needs no build: int8 rows searched with numpy.

Each point takes one row.  In memory: the vector normalized and quantized to int8 with a scale
of its own (``codes``, ``scale``), a 64-number *sketch* of it (its coordinates along the main
directions of the data, fitted from a sample, plus two bounds), and a compact payload (the scope
and namespace as interned ids, the form key as 16 bytes, the expiry, and ``question``/``ref``
packed in one small ``bytes``).  On disk, in the index's directory: the vectors as given
(float16, one fixed-size row each, written as they come) and a journal of the payloads.

A search is exact, in three steps that only ever drop rows that cannot reach the threshold:

1. the sketch gives each row of the scope an upper bound of its cosine (the part along the
   fitted directions exactly, the rest bounded by Cauchy-Schwarz, plus the int8 error): one
   matrix-vector product over 66 numbers a row;
2. the rows left are scored on their int8 codes, each within its stored error bound;
3. the rows that may still reach the threshold are scored exactly on their float16 vector,
   read from the file (a handful of rows; a read each, no lock).

No step holds the GIL for long: the products run in numpy (which lets go of it), the fit of
the sketch's directions and the growth of the arrays work in bounded chunks, off the request
path.  Deleting a row tombstones it; its row is reused once the deletion is on disk, so nothing
needs compacting but the journal, which is rewritten from memory when it has grown to several
times what it holds.

Readers take no lock: a row is written, then published (its scope id set last); a result is
checked against the row's generation before it is returned.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import logging
import math
import os
import re
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import numpy as np

from ...runtime.forks import hold_across_fork
from ...runtime.home import private_dir, private_file
from .vectors import SEARCH_FIELDS, Candidate, DiskFull, FreeSpace

__all__ = ["CorruptIndex", "MatrixIndex"]

_SCORE_ROWS = 8192  # int8 rows scored at a time (16 MiB of float32 at 512 dimensions)

log = logging.getLogger(__name__)

FORMAT = 2  # of the files below (1 was a qdrant-edge shard)
SKETCH_DIMS = 64  # fitted directions a sketch keeps (dims below 4x this get no sketch)
FIT_AT = 1024  # live rows before the first fit; fitted again at 4x the rows of the last fit
_FIT_SAMPLE = 4096  # rows the directions are fitted on
_CHUNK = 4096  # rows per step of any pass over the arrays
_SLACK = 2e-3  # added to every bound: float32 rounding never drops a row that qualifies
_DEAD = -1  # the scope id of a free row
_HEX32 = re.compile(r"[0-9a-f]{32}")
_FILTERS = ("scope", "namespace", "form")


class CorruptIndex(ValueError):
    """The index's files do not hold what their metadata says (or are of another format)."""


@dataclass(slots=True)
class _Arrays:
    """The row arrays, replaced whole when they grow or the sketch is fitted again (a reader
    keeps the ones it started with)."""

    n: int  # rows in use or freed: the high-water mark
    codes: np.ndarray  # (cap, dim) int8
    scale: np.ndarray  # (cap, 2) float32: the codes' scale, the bound of their error
    sid: np.ndarray  # (cap,) int32: scope id, _DEAD for a free row
    nsid: np.ndarray  # (cap,) int32: namespace id
    form: np.ndarray  # (cap, 2) uint64
    expires: np.ndarray  # (cap,) float64
    gen: np.ndarray  # (cap,) uint32: bumped on every write of the row
    proj: np.ndarray | None = None  # (dim, k) float32, orthonormal columns
    sketch: np.ndarray | None = None  # (cap, k + 2) float32: coordinates, rest, int8 error

    @property
    def cap(self) -> int:
        return len(self.sid)


class _Interned:
    """Strings (scopes, namespaces) as small ids, each freed when no row uses it."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str | None] = []
        self.uses: list[int] = []
        self._free: list[int] = []

    def take(self, name: str) -> int:
        sid = self.ids.get(name)
        if sid is None:
            sid = self._free.pop() if self._free else len(self.names)
            if sid == len(self.names):
                self.names.append(name)
                self.uses.append(0)
            else:
                self.names[sid] = name
            self.ids[name] = sid
        self.uses[sid] += 1
        return sid

    def drop(self, sid: int) -> None:
        self.uses[sid] -= 1
        if self.uses[sid] == 0:
            name = self.names[sid]
            self.names[sid] = None
            if name is not None:
                del self.ids[name]
            self._free.append(sid)


class _Matrix:
    """The matrix itself: its rows (taken, grown, placed, killed), its files (opened and
    replayed, flushed, closed) and its sketch (fitted in the background)."""

    name = "matrix"

    def __init__(
        self,
        path: str | Path,
        dim: int,
        *,
        min_free_bytes: int = 64 * 2**20,
        sketch_dims: int = SKETCH_DIMS,
        fit_at: int = FIT_AT,
    ) -> None:
        self.path = Path(path)
        self.dim = dim
        self.k = sketch_dims if dim >= 4 * sketch_dims else 0
        self.fit_at = fit_at
        self._room = FreeSpace(self.path, min_free_bytes)
        self._pid = os.getpid()
        self._row_bytes = 2 * dim
        self._write_lock = threading.Lock()
        self._maintaining = threading.Lock()  # one fit at a time
        self._flushing = threading.Lock()  # one flush at a time
        self._keys: list[int | None] = []  # row -> the point's id as an integer
        self._rows: dict[int, int] = {}  # id -> row
        self._payloads: list[bytes | None] = []  # row -> msgpack of [question, ref]
        self._scopes = _Interned()
        self._spaces = _Interned()
        self._free: list[int] = []  # rows whose deletion is on disk: reused first
        self._freed: list[int] = []  # rows deleted since the last flush
        self._dirty: set[int] = set()  # rows written or deleted since the last flush
        self._fitted = 0  # live rows at the last fit
        self._journal_records = 0  # records in the journal file
        self._journal_name = "journal-0"
        self._journal_size = 0
        self._closed = False
        self._arrays = self._allocate(0, 0)
        existed = (self.path / "meta").exists()
        if not existed and self.path.is_dir() and any(self.path.iterdir()):
            raise CorruptIndex(f"{self.path} holds files of another format")
        private_dir(self.path)
        self._check_room()
        self._vfd = os.open(private_file(self.path / "vectors"), os.O_RDWR)
        self._fds = [self._vfd]
        self._close_fds = weakref.finalize(self, _close_all, self._fds)
        self._close_fds.atexit = False
        try:
            if existed:
                self._load()
            else:
                private_file(self.path / self._journal_name)
                self._write_meta()
        except BaseException:
            self._close_fds()
            raise
        hold_across_fork(self, "_write_lock")  # a child is never copied mid-write

    def count(self) -> int:
        return len(self._rows)

    def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):
            self.flush()
        self._closed = True
        # A search still under way reads nothing now: the descriptor's number stays taken (by
        # /dev/null) until the index is collected, so no other file can get it.  (A fit under
        # way ends first.)
        with self._maintaining, contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, self._vfd)
            os.close(null)

    def _writable(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError("this vector index was opened by another process (a fork)")
        if self._closed:
            raise RuntimeError("the vector index is closed")
        self._check_room()

    def _check_room(self) -> None:
        self._room.check()

    def _take_row(self) -> int:
        if self._free:
            return self._free.pop()
        arrays = self._arrays
        if arrays.n == arrays.cap:
            arrays = self._grow(arrays)
        row = arrays.n
        self._keys.append(None)
        self._payloads.append(None)
        arrays.n += 1
        return row

    def _grow(self, arrays: _Arrays) -> _Arrays:
        """Twice the capacity (the copy in chunks, each of which lets go of the GIL)."""
        bigger = self._allocate(max(1024, 2 * arrays.cap), arrays.n)
        bigger.proj = arrays.proj
        if arrays.proj is not None:
            bigger.sketch = np.empty((bigger.cap, self.k + 2), np.float32)
        for start in range(0, arrays.n, _CHUNK):
            end = min(arrays.n, start + _CHUNK)
            for name in ("codes", "scale", "sid", "nsid", "form", "expires", "gen", "sketch"):
                old = getattr(arrays, name)
                if old is not None:
                    getattr(bigger, name)[start:end] = old[start:end]
        self._arrays = bigger
        return bigger

    def _allocate(self, cap: int, n: int) -> _Arrays:
        sid = np.empty(cap, np.int32)
        sid.fill(_DEAD)
        return _Arrays(
            n=n,
            codes=np.empty((cap, self.dim), np.int8),
            scale=np.zeros((cap, 2), np.float32),
            sid=sid,
            nsid=np.zeros(cap, np.int32),
            form=np.zeros((cap, 2), np.uint64),
            expires=np.zeros(cap, np.float64),
            gen=np.zeros(cap, np.uint32),
        )

    def _place(
        self, rows: list[int], batch: _Batch, codes: np.ndarray | None, scale: np.ndarray | None
    ) -> None:
        """Fill the rows (their ids already point at them), then publish them: their scope ids
        last.  ``codes``/``scale`` ``None``: filled later (a load)."""
        arrays = self._arrays
        at = np.asarray(rows, dtype=np.intp)
        if codes is not None and scale is not None:
            arrays.codes[at] = codes
            arrays.scale[at] = scale
            if arrays.sketch is not None and arrays.proj is not None:
                arrays.sketch[at] = _sketch(codes, scale, arrays.proj)
        arrays.form[at] = batch.forms
        arrays.expires[at] = batch.expires
        arrays.gen[at] += 1
        arrays.nsid[at] = [self._spaces.take(space) for space in batch.spaces]
        scopes = [self._scopes.take(scope) for scope in batch.scopes]
        for row, key, packed in zip(rows, batch.keys, batch.payloads, strict=True):
            self._keys[row] = key
            self._payloads[row] = packed
        self._dirty.update(rows)
        arrays.sid[at] = scopes

    def _holds(self, row: int, batch: _Batch, i: int, stored: np.ndarray) -> bool:
        """Whether ``row`` holds the ``i``-th point of ``batch`` already, vector included."""
        arrays = self._arrays
        if self._payloads[row] != batch.payloads[i] or arrays.expires[row] != batch.expires[i]:
            return False
        if self._scopes.names[int(arrays.sid[row])] != batch.scopes[i]:
            return False
        if self._spaces.names[int(arrays.nsid[row])] != batch.spaces[i]:
            return False
        if (arrays.form[row] != batch.forms[i]).any():
            return False
        try:
            return os.pread(self._vfd, self._row_bytes, row * self._row_bytes) == stored.tobytes()
        except OSError:
            return False

    def _kill(self, row: int) -> None:
        """Tombstone the row (out of searches at once); reusable after the next flush."""
        arrays = self._arrays
        scope = int(arrays.sid[row])
        if scope == _DEAD:
            return
        arrays.sid[row] = _DEAD
        arrays.gen[row] += 1
        self._scopes.drop(scope)
        self._spaces.drop(int(arrays.nsid[row]))
        key = self._keys[row]
        if key is not None and self._rows.get(key) == row:
            del self._rows[key]
        self._keys[row] = None
        self._payloads[row] = None
        self._dirty.add(row)
        self._freed.append(row)

    def _delete_rows(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        self._writable()
        for start in range(0, len(rows), _CHUNK):
            with self._write_lock:
                for row in rows[start : start + _CHUNK].tolist():
                    self._kill(row)

    def flush(self) -> None:
        """Put what changed since the last flush on disk (the vectors are written as they
        come; the payloads and deletions here), then the metadata that says so."""
        if self._closed or os.getpid() != self._pid:
            return
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
        with self._write_lock:
            dirty, self._dirty = self._dirty, set()
            freed, self._freed = self._freed, []
            rewrite = self._journal_records > 2 * len(self._rows) + _CHUNK
        if rewrite:  # a new journal: everything here, then what changed meanwhile
            rows: Iterable[int] = range(self._arrays.n)
            name = f"journal-{int(self._journal_name.split('-')[1]) + 1}"
        else:
            rows, name = sorted(dirty), self._journal_name
        try:
            records, data = self._pack(rows, live_only=rewrite)
            with self._write_lock:  # written during the packing: packed again, after
                late, self._dirty = self._dirty, set()
            more, tail = self._pack(sorted(late), live_only=False)
            fd = os.open(private_file(self.path / name), os.O_WRONLY | os.O_APPEND)
            try:
                if rewrite:
                    os.ftruncate(fd, 0)
                else:
                    os.ftruncate(fd, self._journal_size)
                for chunk in (*data, *tail):
                    _write_all(fd, chunk)
                os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            os.fsync(self._vfd)
        except OSError as exc:
            with self._write_lock:  # written again at the next flush
                self._dirty |= dirty
                self._freed = freed + self._freed
            raise _disk_error(exc, self.path) from exc
        old = self._journal_name
        self._journal_records = (0 if rewrite else self._journal_records) + records + more
        self._journal_name, self._journal_size = name, size
        self._write_meta()
        if rewrite and old != name:
            (self.path / old).unlink(missing_ok=True)
        with self._write_lock:  # their deletions are on disk: the rows may be reused
            self._free.extend(freed)
        if records + more > _CHUNK:
            del data, tail
            _give_back_memory()

    def _pack(self, rows: Iterable[int], *, live_only: bool) -> tuple[int, list[bytes]]:
        """Journal records of ``rows``, in chunks: a ``put`` of the live rows' fields (with a
        CRC of each one's vector on disk), a ``free`` of the others."""
        chunks: list[bytes] = []
        records = 0
        arrays = self._arrays
        for part in _slices(list(rows), 2048):
            at = np.asarray(part, dtype=np.intp)
            sids = arrays.sid[at]
            put, keys, packed, crcs = [], [], [], []
            for row in part:
                key, data = self._keys[row], self._payloads[row]
                if key is None or data is None:
                    continue
                put.append(row)
                keys.append(key.to_bytes(16, "big"))
                packed.append(data)
                vector = os.pread(self._vfd, self._row_bytes, row * self._row_bytes)
                crcs.append(zlib.crc32(vector))
            live = np.asarray(put, dtype=np.intp)
            alive = sids != _DEAD
            if not live_only and (~alive).any():
                chunks.append(msgpack.packb(["free", at[~alive].astype("<i4").tobytes()]))
                records += 1
            if not len(live):
                continue
            scopes = [
                self._scopes.names[sid] if sid != _DEAD else None
                for sid in arrays.sid[live].tolist()
            ]
            spaces = [self._spaces.names[sid] for sid in arrays.nsid[live].tolist()]
            if None in scopes or None in spaces:  # deleted while packed: freed in the next flush
                keep = [
                    i for i in range(len(scopes)) if scopes[i] is not None and spaces[i] is not None
                ]
                live = live[keep]
                keys, packed = [keys[i] for i in keep], [packed[i] for i in keep]
                crcs, scopes = [crcs[i] for i in keep], [scopes[i] for i in keep]
                spaces = [spaces[i] for i in keep]
            record = [
                "put",
                live.astype("<i4").tobytes(),
                b"".join(keys),
                scopes,
                spaces,
                arrays.form[live].astype("<u8").tobytes(),
                arrays.expires[live].astype("<f8").tobytes(),
                packed,
                np.asarray(crcs, dtype="<u4").tobytes(),
            ]
            chunks.append(msgpack.packb(record, use_bin_type=True))
            records += len(live)
        return records, chunks

    def _write_meta(self) -> None:
        meta = {
            "format": FORMAT,
            "dim": self.dim,
            "rows": self._arrays.n,
            "journal": self._journal_name,
            "size": self._journal_size,
        }
        scratch = self.path / "meta.new"
        scratch.unlink(missing_ok=True)
        fd = os.open(private_file(scratch), os.O_WRONLY)
        try:
            _write_all(fd, msgpack.packb(meta))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(scratch, self.path / "meta")  # whole or not at all, even on a crash

    def _load(self) -> None:
        """The index as its last flush left it; ``CorruptIndex`` when the files disagree."""
        try:
            meta = msgpack.unpackb((self.path / "meta").read_bytes(), raw=False)
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            raise CorruptIndex(f"unreadable metadata: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CorruptIndex("an index of another format")
        if meta.get("dim") != self.dim:
            raise CorruptIndex(f"an index of {meta.get('dim')} dimensions, not {self.dim}")
        n, name, size = meta.get("rows"), meta.get("journal"), meta.get("size")
        if not (
            isinstance(n, int) and n >= 0 and isinstance(size, int) and size >= 0
            and isinstance(name, str) and re.fullmatch(r"journal-\d+", name)
        ):  # fmt: skip
            raise CorruptIndex("metadata of the wrong shape")
        self._journal_name, self._journal_size = name, size
        arrays = self._allocate(_capacity(n), n)
        self._arrays = arrays
        self._keys = [None] * n
        self._payloads = [None] * n
        crcs = np.zeros(n, np.uint32)
        try:
            self._journal_records = self._replay(arrays, crcs, size)
        except (OSError, ValueError, msgpack.UnpackException) as exc:
            raise CorruptIndex(f"unreadable journal: {exc}") from None
        for start in range(0, n, _CHUNK):  # the vectors of the live rows, checked
            end = min(n, start + _CHUNK)
            live = np.flatnonzero(arrays.sid[start:end] != _DEAD)
            if not len(live):
                continue
            data = os.pread(self._vfd, (end - start) * self._row_bytes, start * self._row_bytes)
            if len(data) < (int(live[-1]) + 1) * self._row_bytes:
                raise CorruptIndex("fewer vectors than the journal says")
            block = np.frombuffer(data, dtype="<f2")[: (end - start) * self.dim]
            block = block.reshape(-1, self.dim)
            for i in live.tolist():
                if zlib.crc32(block[i].tobytes()) != int(crcs[start + i]):
                    raise CorruptIndex(f"row {start + i}: its vector does not match the journal")
            exact = block[live].astype(np.float32)
            norms = np.linalg.norm(exact, axis=1)
            if not (np.isfinite(norms).all() and (norms > 0).all()):
                raise CorruptIndex("a stored vector that is zero or not finite")
            codes, scale = _quantize(exact / norms[:, None])
            arrays.codes[start + live] = codes
            arrays.scale[start + live] = scale
            time.sleep(0)  # let the app's threads in between chunks
        dead = arrays.sid[:n] == _DEAD
        self._free = np.flatnonzero(dead)[::-1].tolist()
        if self._fit_due():
            self.fit()
        _give_back_memory()

    def _replay(self, arrays: _Arrays, crcs: np.ndarray, size: int) -> int:
        """Apply the journal's first ``size`` bytes to the (empty) rows; returns the rows it
        records.  A later record of a row replaces an earlier one; an id written to a row
        leaves the row it was in before."""
        n, records = arrays.n, 0
        with open(self.path / self._journal_name, "rb") as journal:
            unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**27)
            left = size
            while left > 0:
                data = journal.read(min(left, 2**20))
                if not data:
                    raise CorruptIndex("a journal shorter than the metadata says")
                left -= len(data)
                unpacker.feed(data)
                for record in unpacker:
                    rows, batch, crc = _record(record, n)
                    records += len(rows)
                    for row in rows:
                        self._kill(row)
                    if batch is None:
                        continue
                    for key, row in zip(batch.keys, rows, strict=True):
                        if (old := self._rows.get(key)) is not None:
                            self._kill(old)
                        self._rows[key] = row
                    self._place(rows, batch, None, None)
                    crcs[rows] = crc
                time.sleep(0)
            if unpacker.tell() != size:
                raise CorruptIndex("a journal that ends inside a record")
        self._dirty.clear()
        self._freed.clear()
        return records

    def _fit_due(self) -> bool:
        return self.k > 0 and len(self._rows) >= max(self.fit_at, 4 * self._fitted)

    def _start_fit(self) -> None:
        if self._maintaining.locked():
            return
        threading.Thread(target=self._fit_quietly, name="tricache-matrix-fit", daemon=True).start()

    def _fit_quietly(self) -> None:
        try:
            self.fit(wait=False)
        except Exception as exc:  # searches go on without (or with the older) sketch
            log.warning("tricache: vector index sketch not fitted: %s", exc)

    def fit(self, *, wait: bool = True) -> None:
        """Fit the sketch's directions to the rows held now and sketch every row again: in
        chunks, off the write lock, then the rows written meanwhile under it.  ``wait=False``:
        nothing when a fit is under way."""
        if self.k == 0 or not self._maintaining.acquire(blocking=wait):
            return
        try:
            if self._closed:
                return
            with self._write_lock:
                arrays = self._arrays
                n = arrays.n
                generations = arrays.gen[:n].copy()
                live = np.flatnonzero(arrays.sid[:n] != _DEAD)
                fitted = len(live)
            if fitted < 2 * self.k:
                return
            rng = np.random.default_rng(fitted)
            sample = np.sort(rng.choice(live, min(len(live), _FIT_SAMPLE), replace=False))
            proj = _directions(arrays.codes[sample], arrays.scale[sample], self.k)
            sketch = np.empty((arrays.cap, self.k + 2), np.float32)
            for start in range(0, n, _CHUNK):
                end = min(n, start + _CHUNK)
                sketch[start:end] = _sketch(arrays.codes[start:end], arrays.scale[start:end], proj)
                time.sleep(0)  # let the app's threads in between chunks
            with self._write_lock:
                current = self._arrays
                if current.cap != len(sketch):  # grown meanwhile
                    grown = np.empty((current.cap, self.k + 2), np.float32)
                    grown[:n] = sketch[:n]
                    sketch = grown
                changed = np.flatnonzero(current.gen[:n] != generations)
                redo = np.concatenate([changed, np.arange(n, current.n)])
                if len(redo):
                    sketch[redo] = _sketch(current.codes[redo], current.scale[redo], proj)
                self._arrays = replace(current, proj=proj, sketch=sketch)
                self._fitted = fitted
            del arrays, current, sketch
            _give_back_memory()
        finally:
            self._maintaining.release()


class _MatrixPoints(_Matrix):
    """What the index offers (``VectorIndex``): points upserted and deleted, searched: every
    row bounded with the sketch, the survivors scored on their int8 codes, the few left on
    their float16 vectors."""

    def upsert(self, point_id: str, vector: np.ndarray, payload: Mapping[str, Any]) -> None:
        self.upsert_many([(point_id, vector, payload)])

    def upsert_many(self, points: Sequence[tuple[str, np.ndarray, Mapping[str, Any]]]) -> None:
        """Write the points (a point whose id is already here replaces it).  Raises
        ``ValueError`` for a bad id, vector or payload (none of the batch is written)."""
        if not points:
            return
        keys = [_key(point_id) for point_id, _, _ in points]
        raw = np.asarray(
            np.stack([np.asarray(v, dtype=np.float32).reshape(-1) for _, v, _ in points]),
            dtype=np.float32,
        )
        if raw.shape[1] != self.dim:
            raise ValueError(f"vectors of {raw.shape[1]} numbers, not {self.dim}")
        stored = raw.astype("<f2")  # what the file keeps (the store's own precision)
        exact = stored.astype(np.float32)
        norms = np.linalg.norm(exact, axis=1)
        if not (np.isfinite(norms).all() and (norms > 0).all()):
            raise ValueError("a vector that is zero or not finite")
        batch = _Batch.of(keys, [payload for _, _, payload in points])
        codes, scale = _quantize(exact / norms[:, None])
        self._writable()
        with self._write_lock:
            self._writable()
            rows, kept = [], []
            last = {key: i for i, key in enumerate(keys)}  # an id twice: its last point stays
            for i, key in enumerate(keys):
                if last[key] != i:
                    continue
                old = self._rows.get(key)
                if old is not None:
                    if self._holds(old, batch, i, stored[i]):
                        continue  # this very point (a write of ours, back from the store)
                    self._kill(old)
                row = self._take_row()
                self._rows[key] = row
                rows.append(row)
                kept.append(i)
            if not rows:
                return
            if len(kept) < len(keys):
                batch, stored, codes, scale = (
                    batch.taking(kept),
                    stored[kept],
                    codes[kept],
                    scale[kept],
                )
            try:
                for row, vector in zip(rows, stored, strict=True):
                    _write_all(self._vfd, vector.tobytes(), row * self._row_bytes)
            except OSError as exc:
                for key, row in zip(batch.keys, rows, strict=True):  # of no point: reused later
                    self._rows.pop(key, None)
                    self._freed.append(row)
                    self._dirty.add(row)
                raise _disk_error(exc, self.path) from exc
            self._place(rows, batch, codes, scale)
            due = self._fit_due()
        if due:
            self._start_fit()

    def delete(self, point_ids: Sequence[str]) -> None:
        keys = []
        for point_id in point_ids:
            with contextlib.suppress(ValueError):  # not an id of ours: nothing to delete
                keys.append(_key(point_id))
        if not keys:
            return
        self._writable()
        with self._write_lock:
            self._writable()
            for key in keys:
                row = self._rows.get(key)
                if row is not None:
                    self._kill(row)

    def delete_where(self, must: Mapping[str, str]) -> None:
        arrays = self._arrays
        picked = self._pick(arrays, must)
        if picked is None:
            return
        rows, predicate = picked
        if rows is None:
            rows = np.arange(arrays.n)
        self._delete_rows(rows[predicate(rows)])

    def delete_expired(self, now: float) -> None:
        arrays = self._arrays
        n = arrays.n
        self._delete_rows(np.flatnonzero((arrays.expires[:n] < now) & (arrays.sid[:n] != _DEAD)))

    def search(
        self, vector: np.ndarray, must: Mapping[str, str], limit: int, threshold: float
    ) -> list[Candidate]:
        """The ``limit`` points matching ``must`` whose cosine with ``vector`` is at least
        ``threshold``, best first, each scored exactly on its float16 vector."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(query))
        if limit <= 0 or query.shape[0] != self.dim or not (math.isfinite(norm) and norm > 0):
            return []
        unit = query / norm
        arrays = self._arrays
        picked = self._pick(arrays, must)
        if picked is None:
            return []
        rows, predicate = picked
        floor = threshold - _SLACK
        if arrays.proj is not None and arrays.sketch is not None:
            along = np.einsum("i,ij->j", unit, arrays.proj)  # (no BLAS: no thread wakes)
            rest = math.sqrt(max(0.0, 1.0 - float(along @ along)))
            bound_of = np.concatenate([along, np.array([rest, 1.0], np.float32)])
            if rows is None:  # most rows qualify: one pass over all, then the filter
                bounds = np.einsum("ij,j->i", arrays.sketch[: arrays.n], bound_of)
                rows = np.flatnonzero(bounds >= floor)
                rows = rows[predicate(rows)]
            else:
                bounds = np.einsum("ij,j->i", arrays.sketch[rows], bound_of)
                rows = rows[bounds >= floor]
        elif rows is None:
            rows = np.flatnonzero(predicate(np.arange(arrays.n)))
        if not len(rows):
            return []
        scale = arrays.scale[rows]
        estimate = np.empty(len(rows), np.float32)
        for start in range(0, len(rows), _SCORE_ROWS):  # (a bounded copy: the sketch may
            part = rows[start : start + _SCORE_ROWS]  # prune little on unusual vectors)
            codes = arrays.codes[part].astype(np.float32)
            estimate[start : start + len(part)] = np.einsum("ij,j->i", codes, unit)
        estimate *= scale[:, 0]
        reach = estimate + scale[:, 1]
        keep = np.flatnonzero(reach >= floor)
        order = keep[np.argsort(-reach[keep], kind="stable")]
        found: list[tuple[float, int, int]] = []  # (score, row, generation)
        for i in order.tolist():
            if len(found) >= limit and reach[i] + _SLACK < found[-1][0]:
                break  # no row left can beat the ones found
            row = int(rows[i])
            generation = int(arrays.gen[row])
            score = self._exact(row, query, norm)
            if score is None or score < threshold:
                continue
            found.append((score, row, generation))
            found.sort(key=lambda item: -item[0])
            del found[limit:]
        return self._candidates(arrays, found, scored=True)

    def find(self, must: Mapping[str, str], limit: int) -> list[Candidate]:
        """Points whose payload matches ``must``, without a vector (score 1.0)."""
        arrays = self._arrays
        picked = self._pick(arrays, must)
        if picked is None or limit <= 0:
            return []
        rows, predicate = picked
        if rows is None:
            rows = np.arange(arrays.n)
        rows = rows[predicate(rows)][:limit]
        found = [(1.0, int(row), int(arrays.gen[row])) for row in rows.tolist()]
        return self._candidates(arrays, found, scored=False)

    def _pick(
        self, arrays: _Arrays, must: Mapping[str, str]
    ) -> tuple[np.ndarray | None, Any] | None:
        """The rows that ``must`` can match (``None``: too many to gather, pass over all) and a
        predicate that tells, of given rows, which match; ``None`` when none can."""
        unknown = set(must) - set(_FILTERS)
        if unknown:
            raise ValueError(f"the matrix index filters on {_FILTERS}, not {sorted(unknown)}")
        n = arrays.n
        sid = arrays.sid
        scope = self._scopes.ids.get(must["scope"]) if "scope" in must else None
        if "scope" in must and scope is None:
            return None
        space = self._spaces.ids.get(must["namespace"]) if "namespace" in must else None
        if "namespace" in must and space is None:
            return None
        form = _form_key(must["form"]) if "form" in must else None

        def predicate(rows: np.ndarray) -> np.ndarray:
            keep = sid[rows] != _DEAD if scope is None else sid[rows] == scope
            if space is not None:
                keep &= arrays.nsid[rows] == space
            if form is not None:
                pair = arrays.form[rows]
                keep &= (pair[:, 0] == form[0]) & (pair[:, 1] == form[1])
            return keep

        if scope is None:
            return None, predicate
        uses = self._scopes.uses[scope] if scope < len(self._scopes.uses) else 0
        if 4 * uses > n:  # a big scope: a pass over all rows beats a gather
            return None, predicate
        rows = np.flatnonzero(sid[:n] == scope)
        return rows[predicate(rows)], predicate

    def _exact(self, row: int, query: np.ndarray, norm: float) -> float | None:
        try:
            data = os.pread(self._vfd, self._row_bytes, row * self._row_bytes)
        except OSError:
            return None
        if len(data) != self._row_bytes:
            return None
        vector = np.frombuffer(data, dtype="<f2").astype(np.float64)
        length = float(np.linalg.norm(vector))
        if not length > 0:
            return None
        return float(vector @ query.astype(np.float64)) / (length * norm)

    def _candidates(
        self, arrays: _Arrays, found: list[tuple[float, int, int]], *, scored: bool
    ) -> list[Candidate]:
        out, seen = [], set()
        for score, row, generation in found:
            key, packed = self._keys[row], self._payloads[row]
            # the row was deleted or written again meanwhile: not what was scored
            if key is None or packed is None or int(self._arrays.gen[row]) != generation:
                continue
            if key in seen:
                continue
            seen.add(key)
            values = msgpack.unpackb(packed, raw=False)  # (rows written before "answer": 2)
            payload = {
                name: value
                for name, value in zip(SEARCH_FIELDS, values, strict=False)
                if value is not None
            }
            out.append(Candidate(str(uuid.UUID(int=key)), score if scored else 1.0, payload))
        return out


class MatrixIndex(_MatrixPoints):
    """The exhaustive, exact index of one replica, persisted under ``path`` (see the module).

    Ids are UUIDs (as the tier makes them); filters match ``scope``, ``namespace`` and
    ``form`` exactly.  Only the process that opened it writes it: a forked child that inherits
    it can search it but its writes raise and its flushes do nothing."""

    discard = _MatrixPoints.delete  # in-process: nothing to wait on


# helpers ---------------------------------------------------------------------------------------
def _key(point_id: str) -> int:
    """A point id (a UUID's text) as the integer the index keys it by; ``ValueError`` else."""
    if not isinstance(point_id, str):
        raise ValueError(f"point id {point_id!r} is not text")
    return uuid.UUID(point_id).int


def _form_key(form: str) -> tuple[int, int]:
    """The 16 bytes a form key is kept as: itself when it is the tier's digest (32 hex
    digits), a digest of it otherwise (never equal to a hex one but by a 2^-128 chance)."""
    if _HEX32.fullmatch(form):
        raw = bytes.fromhex(form)
    else:
        raw = hashlib.blake2b(
            b"\x00" + form.encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


_NO_FORM = _form_key("\x01no form")


class _Batch(NamedTuple):
    """What the index keeps of the payloads of a batch of points."""

    keys: list[int]
    scopes: list[str]
    spaces: list[str]
    forms: np.ndarray  # (m, 2) uint64
    expires: np.ndarray  # (m,) float64
    payloads: list[bytes]  # msgpack of the fields a search returns

    def taking(self, kept: list[int]) -> _Batch:
        return _Batch(
            [self.keys[i] for i in kept],
            [self.scopes[i] for i in kept],
            [self.spaces[i] for i in kept],
            self.forms[kept],
            self.expires[kept],
            [self.payloads[i] for i in kept],
        )

    @classmethod
    def of(cls, keys: list[int], payloads: Sequence[Mapping[str, Any]]) -> _Batch:
        """``ValueError`` for a payload whose fields are not of the types the tier writes."""
        scopes, spaces, forms, expires, packed = [], [], [], [], []
        for payload in payloads:
            scope, space = payload.get("scope", ""), payload.get("namespace", "")
            if not isinstance(scope, str) or not isinstance(space, str):
                raise ValueError("payload fields 'scope' and 'namespace' must be text")
            form = payload.get("form")
            if form is not None and not isinstance(form, str):
                raise ValueError("payload field 'form' must be text")
            until = payload.get("expires_at", math.inf)
            if not isinstance(until, float | int) or isinstance(until, bool) or until != until:
                raise ValueError("payload field 'expires_at' must be a time")
            shown = [payload.get(name) for name in SEARCH_FIELDS]
            if not all(value is None or isinstance(value, str) for value in shown):
                raise ValueError(f"payload fields {SEARCH_FIELDS} must be text")
            scopes.append(scope)
            spaces.append(space)
            forms.append(_NO_FORM if form is None else _form_key(form))
            expires.append(float(until))
            packed.append(msgpack.packb(shown, use_bin_type=True))
        return cls(
            keys,
            scopes,
            spaces,
            np.asarray(forms, dtype=np.uint64).reshape(-1, 2),
            np.asarray(expires, dtype=np.float64),
            packed,
        )


def _record(record: Any, n: int) -> tuple[list[int], _Batch | None, np.ndarray]:
    """The rows a journal record names, and for a ``put`` their fields and vectors' CRCs;
    ``CorruptIndex`` for anything else."""
    if not isinstance(record, list) or not record or record[0] not in ("put", "free"):
        raise CorruptIndex("a journal record of the wrong shape")
    if not isinstance(record[1], bytes) or len(record[1]) % 4:
        raise CorruptIndex("a journal record of the wrong shape")
    rows = np.frombuffer(record[1], dtype="<i4")
    if len(rows) and (rows.min() < 0 or rows.max() >= n or len(np.unique(rows)) != len(rows)):
        raise CorruptIndex("a journal record of rows out of range")
    if record[0] == "free":
        if len(record) != 2:
            raise CorruptIndex("a journal record of the wrong shape")
        return rows.tolist(), None, np.zeros(0, np.uint32)
    if len(record) != 9:
        raise CorruptIndex("a journal record of the wrong shape")
    _, _, keys, scopes, spaces, forms, expires, payloads, crcs = record
    m = len(rows)
    if not (
        isinstance(keys, bytes) and len(keys) == 16 * m
        and isinstance(forms, bytes) and len(forms) == 16 * m
        and isinstance(expires, bytes) and len(expires) == 8 * m
        and isinstance(crcs, bytes) and len(crcs) == 4 * m
        and _all_of(scopes, str, m) and _all_of(spaces, str, m) and _all_of(payloads, bytes, m)
    ):  # fmt: skip
        raise CorruptIndex("a journal record of the wrong types")
    until = np.frombuffer(expires, dtype="<f8").astype(np.float64)
    if np.isnan(until).any():
        raise CorruptIndex("a journal record of the wrong types")
    ids = [int.from_bytes(keys[16 * i : 16 * i + 16], "big") for i in range(m)]
    if len(set(ids)) != m:
        raise CorruptIndex("an id twice in one journal record")
    batch = _Batch(
        ids,
        scopes,
        spaces,
        np.frombuffer(forms, dtype="<u8").astype(np.uint64).reshape(-1, 2),
        until,
        payloads,
    )
    return rows.tolist(), batch, np.frombuffer(crcs, dtype="<u4")


def _all_of(items: Any, kind: type, m: int) -> bool:
    return isinstance(items, list) and len(items) == m and all(isinstance(x, kind) for x in items)


def _quantize(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes of unit rows, with (scale, bound of the error's norm) for each."""
    top = np.maximum(unit.max(axis=1), -unit.min(axis=1))
    scale = (top / 127.0).astype(np.float32)
    scaled = unit * (1.0 / scale)[:, None]
    np.rint(scaled, out=scaled)
    codes = scaled.astype(np.int8)
    scaled *= scale[:, None]
    scaled -= unit
    error = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    bounds = np.empty((len(unit), 2), np.float32)
    bounds[:, 0] = scale
    bounds[:, 1] = error * 1.001 + 1e-5
    return codes, bounds


def _directions(codes: np.ndarray, scale: np.ndarray, k: int) -> np.ndarray:
    """``k`` orthonormal directions near the rows' main ones (uncentred): a few rounds of
    orthogonal iteration on their Gram matrix.  No LAPACK call: with several BLAS threads
    on two busy cores, a QR of 512x80 took 1.5 s here (2 ms on one thread).  Any orthonormal
    directions keep every bound exact; better ones prune more."""
    rows = codes.astype(np.float32) * scale[:, :1]
    gram = (rows.T @ rows).astype(np.float64)
    basis = _orthonormal(np.random.default_rng(0).standard_normal((gram.shape[0], k)))
    for _ in range(5):
        basis = _orthonormal(gram @ basis)
    return np.ascontiguousarray(basis, dtype=np.float32)


def _orthonormal(vectors: np.ndarray) -> np.ndarray:
    """The columns made orthonormal in order (Gram-Schmidt, twice over for accuracy)."""
    out = np.array(vectors, dtype=np.float64)
    for j in range(out.shape[1]):
        column = out[:, j]
        for _ in range(2):
            column -= np.einsum("ij,j->i", out[:, :j], np.einsum("ij,i->j", out[:, :j], column))
        length = math.sqrt(float(np.einsum("i,i->", column, column)))
        if length < 1e-9:  # a degenerate column: any direction orthogonal to the others
            column[:] = np.random.default_rng(j).standard_normal(len(column))
            column -= np.einsum("ij,j->i", out[:, :j], np.einsum("ij,i->j", out[:, :j], column))
            length = math.sqrt(float(np.einsum("i,i->", column, column)))
        column /= length
    return out


def _sketch(codes: np.ndarray, scale: np.ndarray, proj: np.ndarray) -> np.ndarray:
    """Per row: its coordinates along ``proj``, the norm of the rest, and the int8 error."""
    rows = codes.astype(np.float32) * scale[:, :1]
    along = rows @ proj
    total = np.einsum("ij,ij->i", rows, rows)
    rest = np.sqrt(np.maximum(0.0, total - np.einsum("ij,ij->i", along, along)) + 1e-6)
    out = np.empty((len(rows), proj.shape[1] + 2), np.float32)
    out[:, :-2] = along
    out[:, -2] = rest
    out[:, -1] = scale[:, 1]
    return out


def _capacity(n: int) -> int:
    cap = 1024
    while cap < n:
        cap *= 2
    return cap


def _write_all(fd: int, data: bytes, offset: int | None = None) -> None:
    view = memoryview(data)
    while view:
        done = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[done:]
        if offset is not None:
            offset += done


def _disk_error(exc: OSError, path: Path) -> OSError:
    if exc.errno == 28:  # ENOSPC
        return DiskFull(f"no space left under {path}: the embedded vector index is not written")
    return exc


def _give_back_memory() -> None:
    """Return the heap's free pages to the system after a large pass (glibc keeps the arrays
    a growth or a fit freed, and a load's or a flush's transient objects, in the process)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)  # (ctypes lets go of the GIL meanwhile)


_libc: Any = None


def _close_all(fds: list[int]) -> None:
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _slices(items: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
