"""A request analysed once: its exact key and its question, carried through every tier.

``Cache`` builds one ``Asked`` per lookup or update; the exact tier reads its key, the semantic
tier and the FAQ its located question, the learning its key.  Nothing downstream locates the
question or derives the key again.
"""

from __future__ import annotations

from typing import NamedTuple

from .question import Located, locate
from .request import CacheRequest

__all__ = ["Asked", "ask"]


class Asked(NamedTuple):
    """``request`` with what every tier needs from it (a tuple: made on every lookup)."""

    request: CacheRequest
    key: str  # the exact-tier key (``exact_key``)
    located: Located | None  # the question in the last message and its frame (None: unclear)

    @property
    def question(self) -> str:
        """The question: the located one, else the whole last message."""
        return self.located.question if self.located is not None else self.request.query

    @property
    def tags(self) -> tuple[str, ...]:
        return self.request.tags


def ask(request: CacheRequest, key: str) -> Asked:
    """``request`` analysed: ``key`` is its exact key (the tier's settings decide it)."""
    return Asked(request, key, locate(request.query))
