"""Oracle stand-in models: every answer is a digest of everything the model was shown.

A served answer is right iff the model would have said it.  The oracles digest their whole
input (every message's type, text, name, tool calls and tool results; the tools and call
arguments; the model's own settings) verbatim, except that a question a test declares
equivalent to another ("how do i reset my password" → "How do I reset my password?") is
digested as that one.

Each framework reports what goes into a model call and what comes out, cache hits included:
LangChain calls a chat model's callbacks before it consults its cache, and ``TriCacheLLM``
reports to LlamaIndex's callback manager.  The transcripts below collect those reports, so a
test can check every answer against what the oracle would have said to that very input.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler as LangChainCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.llms import LLM as LangChainLLM
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.base.llms.types import (
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.callbacks.base_handler import BaseCallbackHandler as LlamaCallbackHandler
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from pydantic import Field, PrivateAttr

__all__ = [
    "ChatOracle",
    "Equivalents",
    "LlamaOracle",
    "LlamaTranscript",
    "TextOracle",
    "fill_args",
    "lc_answer",
    "li_answer",
]


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


# equivalent questions --------------------------------------------------------------------------
_LABEL = re.compile(r"^([A-Za-z][A-Za-z ]{0,30}:)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Equivalents:
    """Questions the test declares to mean the same: rewrite → canonical question.

    A text that is one of them (a whole message, or a line of a template, optionally after a
    label such as ``Question:`` or ``Query:``; surrounding white space aside) is digested as the
    canonical question; every other character of the input is digested verbatim."""

    table: Mapping[str, str] = field(default_factory=dict)

    def canonical(self, text: str) -> str:
        if not self.table:
            return text
        if text.strip() in self.table:
            return self.table[text.strip()]
        lines = []
        for line in text.split("\n"):
            core = line.strip()
            labelled = _LABEL.match(core)
            if core in self.table:
                line = self.table[core]
            elif labelled and labelled.group(2) in self.table:
                line = f"{labelled.group(1)} {self.table[labelled.group(2)]}"
            lines.append(line)
        return "\n".join(lines)


def fill_args(schema: Mapping[str, Any], seed: str) -> dict[str, Any]:
    """Arguments for a tool with JSON schema ``schema``, every value derived from ``seed``."""
    args: dict[str, Any] = {}
    for name, spec in sorted((schema.get("properties") or {}).items()):
        h = digest([seed, name])
        kind = spec.get("type")
        if spec.get("enum"):
            args[name] = spec["enum"][int(h[:8], 16) % len(spec["enum"])]
        elif kind == "integer":
            args[name] = int(h[:6], 16) % 100_000
        elif kind == "number":
            args[name] = int(h[:6], 16) / 100
        elif kind == "boolean":
            args[name] = int(h[0], 16) % 2 == 1
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = f"{name}-{h[:8]}"
    return args


# LangChain -------------------------------------------------------------------------------------
def lc_answer(message: BaseMessage) -> dict[str, Any]:
    """What a chat answer says: its text, its tool calls (ids aside), its provider extras
    (TriCache's own tier report aside)."""
    return {
        "content": message.content,
        "tool_calls": [[c["name"], c["args"]] for c in getattr(message, "tool_calls", [])],
        "additional_kwargs": {
            k: v for k, v in message.additional_kwargs.items() if k != "tricache"
        },
    }


@dataclass
class Served:
    """One chat-model call LangChain made: the input and settings, and the answer it returned."""

    messages: list[BaseMessage]
    params: dict[str, Any]
    message: BaseMessage
    expected: AIMessage | None = None

    @property
    def tier(self) -> str:
        info = self.message.response_metadata.get("tricache") or {}
        return str(info.get("tier", "model"))

    @property
    def question(self) -> str:
        return str(self.messages[-1].content)[:160] if self.messages else ""


class _ChatTranscript(LangChainCallbackHandler):
    """Collects every call of one chat model: what went in (on start, before the cache is
    consulted) and what came out (on end, from the cache or the model)."""

    run_inline = True
    raise_error = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[UUID, tuple[list[BaseMessage], dict[str, Any]]] = {}
        self._served: list[Served] = []

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        seen = [m.model_copy(deep=True) for m in messages[0]]
        with self._lock:
            self._pending[run_id] = (seen, dict(invocation_params or {}))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            start = self._pending.pop(run_id, None)
        if start is None:
            return
        generation = response.generations[0][0]
        assert isinstance(generation, ChatGeneration)
        message = generation.message.model_copy(deep=True)
        with self._lock:
            self._served.append(Served(start[0], start[1], message))

    def take(self) -> list[Served]:
        with self._lock:
            served, self._served = self._served, []
        return served


_SETTINGS = ("_type", "model_name", "temperature", "stop")


class ChatOracle(BaseChatModel):
    """A LangChain chat model whose answer is ``"ans:" + digest(input)[:12]``.

    With tools bound it calls one (chosen and filled in from the digest) on the first
    ``tool_rounds`` rounds after the user's message, or on every call when a tool is forced
    (``tool_choice``), and answers in text after that.  ``calls`` counts the model's own calls
    (a cache hit makes none); ``check()`` checks every call made since the last check."""

    model_name: str = "oracle-chat"
    temperature: float = 0.0
    equivalents: dict[str, str] = Field(default_factory=dict)
    tool_rounds: int = 2
    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _transcript: _ChatTranscript = PrivateAttr(default_factory=_ChatTranscript)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        existing = self.callbacks if isinstance(self.callbacks, list) else []
        self.callbacks = [*existing, self._transcript]

    @property
    def _llm_type(self) -> str:
        return "oracle-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "temperature": self.temperature}

    @property
    def calls(self) -> int:
        return self._calls

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            self._calls += 1
        return ChatResult(
            generations=[ChatGeneration(message=self.respond(messages, stop, **kwargs))]
        )

    # the answer --------------------------------------------------------------------------------
    def respond(
        self, messages: Sequence[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> AIMessage:
        """What this model answers to ``messages`` (with ``kwargs`` bound): no call counted."""
        seen = {
            "model": [self.model_name, self.temperature],
            "stop": stop,
            "kwargs": kwargs,
            "messages": [self._message(m) for m in messages],
        }
        d = digest(seen)
        extras = {"oracle": {"digest": d, "turns": len(messages)}}
        tools = kwargs.get("tools") or []
        if tools and self._calls_a_tool(messages, kwargs.get("tool_choice")):
            function = self._pick(tools, kwargs.get("tool_choice"), d)
            call = {
                "name": function["name"],
                "args": fill_args(function.get("parameters") or {}, d),
                "id": f"call_{uuid.uuid4().hex[:12]}",
            }
            return AIMessage(
                "",
                tool_calls=[call],
                additional_kwargs=extras,
                response_metadata={"finish_reason": "tool_calls", "model_name": self.model_name},
            )
        return AIMessage(
            f"ans:{d[:12]}",
            additional_kwargs=extras,
            response_metadata={"finish_reason": "stop", "model_name": self.model_name},
        )

    def expected(self, served: Served) -> AIMessage:
        params = served.params
        kwargs = {k: v for k, v in params.items() if k not in _SETTINGS}
        assert params.get("model_name", self.model_name) == self.model_name
        return self.respond(served.messages, params.get("stop"), **kwargs)

    def check(self) -> list[Served]:
        """Every call made through LangChain since the last check (at least one): assert its
        answer is the one this model gives to that input; returns them (``expected`` set)."""
        served = self._transcript.take()
        assert served, "no call of the model was reported"
        for call in served:
            call.expected = self.expected(call)
            got, want = lc_answer(call.message), lc_answer(call.expected)
            assert got == want, (
                f"wrong answer served (tier {call.tier!r}) to {call.question!r}: "
                f"got {got['content']!r} {got['tool_calls']}, "
                f"the model says {want['content']!r} {want['tool_calls']}"
            )
        return served

    def _message(self, message: BaseMessage) -> dict[str, Any]:
        item: dict[str, Any] = {"type": message.type, "content": self._content(message.content)}
        if message.name:
            item["name"] = message.name
        if isinstance(message, AIMessage):
            item["tool_calls"] = [[c["name"], c["args"]] for c in message.tool_calls]
            item["invalid_tool_calls"] = [
                [c.get("name"), c.get("args")] for c in message.invalid_tool_calls
            ]
        if isinstance(message, ToolMessage):
            item["status"] = message.status
        if isinstance(message, ChatMessage):
            item["role"] = message.role
        return item

    def _content(self, content: Any) -> Any:
        eq = Equivalents(self.equivalents)
        if isinstance(content, str):
            return eq.canonical(content)
        parts: list[Any] = []
        for part in content:
            if isinstance(part, str):
                parts.append(eq.canonical(part))
            elif isinstance(part, dict) and part.get("type") == "text":
                parts.append({**part, "text": eq.canonical(str(part.get("text", "")))})
            else:
                parts.append(part)
        return parts

    def _calls_a_tool(self, messages: Sequence[BaseMessage], choice: Any) -> bool:
        if choice == "none":
            return False
        if choice not in (None, "auto"):
            return True
        rounds = 0
        for message in reversed(messages):
            if isinstance(message, HumanMessage):
                break
            if isinstance(message, AIMessage) and message.tool_calls:
                rounds += 1
        return rounds < self.tool_rounds

    @staticmethod
    def _pick(tools: Sequence[dict[str, Any]], choice: Any, d: str) -> dict[str, Any]:
        functions = [t["function"] for t in tools]
        if isinstance(choice, dict):
            choice = (choice.get("function") or {}).get("name")
        if isinstance(choice, str) and choice not in ("any", "required", "auto"):
            return next(f for f in functions if f["name"] == choice)
        return functions[int(d[:8], 16) % len(functions)]


class TextOracle(LangChainLLM):
    """A LangChain (text) LLM whose answer is ``"ans:" + digest(prompt)[:12]``."""

    model_name: str = "oracle-text"
    equivalents: dict[str, str] = Field(default_factory=dict)
    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "oracle-text"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    @property
    def calls(self) -> int:
        return self._calls

    def _call(
        self, prompt: str, stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> str:
        with self._lock:
            self._calls += 1
        return self.respond(prompt, stop, **kwargs)

    def respond(self, prompt: str, stop: list[str] | None = None, **kwargs: Any) -> str:
        prompt = Equivalents(self.equivalents).canonical(prompt)
        return "ans:" + digest([self.model_name, prompt, stop, kwargs])[:12]


# LlamaIndex ------------------------------------------------------------------------------------
def li_answer(message: LlamaMessage) -> dict[str, Any]:
    """What a LlamaIndex chat answer says: its text and its tool calls (ids aside)."""
    return {
        "text": "".join(b.text for b in message.blocks if isinstance(b, TextBlock)),
        "tool_calls": [
            [b.tool_name, _kwargs(b.tool_kwargs)]
            for b in message.blocks
            if isinstance(b, ToolCallBlock)
        ],
    }


def _kwargs(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


_PIECES = re.compile(r"\S+\s*|\s+")
_REACT_TOOL = re.compile(r"^> Tool Name: (.+)$", re.MULTILINE)
_REACT_ARGS = re.compile(r"^Tool Args: (\{.*\})$", re.MULTILINE)


class LlamaOracle(FunctionCallingLLM):
    """A LlamaIndex LLM whose answer is ``"ans:" + digest(input)[:12]``: chat, completion,
    their streams and async forms; function calling (a tool call on the first ``tool_rounds``
    rounds after the user's message) and ReAct (an action, then after an observation the
    answer) when it is given tools."""

    model_name: str = "oracle-llama"
    equivalents: dict[str, str] = Field(default_factory=dict)
    chat_model: bool = True
    tool_rounds: int = 1
    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def class_name(cls) -> str:
        return "LlamaOracle"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            model_name=self.model_name,
            is_chat_model=self.chat_model,
            is_function_calling_model=True,
        )

    @property
    def calls(self) -> int:
        return self._calls

    def _count(self) -> None:
        with self._lock:
            self._calls += 1

    # chat ------------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[LlamaMessage], **kwargs: Any) -> ChatResponse:
        self._count()
        return ChatResponse(message=self.respond(messages, **kwargs))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[LlamaMessage], **kwargs: Any) -> ChatResponse:
        self._count()
        return ChatResponse(message=self.respond(messages, **kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[LlamaMessage], **kwargs: Any) -> ChatResponseGen:
        self._count()
        return _chat_stream(self.respond(messages, **kwargs))

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[LlamaMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        self._count()
        return _async(_chat_stream(self.respond(messages, **kwargs)))

    # completion --------------------------------------------------------------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._count()
        return CompletionResponse(text=self.respond_text(prompt, **kwargs))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        self._count()
        return CompletionResponse(text=self.respond_text(prompt, **kwargs))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        self._count()
        return _completion_stream(self.respond_text(prompt, **kwargs))

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        self._count()
        return _async(_completion_stream(self.respond_text(prompt, **kwargs)))

    # tools -------------------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | LlamaMessage | None = None,
        chat_history: list[LlamaMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            messages.append(LlamaMessage(role=MessageRole.USER, content=user_msg))
        elif user_msg is not None:
            messages.append(user_msg)
        return {"messages": messages, "tools": list(tools), "tool_required": tool_required,
                **kwargs}  # fmt: skip

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = [
            ToolSelection(
                tool_id=b.tool_call_id or "",
                tool_name=b.tool_name,
                tool_kwargs=_kwargs(b.tool_kwargs),
            )
            for b in response.message.blocks
            if isinstance(b, ToolCallBlock)
        ]
        if not calls and error_on_no_tool_call:
            raise ValueError("the response has no tool call")
        return calls

    # the answer --------------------------------------------------------------------------------
    def respond(self, messages: Sequence[LlamaMessage], **kwargs: Any) -> LlamaMessage:
        """What this model answers to ``messages`` (and ``kwargs``): no call counted."""
        tools = list(kwargs.get("tools") or [])
        rest = {k: v for k, v in kwargs.items() if k != "tools"}
        d = digest(
            {
                "model": self.model_name,
                "messages": [self._message(m) for m in messages],
                "tools": [self._tool(t) for t in tools],
                "kwargs": rest,
            }
        )
        react = _react_tools(messages)
        if react:
            if any(_text_of(m).startswith("Observation:") for m in messages[1:]):
                text = (
                    "Thought: I can answer without using any more tools. I'll use the user's "
                    f"language to answer\nAnswer: ans:{d[:12]}"
                )
            else:
                name, schema = react[int(d[:8], 16) % len(react)]
                text = (
                    "Thought: I need to use a tool to help me answer the question.\n"
                    f"Action: {name}\nAction Input: {json.dumps(fill_args(schema, d))}"
                )
            return LlamaMessage(role=MessageRole.ASSISTANT, content=text)
        if tools and self._calls_a_tool(messages):
            tool = tools[int(d[:8], 16) % len(tools)]
            block = ToolCallBlock(
                tool_call_id=f"call-{uuid.uuid4().hex[:12]}",
                tool_name=tool.metadata.get_name(),
                tool_kwargs=fill_args(tool.metadata.get_parameters_dict(), d),
            )
            return LlamaMessage(role=MessageRole.ASSISTANT, blocks=[block])
        return LlamaMessage(role=MessageRole.ASSISTANT, content=f"ans:{d[:12]}")

    def respond_text(self, prompt: str, **kwargs: Any) -> str:
        kwargs.pop("formatted", None)
        prompt = Equivalents(self.equivalents).canonical(prompt)
        return "ans:" + digest({"model": self.model_name, "prompt": prompt, "kwargs": kwargs})[:12]

    def _message(self, message: LlamaMessage) -> dict[str, Any]:
        eq = Equivalents(self.equivalents)
        blocks: list[Any] = []
        for block in message.blocks:
            if isinstance(block, TextBlock):
                blocks.append(["text", eq.canonical(block.text)])
            elif isinstance(block, ToolCallBlock):
                blocks.append(["tool_call", block.tool_name, _kwargs(block.tool_kwargs)])
            else:
                blocks.append(["block", block.model_dump(mode="json")])
        extras = {
            k: v
            for k, v in message.additional_kwargs.items()
            if k not in ("tool_call_id", "tricache")
        }
        role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
        return {"role": role, "blocks": blocks, "extras": extras}

    @staticmethod
    def _tool(tool: Any) -> dict[str, Any]:
        meta = tool.metadata
        return {
            "name": meta.get_name(),
            "description": meta.description,
            "parameters": meta.get_parameters_dict(),
        }

    def _calls_a_tool(self, messages: Sequence[LlamaMessage]) -> bool:
        rounds = 0
        for message in reversed(messages):
            if message.role == MessageRole.USER:
                break
            if any(isinstance(b, ToolCallBlock) for b in message.blocks):
                rounds += 1
        return rounds < self.tool_rounds


def _text_of(message: LlamaMessage) -> str:
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def _react_tools(messages: Sequence[LlamaMessage]) -> list[tuple[str, dict[str, Any]]]:
    """The tools a ReAct system header offers (name, argument schema); [] for other prompts."""
    if not messages or messages[0].role != MessageRole.SYSTEM:
        return []
    header = _text_of(messages[0])
    if "Action Input:" not in header:
        return []
    names = [n.strip() for n in _REACT_TOOL.findall(header)]
    schemas = [json.loads(s) for s in _REACT_ARGS.findall(header)]
    return list(zip(names, schemas, strict=True))


def _chat_stream(message: LlamaMessage) -> ChatResponseGen:
    text = message.content or ""
    if not text or any(not isinstance(b, TextBlock) for b in message.blocks):
        yield ChatResponse(message=message, delta=text)
        return
    pieces = _PIECES.findall(text)
    so_far = ""
    for i, piece in enumerate(pieces):
        so_far += piece
        last = i == len(pieces) - 1
        partial = message if last else LlamaMessage(role=MessageRole.ASSISTANT, content=so_far)
        yield ChatResponse(message=partial, delta=piece)


def _completion_stream(text: str) -> CompletionResponseGen:
    so_far = ""
    for piece in _PIECES.findall(text) or [""]:
        so_far += piece
        yield CompletionResponse(text=so_far, delta=piece)


async def _async(items: Iterator[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


@dataclass
class LlamaCall:
    """One call of a ``TriCacheLLM`` as LlamaIndex reported it: the input and the answer."""

    messages: list[LlamaMessage] | None
    prompt: str | None
    kwargs: dict[str, Any]
    response: Any

    @property
    def tier(self) -> str:
        info = (getattr(self.response, "additional_kwargs", None) or {}).get("tricache") or {}
        return str(info.get("tier", "model"))

    @property
    def question(self) -> str:
        if self.messages:
            return _text_of(self.messages[-1])[-160:]
        return (self.prompt or "")[-160:]


class LlamaTranscript(LlamaCallbackHandler):
    """Collects the calls of every ``TriCacheLLM`` that reports to the callback manager this
    handler is in (``Settings.callback_manager`` in these tests: query engines and chat engines
    set it on their LLM), and checks them against an oracle."""

    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}
        self._calls: list[LlamaCall] = []

    def on_event_start(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str = "",
        parent_id: str = "",
        **kwargs: Any,
    ) -> str:
        serialized = (payload or {}).get(EventPayload.SERIALIZED) or {}
        if event_type == CBEventType.LLM and serialized.get("class_name") == "TriCacheLLM":
            start = dict(payload or {})
            if EventPayload.MESSAGES in start:
                start[EventPayload.MESSAGES] = [
                    m.model_copy(deep=True) for m in start[EventPayload.MESSAGES]
                ]
            with self._lock:
                self._pending[event_id] = start
        return event_id

    def on_event_end(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str = "",
        **kwargs: Any,
    ) -> None:
        with self._lock:
            start = self._pending.pop(event_id, None)
        if start is None or payload is None:
            return
        extra = dict(start.get(EventPayload.ADDITIONAL_KWARGS) or {})
        # a copy: agents go on to edit the message they were given (ReAct keeps the answer only)
        if EventPayload.MESSAGES in start:
            response = payload[EventPayload.RESPONSE].model_copy(deep=True)
            call = LlamaCall(start[EventPayload.MESSAGES], None, extra, response)
        else:
            response = payload[EventPayload.COMPLETION].model_copy(deep=True)
            call = LlamaCall(None, start.get(EventPayload.PROMPT), extra, response)
        with self._lock:
            self._calls.append(call)

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(
        self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None
    ) -> None:
        pass

    def check(self, oracle: LlamaOracle) -> list[LlamaCall]:
        """Every ``TriCacheLLM`` call reported since the last check (at least one): assert its
        answer is the one ``oracle`` gives to that input."""
        with self._lock:
            calls, self._calls = self._calls, []
        assert calls, "no call of the cached LLM was reported"
        for call in calls:
            if call.messages is not None:
                got = li_answer(call.response.message)
                want = li_answer(oracle.respond(call.messages, **call.kwargs))
            else:
                got = call.response.text
                want = oracle.respond_text(call.prompt or "", **call.kwargs)
            assert got == want, (
                f"wrong answer served (tier {call.tier!r}) to ...{call.question!r}: "
                f"got {got!r}, the model says {want!r}"
            )
        return calls
