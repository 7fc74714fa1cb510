"""Whole-message decoding for the Messages API (pure).

Every block keeps its JSON in ``raw``; an unknown type becomes an
:class:`~vaelii_llm._protocol.OpaqueBlock`. A refusal is a 200 with
``stop_reason == "refusal"`` and empty or partial content: nothing is
fabricated. An ``error`` object inside a 200 is an
:class:`~vaelii_llm.errors.LLMApiError`.

The message's top-level fields this package does not model (``container``,
``context_management``…) are kept on ``Response.extra``, its usage fields
not modelled (``service_tier``, ``server_tool_use``…) on ``Usage.extra``; a
null one is left out, so both are None when there are none. A stream fills
them by the same rule (:class:`Top`), from ``message_start`` and then
``message_delta``.

Under ``max_tokens`` the last block, when a ``tool_use``, is ``partial=True``
(never to be run); a cut tool input is read leniently (jiter's partial mode:
whole members kept, a cut string kept up to the cut, a cut number, literal
or key dropped).

Stop reasons
    The API's own words are the neutral vocabulary and pass through
    (:func:`stop_reason`); the word as sent is kept on
    ``Response.vendor_stop_reason`` whatever it is:

    =================================  =========================================
    the API's ``stop_reason``          ``Response.stop_reason``
    =================================  =========================================
    ``end_turn``, ``tool_use``,        the same word
    ``max_tokens``, ``stop_sequence``,
    ``refusal``, ``pause_turn``
    ``model_context_window_exceeded``  ``max_tokens`` (the turn was cut)
    any other word                     ``tool_use`` when the content holds a
                                       tool call, else ``end_turn``
    none                               None
    =================================  =========================================
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._protocol import Block
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import Usage
from vaelii_llm._protocol import nearest_stop_reason
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.providers._turn import count_call

__all__ = [
    "WHOLE_DECODER",
    "Top",
    "decode_block",
    "decode_response",
    "from_parsed",
    "lenient",
    "mark_cut",
    "not_sse",
    "stop_reason",
]

WHOLE_DECODER: Final = msgspec.json.Decoder(dict[str, Any])
"""A non-streamed body, as a mapping: the fields this package does not model
are kept (``Response.extra``), which a typed struct would drop."""

_COUNTS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
"""The usage counts :class:`~vaelii_llm._protocol.Usage` models; any other usage
field goes to ``Usage.extra``."""
_COUNT_SET: Final = frozenset(_COUNTS)
_STOP_STRINGS: Final = frozenset({"stop_reason", "stop_sequence"})
_MESSAGE_STRINGS: Final = _STOP_STRINGS | {"id", "model"}
"""A message's fields that are strings on the Response (the stop ones also on a delta)."""
_MESSAGE_OWN: Final = frozenset({"type", "role", "content"})
"""Top-level fields a message carries that are neither on the Response nor extra."""
_DELTA_EVENT_OWN: Final = frozenset({"type", "delta", "usage"})


def _bad_block(raw: Mapping[str, Any], label: str, why: str) -> LLMBadResponse:
    return LLMBadResponse(label, f"answered a content block {why}", msgspec.json.encode(raw))


def _field(raw: Mapping[str, Any], key: str, kind: type, label: str) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind):
        block_type = raw.get("type")
        raise _bad_block(
            raw, label, f"of type {block_type!r} whose {key!r} is not a {kind.__name__}"
        )
    return value


