"""``TriCacheEmbedding``: the cache's packaged embedding model as a LlamaIndex embedding, so an
index can be built with nothing downloaded (``VectorStoreIndex(..., embed_model=...)``)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from tricache.semantic.embed import get_embedder

__all__ = ["TriCacheEmbedding"]


class TriCacheEmbedding(BaseEmbedding):
    """``TriCacheEmbedding()`` uses the default multilingual model (``"use-m"``); any name
    :func:`tricache.semantic.embed.get_embedder` knows works (``"e5-small-q4"``, a local path …)."""

    _embedder: Any = PrivateAttr()

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        embedder = get_embedder(model)
        super().__init__(model_name=getattr(embedder, "name", model or "default"), **kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "TriCacheEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return [float(x) for x in self._embedder.embed([query])[0]]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_query_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._embedder.embed(texts)]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)
