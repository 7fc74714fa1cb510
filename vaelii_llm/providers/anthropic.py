"""The Messages API backend.

``provider(credential=..., base_url=..., model=..., effort=..., headers=...)`` builds an
:class:`AnthropicProvider` without I/O; it is an async context manager owning
one HTTP session (opened on the first turn, closed by ``aclose``, after which
every turn raises :class:`~vaelii_llm.errors.LLMClosed`).

What goes out (:func:`build_body`)
    ``model`` (default :data:`DEFAULT_MODEL`), ``max_tokens``, ``messages``,
    ``system``, ``tools``, ``stop_sequences``; ``thinking`` always
    ``{"type": "adaptive"}`` (no token budget; the request's
    ``thinking_display`` is added as ``display``); ``output_config.effort``
    (the request's ``effort``, else the provider's, default ``"medium"``) and
    ``output_config.format`` (the request's ``format`` JSON schema, wrapped as
    ``{"type": "json_schema", "schema": …}``); ``fallbacks: "default"`` with the
    :data:`FALLBACK_BETA` header unless the request sets ``fallbacks=None``.
    ``temperature``, ``top_p``, ``top_k`` and ``tool_choice`` are never sent:
    this model family refuses the first three and a forced tool.

Blocks
    A block carrying ``raw`` of its own type is sent back exactly as received
    (the API rejects an edited thinking block, and an unmodelled vendor block
    round-trips this way). A built block, or one whose ``raw`` another backend
    wrote, is written from its fields; one of a type the encoder
    has no shape for (an :class:`~vaelii_llm._protocol.OpaqueBlock` with an
    empty ``raw``, a foreign class) is refused with
    :class:`~vaelii_llm.errors.LLMEncode`.

What comes back
    Every block keeps its JSON in ``raw``; an unknown type becomes an
    ``OpaqueBlock``. A refusal is a 200 with ``stop_reason == "refusal"`` and
    empty or partial content: nothing is fabricated. ``stream`` reassembles
    the SSE events (:class:`StreamAssembler`) and yields each block when its
    ``content_block_stop`` arrives, its ``raw`` equal to what the non-streamed
    API returns for it, then the same :class:`~vaelii_llm._protocol.Response`
    ``complete`` returns; with ``deltas=True`` the text and thinking pieces and
    each tool call's start come before their block. An ``error`` event is an
    :class:`~vaelii_llm.errors.LLMApiError`; a stream ending before
    ``message_stop`` is an :class:`~vaelii_llm.errors.LLMBadResponse`.

    The message's top-level fields this package does not model
    (``container``, ``context_management``…) are kept on ``Response.extra``,
    its usage fields not modelled (``service_tier``, ``server_tool_use``…) on
    ``Usage.extra``; a null one is left out, so both are None when there are
    none. Streamed, they come from ``message_start`` and then
    ``message_delta`` (its ``delta`` and the fields beside it), a null never
    replacing a value, a later value replacing an earlier one.

Streamed turns equal whole ones
    * A server-side fallback: ``message_start`` names the model first asked;
      each ``fallback`` block's ``to.model`` served what follows, so the
      Response names the last one, as the whole message does.
    * A block type the package does not model takes the deltas the typed path
      does not read (``compaction_delta`` on a ``compaction`` block, any
      other) by one rule, applied to its ``raw`` in order: a delta's ``type``
      is not copied and a null carries nothing; a string is appended to the
      field's string (a null, absent or non-string field counts as ``""``); a
      list extends the field's list (likewise ``[]``); any other value
      replaces the field (the last one wins). ``input_json_delta`` and
      ``citations_delta`` do on it what they do on a modelled block (a
      ``server_tool_use`` input, the citations). A modelled block skips a
      delta type it does not know.
    * ``max_tokens`` inside a tool input: the turn ends as ``max_tokens``
      with the blocks as they came; a cut input is read leniently (jiter's
      partial mode: whole members kept, a cut string kept up to the cut, a
      cut number, literal or key dropped), as the whole message carries it.
      Under ``max_tokens`` the last block, when a ``tool_use``, is
      ``partial=True`` on both paths, so it is never run; streamed, a tool
      call is handed over once the next block starts or the stop reason
      comes, so it is never handed over whole first. A cut input under any
      other stop reason, or followed by another block, is an
      ``LLMBadResponse``.
    * Blocks are numbered from 0 in order: a start out of turn, or a delta
      or a stop for a block that is not open, is an ``LLMBadResponse`` (a
      lost block), never a shorter message.

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

Credentials
    An explicit ``credential``, or one in the environment, is read and checked
    when the provider is built (no I/O). With neither, the first turn runs
    :func:`~vaelii_llm.providers._credentials.resolve` (the environment again,
    then the ``ant`` CLI, at most :data:`~vaelii_llm.providers._credentials.ANT_TIMEOUT_S`
    seconds, outside the turn's ``timeout_ms``) and the provider keeps what it
    found. Concurrent first turns share one lookup; a lookup that finds nothing
    fails the turns waiting on it, and the next turn looks again. Cancelling
    the turn kills the CLI. The credential appears in no message, log line or
    repr.

There is no retry: a 429 or 529 is an ``LLMApiError`` carrying its status.
The session, the closed state, the turn and the stream pump are the shared
skeleton's (:mod:`vaelii_llm.providers._http`); this module is the codec
(:class:`MessagesCodec`) and the credential lookup.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import msgspec

from vaelii_llm import _transport as transport
from vaelii_llm import config, telemetry
from vaelii_llm._protocol import (
    UNSET,
    Block,
    Delta,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    Request,
    Response,
    StopReason,
    StreamItem,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseStart,
    Usage,
    nearest_stop_reason,
)
from vaelii_llm._wire.sse import SSEDecoder
from vaelii_llm.errors import (
    LLMApiError,
    LLMBadCredential,
    LLMBadResponse,
    LLMEncode,
    LLMNoCredential,
)
from vaelii_llm.providers import _credentials as credentials
from vaelii_llm.providers._credentials import Credential
from vaelii_llm.providers._http import HTTPProvider

__all__ = [
    "API_VERSION",
    "DEFAULT_EFFORT",
    "DEFAULT_MODEL",
    "FALLBACK_BETA",
    "NEVER_SENT",
    "AnthropicProvider",
    "MessagesCodec",
    "StreamAssembler",
    "available",
    "betas",
    "build_body",
    "decode_block",
    "decode_response",
    "encode_block",
    "provider",
    "stop_reason",
]

log = logging.getLogger("vaelii_llm.providers.anthropic")

API_VERSION: Final = "2023-06-01"
"""The ``anthropic-version`` header: the version the API's published history names."""
DEFAULT_MODEL: Final = "claude-opus-5-5"
DEFAULT_EFFORT: Final = "medium"
"""One level below claude-opus-5's own default; a caller wanting deeper
reasoning sends ``effort``."""
FALLBACK_BETA: Final = "server-side-fallback-2026-07-01"
NEVER_SENT: Final = frozenset({"temperature", "top_p", "top_k", "tool_choice"})
MESSAGES_PATH: Final = "/v1/messages"
_NOT_SSE_KEPT: Final = 64 * 1024
"""How much of a streamed answer that holds no SSE event is kept for the error:
a gateway's JSON error or a proxy's HTML page, recognisable from its opening."""

