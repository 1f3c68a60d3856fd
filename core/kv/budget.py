"""KV memory from a Hugging Face ``config.json``: per token, per request, for a concurrency.

bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per value; a paged engine
(vLLM) holds whole blocks, so a request's tokens round up to the block size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["KVBudget", "kv_budget", "kv_bytes_per_token", "suggest_max_model_len"]

_DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8": 1, "int8": 1,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class KVBudget:
    bytes_per_token: int
    tokens: int  # per request, as asked
    block_size: int
    blocks_per_request: int
    bytes_per_request: int
    concurrency: int
    total_bytes: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def load_config(config: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    """A config mapping; a path may name ``config.json`` or the folder holding it."""
    if isinstance(config, Mapping):
        return config
    path = Path(config)
    if path.is_dir():
        path = path / "config.json"
    loaded = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a JSON object")
    return loaded


def kv_bytes_per_token(config: str | Path | Mapping[str, Any], dtype: str = "auto") -> int:
    """KV bytes one token takes in every layer.  ``dtype="auto"`` reads the config's dtype."""
    cfg = load_config(config)
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]  # multimodal configs nest the language model's
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except KeyError as exc:
        raise ValueError(f"config has no {exc.args[0]!r}: not a decoder config?") from None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    if dtype == "auto":
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float16")
    try:
        width = _DTYPE_BYTES[dtype.lower().removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unknown KV dtype {dtype!r}; one of {sorted(_DTYPE_BYTES)}") from None
    return 2 * layers * kv_heads * head_dim * width


def kv_budget(
    config: str | Path | Mapping[str, Any],
    tokens: int,
    *,
    concurrency: int = 1,
    block_size: int = 16,
    dtype: str = "auto",
) -> KVBudget:
    """KV memory for ``concurrency`` requests of ``tokens`` tokens (prompt + output)."""
    if tokens <= 0 or concurrency <= 0 or block_size <= 0:
        raise ValueError("tokens, concurrency and block_size must be positive")
    per_token = kv_bytes_per_token(config, dtype)
    blocks = math.ceil(tokens / block_size)
    per_request = blocks * block_size * per_token
    return KVBudget(per_token, tokens, block_size, blocks, per_request, concurrency,
                    per_request * concurrency)  # fmt: skip


def suggest_max_model_len(
    prompt_lengths: Iterable[int], *, output_tokens: int = 0, block_size: int = 16
) -> int:
    """p95 of the sample's prompt lengths × 1.2, plus the output budget, rounded up to a block."""
    ordered = sorted(int(n) for n in prompt_lengths)
    if not ordered:
        raise ValueError("no prompt lengths")
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    wanted = math.ceil(p95 * 1.2) + output_tokens
    return math.ceil(wanted / block_size) * block_size
