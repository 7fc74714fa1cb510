"""One checker that a JSON body is what a vendor package's request types
(``TypedDict`` trees) accept: the request-conformance tests of every wire use it.

It walks the types with ``typing`` only: required keys present, no key the
type does not name, literals and scalars of their type, every union tried.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import typing_extensions

__all__ = ["REASONING_FIELDS", "conforms", "without_reasoning"]

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""The one extension a Chat Completions body may carry: an assistant message's
thinking, which DeepSeek, vLLM and llama.cpp's server read and OpenAI's type
has no field for (OpenAI's own API is sent none: ``send_reasoning`` is off there)."""


def without_reasoning(body: dict[str, Any]) -> list[str]:
    """Take the thinking sent back out of ``body``'s assistant messages (each
    a string, on an assistant message only); return what was taken."""
    taken = []
    for message in body["messages"]:
        for name in REASONING_FIELDS:
            if name in message:
                assert message["role"] == "assistant"
                value = message.pop(name)
                assert type(value) is str
                taken.append(value)
    return taken


def conforms(value: Any, hint: Any, at: str = "body") -> list[str]:  # noqa: C901 (one rule a kind)
    """Where ``value`` departs from the type ``hint`` (empty: it conforms)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing_extensions.Required, typing_extensions.NotRequired, typing.Annotated):
        return conforms(value, args[0], at)
    if hint is Any or hint is object:
        return []
    if origin in (typing.Union, types.UnionType):
        found = [conforms(value, arg, at) for arg in args]
        return [] if any(not f for f in found) else [f"{at}: no branch of {hint} fits"]
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return [] if value in args else [f"{at}: {value!r} is not one of {args}"]
    if origin in (typing.IO, os.PathLike) or hint in (typing.IO, os.PathLike):
        return [f"{at}: a JSON value is no file or path"]  # the SDK's upload-only branches
    if hint is type(None):
        return [] if value is None else [f"{at}: {value!r} is not None"]
    if typing_extensions.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{at}: {type(value).__name__} is no {hint.__name__}"]
        fields = typing.get_type_hints(hint, include_extras=True)
        out = [
            f"{at}.{key}: {hint.__name__} names no such key" for key in value if key not in fields
        ]
        # The package declares every TypedDict total=False and marks what it
        # requires Required[...]; read from the hints, since under postponed
        # annotations the class's own __required_keys__ cannot see it.
        required = [
            k for k, f in fields.items() if typing.get_origin(f) is typing_extensions.Required
        ]
        out += [f"{at}.{key}: required" for key in required if key not in value]
        for key, item in value.items():
            if key in fields:
                out += conforms(item, fields[key], f"{at}.{key}")
        return out
    if origin in (dict, Mapping) or hint is dict:
        return [] if isinstance(value, dict) else [f"{at}: not an object"]
    if origin in (list, Iterable, Sequence) or (
        isinstance(origin, type) and issubclass(origin, Iterable) and origin is not str
    ):
        if isinstance(value, str) or not isinstance(value, list):
            return [f"{at}: not a list"]
        return [e for n, item in enumerate(value) for e in conforms(item, args[0], f"{at}[{n}]")]
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{at}: not a number"]
    if isinstance(hint, type):
        return [] if isinstance(value, hint) else [f"{at}: {value!r} is not {hint.__name__}"]
    alias = getattr(hint, "__value__", None)  # a `type X = ...` alias
    if alias is not None:
        return conforms(value, alias, at)
    raise AssertionError(f"{at}: the checker has no rule for {hint!r}")