# ---------------------------------------------------------------------------
# request encoding (pure)


def encode_block(block: Block, label: str = "the Messages API") -> dict[str, Any]:
    """One content block as the API takes it: ``raw`` unchanged when set and
    of the block's type (another vendor's raw, such as an Ollama tool call's,
    is no Messages API block, so the block is built from its fields)."""
    raw = getattr(block, "raw", None)
    if raw and raw.get("type") == getattr(block, "type", None):
        return raw  # type: ignore[no-any-return]
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        out: dict[str, Any] = {"type": "thinking", "thinking": block.thinking}
        if block.signature is not None:
            out["signature"] = block.signature
        return out
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        out = {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": block.content}
        if block.is_error:
            out["is_error"] = True
        return out
    raise LLMEncode(str(getattr(block, "type", type(block).__name__)), label)


def _encode_message(message: Message, label: str) -> dict[str, Any]:
    content = message.content
    if isinstance(content, str):
        return {"role": message.role, "content": content}
    return {"role": message.role, "content": [encode_block(b, label) for b in content]}


def _output_format(schema: dict[str, Any]) -> dict[str, Any]:
    # A JSON schema never has type "json_schema", so an already wrapped one is recognisable.
    if schema.get("type") == "json_schema" and "schema" in schema:
        return schema
    return {"type": "json_schema", "schema": schema}


def build_body(
    request: Request,
    *,
    model: str = DEFAULT_MODEL,
    effort: str = DEFAULT_EFFORT,
    stream: bool = False,
    label: str = "the Messages API",
) -> dict[str, Any]:
    """The JSON body for ``request`` (see the module docstring for what goes out)."""
    body: dict[str, Any] = {
        "model": request.model or model,
        "max_tokens": request.max_tokens,
        "messages": [_encode_message(m, label) for m in request.messages],
    }
    if request.system is not None:
        body["system"] = request.system
    if request.tools:
        body["tools"] = [msgspec.to_builtins(t) for t in request.tools]
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    thinking: dict[str, Any] = {"type": "adaptive"}
    if request.thinking_display is not None:
        thinking["display"] = request.thinking_display
    body["thinking"] = thinking
    output_config: dict[str, Any] = {"effort": request.effort or effort}
    if request.format is not None:
        output_config["format"] = _output_format(request.format)
    body["output_config"] = output_config
    if request.fallbacks is UNSET:
        body["fallbacks"] = "default"
    elif request.fallbacks is not None:
        body["fallbacks"] = request.fallbacks
    if stream:
        body["stream"] = True
    return body


def betas(request: Request, credential: Credential | None = None) -> tuple[str, ...]:
    """The ``anthropic-beta`` values the turn needs: the credential's (OAuth),
    then the fallback beta unless the request drops fallbacks."""
    found = list(credential.betas) if credential is not None else []
    if request.fallbacks is not None:
        found.append(FALLBACK_BETA)
    return tuple(found)


# ---------------------------------------------------------------------------
# response decoding (pure)

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

_WHOLE_DECODER: Final = msgspec.json.Decoder(dict[str, Any])
"""A non-streamed body, as a mapping: the fields this package does not model
are kept (``Response.extra``), which a typed struct would drop."""


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


class _Top:
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
            _mark_cut(content, len(content) - 1)
        counts = self.counts
        return Response(
            content=content,
            stop_reason=stop_reason(self.stop_reason, content),
            vendor_stop_reason=self.stop_reason,
            model=self.model,
            id=self.id,
            stop_sequence=self.stop_sequence,
            stop_details=self.stop_details,
            usage=Usage(
                input_tokens=counts.get("input_tokens"),
                output_tokens=counts.get("output_tokens"),
                cache_creation_input_tokens=counts.get("cache_creation_input_tokens"),
                cache_read_input_tokens=counts.get("cache_read_input_tokens"),
                extra=self.usage_extra or None,
            ),
            extra=self.extra or None,
        )


def _mark_cut(content: list[Block], last: int) -> None:
    """Under ``max_tokens``, the last block when it is a tool call is the cut
    one (whether or not its input happens to read as whole JSON): never to be run."""
    if last >= 0:
        block = content[last]
        if isinstance(block, ToolUseBlock) and not block.partial:
            content[last] = msgspec.structs.replace(block, partial=True)


def _lenient(text: str, kind: Any, label: str) -> Any:
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
    """The neutral stop reason for the API's word (the table in the module
    docstring): its own six words are the vocabulary; an unknown one is the
    nearest, ``tool_use`` when the turn holds a tool call, else ``end_turn``."""
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
        parsed = _WHOLE_DECODER.decode(data)
    except Exception as exc:
        raise LLMBadResponse(label, "answered a body that is not a message", data) from exc
    return _from_parsed(parsed, label)


def _not_sse(opening: bytes, label: str) -> LLMApiError | LLMBadResponse:
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


def _from_parsed(parsed: dict[str, Any], label: str) -> Response:
    kind = parsed.get("type")
    if kind == "error":
        error = {"type": "error", "error": parsed.get("error", {})}
        raise LLMApiError(label, 200, msgspec.json.encode(error).decode())
    content = parsed.get("content")
    if kind != "message" or type(content) is not list:
        raise LLMBadResponse(label, "answered a body that is not a message", _encode(parsed))
    blocks: list[Block] = []
    for raw in content:
        if type(raw) is not dict:
            raise LLMBadResponse(
                label, "answered a content block that is not an object", _encode(raw)
            )
        blocks.append(decode_block(raw, label))
    top = _Top(label)
    top.take_message(parsed)
    return top.response(blocks)


def _encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


# ---------------------------------------------------------------------------
# stream reassembly (sans-IO)


class _BlockStart(msgspec.Struct, frozen=True):
    index: int
    content_block: dict[str, Any]


class _Delta(msgspec.Struct, frozen=True, gc=False):
    """A delta's fields, each as sent (``Any``: a wrong type is refused only
    for the delta type that reads it, as a dict lookup would); others skipped
    (a delta the typed path does not read is decoded again whole)."""

    type: Any = None
    text: Any = None
    partial_json: Any = None
    thinking: Any = None
    signature: Any = None
    citation: Any = None


class _BlockDelta(msgspec.Struct, frozen=True, gc=False):
    index: int
    delta: _Delta


class _WholeDelta(msgspec.Struct, frozen=True):
    delta: dict[str, Any]


class _BlockStop(msgspec.Struct, frozen=True):
    index: int


class _MessageStart(msgspec.Struct, frozen=True):
    message: dict[str, Any]


_DELTA_DECODER: Final = msgspec.json.Decoder(_BlockDelta)
_WHOLE_DELTA_DECODER: Final = msgspec.json.Decoder(_WholeDelta)
_DECODERS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    "message_start": msgspec.json.Decoder(_MessageStart),
    "content_block_start": msgspec.json.Decoder(_BlockStart),
    "content_block_delta": _DELTA_DECODER,
    "content_block_stop": msgspec.json.Decoder(_BlockStop),
    "message_delta": _WHOLE_DECODER,
}
_ANY_JSON: Final = msgspec.json.Decoder()
_TYPED: Final = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
"""The block types the typed path reassembles; every other type's deltas
follow the generic rule (the module docstring)."""


