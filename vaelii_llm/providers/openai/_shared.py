"""What the two OpenAI wires share (Chat Completions, :mod:`._chat` and
:mod:`._assemble`; the Responses API, the ``_responses_*`` modules): the
media OpenAI documents, the response headers callers see, one rule for a
structured-output schema, how a usage count is read, and the refusal of a
streamed answer that held no event. Each wire imports
these from here, never from the other wire's modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import Final

from vaelii_llm import errors
from vaelii_llm._media import MAX_BASE64
from vaelii_llm._media import MB
from vaelii_llm._media import WEB_IMAGE_TYPES
from vaelii_llm._media import MediaLimits
from vaelii_llm._protocol import TOOL_CHOICES
from vaelii_llm._protocol import Request
from vaelii_llm._transport.settings import Headers

__all__ = ["HEADERS", "MEDIA", "count", "no_event", "response_format", "tool_choice"]

MEDIA: Final = MediaLimits(
    image_types=WEB_IMAGE_TYPES,
    image_base64=MAX_BASE64,
    image_limit=f"the {MAX_BASE64 // MB} MB request payload OpenAI documents",
    document_base64=MAX_BASE64,
    document_limit=f"the {MAX_BASE64 // MB} MB request payload OpenAI documents",
)
"""What both wires take as images and documents, from OpenAI's
documentation (the reference the compatible servers follow)."""

HEADERS: Final = Headers(
    request_id="x-request-id",
    names=frozenset({"retry-after", "retry-after-ms"}),
    prefixes=("x-ratelimit-",),
)
"""What callers see of an OpenAI-compatible server's response headers."""


def _closed(schema: Any) -> bool:
    """Whether every object schema in ``schema`` requires all its properties
    and admits no others: what OpenAI's strict mode demands."""
    if type(schema) is list:
        return all(_closed(item) for item in schema)
    if type(schema) is not dict:
        return True
    properties = schema.get("properties")
    if type(properties) is dict and (
        set(schema.get("required") or ()) != set(properties)
        or schema.get("additionalProperties") is not False
    ):
        return False
    return all(_closed(value) for value in schema.values())


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """Chat Completions' ``json_schema`` wrapper for a ``format`` schema (one
    rule for the name and for strictness; the Responses API flattens it)."""
    # A JSON schema never has type "json_schema", so an already wrapped one is recognisable.
    if schema.get("type") == "json_schema" and "json_schema" in schema:
        return schema
    title = schema.get("title")
    name = title if type(title) is str and title.replace("_", "").isalnum() else "response"
    return {
        "type": "json_schema",
        "json_schema": {"name": name[:64], "schema": schema, "strict": _closed(schema)},
    }


def tool_choice(request: Request, *, nested: bool = True) -> str | dict[str, Any] | None:
    """``tool_choice`` as Chat Completions takes it (the word, or a named
    function); ``nested=False``, as the Responses API takes it (the name beside
    ``type``); ``"auto"`` as nothing."""
    choice = request.tool_choice
    if choice == "auto":
        return None
    if choice in TOOL_CHOICES:
        return choice
    if nested:
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


def count(value: Any) -> int | None:
    """A usage count: an int as sent, anything else none."""
    return value if type(value) is int else None


def no_event(
    opening: bytes,
    label: str,
    decode: Callable[[bytes], Any],
    refuse: Callable[[Any, str], None],
) -> errors.LLMError:
    """The refusal of a streamed answer that held no event: the error
    ``refuse`` raises for the body ``decode`` reads (the wire's own error
    shape, :class:`~vaelii_llm.errors.LLMApiError`), anything else
    :class:`~vaelii_llm.errors.LLMBadResponse`."""
    try:
        parsed = decode(opening)
    except Exception:
        parsed = None
    if parsed is not None:
        try:
            refuse(parsed, label)
        except errors.LLMError as refused:
            return refused
    return errors.LLMBadResponse(label, "answered a streamed turn with no SSE event", opening)
