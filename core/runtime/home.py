"""Where embedded stores keep their files, private to the user who runs the app.

Directories are created 0700 and files 0600 (each file is created with its mode, never by
changing the process-wide umask).  An existing one with looser permissions is tightened when
the current user owns it, with one log line; anything else is logged, never raised.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import threading
from pathlib import Path

import platformdirs

__all__ = [
    "data_dir",
    "installation_secret",
    "private_dir",
    "private_file",
    "private_sqlite",
    "private_tree",
]

log = logging.getLogger(__name__)

_SQLITE_SIBLINGS = ("-wal", "-shm", "-journal")
_SECRET_BYTES = 32
_logged: set[tuple[str, str]] = set()
_secrets: dict[Path, bytes] = {}
_secrets_lock = threading.Lock()


def data_dir() -> Path:
    """``$TRICACHE_HOME`` if set, else the per-user cache directory (created 0700)."""
    env = os.environ.get("TRICACHE_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("tricache"))
    return private_dir(path)


def private_dir(path: str | Path) -> Path:
    """``path`` as a directory only its owner can enter: created 0700 (its missing parents
    too), or tightened when it exists, is ours and lets others in."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.is_dir()]
    for directory in reversed(missing):  # an error here is the caller's
        directory.mkdir(mode=0o700, exist_ok=True)
    _tighten(path, 0o700)
    return path


def private_tree(path: str | Path) -> Path:
    """``path`` as a private directory, with what an earlier run left in it made private too
    (directories 0700, files 0600): for a directory another library fills, such as the
    embedded vector index, whose new files are then only reachable through ``path``."""
    path = private_dir(path)
    tightened = 0
    for parent, dirs, files in os.walk(path):
        for name in dirs:
            tightened += _tighten(Path(parent, name), 0o700, quiet=True)
        for name in files:
            tightened += _tighten(Path(parent, name), 0o600, quiet=True)
    if tightened:  # the engine makes its files 0644: private already through ``path``
        log.debug("tricache: %d paths under %s made private", tightened, path)
    return path


def private_file(path: str | Path) -> Path:
    """``path`` as a file only its owner can read: created empty with mode 0600 when absent
    (``O_EXCL``: never truncates), tightened when it exists, is ours and is looser."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _tighten(path, 0o600)
    except OSError as exc:  # a read-only or missing directory: the opener will say so
        _once(path, "create", "tricache: cannot create %s privately: %s", path, exc)
    else:
        os.close(fd)
    return path


def private_sqlite(path: str | Path) -> Path:
    """A SQLite database file made private before ``sqlite3`` opens it.  SQLite gives the
    ``-wal``, ``-shm`` and ``-journal`` files it creates the mode of the database file, so
    only the ones left by an earlier run need tightening."""
    path = Path(path)
    if str(path) in ("", ":memory:"):
        return path
    private_file(path)
    for suffix in _SQLITE_SIBLINGS:
        sibling = path.with_name(path.name + suffix)
        if sibling.exists():
            _tighten(sibling, 0o600)
    return path


def installation_secret(home: str | Path | None = None) -> bytes:
    """The random 32-byte key of this installation, from ``<home>/secret`` (the data
    directory by default); created once (0600, atomically), then read by every process."""
    path = (Path(home) if home is not None else data_dir()) / "secret"
    key = path.resolve()
    with _secrets_lock:
        if key not in _secrets:
            _secrets[key] = _read_or_create_secret(path)
        return _secrets[key]


def _read_or_create_secret(path: Path) -> bytes:
    """Written whole to a temporary file, then linked in: a reader never sees a partial
    secret, and of two processes creating it at once, the first link wins for both."""
    for _ in range(3):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            pass
        else:
            if len(data) == _SECRET_BYTES:
                _tighten(path, 0o600)
                return data
            log.warning("tricache: %s is damaged (%d bytes); replacing it", path, len(data))
            path.unlink(missing_ok=True)  # audit hashes written before no longer compare
        temporary = path.with_name(f".secret-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(_SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process won: read its secret
        finally:
            temporary.unlink(missing_ok=True)
    raise OSError(f"tricache: cannot create the installation secret {path}")


def _tighten(path: Path, mode: int, *, quiet: bool = False) -> bool:
    """Remove group and other permissions from ``path`` (to at most ``mode``) when we own
    it, logging once unless ``quiet``; whether it changed.  POSIX only."""
    if os.name != "posix":
        return False
    try:
        st = os.stat(path)
    except OSError as exc:
        _once(path, "stat", "tricache: cannot check the permissions of %s: %s", path, exc)
        return False
    current = stat.S_IMODE(st.st_mode)
    if not current & 0o077:
        return False
    if st.st_uid != os.getuid():
        _once(path, "foreign", "tricache: %s is open to other users and not ours (mode %o)",
              path, current)  # fmt: skip
        return False
    try:
        os.chmod(path, current & mode)
    except OSError as exc:
        _once(path, "chmod", "tricache: cannot make %s private: %s", path, exc)
        return False
    if not quiet:
        _once(path, "tightened", "tricache: %s was open to other users; made private", path)
    return True


def _once(path: Path, what: str, message: str, *args: object) -> None:
    if (str(path), what) not in _logged:
        _logged.add((str(path), what))
        log.warning(message, *args)