def _flush(raw: dict[str, Any], key: str, pieces: list[str]) -> None:
    base = raw.get(key)
    raw[key] = (base if type(base) is str else "") + "".join(pieces)


class _OpenBlock:
    """A block between its start and its stop: the pieces, joined once at the stop."""

    __slots__ = (
        "citations",
        "json",
        "kind",
        "pending",
        "signature",
        "start",
        "text",
        "thinking",
        "work",
    )

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.kind = start.get("type")
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.json: list[str] = []
        self.signature: str | None = None
        self.citations: list[Any] = []
        self.work: dict[str, Any] | None = None  # the raw as generic deltas left it
        self.pending: dict[str, list[str]] = {}  # its string pieces, joined at the stop

    def apply(self, delta: Mapping[str, Any]) -> None:
        """A delta the typed path does not read, on a block type it does not
        model: the generic rule of the module docstring."""
        work = self.work
        if work is None:
            work = self.work = dict(self.start)
        pending = self.pending
        for key, value in delta.items():
            if key == "type" or value is None:
                continue
            if type(value) is str:
                pending.setdefault(key, []).append(value)
                continue
            pieces = pending.pop(key, None)
            if pieces is not None:
                _flush(work, key, pieces)
            if type(value) is list:
                base = work.get(key)
                work[key] = [*base, *value] if type(base) is list else list(value)
            else:
                work[key] = value

    def close(self, label: str) -> tuple[dict[str, Any], str | None]:
        """The block's JSON, and its streamed input when that is no whole JSON
        (a cut, read leniently into ``input``), else None."""
        raw = self.work if self.work is not None else dict(self.start)
        for key, pieces in self.pending.items():
            _flush(raw, key, pieces)
        if self.text:
            raw["text"] = str(raw.get("text") or "") + "".join(self.text)
        if self.thinking:
            raw["thinking"] = str(raw.get("thinking") or "") + "".join(self.thinking)
        if self.signature is not None:
            raw["signature"] = self.signature
        if self.citations:
            raw["citations"] = [*(raw.get("citations") or []), *self.citations]
        cut = None
        if self.json:
            joined = "".join(self.json)
            if joined:
                try:
                    raw["input"] = _ANY_JSON.decode(joined)
                except Exception:
                    raw["input"] = _lenient(joined, self.kind, label)
                    cut = joined
        return raw, cut


