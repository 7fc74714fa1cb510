"""What a span records of message content, when content is recorded: messages
and blocks in the GenAI conventions' parts, and a tool call's arguments as
JSON cut to a bound, whatever a model wrote."""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._edn import DEFAULT_MAX_CHARS
from vaelii_llm._json_walk import atoms
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock

__all__ = ["ARGUMENTS_CHARS", "arguments", "as_json", "message_parts", "parts_of"]


def as_json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except RecursionError:  # a model's tool input nested past msgspec's limit
        return arguments(value)
    except (TypeError, ValueError, OverflowError):
        return msgspec.json.encode(repr(value)).decode()


ARGUMENTS_CHARS: Final = DEFAULT_MAX_CHARS
"""The most of a tool call's arguments a span records (the KB tools' default
result bound, :data:`vaelii_llm._edn.DEFAULT_MAX_CHARS`): a model's input is
whatever it wrote, of any size or depth."""


class _Lit(str):
    """JSON punctuation :func:`arguments` writes as it is."""

    __slots__ = ()


def _members(value: Any) -> Iterator[Any] | None:
    """The JSON a compound ``value`` prints as, a member at a time; None for an atom."""
    if isinstance(value, Mapping):
        return _object_members(value)
    if isinstance(value, list | tuple):
        return _array_members(value)
    return None


def _object_members(value: Mapping[Any, Any]) -> Iterator[Any]:
    yield _Lit("{")
    for index, (key, item) in enumerate(value.items()):
        if index:
            yield _Lit(",")
        yield key if isinstance(key, str) else f"<{type(key).__name__}>"
        yield _Lit(":")
        yield item
    yield _Lit("}")


def _array_members(value: list[Any] | tuple[Any, ...]) -> Iterator[Any]:
    yield _Lit("[")
    for index, item in enumerate(value):
        if index:
            yield _Lit(",")
        yield item
    yield _Lit("]")


def _atom(value: Any, room: int) -> str:
    if isinstance(value, str):
        return msgspec.json.encode(value[:room]).decode()
    if value is None or isinstance(value, bool | int | float):
        try:
            return msgspec.json.encode(value).decode()
        except (TypeError, ValueError, OverflowError):  # an int past 64 bits
            pass
    return msgspec.json.encode(f"<{type(value).__name__}>").decode()


def arguments(value: Any, limit: int = ARGUMENTS_CHARS) -> str:
    """A tool call's arguments as JSON, at most ``limit`` characters (a cut text
    ends with ``…`` and is no longer JSON). The walk is iterative and goes only as
    far as it prints, so any input, a 10^5-deep list or a megabyte array, costs at
    most ``limit`` steps and never raises: a tool call's span must not fail the call."""
    parts: list[str] = []
    room = limit
    cut = False
    for item in atoms(value, _members):
        if room <= 0:
            cut = True
            break
        text = item if type(item) is _Lit else _atom(item, room)
        parts.append(text[:room])
        if len(text) > room:
            cut = True
            break
        room -= len(text)
    text = "".join(parts)
    return text[: max(0, limit - 1)] + "…" if cut else text


def message_parts(message: Message) -> dict[str, Any]:
    content = message.content
    parts = (
        [{"type": "text", "content": content}] if isinstance(content, str) else parts_of(content)
    )
    return {"role": message.role, "parts": parts}


def parts_of(blocks: list[Block]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingBlock):
            parts.append({"type": "reasoning", "content": block.thinking})
        elif isinstance(block, ToolUseBlock):
            parts.append(
                {"type": "tool_call", "id": block.id, "name": block.name, "arguments": block.input}
            )
        elif isinstance(block, ToolResultBlock):
            content = block.content  # a content list's images recorded by type alone
            response = content if isinstance(content, str) else parts_of(list(content))
            parts.append(
                {"type": "tool_call_response", "id": block.tool_use_id, "response": response}
            )
        elif isinstance(block, RedactedThinkingBlock):
            parts.append({"type": "reasoning", "redacted": True})
        else:
            parts.append({"type": block.type})
    return parts
