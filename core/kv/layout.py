"""Chat messages → token ids whose first part is the shared prefix, always tokenized the same.

The prefix (by default the leading system messages) and the rest are tokenized separately and
concatenated, so a BPE merge across the boundary can never change the prefix tokens: every
call with the same system prompt starts with the very same ids, which is what a prefix cache
needs.  With a chat template the text is the template's; without one, a plain layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .backend import Message

__all__ = ["LaidOut", "PromptLayout"]


@dataclass(frozen=True, slots=True)
class LaidOut:
    ids: list[int]
    prefix_len: int  # the first prefix_len ids are the shared prefix


class PromptLayout:
    """Lays out prompts for one tokenizer (a Hugging Face tokenizer)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.templated = bool(getattr(tokenizer, "chat_template", None))

    def lay_out(self, messages: Sequence[Message], prefix_messages: int | None = None) -> LaidOut:
        """``prefix_messages``: how many leading messages are shared (default: the leading
        system messages)."""
        plain = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        if not plain:
            raise ValueError("no messages")
        n = _leading_system(plain) if prefix_messages is None else prefix_messages
        head_text, rest_text = self._texts(plain, max(0, min(n, len(plain) - 1)))
        head = self._encode(head_text, first=True) if head_text else []
        rest = self._encode(rest_text, first=not head)
        return LaidOut(head + rest, len(head))

    def prefix_ids(self, system: str) -> list[int]:
        """The ids of a system prompt's prefix, as :meth:`lay_out` would produce them."""
        laid = self.lay_out(
            [{"role": "system", "content": system}, {"role": "user", "content": ""}]
        )
        return laid.ids[: laid.prefix_len]

    def _texts(self, messages: list[dict[str, str]], n: int) -> tuple[str, str]:
        if self.templated:
            full = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            head = self.tokenizer.apply_chat_template(messages[:n], tokenize=False) if n else ""
            if head and full.startswith(head):
                return head, full[len(head) :]
            return "", full  # the template renders the head differently alone: no prefix
        head = "".join(_plain(m) for m in messages[:n])
        return head, "".join(_plain(m) for m in messages[n:]) + "<|assistant|>\n"

    def _encode(self, text: str, *, first: bool) -> list[int]:
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        bos = getattr(self.tokenizer, "bos_token_id", None)
        if first and not self.templated and bos is not None:
            ids.insert(0, bos)  # templates write their own BOS text
        return ids


def _leading_system(messages: list[dict[str, str]]) -> int:
    n = 0
    while n < len(messages) and messages[n]["role"] == "system":
        n += 1
    return n


def _plain(message: dict[str, str]) -> str:
    return f"<|{message['role']}|>\n{message['content']}\n"