class StreamAssembler:
    """Turns the Messages API's SSE events into whole blocks and a Response.

    Sans-IO, in the words every assembler speaks (:mod:`vaelii_llm.providers._http`):
    :meth:`feed` takes one event (its name and data) and returns what it
    completed; :meth:`feed_batch` does the same for the decoder's
    ``(event, data)`` pairs; :attr:`finished` says ``message_stop`` has
    arrived; :meth:`result` gives the final :class:`Response`. Text, thinking
    and tool-input pieces are kept in lists and joined once at the block's
    stop; the tool input is parsed once from the joined JSON; a
    ``signature_delta`` lands on its thinking block and a ``citations_delta``
    in its block's ``raw``; a block type not modelled takes its other deltas
    by the generic rule (the module docstring). Pings and unknown event types
    are skipped (the API may add them); an ``error`` event raises
    ``LLMApiError``. A block still open at ``message_stop`` is closed there
    and returned with that event. Blocks are numbered from 0 in order: a
    start out of turn, or a delta or stop for a block that is not open, is a
    lost block (``LLMBadResponse``).

    A ``tool_use`` block is handed over when the next block starts or the
    stop reason arrives, whichever comes first: under ``max_tokens`` the last
    one is the cut call (``partial=True``), and it is never handed over as
    whole. A block whose input is no whole JSON is a cut: kept, read
    leniently, when the turn stopped for ``max_tokens``; an ``LLMBadResponse``
    otherwise.

    With ``deltas`` a ``text_delta`` or ``thinking_delta`` (and a block
    start's own opening text) is also handed back as a
    :class:`~vaelii_llm._protocol.TextDelta` or
    :class:`~vaelii_llm._protocol.ThinkingDelta`, and a ``tool_use`` block's
    start as a :class:`~vaelii_llm._protocol.ToolUseStart`; ``index`` is the
    event's block index, which the API numbers by position in the content.
    """

    __slots__ = (
        "_blocks",
        "_deltas",
        "_held",
        "_label",
        "_open",
        "_started",
        "_stopped",
        "_top",
    )

    def __init__(self, label: str = "the Messages API", *, deltas: bool = False) -> None:
        self._label = label
        self._deltas = deltas
        self._top: _Top | None = None
        self._open: dict[int, _OpenBlock] = {}
        self._blocks: dict[int, Block] = {}
        self._started = 0
        self._held: tuple[int, Block, str | None] | None = None
        self._stopped = False

    @property
    def finished(self) -> bool:
        """Whether ``message_stop`` has arrived."""
        return self._stopped

    def feed(self, event: str, data: str | bytes) -> list[StreamItem]:
        """Apply one event; what it completed (blocks, and deltas when asked for), in order."""
        if self._stopped or event == "ping":
            return []
        if event == "error":
            raise LLMApiError(
                self._label, 200, data if isinstance(data, str) else data.decode("utf-8", "replace")
            )
        decoder = _DECODERS.get(event)
        if decoder is None:
            if event == "message_stop":
                return self._finish()
            return []  # an event type this package does not know yet
        try:
            parsed = decoder.decode(data)
        except Exception as exc:
            raise LLMBadResponse(
                self._label, f"streamed a {event} event that will not parse", data
            ) from exc
        if isinstance(parsed, _MessageStart):
            if self._top is not None:
                raise LLMBadResponse(self._label, "streamed a second message_start", data)
            self._top = _Top(self._label)
            self._top.take_message(parsed.message)
            return []
        top = self._top
        if top is None:
            raise LLMBadResponse(self._label, f"streamed {event} before message_start", data)
        if isinstance(parsed, _BlockDelta):
            delta = self._delta(parsed, data)
            return [] if delta is None else [delta]
        if isinstance(parsed, _BlockStart):
            return self._start(parsed, data, top)
        if isinstance(parsed, _BlockStop):
            block = self._open.pop(parsed.index, None)
            if block is None:
                raise LLMBadResponse(
                    self._label, f"stopped block {parsed.index}, which is not open", data
                )
            out = self._release(final=False)
            raw, cut = block.close(self._label)
            done = decode_block(raw, self._label)
            self._blocks[parsed.index] = done
            if cut is not None or isinstance(done, ToolUseBlock):
                self._held = (parsed.index, done, cut)
            else:
                out.append(done)
            return out
        if type(parsed) is not dict:
            raise LLMBadResponse(self._label, "streamed a message_delta that is no object", data)
        top.take_delta(parsed)
        return self._release(final=True)

    def _start(self, parsed: _BlockStart, data: str | bytes, top: _Top) -> list[StreamItem]:
        index = parsed.index
        if index != self._started:
            if index < self._started:
                raise LLMBadResponse(self._label, f"started block {index} twice", data)
            raise LLMBadResponse(
                self._label,
                f"started block {index} before block {self._started}: a block was lost",
                data,
            )
        out = self._release(final=False)
        self._started = index + 1
        block = parsed.content_block
        if block.get("type") == "fallback":  # a server-side fallback: the next model serves
            to = block.get("to")
            model = to.get("model") if type(to) is dict else None
            if type(model) is str:
                top.model = model
        self._open[index] = _OpenBlock(block)
        if self._deltas:
            start = _start_delta(index, block)
            if start is not None:
                out.append(start)
        return out

    def _release(self, *, final: bool) -> list[StreamItem]:
        """The held tool call, once what follows it is known: a next block
        (``final`` False) or the stop reason (``final`` True)."""
        held = self._held
        if held is None:
            return []
        self._held = None
        index, block, cut = held
        cut_allowed = final and self._top is not None and self._top.max_tokens()
        if cut is not None and not cut_allowed:
            raise LLMBadResponse(
                self._label, f"streamed a {block.type!r} block whose input is not JSON", cut
            )
        if cut_allowed and index == self._started - 1:
            content = [block]
            _mark_cut(content, 0)
            block = self._blocks[index] = content[0]
        return [block]

    def feed_batch(self, frames: Iterable[tuple[bytes, bytes]]) -> Iterator[StreamItem]:
        """:meth:`feed` for each ``(event, data)`` pair of UTF-8 bytes (as
        :meth:`SSEDecoder.feed_frames <vaelii_llm._wire.sse.SSEDecoder.feed_frames>`
        hands them over), yielding as it goes: what came before a refused
        event is handed over before the refusal.

        The streamed path: a ``content_block_delta`` (nearly every event of a
        turn) is decoded from the bytes and applied here, in one step; any
        other event goes through :meth:`feed`, so both apply the same rules.
        """
        decode = _DELTA_DECODER.decode
        opened = self._open
        deltas = self._deltas
        live = not self._stopped and self._top is not None
        texts: list[str] | None = None  # the pieces of the open text block last seen
        last = -1  # its index (only feed opens or closes a block)
        for event, data in frames:
            if not live or event != b"content_block_delta":
                yield from self.feed(event.decode(), data)
                live = not self._stopped and self._top is not None
                last = -1
                continue
            try:
                parsed = decode(data)
            except Exception as exc:
                raise LLMBadResponse(
                    self._label, "streamed a content_block_delta event that will not parse", data
                ) from exc
            index = parsed.index
            if index != last:
                block = opened.get(index)
                texts = block.text if block is not None and block.kind == "text" else None
                last = index
            delta = parsed.delta
            if texts is not None and delta.type == "text_delta":
                text = delta.text
                if type(text) is str:  # else _delta refuses it
                    texts.append(text)
                    if deltas:
                        yield TextDelta(index=index, text=text)
                    continue
            item = self._delta(parsed, data)
            if item is not None:
                yield item

    def _delta(self, parsed: _BlockDelta, data: str | bytes) -> Delta | None:
        """Apply one delta to its open block; the delta item to hand back, if asked for."""
        block = self._open.get(parsed.index)
        if block is None:
            raise LLMBadResponse(
                self._label, f"streamed a delta for block {parsed.index}, which is not open", data
            )
        delta = parsed.delta
        kind = delta.type
        block_type = block.kind
        if kind == "input_json_delta":
            if block_type == "tool_use" or block_type not in _TYPED:
                block.json.append(self._str(delta, delta.partial_json, "partial_json", data))
        elif kind == "citations_delta":
            if block_type == "text" or block_type not in _TYPED:
                block.citations.append(delta.citation)
        elif block_type not in _TYPED:
            block.apply(_WHOLE_DELTA_DECODER.decode(data).delta)
        elif kind == "text_delta":
            if block_type == "text":
                text = self._str(delta, delta.text, "text", data)
                block.text.append(text)
                if self._deltas:
                    return TextDelta(index=parsed.index, text=text)
        elif kind == "thinking_delta":
            if block_type == "thinking":
                thinking = self._str(delta, delta.thinking, "thinking", data)
                block.thinking.append(thinking)
                if self._deltas:
                    return ThinkingDelta(index=parsed.index, thinking=thinking)
        elif kind == "signature_delta" and block_type == "thinking":
            block.signature = self._str(delta, delta.signature, "signature", data)
        # any other delta on a modelled block: added by a later API version; skipped
        return None

    def _str(self, delta: _Delta, value: Any, key: str, data: str | bytes) -> str:
        if not isinstance(value, str):
            raise LLMBadResponse(
                self._label, f"streamed a {delta.type} with no {key!r} string", data
            )
        return value

    def _finish(self) -> list[StreamItem]:
        top = self._top
        if top is None:
            raise LLMBadResponse(self._label, "streamed message_stop before message_start")
        self._stopped = True
        closed = self._release(final=True)
        last = self._started - 1
        for index in sorted(self._open):
            raw, cut = self._open.pop(index).close(self._label)
            if cut is not None and not top.max_tokens():
                raise LLMBadResponse(
                    self._label,
                    f"streamed a {raw.get('type')!r} block whose input is not JSON",
                    cut,
                )
            content = [decode_block(raw, self._label)]
            if index == last and top.max_tokens():
                _mark_cut(content, 0)
            self._blocks[index] = content[0]
            closed.append(content[0])
        return closed

    def result(self) -> Response:
        """The whole turn. Before ``message_stop`` it is an ``LLMBadResponse``:
        the stream was cut short."""
        if not self._stopped or self._top is None:
            raise LLMBadResponse(self._label, "ended the stream without message_stop")
        return self._top.response([self._blocks[i] for i in sorted(self._blocks)])