class Top:
    """A message's top-level fields and usage, as the Response carries them.

    Filled from the whole message, or from ``message_start`` and then each
    ``message_delta``, by one rule: a null never replaces a value; the
    modelled fields are checked for their type; every other non-null field is
    kept, the later value winning (``extra``, ``usage_extra``).
    """

    __slots__ = (
        "counts",
        "extra",
        "id",
        "label",
        "model",
        "stop_details",
        "stop_reason",
        "stop_sequence",
        "usage_extra",
    )

    def __init__(self, label: str) -> None:
        self.label = label
        self.id: str | None = None
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.stop_details: dict[str, Any] | None = None
        self.counts: dict[str, int] = {}
        self.usage_extra: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}

    def _bad(self, why: str, source: Mapping[str, Any]) -> LLMBadResponse:
        return LLMBadResponse(self.label, why, msgspec.json.encode(source))

    def _stop(self, key: str, value: Any, source: Mapping[str, Any]) -> bool:
        """Set a stop field; False when ``key`` is none."""
        if key in _STOP_STRINGS:
            if type(value) is not str:
                raise self._bad(f"answered a message whose {key!r} is not a string", source)
            setattr(self, key, value)
            return True
        if key == "stop_details":
            if type(value) is not dict:
                raise self._bad("answered a message whose 'stop_details' is not an object", source)
            self.stop_details = value
            return True
        return False

    def take_message(self, message: Mapping[str, Any]) -> None:
        """A whole message's fields, or ``message_start``'s (content aside)."""
        for key, value in message.items():
            if value is None or key in _MESSAGE_OWN:
                continue
            if key in _MESSAGE_STRINGS:
                if type(value) is not str:
                    raise self._bad(f"answered a message whose {key!r} is not a string", message)
                setattr(self, key, value)
            elif key == "usage":
                self.take_usage(value, message)
            elif not self._stop(key, value, message):
                self.extra[key] = value

    def take_delta(self, event: Mapping[str, Any]) -> None:
        """A ``message_delta``: its ``delta`` (stop fields, and ``container``
        and the like), its cumulative ``usage``, and fields beside them."""
        delta = event.get("delta")
        if delta is not None:
            if type(delta) is not dict:
                raise self._bad("streamed a message_delta whose 'delta' is not an object", event)
            for key, value in delta.items():
                if value is not None and not self._stop(key, value, event):
                    self.extra[key] = value
        usage = event.get("usage")
        if usage is not None:
            self.take_usage(usage, event)
        for key, value in event.items():
            if value is not None and key not in _DELTA_EVENT_OWN:
                self.extra[key] = value

    def take_usage(self, usage: Any, source: Mapping[str, Any]) -> None:
        if type(usage) is not dict:
            raise self._bad("answered a message whose 'usage' is not an object", source)
        for key, value in usage.items():
            if value is None:
                continue  # counts are cumulative; an omitted one keeps the value it had
            if key in _COUNT_SET:
                if type(value) is not int:
                    raise self._bad(f"answered a usage whose {key!r} is not an integer", source)
                self.counts[key] = value
            else:
                self.usage_extra[key] = value

    def max_tokens(self) -> bool:
        """Whether the turn was cut by its token budget (or the context window)."""
        word = self.stop_reason
        return word is not None and _STOP_REASONS.get(word) == "max_tokens"

    def response(self, content: list[Block]) -> Response:
        if self.max_tokens():
            mark_cut(content, len(content) - 1)
        counts = self.counts
        created = counts.get("cache_creation_input_tokens")
        read = counts.get("cache_read_input_tokens")
        return Response(
            content=content,
            stop_reason=stop_reason(self.stop_reason, content),
            vendor_stop_reason=self.stop_reason,
            model=self.model,
            id=self.id,
            stop_sequence=self.stop_sequence,
            stop_details=self.stop_details,
            usage=Usage(
                input_tokens=prompt_tokens(counts.get("input_tokens"), created, read),
                output_tokens=counts.get("output_tokens"),
                cache_creation_input_tokens=created,
                cache_read_input_tokens=read,
                extra=self.usage_extra or None,
            ),
            extra=self.extra or None,
        )


def prompt_tokens(uncached: int | None, created: int | None, read: int | None) -> int | None:
    """``Usage.input_tokens`` from the Messages API's counts: its ``input_tokens``
    counts only the prompt tokens after the last cache breakpoint, so the
    tokens written to and read from the cache are added back (the one meaning
    of :class:`~vaelii_llm.Usage` on every backend)."""
    if uncached is None:
        return None
    return uncached + (created or 0) + (read or 0)


def mark_cut(content: list[Block], last: int) -> None:
    """Under ``max_tokens``, the last block when it is a tool call is the cut
    one (whether or not its input happens to read as whole JSON): never to be run."""
    if last >= 0:
        block = content[last]
        if isinstance(block, ToolUseBlock) and not block.partial:
            content[last] = msgspec.structs.replace(block, partial=True)


