"""Where embedded stores keep their files."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["data_dir"]


def data_dir() -> Path:
    """``$TRICACHE_HOME`` if set, else the per-user cache directory (created on demand)."""
    env = os.environ.get("TRICACHE_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("tricache"))
    path.mkdir(parents=True, exist_ok=True)
    return path
