"""Prefix KV reuse with Hugging Face transformers (CPU for tests and laptops, GPU works too).

The KV of each shared prefix is computed once and kept in a byte-bounded LRU; a call continues
from a copy of it (a ``DynamicCache``), so only the rest of its prompt is prefilled.  Decoding
is greedy, so outputs equal generation from scratch up to float rounding.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..ops.metrics import Metrics
from .backend import KVResult, Message, PrefixStats, require
from .layout import PromptLayout

__all__ = ["TransformersBackend"]


class TransformersBackend:
    """``TransformersBackend("path/or/model-id")`` or ``TransformersBackend(model, tokenizer)``.

    ``max_cache_bytes`` bounds the prefix KV kept (least recently used prefixes go first);
    ``reuse=False`` turns reuse off (the baseline in benchmarks).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_cache_bytes: int = 512 * 2**20,
        reuse: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        require("tricache.kv.TransformersBackend", "hf", "torch", "transformers")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(model, str | Path):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("a tokenizer is needed with a model object")
        self._torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.layout = PromptLayout(tokenizer)
        self.reuse = reuse
        self.stats = PrefixStats(metrics)
        self._prefixes = _PrefixLRU(max_cache_bytes)
        # transformers 5 renamed forward's ``past_key_values`` to ``cache``
        forward = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        eos = getattr(model.generation_config, "eos_token_id", None)
        self._eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    # the protocol ----------------------------------------------------------------------------
    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int = 128,
        prefix_messages: int | None = None,
    ) -> KVResult:
        laid = self.layout.lay_out(messages, prefix_messages)
        start = time.perf_counter()
        ttft = 0.0
        tokens: list[int] = []
        steps = self._decode(laid.ids, laid.prefix_len, max_new_tokens)
        reused = next(steps)
        for token in steps:
            if not tokens:
                ttft = time.perf_counter() - start
            tokens.append(token)
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return KVResult(text, len(laid.ids), reused, ttft, tuple(tokens))

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int = 128,
        prefix_messages: int | None = None,
    ) -> Iterator[str]:
        """Text pieces as they are generated (each decoded against the text so far)."""
        laid = self.layout.lay_out(messages, prefix_messages)
        steps = self._decode(laid.ids, laid.prefix_len, max_new_tokens)
        next(steps)
        tokens: list[int] = []
        shown = ""
        for token in steps:
            tokens.append(token)
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            if len(text) > len(shown) and not text.endswith("\ufffd"):  # whole characters only
                yield text[len(shown) :]
                shown = text

    def warm(self, system: str) -> int:
        ids = self.layout.prefix_ids(system)
        key = _digest(ids)
        if ids and self._prefixes.get(key) is None:
            self._compute_prefix(ids, key)
        return len(ids)

    @property
    def cached_prefixes(self) -> int:
        return len(self._prefixes)

    # decoding --------------------------------------------------------------------------------
    def _decode(self, ids: list[int], prefix_len: int, max_new_tokens: int) -> Iterator[int]:
        """First yields how many prompt tokens were reused, then the generated token ids."""
        torch = self._torch
        with torch.inference_mode():
            cache, reused = self._start(ids, prefix_len)
            self.stats.record(len(ids), reused)
            yield reused
            logits = self._forward(ids[reused:], cache)
            for step in range(max_new_tokens):
                token = int(logits.argmax(-1))
                yield token
                if token in self._eos or step == max_new_tokens - 1:
                    return
                logits = self._forward([token], cache)

    def _forward(self, ids: list[int], cache: Any) -> Any:
        input_ids = self._torch.tensor([ids], device=self.model.device)
        out = self.model(input_ids=input_ids, **{self._cache_arg: cache}, use_cache=True)
        return out.logits[0, -1]

    def _start(self, ids: list[int], prefix_len: int) -> tuple[Any, int]:
        """A KV cache to continue from, and how many of ``ids`` it already holds."""
        from transformers import DynamicCache

        usable = min(prefix_len, len(ids) - 1)  # at least one token must be fed for logits
        if not self.reuse or usable <= 0:
            return DynamicCache(), 0
        key = _digest(ids[:prefix_len])
        found = self._prefixes.get(key)
        # first call with this prefix: compute it once (it counts as prefilled), keep it
        prefix = found if found is not None else self._compute_prefix(ids[:prefix_len], key)
        cache = copy.deepcopy(prefix)
        if usable < prefix_len:
            cache.crop(usable)
        return cache, usable if found is not None else 0

    def _compute_prefix(self, prefix: list[int], key: str) -> Any:
        from transformers import DynamicCache

        cached = DynamicCache()
        with self._torch.inference_mode():
            self._forward(prefix, cached)
        self._prefixes.put(key, cached, _nbytes(cached))
        return cached


class _PrefixLRU:
    """Prefix KV caches by digest of their token ids, bounded by total bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: str, value: Any, size: int) -> None:
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped


def _digest(ids: list[int]) -> str:
    raw = b"".join(i.to_bytes(4, "little", signed=True) for i in ids)
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _nbytes(cache: Any) -> int:
    """Bytes held by a transformers KV cache (``layers`` in recent versions, lists before)."""
    tensors: list[Any] = []
    for layer in getattr(cache, "layers", None) or []:
        tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
    for name in ("key_cache", "value_cache"):
        tensors += list(getattr(cache, name, None) or [])
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel"))
