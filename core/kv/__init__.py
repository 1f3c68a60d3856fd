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

from .backend import KVResult, PrefixBackend, PrefixStats
from .budget import KVBudget, kv_budget, kv_bytes_per_token, suggest_max_model_len
from .layout import PromptLayout
from .transformers_backend import TransformersBackend
from .vllm_backend import VLLMBackend, VLLMServerBackend

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
