"""Which call a tool result answers is part of the key; the run-specific id is not.

Parallel tool calls come back in the order they finish; a model pairs each result with its call
by ``tool_call_id``.  Two conversations whose results answer the calls the other way round ask
different things; two that pair them alike, under other ids, ask the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langchain_tricache import CachedChatModel, TriCache
from tricache import Cache


class Pairing(BaseChatModel):
    """Says each call's ticker beside the result that answers it (paired by id, as providers
    do); ``calls`` counts what reached it."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "pairing"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.calls += 1
        asked = {c["id"]: c["args"]["ticker"] for m in messages if isinstance(m, AIMessage)
                 for c in m.tool_calls}  # fmt: skip
        text = ", ".join(f"{asked[m.tool_call_id]} = {m.content}" for m in messages
                         if isinstance(m, ToolMessage))  # fmt: skip
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


def _conversation(ids: tuple[str, str], results: tuple[str, str]) -> list[Any]:
    tickers = zip(("AAPL", "MSFT"), ids, strict=True)
    calls = [{"name": "price", "args": {"ticker": t}, "id": i} for t, i in tickers]
    return [
        HumanMessage("What do AAPL and MSFT cost?"),
        AIMessage("", tool_calls=calls),
        ToolMessage("$190", tool_call_id=results[0]),  # in the order they finished
        ToolMessage("$420", tool_call_id=results[1]),
    ]


@pytest.mark.parametrize("wrapped", [False, True], ids=["BaseCache", "CachedChatModel"])
def test_tool_results_answer_their_own_calls(tmp_path: Path, wrapped: bool) -> None:
    model = Pairing()
    if wrapped:
        cache = Cache(path=str(tmp_path / "c.sqlite3"), semantic=False)
        asked: Any = CachedChatModel(inner=model, tricache=cache)
    else:
        asked = model.model_copy(update={"cache": TriCache(path=str(tmp_path / "c.sqlite3"),
                                                           semantic=False)})  # fmt: skip
        model = asked
    first = asked.invoke(_conversation(("call_1", "call_2"), ("call_1", "call_2")))
    assert first.content == "AAPL = $190, MSFT = $420"
    swapped = asked.invoke(_conversation(("call_1", "call_2"), ("call_2", "call_1")))
    assert swapped.content == "MSFT = $190, AAPL = $420"  # not the first conversation's answer
    assert model.calls == 2
    again = asked.invoke(_conversation(("call_7", "call_8"), ("call_7", "call_8")))  # other ids
    assert again.content == "AAPL = $190, MSFT = $420" and model.calls == 2  # the same question
