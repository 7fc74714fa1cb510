"""The Messages API backend.

``provider(credential=..., base_url=..., model=..., effort=..., headers=...)`` builds an
:class:`AnthropicProvider` without I/O; it is an async context manager owning
one ``aiohttp`` session (opened on the first turn, closed by ``aclose``).

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
    has no shape for (an :class:`~vaelii_llm.protocol.OpaqueBlock` with an
    empty ``raw``, a foreign class) is refused with
    :class:`~vaelii_llm.errors.LLMEncode`.

What comes back
    Every block keeps its JSON in ``raw``; an unknown type becomes an
    ``OpaqueBlock``. A refusal is a 200 with ``stop_reason == "refusal"`` and
    empty or partial content: nothing is fabricated, the stop reason is
    reported as is. ``stream`` reassembles the SSE events
    (:class:`StreamAssembler`) and yields each block when its
    ``content_block_stop`` arrives, its ``raw`` equal to what the non-streamed
    API returns for it, then the same :class:`~vaelii_llm.protocol.Response`
    ``complete`` returns. An ``error`` event is an
    :class:`~vaelii_llm.errors.LLMApiError`; a stream ending before
    ``message_stop`` is an :class:`~vaelii_llm.errors.LLMBadResponse`.

Credentials
    An explicit ``credential``, or one in the environment, is read and checked
    when the provider is built (no I/O). With neither, the first turn runs
    :func:`~vaelii_llm.providers.credentials.resolve` (the environment again,
    then the ``ant`` CLI, at most :data:`~vaelii_llm.providers.credentials.ANT_TIMEOUT_S`
    seconds, outside the turn's ``timeout_ms``) and the provider keeps what it
    found. Concurrent first turns share one lookup; a lookup that finds nothing
    fails the turns waiting on it, and the next turn looks again. Cancelling
    the turn kills the CLI. The credential appears in no message, log line or
    repr.

There is no retry: a 429 or 529 is an ``LLMApiError`` carrying its status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from typing import Any, Final

import aiohttp
import msgspec

from vaelii_llm import config, telemetry, transport
from vaelii_llm.errors import (
    LLMApiError,
    LLMBadCredential,
    LLMBadResponse,
    LLMEncode,
    LLMNoCredential,
)
from vaelii_llm.protocol import (
    UNSET,
    Block,
    Message,
    OpaqueBlock,
    ProviderBase,
    RedactedThinkingBlock,
    Request,
    Response,
    StreamItem,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from vaelii_llm.providers import credentials
from vaelii_llm.providers.credentials import Credential
from vaelii_llm.wire.sse import SSEDecoder

__all__ = [
    "API_VERSION",
    "DEFAULT_EFFORT",
    "DEFAULT_MODEL",
    "FALLBACK_BETA",
    "NEVER_SENT",
    "PROBE_OPTS",
    "AnthropicProvider",
    "StreamAssembler",
    "available",
    "betas",
    "build_body",
    "decode_block",
    "decode_response",
    "encode_block",
    "provider",
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
PROBE_OPTS: Final = frozenset({"credential"})
MESSAGES_PATH: Final = "/v1/messages"
_DRAIN_S: Final = 0.05
"""How long a stream may take to end after ``message_stop`` before its
connection is closed rather than reused: the API ends it at once."""
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


class _Usage(msgspec.Struct, frozen=True):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(msgspec.Struct, frozen=True, tag="message"):
    content: list[dict[str, Any]]
    stop_reason: str | None = None
    id: str | None = None
    model: str | None = None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: _Usage = _Usage()


class _ErrorBody(msgspec.Struct, frozen=True, tag="error"):
    error: dict[str, Any] = {}


_BODY_DECODER: Final = msgspec.json.Decoder(_Message | _ErrorBody)


def _usage(wire: _Usage) -> Usage:
    return Usage(
        input_tokens=wire.input_tokens,
        output_tokens=wire.output_tokens,
        cache_creation_input_tokens=wire.cache_creation_input_tokens,
        cache_read_input_tokens=wire.cache_read_input_tokens,
    )


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


def _response(message: _Message, content: list[Block], usage: Usage) -> Response:
    return Response(
        content=content,
        stop_reason=message.stop_reason,
        model=message.model,
        id=message.id,
        stop_sequence=message.stop_sequence,
        stop_details=message.stop_details,
        usage=usage,
    )


def decode_response(data: bytes, label: str = "the Messages API") -> Response:
    """A non-streamed body as a :class:`Response`. An ``error`` object inside
    a 200 is an ``LLMApiError``; a body that is not a message is an
    ``LLMBadResponse``."""
    try:
        parsed = _BODY_DECODER.decode(data)
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


def _from_parsed(parsed: _Message | _ErrorBody, label: str) -> Response:
    if isinstance(parsed, _ErrorBody):
        raise LLMApiError(
            label, 200, msgspec.json.encode({"type": "error", "error": parsed.error}).decode()
        )
    content = [decode_block(raw, label) for raw in parsed.content]
    return _response(parsed, content, _usage(parsed.usage))


# ---------------------------------------------------------------------------
# stream reassembly (sans-IO)


class _StartMessage(msgspec.Struct, frozen=True):
    id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: _Usage = _Usage()


class _MessageStart(msgspec.Struct, frozen=True):
    message: _StartMessage


class _BlockStart(msgspec.Struct, frozen=True):
    index: int
    content_block: dict[str, Any]


class _Delta(msgspec.Struct, frozen=True, gc=False):
    """A delta's fields, each as sent (``Any``: a wrong type is refused only
    for the delta type that reads it, as a dict lookup would); others skipped."""

    type: Any = None
    text: Any = None
    partial_json: Any = None
    thinking: Any = None
    signature: Any = None
    citation: Any = None


class _BlockDelta(msgspec.Struct, frozen=True, gc=False):
    index: int
    delta: _Delta


class _BlockStop(msgspec.Struct, frozen=True):
    index: int


class _DeltaBody(msgspec.Struct, frozen=True):
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None


class _MessageDelta(msgspec.Struct, frozen=True):
    delta: _DeltaBody = _DeltaBody()
    usage: _Usage = _Usage()


_DELTA_DECODER: Final = msgspec.json.Decoder(_BlockDelta)
_DECODERS: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    "message_start": msgspec.json.Decoder(_MessageStart),
    "content_block_start": msgspec.json.Decoder(_BlockStart),
    "content_block_delta": _DELTA_DECODER,
    "content_block_stop": msgspec.json.Decoder(_BlockStop),
    "message_delta": msgspec.json.Decoder(_MessageDelta),
}
_ANY_JSON: Final = msgspec.json.Decoder()


class _OpenBlock:
    """A block between its start and its stop: the pieces, joined once at the stop."""

    __slots__ = ("citations", "json", "kind", "signature", "start", "text", "thinking")

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.kind = start.get("type")
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.json: list[str] = []
        self.signature: str | None = None
        self.citations: list[Any] = []

    def close(self, label: str) -> dict[str, Any]:
        raw = dict(self.start)
        kind = raw.get("type")
        if self.text:
            raw["text"] = str(raw.get("text") or "") + "".join(self.text)
        if self.thinking:
            raw["thinking"] = str(raw.get("thinking") or "") + "".join(self.thinking)
        if self.signature is not None:
            raw["signature"] = self.signature
        if self.citations:
            raw["citations"] = [*(raw.get("citations") or []), *self.citations]
        if self.json:
            joined = "".join(self.json)
            if joined:
                try:
                    value = _ANY_JSON.decode(joined)
                except Exception as exc:
                    raise LLMBadResponse(
                        label, f"streamed a {kind!r} block whose input is not JSON", joined
                    ) from exc
                raw["input"] = value
        return raw


class StreamAssembler:
    """Turns the Messages API's SSE events into whole blocks and a Response.

    Sans-IO: :meth:`feed` takes one event (its name and data) and returns the
    blocks it completed; :meth:`result` gives the final :class:`Response` once
    ``message_stop`` has arrived. Text, thinking and tool-input pieces are kept
    in lists and joined once at the block's stop; the tool input is parsed once
    from the joined JSON; a ``signature_delta`` lands on its thinking block and
    a ``citations_delta`` in its text block's ``raw``. Pings and unknown event
    or delta types are skipped (the API may add them); an ``error`` event
    raises ``LLMApiError``. A block still open at ``message_stop`` is closed
    there and returned with that event.
    """

    __slots__ = ("_blocks", "_label", "_message", "_open", "_stop", "_stopped", "_usage")

    def __init__(self, label: str = "the Messages API") -> None:
        self._label = label
        self._message: _StartMessage | None = None
        self._open: dict[int, _OpenBlock] = {}
        self._blocks: dict[int, Block] = {}
        self._stop: _DeltaBody | None = None
        self._usage: dict[str, int | None] = {}
        self._stopped = False

    @property
    def finished(self) -> bool:
        """Whether ``message_stop`` has arrived."""
        return self._stopped

    def feed(self, event: str, data: str | bytes) -> list[Block]:
        """Apply one event; the blocks it completed, in order."""
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
            if self._message is not None:
                raise LLMBadResponse(self._label, "streamed a second message_start", data)
            self._message = parsed.message
            self._usage = {f: getattr(parsed.message.usage, f) for f in _Usage.__struct_fields__}
            return []
        if self._message is None:
            raise LLMBadResponse(self._label, f"streamed {event} before message_start", data)
        if isinstance(parsed, _BlockDelta):
            self._delta(parsed, data)
            return []
        if isinstance(parsed, _BlockStart):
            if parsed.index in self._open or parsed.index in self._blocks:
                raise LLMBadResponse(self._label, f"started block {parsed.index} twice", data)
            self._open[parsed.index] = _OpenBlock(parsed.content_block)
            return []
        if isinstance(parsed, _BlockStop):
            block = self._open.pop(parsed.index, None)
            if block is None:
                raise LLMBadResponse(
                    self._label, f"stopped block {parsed.index}, which is not open", data
                )
            done = decode_block(block.close(self._label), self._label)
            self._blocks[parsed.index] = done
            return [done]
        assert isinstance(parsed, _MessageDelta)
        self._stop = parsed.delta
        usage = parsed.usage
        self._usage["output_tokens"] = usage.output_tokens
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            value = getattr(usage, name)
            if value is not None:  # counts are cumulative; an omitted one keeps its start value
                self._usage[name] = value
        return []

    def feed_frames(self, frames: Iterable[tuple[bytes, bytes]]) -> Iterator[Block]:
        """:meth:`feed` for each ``(event, data)`` pair of UTF-8 bytes (as
        :meth:`SSEDecoder.feed_frames <vaelii_llm.wire.sse.SSEDecoder.feed_frames>`
        hands them over), yielding each block as it completes: the blocks
        before a refused event are handed over before the refusal.

        The streamed path: a ``content_block_delta`` (nearly every event of a
        turn) is decoded from the bytes and applied here, in one step; any
        other event goes through :meth:`feed`, so both apply the same rules.
        """
        decode = _DELTA_DECODER.decode
        opened = self._open
        live = not self._stopped and self._message is not None
        for event, data in frames:
            if not live or event != b"content_block_delta":
                yield from self.feed(event.decode(), data)
                live = not self._stopped and self._message is not None
                continue
            try:
                parsed = decode(data)
            except Exception as exc:
                raise LLMBadResponse(
                    self._label, "streamed a content_block_delta event that will not parse", data
                ) from exc
            block = opened.get(parsed.index)
            delta = parsed.delta
            if block is not None and delta.type == "text_delta" and block.kind == "text":
                text = delta.text
                if type(text) is str:  # else _delta refuses it
                    block.text.append(text)
                    continue
            self._delta(parsed, data)

    def _delta(self, parsed: _BlockDelta, data: str | bytes) -> None:
        block = self._open.get(parsed.index)
        if block is None:
            raise LLMBadResponse(
                self._label, f"streamed a delta for block {parsed.index}, which is not open", data
            )
        delta = parsed.delta
        kind = delta.type
        block_type = block.kind
        if kind == "text_delta":
            if block_type == "text":
                block.text.append(self._str(delta, delta.text, "text", data))
        elif kind == "input_json_delta":
            block.json.append(self._str(delta, delta.partial_json, "partial_json", data))
        elif kind == "thinking_delta":
            if block_type == "thinking":
                block.thinking.append(self._str(delta, delta.thinking, "thinking", data))
        elif kind == "signature_delta":
            if block_type == "thinking":
                block.signature = self._str(delta, delta.signature, "signature", data)
        elif kind == "citations_delta" and block_type == "text":
            block.citations.append(delta.citation)
        # any other delta type: added by a later API version; skipped

    def _str(self, delta: _Delta, value: Any, key: str, data: str | bytes) -> str:
        if not isinstance(value, str):
            raise LLMBadResponse(
                self._label, f"streamed a {delta.type} with no {key!r} string", data
            )
        return value

    def _finish(self) -> list[Block]:
        if self._message is None:
            raise LLMBadResponse(self._label, "streamed message_stop before message_start")
        self._stopped = True
        closed: list[Block] = []
        for index in sorted(self._open):
            done = decode_block(self._open.pop(index).close(self._label), self._label)
            self._blocks[index] = done
            closed.append(done)
        return closed

    def result(self) -> Response:
        """The whole turn. Before ``message_stop`` it is an ``LLMBadResponse``:
        the stream was cut short."""
        if not self._stopped or self._message is None:
            raise LLMBadResponse(self._label, "ended the stream without message_stop")
        start = self._message
        stop = self._stop or _DeltaBody(
            stop_reason=start.stop_reason,
            stop_sequence=start.stop_sequence,
            stop_details=start.stop_details,
        )
        return Response(
            content=[self._blocks[i] for i in sorted(self._blocks)],
            stop_reason=stop.stop_reason,
            model=start.model,
            id=start.id,
            stop_sequence=stop.stop_sequence,
            stop_details=stop.stop_details,
            usage=Usage(**self._usage),
        )


# ---------------------------------------------------------------------------
# the provider (I/O through transport.py)


class AnthropicProvider(ProviderBase):
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
        self._base_url = config.anthropic_base_url(base_url)
        self._url = self._base_url + MESSAGES_PATH
        # A gateway URL may carry user:password; it names the far end with them cut.
        self._shown_url = config.hide_userinfo(self._base_url)
        self._model = model or DEFAULT_MODEL
        self._effort = effort or DEFAULT_EFFORT
        self._extra_headers = dict(headers or {})
        self.endpoint = transport.Endpoint(
            label=f"the Messages API at {self._shown_url}", slug="anthropic"
        )
        self._credential: Credential | None = credentials.resolve_now(credential)
        self._lookup = asyncio.Lock()
        self._failed_lookups = 0
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"AnthropicProvider(base_url={self._shown_url!r}, model={self._model!r}, "
            f"effort={self._effort!r})"
        )

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        """Close the provider's session; a closed provider refuses further turns
        (RuntimeError), as the Ollama provider does. Closing twice is harmless."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _session_now(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("this Messages API provider is closed")
        if self._session is None or self._session.closed:
            self._session = transport.create_session(
                {
                    "anthropic-version": API_VERSION,
                    "content-type": "application/json",
                    **self._extra_headers,
                }
            )
        return self._session

    async def credential(self) -> Credential:
        """The credential turns send, resolving it (once) when the provider
        was built without one. Raises ``LLMNoCredential`` when there is none."""
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

    def _prepare(self, request: Request, stream: bool) -> bytes:
        body = build_body(
            request,
            model=self._model,
            effort=self._effort,
            stream=stream,
            label=self.endpoint.label,
        )
        return msgspec.json.encode(body)

    async def _headers(self, request: Request, accept: str) -> dict[str, str]:
        cred = await self.credential()
        headers = cred.headers()
        headers["accept"] = accept
        wanted = betas(request, cred)
        if wanted:
            headers["anthropic-beta"] = ",".join(wanted)
        return headers

    async def complete(self, request: Request) -> Response:
        body = self._prepare(request, stream=False)
        headers = await self._headers(request, "application/json")
        deadline = transport.Deadline.after_ms(request.timeout_ms)
        parsed = await transport.request_json(
            self._session_now(),
            self.endpoint,
            "POST",
            self._url,
            deadline=deadline,
            decoder=_BODY_DECODER,
            body=body,
            headers=headers,
        )
        return _from_parsed(parsed, self.endpoint.label)

    async def stream(self, request: Request) -> AsyncGenerator[StreamItem, None]:
        body = self._prepare(request, stream=True)
        headers = await self._headers(request, "text/event-stream")
        deadline = transport.Deadline.after_ms(request.timeout_ms)
        label = self.endpoint.label
        frames = SSEDecoder(label)
        assembler = StreamAssembler(label)
        async with transport.open_stream(
            self._session_now(),
            self.endpoint,
            "POST",
            self._url,
            deadline=deadline,
            body=body,
            headers=headers,
        ) as chunks:
            opening: bytearray | None = bytearray()  # kept until the first event
            async for chunk in chunks:
                events = frames.feed_frames(chunk)
                if opening is not None:
                    if events:
                        opening = None
                    elif len(opening) < _NOT_SSE_KEPT:
                        opening += chunk[: _NOT_SSE_KEPT - len(opening)]
                for block in assembler.feed_frames(events):
                    yield block
                if assembler.finished:
                    await transport.drain(chunks, _DRAIN_S)
                    break
        if opening:
            raise _not_sse(bytes(opening), label)
        yield assembler.result()


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