def _start_delta(index: int, start: dict[str, Any]) -> Delta | None:
    """The delta a block's start hands over: a tool call's name, or the
    opening text or thinking the start already carries (usually none)."""
    kind = start.get("type")
    if kind == "tool_use":
        call_id, name = start.get("id"), start.get("name")
        if isinstance(call_id, str) and isinstance(name, str):
            return ToolUseStart(index=index, id=call_id, name=name)
    elif kind == "text":
        text = start.get("text")
        if isinstance(text, str) and text:
            return TextDelta(index=index, text=text)
    elif kind == "thinking":
        thinking = start.get("thinking")
        if isinstance(thinking, str) and thinking:
            return ThinkingDelta(index=index, thinking=thinking)
    return None


class _Frames:
    """The SSE decoder as the skeleton feeds it: ``(event, data)`` byte pairs,
    and, until the first event, the opening bytes, so a streamed answer in
    which no event ever came (a gateway's JSON error, a proxy's HTML page)
    is refused with what it sent when the body ends."""

    __slots__ = ("_decoder", "_label", "_opening")

    def __init__(self, label: str) -> None:
        self._label = label
        self._decoder = SSEDecoder(label)
        self._opening: bytearray | None = bytearray()  # kept until the first event

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        frames = self._decoder.feed_frames(data)
        opening = self._opening
        if opening is not None:
            if frames:
                self._opening = None
            elif not data:
                if opening:
                    raise _not_sse(bytes(opening), self._label)
            elif len(opening) < _NOT_SSE_KEPT:
                opening += data[: _NOT_SSE_KEPT - len(opening)]
        return frames


