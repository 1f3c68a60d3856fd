"""What a cached chain's key holds besides its input: a digest of the chain's structure.

LangChain's own serialization (``to_json``) gives the prompts, models and bound settings of
serializable steps; the other steps are described here: a chat model by its ``llm_string``
(what LangChain's cache keys on), a function by its code, defaults, closure and the plain
data, runnables and functions it reads from its own module.  Anything else (a vector store, a
client …) has no description two processes would agree on: the chain has no fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import types
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.language_models import BaseChatModel, BaseLLM
from langchain_core.load.serializable import Serializable
from langchain_core.rate_limiters import BaseRateLimiter
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel

__all__ = ["opaque_part", "runnable_fingerprint"]

_SKIPPED_GLOBALS = (types.ModuleType, type, logging.Logger)  # code, or a log: not the answer
_describing = threading.local()  # functions being described, so recursion ends


class _Opaque(TypeError):
    """A part of the chain with no reliable description."""


def runnable_fingerprint(runnable: Runnable[Any, Any]) -> str | None:
    """A digest of everything in ``runnable`` that shapes its output, or ``None`` when some
    part of it cannot be described reliably."""
    try:
        text = json.dumps(runnable, default=_describe, sort_keys=True, ensure_ascii=False)
    except Exception:  # _Opaque, keys of mixed types, a cycle, a step failing to describe
        return None
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()


def opaque_part(runnable: Runnable[Any, Any]) -> str:
    """What made :func:`runnable_fingerprint` give up, for the log."""
    try:
        json.dumps(runnable, default=_describe, sort_keys=True)
    except _Opaque as exc:
        return str(exc)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "nothing"


def _describe(obj: Any) -> Any:
    """JSON-able data for one part of a chain (``json.dumps`` walks what it holds)."""
    if isinstance(obj, Serializable) and obj.is_lc_serializable():
        serialized = obj.to_json()
        if serialized.get("type") == "constructor":
            return serialized
    if isinstance(obj, BaseChatModel):
        return {"chat_model": obj._get_llm_string()}
    if isinstance(obj, BaseLLM):
        return {"llm": str(sorted(obj.dict().items()))}  # what LangChain's cache keys LLMs on
    if isinstance(obj, RunnableLambda):
        return {"lambda": [getattr(obj, "func", None), getattr(obj, "afunc", None)],
                "deps": obj.deps}  # fmt: skip
    if isinstance(obj, types.FunctionType):
        return _function(obj)
    if isinstance(obj, functools.partial):
        return {"partial": [obj.func, obj.args, obj.keywords]}
    if isinstance(obj, types.MethodType):
        return {"method": [obj.__func__, obj.__self__]}
    if isinstance(obj, type) and issubclass(obj, BaseModel):  # a schema: structured output …
        return {"schema": f"{obj.__module__}.{obj.__qualname__}", "of": obj.model_json_schema()}
    if isinstance(obj, type) and issubclass(obj, BaseException):  # which errors to retry
        return {"exception": f"{obj.__module__}.{obj.__qualname__}"}
    if isinstance(obj, types.BuiltinFunctionType):  # len, or ", ".join (its owner counts)
        owner = None if isinstance(obj.__self__, types.ModuleType) else obj.__self__
        return {"builtin": f"{obj.__module__}.{obj.__qualname__}", "of": owner}
    if isinstance(obj, BaseCallbackHandler | BaseCallbackManager | BaseCache | BaseRateLimiter):
        return {"watcher": None}  # they watch, pace or cache a run, never change its output
    if isinstance(obj, BaseModel):  # a custom step, settings …: all of its state
        return {"model": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "fields": dict(obj), "private": obj.__pydantic_private__}  # fmt: skip
    if isinstance(obj, set | frozenset):  # tuples and lists json.dumps writes itself
        return sorted(obj, key=repr)
    kind = obj if isinstance(obj, type) else type(obj)
    raise _Opaque(f"{kind.__module__}.{kind.__qualname__}")


def _function(fn: types.FunctionType) -> dict[str, Any]:
    """A function: its code, defaults, closure and the globals it reads (modules, classes and
    loggers left out; another module's functions by name; a function already being described,
    by name)."""
    name = f"{fn.__module__}.{fn.__qualname__}"
    busy: set[int] = _describing.__dict__.setdefault("ids", set())
    if id(fn) in busy:
        return {"function": name}
    try:
        closure = [cell.cell_contents for cell in fn.__closure__ or ()]
    except ValueError:  # an empty cell: the function is still being defined
        raise _Opaque(f"{fn.__qualname__} (empty closure cell)") from None
    read: dict[str, Any] = {}
    for global_name in sorted(_global_names(fn.__code__) & fn.__globals__.keys()):
        value = fn.__globals__[global_name]
        if isinstance(value, types.FunctionType) and value.__module__ != fn.__module__:
            read[global_name] = f"{value.__module__}.{value.__qualname__}"
        elif not isinstance(value, _SKIPPED_GLOBALS):
            read[global_name] = value
    busy.add(id(fn))
    try:  # described now, while recursion is guarded (json.dumps would do it later)
        described = json.loads(json.dumps([closure, read], default=_describe, sort_keys=True))
    finally:
        busy.discard(id(fn))
    return {"function": name, "code": _code(fn.__code__),
            "defaults": [fn.__defaults__, fn.__kwdefaults__], "uses": described}  # fmt: skip


def _code(code: types.CodeType) -> list[Any]:
    """Bytecode, constants (nested code included) and names: equal only for the same code."""
    return [code.co_code.hex(), [_const(c) for c in code.co_consts], list(code.co_names)]


def _const(value: Any) -> Any:
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, tuple | frozenset):
        items = [_const(v) for v in value]
        return items if isinstance(value, tuple) else sorted(items, key=repr)
    return repr(value)


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names
