"""Stores behind the tiers: in-process memory, SQLite (embedded) and Redis (shared)."""

from .base import L2Store, Record, WrittenKeys
from .memory import TTLLRU
from .sqlite import SQLiteStore

__all__ = ["TTLLRU", "L2Store", "Record", "SQLiteStore", "WrittenKeys"]
