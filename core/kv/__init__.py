"""The KV tier: local engines reuse the KV of a shared prompt prefix (system prompt, few-shot
examples, a RAG preamble) across calls instead of prefilling it again.

- :class:`TransformersBackend`: Hugging Face transformers on CPU or GPU; keeps the prefix KV of
  recent prefixes in a byte-bounded LRU and continues each call from a copy.
- :class:`VLLMBackend` (in-process ``vllm.LLM``) and :class:`VLLMServerBackend` (an
  OpenAI-compatible ``vllm serve --enable-prefix-caching``): vLLM's own prefix cache, with
  prompts laid out so that the shared part is a stable token prefix.
- :func:`kv_budget`: how much memory the KV of a model takes, from its ``config.json``.

Heavy imports (torch, transformers, vllm) happen when a backend is built, not here.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import transformers_backend as _transformers_backend
from . import vllm_backend as _vllm_backend
from .backend import KVResult, PrefixBackend, PrefixStats
from .budget import KVBudget, kv_budget, kv_bytes_per_token, suggest_max_model_len
from .layout import PromptLayout


def _require(what: str, extra: str, *modules: str) -> None:
    """Raise an ImportError naming the extra to install when one of ``modules`` is missing."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(f"{what} needs {module}: pip install 'tricache[{extra}]'") from exc


class TransformersBackend(_transformers_backend.TransformersBackend):
    __doc__ = _transformers_backend.TransformersBackend.__doc__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _require("tricache.kv.TransformersBackend", "hf", "torch", "transformers")
        super().__init__(*args, **kwargs)


class VLLMBackend(_vllm_backend.VLLMBackend):
    __doc__ = _vllm_backend.VLLMBackend.__doc__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("llm") is None:  # an engine built elsewhere brings vllm along
            _require("tricache.kv.VLLMBackend", "vllm", "vllm")
        super().__init__(*args, **kwargs)


class VLLMServerBackend(_vllm_backend.VLLMServerBackend):
    __doc__ = _vllm_backend.VLLMServerBackend.__doc__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _require("tricache.kv.VLLMServerBackend", "vllm", "httpx")
        super().__init__(*args, **kwargs)


__all__ = [
    "KVBudget",
    "KVResult",
    "PrefixBackend",
    "PrefixStats",
    "PromptLayout",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMServerBackend",
    "kv_budget",
    "kv_bytes_per_token",
    "suggest_max_model_len",
]