def lenient(text: str, kind: Any, label: str) -> Any:
    """What a tool input cut by ``max_tokens`` says so far, read by jiter's
    partial mode: whole members kept, a cut string kept up to the cut, a cut
    number, literal or key dropped; nothing at all is ``{}``. Text that is no
    prefix of any JSON is still refused."""
    if not text.strip():
        return {}
    # Imported on the first cut only: importing this module stays as light as it was.
    from jiter import from_json

    try:
        return from_json(text.encode(), partial_mode="trailing-strings", allow_inf_nan=False)
    except ValueError as exc:
        raise LLMBadResponse(
            label, f"streamed a {kind!r} block whose input is not JSON", text
        ) from exc


def decode_block(raw: dict[str, Any], label: str = "the Messages API") -> Block:
    """A content block from its JSON, which it keeps as ``raw``.

    A type this package does not model becomes an :class:`OpaqueBlock`; a
    modelled type missing a field it needs is an ``LLMBadResponse``.
    """
    kind = raw.get("type")
    if kind == "text":
        return TextBlock(text=_field(raw, "text", str, label), raw=raw)
    if kind == "thinking":
        signature = raw.get("signature")
        return ThinkingBlock(
            thinking=_field(raw, "thinking", str, label),
            signature=signature if isinstance(signature, str) else None,
            raw=raw,
        )
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(data=_field(raw, "data", str, label), raw=raw)
    if kind == "tool_use":
        return ToolUseBlock(
            id=_field(raw, "id", str, label),
            name=_field(raw, "name", str, label),
            input=_field(raw, "input", dict, label),
            raw=raw,
        )
    if kind == "tool_result":
        content = raw.get("content")
        return ToolResultBlock(
            tool_use_id=_field(raw, "tool_use_id", str, label),
            content=content if isinstance(content, str) else msgspec.json.encode(content).decode(),
            is_error=bool(raw.get("is_error", False)),
            raw=raw,
        )
    if not isinstance(kind, str):
        raise _bad_block(raw, label, "with no type")
    return OpaqueBlock(type=kind, raw=raw)


_STOP_REASONS: Final[dict[str, StopReason]] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
    "model_context_window_exceeded": "max_tokens",
}


def stop_reason(word: str | None, content: Iterable[Block]) -> StopReason | None:
    """The neutral stop reason for the API's word (the module docstring's
    table): its own words are the vocabulary; an unknown one is the nearest,
    ``tool_use`` when the turn holds a tool call, else ``end_turn``."""
    if word is None:
        return None
    neutral = _STOP_REASONS.get(word)
    if neutral is not None:
        return neutral
    return nearest_stop_reason(any(isinstance(b, ToolUseBlock) for b in content))


def decode_response(data: bytes, label: str = "the Messages API") -> Response:
    """A non-streamed body as a :class:`Response`. An ``error`` object inside
    a 200 is an ``LLMApiError``; a body that is not a message is an
    ``LLMBadResponse``."""
    try:
        parsed = WHOLE_DECODER.decode(data)
    except Exception as exc:
        raise LLMBadResponse(label, "answered a body that is not a message", data) from exc
    return from_parsed(parsed, label)


def not_sse(opening: bytes, label: str) -> LLMApiError | LLMBadResponse:
    """The refusal for a streamed answer in which no SSE event arrived: a
    gateway's ``{"type": "error"}`` object is the API error it reports (status
    200), anything else a bad response carrying the opening it sent."""
    try:
        decode_response(opening, label)
    except LLMApiError as err:
        return err
    except LLMBadResponse:
        pass
    return LLMBadResponse(label, "answered a streamed request with no SSE event", opening)


def from_parsed(parsed: dict[str, Any], label: str) -> Response:
    kind = parsed.get("type")
    if kind == "error":
        error = {"type": "error", "error": parsed.get("error", {})}
        raise LLMApiError(label, 200, msgspec.json.encode(error).decode())
    content = parsed.get("content")
    if kind != "message" or type(content) is not list:
        raise LLMBadResponse(label, "answered a body that is not a message", _encode(parsed))
    blocks: list[Block] = []
    calls = 0
    for raw in content:
        if type(raw) is not dict:
            raise LLMBadResponse(
                label, "answered a content block that is not an object", _encode(raw)
            )
        if raw.get("type") == "tool_use":
            count_call(calls, label)
            calls += 1
        blocks.append(decode_block(raw, label))
    top = Top(label)
    top.take_message(parsed)
    return top.response(blocks)


def _encode(value: Any) -> bytes:
    return msgspec.json.encode(value)
