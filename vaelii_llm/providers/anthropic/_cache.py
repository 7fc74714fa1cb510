"""Prompt caching on the Messages API (pure): a :class:`~vaelii_llm._protocol.Cache`
written as ``cache_control`` into a built body.

``auto`` is the top-level ``cache_control`` (the API's automatic caching);
``tools`` marks the last tool, ``system`` the last system block (a string
system prompt becomes one text block to carry it), ``blocks`` the message
blocks named by position (a string content becomes one text block). Each is
``{"type": "ephemeral", "ttl": ...}``. A marked block is a copy: a block's
``raw`` is never changed.

Refused with :class:`~vaelii_llm.errors.LLMEncode` before anything is sent,
as the API would refuse them: more than
:data:`~vaelii_llm._protocol.MAX_CACHE_BREAKPOINTS` breakpoints (``auto``
counted), a position naming no block, and a breakpoint on a thinking block or
an empty text block.
"""

from __future__ import annotations

from typing import Any
from typing import Final

from vaelii_llm._protocol import MAX_CACHE_BREAKPOINTS
from vaelii_llm._protocol import Cache
from vaelii_llm.errors import LLMEncode

__all__ = ["apply_cache"]

_UNMARKABLE: Final = frozenset({"thinking", "redacted_thinking"})
"""Block types the API takes no ``cache_control`` on."""


def _refuse(label: str, why: str) -> LLMEncode:
    return LLMEncode("cache_control", label, reason=why)


def _marked(block: dict[str, Any], control: dict[str, str], label: str, at: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind in _UNMARKABLE:
        raise _refuse(label, f"a cache breakpoint on {at}, a {kind} block, which takes none")
    if kind == "text" and not block.get("text"):
        raise _refuse(label, f"a cache breakpoint on {at}, an empty text block, which takes none")
    return {**block, "cache_control": control}


def _position(
    messages: list[dict[str, Any]], where: tuple[int, int], label: str
) -> tuple[int, int]:
    """``(message, block)`` with negatives counted from the end; refused when it names no block."""
    message, block = where
    count = len(messages)
    if not -count <= message < count:
        raise _refuse(label, f"a cache breakpoint on message {message} of {count}")
    message %= count
    content = messages[message]["content"]
    blocks = 1 if isinstance(content, str) else len(content)
    if not -blocks <= block < blocks:
        raise _refuse(
            label, f"a cache breakpoint on block {block} of message {message}, which has {blocks}"
        )
    return message, block % blocks


def apply_cache(body: dict[str, Any], cache: Cache, label: str) -> None:
    """Write ``cache``'s breakpoints into ``body`` (built by ``build_body``:
    its lists are its own, its blocks may be a caller's ``raw``)."""
    control = {"type": "ephemeral", "ttl": cache.ttl}
    messages: list[dict[str, Any]] = body["messages"]
    positions = sorted({_position(messages, where, label) for where in cache.blocks})
    tools = body.get("tools") if cache.tools else None
    system = body.get("system") if cache.system else None
    count = len(positions) + bool(cache.auto) + bool(tools) + bool(system)
    if count > MAX_CACHE_BREAKPOINTS:
        raise _refuse(
            label,
            f"{count} cache breakpoints; it takes at most {MAX_CACHE_BREAKPOINTS} "
            "(automatic caching counts as one)",
        )
    if cache.auto:
        body["cache_control"] = control
    if tools:
        tools[-1] = {**tools[-1], "cache_control": control}
    if system:
        if isinstance(system, str):
            body["system"] = [{"type": "text", "text": system, "cache_control": control}]
        else:
            system[-1] = _marked(system[-1], control, label, "the last system block")
    for message, block in positions:
        entry = messages[message]
        content = entry["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        at = f"block {block} of message {message}"
        content[block] = _marked(content[block], control, label, at)
        messages[message] = {**entry, "content": content}
