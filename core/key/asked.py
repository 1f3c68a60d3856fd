"""A request analysed once: its exact key and its question, carried through every tier.

``Cache`` builds one ``Asked`` per lookup, update or model call (``Cache.answer``: the lookup
and the write-back share it); the exact tier reads its key, the semantic tier and the FAQ its
located question, its folded and canonical forms and its language, the learning its key, and
every tier the one verdict on whether it may be cached.  Nothing downstream locates the
question, derives the key, folds, strips or judges it again.
"""

from __future__ import annotations

from collections.abc import Callable

from .canonical import canonical
from .forms import folded
from .material import is_material
from .question import Located, locate
from .request import CacheRequest
from .script import lang

__all__ = ["Asked", "ask"]


class Asked:
    """``request`` with what every tier needs from it, each worked out once."""

    __slots__ = ("_cacheable", "_canonical", "_folded", "curated", "key", "located", "request")

    def __init__(self, request: CacheRequest, key: str, located: Located | None) -> None:
        self.request = request
        self.key = key  # the exact-tier key (``exact_key``)
        self.located = located  # the question in the last message and its frame (None: unclear)
        self._cacheable: bool | None = None
        self._folded: str | None = None
        self._canonical: str | None = None
        # the app's own curated answer for this call (``Cache.answer(curated=)``), asked when
        # every tier missed: its text, or None
        self.curated: Callable[[CacheRequest], str | None] | None = None

    def cacheable(self, judge: Callable[[str], bool]) -> bool:
        """``judge(self.canonical)``: may its answer be cached (it depends neither on the time
        nor on the asker)?  "Hi, how do I …" asks how.  Judged at the first tier that asks;
        the others read the verdict."""
        if self._cacheable is None:
            self._cacheable = judge(self.canonical)
        return self._cacheable

    @property
    def question(self) -> str:
        """The question: the located one, else the whole last message."""
        return self.located.question if self.located is not None else self.request.query

    @property
    def folded(self) -> str:
        """The question's canonical text (``forms.folded``): what every comparison sees."""
        if self._folded is None:
            self._folded = folded(self.question)
        return self._folded

    @property
    def canonical(self) -> str:
        """The folded question without the discourse around it (``canonical``): what the
        embedder sees and the time-dependence rule judges."""
        if self._canonical is None:
            self._canonical = canonical(self.folded)
        return self._canonical

    @property
    def lang(self) -> str:
        """The question's language, ``"zh"`` or ``"en"`` (``script.lang``): whose labels
        decide for it."""
        return lang(self.folded)

    @property
    def tags(self) -> tuple[str, ...]:
        return self.request.tags


def ask(request: CacheRequest, key: str) -> Asked:
    """``request`` analysed: ``key`` is its exact key (the tier's settings decide it).  A
    message that is material to work on ("Translate the user's message …") has no question
    to compare (``material.py``)."""
    if is_material(request.system, request.query):
        return Asked(request, key, None)
    return Asked(request, key, locate(request.query))