# ---------------------------------------------------------------------------
# the provider (I/O through the shared skeleton)


class MessagesCodec:
    """``/v1/messages`` as the shared HTTP skeleton drives it: the body, the
    headers (the credential, resolved once, see the module docstring), the
    decoders and the assembler. No I/O but the credential lookup."""

    whole_decoder: Final = _WHOLE_DECODER

    def __init__(
        self,
        *,
        credential: str | Credential | None,
        base_url: str | None,
        model: str | None,
        effort: str | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = config.anthropic_base_url(base_url)
        self.url = self.base_url + MESSAGES_PATH
        # A gateway URL may carry user:password; it names the far end with them cut.
        self.shown_url = config.hide_userinfo(self.base_url)
        self.model = model or DEFAULT_MODEL
        self.effort = effort or DEFAULT_EFFORT
        self._session_headers = transport.with_json_content_type(
            {"anthropic-version": API_VERSION, **(headers or {})}
        )
        self.endpoint = transport.Endpoint(
            label=f"the Messages API at {self.shown_url}", slug="anthropic"
        )
        self._credential: Credential | None = credentials.resolve_now(credential)
        self._lookup = asyncio.Lock()
        self._failed_lookups = 0
        # The turn headers for (credential, streamed, fallbacks dropped): built once each.
        self._turn_headers: dict[tuple[bool, bool], Mapping[str, str]] = {}

    def session_headers(self) -> Mapping[str, str]:
        return self._session_headers

    async def credential(self) -> Credential:
        """The credential turns send, resolving it (once) when none was given."""
        if self._credential is not None:
            return self._credential
        failed_before = self._failed_lookups
        async with self._lookup:
            if self._credential is not None:
                return self._credential
            if self._failed_lookups != failed_before:
                raise LLMNoCredential("the lookup this turn waited on found none")
            try:
                self._credential = await credentials.resolve()
            except (LLMNoCredential, LLMBadCredential):
                self._failed_lookups += 1
                raise
            return self._credential

    def body(self, request: Request, *, stream: bool) -> bytes:
        body = build_body(
            request,
            model=self.model,
            effort=self.effort,
            stream=stream,
            label=self.endpoint.label,
        )
        return msgspec.json.encode(body)

    async def headers(self, request: Request, *, stream: bool) -> Mapping[str, str]:
        cred = self._credential
        if cred is None:
            cred = await self.credential()
        key = (stream, request.fallbacks is None)
        found = self._turn_headers.get(key)
        if found is None:
            built = cred.headers()
            built["accept"] = "text/event-stream" if stream else "application/json"
            wanted = betas(request, cred)
            if wanted:
                built["anthropic-beta"] = ",".join(wanted)
            found = self._turn_headers[key] = transport.checked_headers(built)
        return found

    def whole(self, parsed: dict[str, Any]) -> Response:
        return _from_parsed(parsed, self.endpoint.label)

    def stream_decoder(self) -> _Frames:
        return _Frames(self.endpoint.label)

    def assembler(self, *, deltas: bool) -> StreamAssembler:
        return StreamAssembler(self.endpoint.label, deltas=deltas)


class AnthropicProvider(HTTPProvider[dict[str, Any], list[tuple[bytes, bytes]]]):
    """A Messages API provider; see the module docstring. Use it within one event loop."""

    def __init__(
        self,
        *,
        credential: str | Credential | None = None,
        base_url: str | None = None,
        model: str | None = None,
        effort: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._messages = MessagesCodec(
            credential=credential, base_url=base_url, model=model, effort=effort, headers=headers
        )
        self.endpoint = self._messages.endpoint
        super().__init__(self._messages)

    def __repr__(self) -> str:
        codec = self._messages
        return (
            f"AnthropicProvider(base_url={codec.shown_url!r}, model={codec.model!r}, "
            f"effort={codec.effort!r})"
        )

    @property
    def model(self) -> str:
        return self._messages.model

    async def credential(self) -> Credential:
        """The credential turns send, resolving it (once) when the provider
        was built without one. Raises ``LLMNoCredential`` when there is none."""
        return await self._messages.credential()


def provider(
    *,
    credential: str | Credential | None = None,
    base_url: str | None = None,
    model: str | None = None,
    effort: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> AnthropicProvider:
    """A Messages API provider, built without I/O (see the module docstring).

    ``headers`` are sent on every request (a gateway's or proxy's own); they
    are never logged or shown. A ``user:password@`` in ``base_url`` is sent as
    the URL says and cut from every message and the repr."""
    built = AnthropicProvider(
        credential=credential, base_url=base_url, model=model, effort=effort, headers=headers
    )
    return telemetry.instrument(built, "anthropic", url=config.anthropic_base_url(base_url))


async def available(credential: str | Credential | None = None) -> bool:
    """Whether a credential can be found: the explicit one, the environment's,
    or the ``ant`` CLI's. An unusable credential (a control character) answers
    False and is logged at WARNING naming its header, never its value."""
    try:
        await credentials.resolve(credential)
    except LLMNoCredential:
        return False
    except LLMBadCredential as exc:
        log.warning("the Messages API credential is unusable: %s", exc)
        return False
    return True
