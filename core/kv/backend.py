"""What every KV backend offers: generate and stream from chat messages, warm a prefix, and
say how many prompt tokens it reused rather than prefilled."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..ops.metrics import Metrics

__all__ = ["KVResult", "Message", "PrefixBackend", "PrefixStats"]

Message = Mapping[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


@dataclass(frozen=True, slots=True)
class KVResult:
    """One generation: the text, and how its prompt was processed."""

    text: str
    prompt_tokens: int
    reused_tokens: int  # prompt tokens whose KV came from the prefix cache
    ttft_s: float  # time to the first generated token
    token_ids: tuple[int, ...] = ()

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens


class PrefixStats:
    """Prompt tokens reused vs prefilled, per backend (and mirrored into :class:`Metrics` under
    the ``kv`` tier, which feeds the prefix hit-rate golden signal)."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.prompt_tokens = 0
        self.reused_tokens = 0
        self.metrics = metrics

    def record(self, prompt_tokens: int, reused_tokens: int) -> None:
        with self._lock:
            self.requests += 1
            self.prompt_tokens += prompt_tokens
            self.reused_tokens += reused_tokens
        if self.metrics is not None:
            self.metrics.incr("kv", "requests")
            self.metrics.incr("kv", "prompt_tokens", prompt_tokens)
            self.metrics.incr("kv", "reused_tokens", reused_tokens)

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens that were not prefilled."""
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "hit_rate": round(self.hit_rate, 4),
        }


@runtime_checkable
class PrefixBackend(Protocol):
    """A local engine that reuses the KV of shared prompt prefixes."""

    stats: PrefixStats

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int = 128) -> KVResult: ...

    def stream(
        self, messages: Sequence[Message], *, max_new_tokens: int = 128
    ) -> Iterator[str]: ...

    def warm(self, system: str) -> int:
        """Compute and keep the KV of a system prompt; returns its length in tokens."""
        ...


def require(what: str, extra: str, *modules: str) -> None:
    """Raise an ``ImportError`` naming the extra to install when one of ``modules`` is
    missing (the backends import their engines lazily, when built)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(f"{what} needs {module}: pip install 'tricache[{extra}]'") from exc
