"""The local backend: Ollama's chat API (``/api/chat``), plus the host probes.

What differs from the Messages API backend is the transport, not the protocol:

* No credential: :func:`available` is a reachability probe (``/api/version``
  under a two-second whole-request deadline), so this backend can be tested end
  to end against a real model.
* The context length is the caller's to set, per request, as
  ``options.num_ctx`` (default ``VAELII_OLLAMA_NUM_CTX``). Nothing here
  truncates; the caller sizes the prompt first.
* ``options.temperature`` defaults to 0 so an answer is reproducible;
  ``options.num_predict`` carries ``max_tokens``; ``format`` carries the
  request's JSON schema, which the sampler is constrained to.
* ``keep_alive`` is always sent (``VAELII_OLLAMA_KEEP_ALIVE``, ``30m``): model
  load is most of a cold local turn, and the host's own 5-minute default evicts
  the model between one question and the next.
* Streaming is newline-delimited JSON: one object per chunk carrying a delta,
  the last carrying ``done: true`` and the run's counts and durations.
  :meth:`OllamaProvider.stream` reassembles it into the same :class:`Response`
  :meth:`OllamaProvider.complete` returns; both run through one
  :class:`ChatAssembler`. A stream that ends without ``done: true`` is
  :class:`~vaelii_llm.errors.LLMBadResponse`. A streamed line that only
  continues the open text or thinking run is read for its message alone
  (:meth:`ChatAssembler.feed_lines`). With ``deltas=True`` each
  chunk's text or thinking is also yielded as a
  :class:`~vaelii_llm._protocol.TextDelta` or
  :class:`~vaelii_llm._protocol.ThinkingDelta`, and a
  :class:`~vaelii_llm._protocol.ToolUseStart` comes just before each tool call
  (Ollama sends a call whole, in one chunk).
* An ``error`` field in a 200 body or in a streamed chunk is
  :class:`~vaelii_llm.errors.LLMApiError`, as a failing status is.
* Tools are re-shaped to ``{type: "function", function: {name, description,
  parameters}}`` with ``strict`` dropped; a tool result goes back as a ``tool``
  role message naming its tool. A tool call with no id gets ``call_<n>``, its
  position in the turn counted across a streamed turn's chunks.
* ``stop_reason`` is neutral (:func:`stop_reason`); Ollama's ``done_reason``
  stays on ``Response.vendor_stop_reason``:

  ================  ==================  ===================================
  ``done_reason``   tool calls?         ``stop_reason``
  ================  ==================  ===================================
  ``stop``          yes                 ``tool_use``
  ``stop``          no                  ``end_turn`` (a stop sequence too:
                                        Ollama does not tell them apart)
  ``length``        either              ``max_tokens`` (a cut turn's calls
                                        are not to be run)
  any other word    yes / no            ``tool_use`` / ``end_turn``
  (``load``…)
  none sent         either              None
  ================  ==================  ===================================

* ``usage.input_tokens`` and ``usage.output_tokens`` are the host's
  ``prompt_eval_count`` and ``eval_count``, which stay beside them with the
  durations (ns).
* Prose carries no block JSON on this wire, so text and thinking blocks have
  ``raw=None``; a tool call keeps its original object in ``raw`` and is sent
  back as it came.

The session, the closed state, the turn and the stream pump are the shared
skeleton's (:mod:`vaelii_llm.providers._http`); this module is the codec
(:class:`ChatCodec`) and the probes. The probes (:func:`version`,
:func:`capabilities`, :func:`supports_tools`, :func:`context_length`,
:func:`warm`) send on the one shared probe session of the running loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal

import msgspec

from vaelii_llm import _transport as transport
from vaelii_llm import config, errors, telemetry
from vaelii_llm._protocol import (
    Block,
    Message,
    Request,
    Response,
    StopReason,
    StreamItem,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolResultBlock,
    ToolSchema,
    ToolUseBlock,
    ToolUseStart,
    Usage,
    nearest_stop_reason,
)
from vaelii_llm._wire.ndjson import NDJSONDecoder, refuse_line
from vaelii_llm.providers._hosts import normalize_host
from vaelii_llm.providers._http import HTTPProvider

__all__ = [
    "SHOW_TIMEOUT_MS",
    "VERSION_TIMEOUT_MS",
    "WARM_TIMEOUT_MS",
    "ChatAssembler",
    "ChatChunk",
    "ChatCodec",
    "OllamaProvider",
    "ShowResponse",
    "available",
    "base_url",
    "capabilities",
    "chat_body",
    "context_length",
    "decode_chunk",
    "endpoint",
    "generation_provider",
    "normalize_host",
    "provider",
    "show",
    "stop_reason",
    "supports_tools",
    "version",
    "warm",
]

VERSION_TIMEOUT_MS: Final = 2_000
"""The version probe's whole-request deadline, connection included."""

SHOW_TIMEOUT_MS: Final = 10_000
"""``/api/show`` reads a model's metadata from disk; a loaded host answers in
milliseconds, a busy one in a few seconds."""

WARM_TIMEOUT_MS: Final = 300_000
"""A cold load of a 30B model from disk can take minutes."""


# --------------------------------------------------------------------------
# Hosts


def base_url(host: str | None = None) -> str:
    """The Ollama base URL for ``host``: the argument, else ``VAELII_OLLAMA_HOST``,
    else ``OLLAMA_HOST`` unless it names a bind address (``0.0.0.0``, ``::``,
    ``*``), else ``http://localhost:11434``; read as Ollama reads a host
    (:func:`normalize_host`). Raises ValueError for a host that names none."""
    return normalize_host(config.ollama_host(host))


def endpoint(url: str) -> transport.Endpoint:
    """How the host at base URL ``url`` is named in messages."""
    return transport.Endpoint(label=f"Ollama at {url}", slug="ollama")


# --------------------------------------------------------------------------
# The request on the wire


class _FunctionSpec(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]


class _Tool(msgspec.Struct, frozen=True):
    type: str
    function: _FunctionSpec


class _OutMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str
    content: str
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_name: str | None = None


class _Options(msgspec.Struct, frozen=True, omit_defaults=True):
    num_ctx: int
    temperature: float
    num_predict: int | None = None
    stop: list[str] | None = None


class _ChatRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    messages: list[_OutMessage]
    stream: bool
    keep_alive: str
    options: _Options
    tools: list[_Tool] | None = None
    format: dict[str, Any] | None = None


_ENCODER: Final = msgspec.json.Encoder()


def _wire_tool(tool: ToolSchema) -> _Tool:
    spec = _FunctionSpec(name=tool.name, description=tool.description, parameters=tool.input_schema)
    return _Tool(type="function", function=spec)


def _tool_call(block: ToolUseBlock) -> dict[str, Any]:
    """The call as Ollama sent it when it came from Ollama (its ``raw`` has a
    ``function``), else built from the block: a call another vendor made
    carries that vendor's JSON in ``raw``, which this wire cannot read."""
    if block.raw is not None and isinstance(block.raw.get("function"), dict):
        return block.raw
    return {"function": {"name": block.name, "arguments": block.input}}


def _assistant_message(blocks: Iterable[Block], label: str) -> _OutMessage:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            thoughts.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            calls.append(_tool_call(block))
        else:
            raise errors.LLMEncode(block.type, label)
    return _OutMessage(
        role="assistant",
        content="".join(texts),
        thinking="".join(thoughts) or None,
        tool_calls=calls or None,
    )


def _messages(request: Request, label: str) -> list[_OutMessage]:
    out: list[_OutMessage] = []
    if request.system:
        out.append(_OutMessage(role="system", content=request.system))
    tool_names: dict[str, str] = {}
    for message in request.messages:
        out.extend(_message(message, tool_names, label))
    return out


def _message(message: Message, tool_names: dict[str, str], label: str) -> list[_OutMessage]:
    if isinstance(message.content, str):
        return [_OutMessage(role=message.role, content=message.content)]
    if message.role == "assistant":
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                tool_names[block.id] = block.name
        return [_assistant_message(message.content, label)]
    out: list[_OutMessage] = []
    texts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            if texts:
                out.append(_OutMessage(role="user", content="".join(texts)))
                texts = []
            out.append(
                _OutMessage(
                    role="tool",
                    content=block.content,
                    tool_name=tool_names.get(block.tool_use_id),
                )
            )
        else:
            raise errors.LLMEncode(block.type, label)
    if texts or not out:
        out.append(_OutMessage(role="user", content="".join(texts)))
    return out


def chat_body(
    request: Request,
    *,
    model: str,
    num_ctx: int,
    keep_alive: str,
    stream: bool,
    label: str = "Ollama",
) -> bytes:
    """The ``/api/chat`` body for ``request`` (``model``, ``num_ctx`` and
    ``keep_alive`` already resolved; the request's own values win).

    ``keep_alive``, ``options.num_ctx``, ``options.num_predict`` and
    ``options.temperature`` (0 unless the request names one) are always sent;
    ``tools``, ``format`` and ``options.stop`` only when the request has them.
    Raises :class:`~vaelii_llm.errors.LLMEncode` for a block this wire has no
    shape for (redacted thinking, a vendor's opaque block, a tool result in an
    assistant message).
    """
    options = _Options(
        num_ctx=request.num_ctx if request.num_ctx is not None else num_ctx,
        temperature=request.temperature if request.temperature is not None else 0.0,
        num_predict=request.max_tokens,
        stop=list(request.stop_sequences) or None,
    )
    body = _ChatRequest(
        model=request.model or model,
        messages=_messages(request, label),
        stream=stream,
        keep_alive=request.keep_alive or keep_alive,
        options=options,
        tools=[_wire_tool(t) for t in request.tools] or None,
        format=request.format,
    )
    return _ENCODER.encode(body)


# --------------------------------------------------------------------------
# The response on the wire


class _ToolFunction(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any] = {}


class _ToolCall(msgspec.Struct, frozen=True):
    function: _ToolFunction
    id: str | None = None


class _InMessage(msgspec.Struct, frozen=True, gc=False):
    content: str = ""
    thinking: str = ""
    tool_calls: tuple[msgspec.Raw, ...] | None = None


class ChatChunk(msgspec.Struct, frozen=True, gc=False):
    """One ``/api/chat`` object: a streamed chunk, or the whole non-streamed answer.

    Fields Ollama sends that the protocol has no place for (``created_at``,
    ``logprobs``…) are skipped by the decoder.

    Frozen, and every field immutable, so no chunk can be part of a reference
    cycle: the garbage collector need not track them (``gc=False``), which
    spares a streamed turn's tens of thousands of chunks its scans.
    """

    model: str | None = None
    message: _InMessage | None = None
    done: bool = False
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None
    error: str | None = None


CHUNK_DECODER: Final = msgspec.json.Decoder(ChatChunk)
_TOOL_CALL_DECODER: Final = msgspec.json.Decoder(_ToolCall)
_RAW_DECODER: Final = msgspec.json.Decoder(dict[str, Any])


class _TextPiece(
    msgspec.Struct, frozen=True, gc=False, rename={"piece": "content", "other": "thinking"}
):
    """A message that only continues a text run: text, no thinking, no tool call."""

    piece: str = ""
    other: Literal[""] = ""
    tool_calls: None = None


class _ThinkingPiece(
    msgspec.Struct, frozen=True, gc=False, rename={"piece": "thinking", "other": "content"}
):
    """A message that only continues a thinking run: thinking, no text, no tool call."""

    piece: str = ""
    other: Literal[""] = ""
    tool_calls: None = None


class _TextLine(msgspec.Struct, frozen=True, gc=False):
    """A streamed line that only continues the open text run: not done, no error."""

    message: _TextPiece
    done: Literal[False] = False
    error: None = None


class _ThinkingLine(msgspec.Struct, frozen=True, gc=False):
    """:class:`_TextLine` for a thinking run."""

    message: _ThinkingPiece
    done: Literal[False] = False
    error: None = None


_CONTINUATION_DECODERS: Final[dict[str | None, msgspec.json.Decoder[Any]]] = {
    "text": msgspec.json.Decoder(_TextLine),
    "thinking": msgspec.json.Decoder(_ThinkingLine),
}
"""Per open run, the decoder of a line that only continues it (see
:meth:`ChatAssembler.feed_lines`): a line it refuses is no plain continuation
and is decoded whole."""


def decode_chunk(data: bytes, ep: transport.Endpoint) -> ChatChunk:
    """One chat object from ``data``; anything that will not decode is
    :class:`~vaelii_llm.errors.LLMBadResponse` with an excerpt."""
    return transport.decode_json(data, ep, CHUNK_DECODER)


_STOP_REASONS: Final[dict[str, StopReason]] = {"stop": "end_turn", "length": "max_tokens"}


def stop_reason(done_reason: str | None, called_tools: bool) -> StopReason | None:
    """The neutral stop reason for Ollama's ``done_reason`` (the table in the
    module docstring): a turn that called tools is ``tool_use`` unless it was
    cut (``length``); an unknown word is the nearest, ``tool_use`` or
    ``end_turn``; no word at all is None."""
    if done_reason is None:
        return None
    neutral = _STOP_REASONS.get(done_reason)
    if neutral == "max_tokens":
        return neutral
    return nearest_stop_reason(called_tools)


class ChatAssembler:
    """Sans-IO reassembly of a chat turn from its decoded objects.

    :meth:`feed` takes one :class:`ChatChunk` and returns what it completed:
    a run of thinking or of text closes when the other kind, a tool call, or
    ``done: true`` arrives; a tool call is whole in its chunk. With
    ``deltas`` each piece of text or thinking is also handed back as it
    arrives, and a :class:`~vaelii_llm._protocol.ToolUseStart` before each tool
    call (``index``: the block's position in the final content).
    :meth:`feed_batch` does the same for a decoder's batch, and
    :meth:`feed_lines` for undecoded lines (the streamed path); :attr:`finished`
    says ``done: true`` has arrived; :meth:`result` returns the final
    :class:`Response` (every block, in order).

    A non-streamed answer is one chunk with ``done: true``, so ``complete`` and
    ``stream`` share this path and return equal responses. An ``error`` field is
    :class:`~vaelii_llm.errors.LLMApiError` (status 200); a chunk after
    ``done: true``, a tool call that will not decode, or an end with no
    ``done: true`` is :class:`~vaelii_llm.errors.LLMBadResponse`.
    """

    __slots__ = (
        "_blocks",
        "_calls",
        "_deltas",
        "_done",
        "_label",
        "_model",
        "_open",
        "_out",
        "_parts",
        "_response",
    )

    def __init__(self, label: str = "Ollama", *, deltas: bool = False) -> None:
        self._label = label
        self._deltas = deltas
        self._blocks: list[Block] = []
        self._open: str | None = None
        self._parts: list[str] = []
        self._calls = 0
        self._model: str | None = None
        self._done = False
        self._response: Response | None = None
        self._out: list[StreamItem] = []  # with deltas: what this feed hands back, in order

    @property
    def finished(self) -> bool:
        """Whether ``done: true`` has arrived."""
        return self._done

    def feed(self, chunk: ChatChunk) -> list[StreamItem]:
        """What ``chunk`` completes, in order: the blocks it closes (and, with
        deltas, its pieces and tool-call starts)."""
        if chunk.error is not None:
            raise errors.LLMApiError(self._label, 200, chunk.error)
        if self._done:
            raise errors.LLMBadResponse(self._label, "sent a chunk after done: true")
        if self._model is None:
            self._model = chunk.model
        start = len(self._blocks)
        message = chunk.message
        if message is not None:
            if message.thinking:
                self._append("thinking", message.thinking)
            if message.content:
                self._append("text", message.content)
            if message.tool_calls:
                self._close()
                for raw in message.tool_calls:
                    block = self._tool_use(raw)
                    if self._deltas:
                        self._out.append(
                            ToolUseStart(index=len(self._blocks), id=block.id, name=block.name)
                        )
                        self._out.append(block)
                    self._blocks.append(block)
        if chunk.done:
            self._close()
            self._done = True
            self._response = Response(
                content=self._blocks,
                stop_reason=stop_reason(chunk.done_reason, self._calls > 0),
                vendor_stop_reason=chunk.done_reason,
                model=chunk.model or self._model,
                usage=Usage(
                    input_tokens=chunk.prompt_eval_count,
                    output_tokens=chunk.eval_count,
                    prompt_eval_count=chunk.prompt_eval_count,
                    eval_count=chunk.eval_count,
                    total_duration=chunk.total_duration,
                    load_duration=chunk.load_duration,
                    prompt_eval_duration=chunk.prompt_eval_duration,
                    eval_duration=chunk.eval_duration,
                ),
            )
        if self._deltas:
            out, self._out = self._out, []
            return out
        return list(self._blocks[start:])

    def feed_batch(self, chunks: Iterable[ChatChunk]) -> Iterator[StreamItem]:
        """:meth:`feed` each chunk, yielding as it goes: what came before a
        refused chunk is handed over before the refusal.

        A chunk that only continues the open run of text or thinking (nearly
        every chunk of a turn) is appended here, in one step; any other goes
        through :meth:`feed`, so both apply the same rules.
        """
        parts = self._parts
        run = self._open
        quick = self._model is not None and not self._done
        deltas = self._deltas
        for chunk in chunks:
            message = chunk.message
            if (
                quick
                and message is not None
                and chunk.error is None
                and not chunk.done
                and not message.tool_calls
            ):
                thinking = message.thinking
                content = message.content
                if not thinking:
                    if not content:
                        continue
                    if run == "text":
                        parts.append(content)
                        if deltas:
                            yield TextDelta(index=len(self._blocks), text=content)
                        continue
                elif not content and run == "thinking":
                    parts.append(thinking)
                    if deltas:
                        yield ThinkingDelta(index=len(self._blocks), thinking=thinking)
                    continue
            yield from self.feed(chunk)
            parts = self._parts
            run = self._open
            quick = self._model is not None and not self._done

    def feed_lines(self, lines: Iterable[bytes]) -> Iterator[StreamItem]:
        """:meth:`feed_batch` for a stream's undecoded lines (as
        :meth:`NDJSONDecoder.feed_lines <vaelii_llm._wire.ndjson.NDJSONDecoder.feed_lines>`
        hands them over), each applied before the next is decoded: one pass,
        no chunk outliving its line (a turn's tens of thousands are never
        held at once).

        A line is decoded whole, as :data:`CHUNK_DECODER` decodes it, and
        under the decoder's rules (an empty line skipped, any other that will
        not decode left to :func:`~vaelii_llm._wire.ndjson.refuse_line`: a
        blank one skipped, else refused), except a line that only continues
        the open run, which is nearly every line of a turn. That one is read
        by a decoder whose types admit nothing else (a message of the run's
        kind only, no tool call, not done, no error; any other line fails it
        and is decoded whole), so its piece is appended with no test in
        Python. Such a line is read for its message alone: a model,
        ``done_reason``, count or duration on it is not used (the model is
        the first line's, the rest the last line's), so it is not read, as
        ``created_at`` never is.
        """
        decode_whole = CHUNK_DECODER.decode
        label = self._label
        deltas = self._deltas
        rest = iter(lines)
        while True:
            run = self._open
            if run is not None and self._model is not None:
                decode = _CONTINUATION_DECODERS[run].decode
                append = self._parts.append
                index = len(self._blocks)
                for line in rest:
                    try:
                        piece: str = decode(line).message.piece
                    except Exception:  # no plain continuation: decoded whole below
                        break
                    if piece:
                        append(piece)
                        if deltas:
                            yield (
                                TextDelta(index=index, text=piece)
                                if run == "text"
                                else ThinkingDelta(index=index, thinking=piece)
                            )
                else:
                    return
            else:
                next_line = next(rest, None)
                if next_line is None:
                    return
                line = next_line
            try:
                chunk = decode_whole(line)
            except Exception as exc:  # a hostile line may raise anything
                if line:  # an empty line is skipped; refuse_line skips a blank one
                    refuse_line(label, line, exc)
                continue
            yield from self.feed(chunk)

    def result(self) -> Response:
        """The whole turn; LLMBadResponse when ``done: true`` never came."""
        if self._response is None:
            raise errors.LLMBadResponse(self._label, "ended the stream without done: true")
        return self._response

    def _append(self, kind: str, text: str) -> None:
        if self._open != kind:
            self._close()
            self._open = kind
        self._parts.append(text)
        if self._deltas:
            index = len(self._blocks)
            self._out.append(
                ThinkingDelta(index=index, thinking=text)
                if kind == "thinking"
                else TextDelta(index=index, text=text)
            )

    def _close(self) -> None:
        if self._open is None:
            return
        text = "".join(self._parts)
        block: Block = (
            ThinkingBlock(thinking=text) if self._open == "thinking" else TextBlock(text=text)
        )
        self._blocks.append(block)
        if self._deltas:
            self._out.append(block)
        self._open = None
        self._parts = []

    def _tool_use(self, raw: msgspec.Raw) -> ToolUseBlock:
        try:
            call = _TOOL_CALL_DECODER.decode(raw)
            original = _RAW_DECODER.decode(raw)
        except Exception as exc:
            raise errors.LLMBadResponse(
                self._label, "sent a tool call that will not decode", bytes(raw)
            ) from exc
        position = self._calls
        self._calls += 1
        return ToolUseBlock(
            id=call.id or f"call_{position}",
            name=call.function.name,
            input=call.function.arguments,
            raw=original,
        )


def _whole(chunk: ChatChunk, label: str) -> Response:
    """The Response of a non-streamed answer (one chunk, ``done: true``)."""
    assembler = ChatAssembler(label)
    assembler.feed(chunk)
    return assembler.result()


# --------------------------------------------------------------------------
# The provider


class ChatCodec:
    """``/api/chat`` as the shared HTTP skeleton drives it (no I/O here)."""

    whole_decoder: Final = CHUNK_DECODER

    def __init__(
        self,
        url: str,
        model: str,
        num_ctx: int | None,
        keep_alive: str | None,
        headers: Mapping[str, str],
    ) -> None:
        self.endpoint = endpoint(url)
        self.url = url + "/api/chat"
        self.model = model
        # Read once, when the provider is built: the environment is read per
        # process, not per turn (each read costs a small turn a few percent).
        self._num_ctx = config.ollama_num_ctx(num_ctx)
        self._keep_alive = config.ollama_keep_alive(keep_alive)
        self._headers = transport.with_json_content_type(headers)

    def session_headers(self) -> Mapping[str, str]:
        return self._headers

    def body(self, request: Request, *, stream: bool) -> bytes:
        return chat_body(
            request,
            model=self.model,
            num_ctx=self._num_ctx,
            keep_alive=self._keep_alive,
            stream=stream,
            label=self.endpoint.label,
        )

    async def headers(self, request: Request, *, stream: bool) -> None:
        return None

    def whole(self, parsed: ChatChunk) -> Response:
        return _whole(parsed, self.endpoint.label)

    def stream_decoder(self) -> _Lines:
        return _Lines(NDJSONDecoder(CHUNK_DECODER, self.endpoint.label))

    def assembler(self, *, deltas: bool) -> _LineAssembler:
        return _LineAssembler(ChatAssembler(self.endpoint.label, deltas=deltas))


class _Lines:
    """The stream's decoder as the skeleton feeds it: whole lines, undecoded
    (:meth:`~vaelii_llm._wire.ndjson.NDJSONDecoder.feed_lines`), so that each
    is decoded where it is applied, in one pass."""

    __slots__ = ("_wire",)

    def __init__(self, wire: NDJSONDecoder[ChatChunk]) -> None:
        self._wire = wire

    def feed(self, data: bytes) -> list[bytes]:
        return self._wire.feed_lines(data)


class _LineAssembler:
    """A :class:`ChatAssembler` as the skeleton drives it: a batch is lines
    (:meth:`ChatAssembler.feed_lines`)."""

    __slots__ = ("_assembler",)

    def __init__(self, assembler: ChatAssembler) -> None:
        self._assembler = assembler

    @property
    def finished(self) -> bool:
        return self._assembler.finished

    def feed_batch(self, lines: list[bytes]) -> Iterator[StreamItem]:
        return self._assembler.feed_lines(lines)

    def result(self) -> Response:
        return self._assembler.result()


class OllamaProvider(HTTPProvider[ChatChunk, list[bytes]]):
    """A provider on one Ollama host and model. Build it with :func:`provider`.

    Concurrent turns share the provider's connection pool. ``stream`` releases
    its HTTP response when the caller stops early; iterate it under
    ``contextlib.aclosing`` so that happens at once.
    """

    def __init__(
        self,
        *,
        host: str | None = None,
        model: str | None = None,
        num_ctx: int | None = None,
        keep_alive: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url(host)
        self.model = config.ollama_model(model)
        super().__init__(ChatCodec(self.base_url, self.model, num_ctx, keep_alive, headers or {}))

    def __repr__(self) -> str:
        return f"OllamaProvider(base_url={self.base_url!r}, model={self.model!r})"


def provider(
    *,
    host: str | None = None,
    model: str | None = None,
    num_ctx: int | None = None,
    keep_alive: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> OllamaProvider:
    """A provider on ``host`` (see :func:`base_url`) running ``model``
    (default ``VAELII_OLLAMA_MODEL``, ``phi4:14b``). No I/O happens here.

    ``num_ctx`` and ``keep_alive`` are this provider's defaults for a request
    naming none; unset, ``VAELII_OLLAMA_NUM_CTX`` and
    ``VAELII_OLLAMA_KEEP_ALIVE`` are read when the provider is built.
    ``headers`` are sent on every turn (a gateway's or proxy's own) and never
    logged or shown. Raises ValueError for
    a host that names none.
    """
    built = OllamaProvider(
        host=host, model=model, num_ctx=num_ctx, keep_alive=keep_alive, headers=headers
    )
    return telemetry.instrument(built, "ollama", url=built.base_url)


def generation_provider(
    *,
    host: str | None = None,
    model: str | None = None,
    num_ctx: int | None = None,
    keep_alive: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> OllamaProvider:
    """:func:`provider` on the generation model (``VAELII_OLLAMA_GENERATION_MODEL``,
    ``qwen3-coder:30b``) unless ``model`` names another."""
    built = OllamaProvider(
        host=host,
        model=config.ollama_generation_model(model),
        num_ctx=num_ctx,
        keep_alive=keep_alive,
        headers=headers,
    )
    return telemetry.instrument(built, "ollama", url=built.base_url)


# --------------------------------------------------------------------------
# Probes


class _Version(msgspec.Struct, frozen=True):
    version: str


class ShowResponse(msgspec.Struct, frozen=True):
    """What ``/api/show`` answers that the probes read."""

    capabilities: list[str] = []
    model_info: dict[str, Any] = {}
    parameters: str | None = None


class _ShowRequest(msgspec.Struct, frozen=True):
    model: str


_VERSION_DECODER: Final = msgspec.json.Decoder(_Version)
_SHOW_DECODER: Final = msgspec.json.Decoder(ShowResponse)


async def version(host: str | None = None, *, timeout_ms: int = VERSION_TIMEOUT_MS) -> str:
    """The host's Ollama version (``/api/version``), under a whole-request
    deadline of ``timeout_ms``. Raises the typed error when it cannot answer."""
    url = base_url(host)
    answer = await transport.request_json(
        transport.probe_session(),
        endpoint(url),
        "GET",
        url + "/api/version",
        deadline=transport.Deadline.after_ms(timeout_ms),
        decoder=_VERSION_DECODER,
    )
    return answer.version


async def available(host: str | None = None) -> bool:
    """Whether an Ollama answers at ``host`` within two seconds. Never raises
    for an unreachable, slow, wrong or malformed host: it answers False."""
    try:
        await version(host)
    except (errors.LLMError, ValueError):
        return False
    return True


async def show(
    model: str | None = None, host: str | None = None, *, timeout_ms: int = SHOW_TIMEOUT_MS
) -> ShowResponse:
    """``/api/show`` for ``model`` (default ``VAELII_OLLAMA_MODEL``). An unknown
    model is the host's 404, :class:`~vaelii_llm.errors.LLMApiError`."""
    url = base_url(host)
    return await transport.request_json(
        transport.probe_session(),
        endpoint(url),
        "POST",
        url + "/api/show",
        deadline=transport.Deadline.after_ms(timeout_ms),
        decoder=_SHOW_DECODER,
        body=_ENCODER.encode(_ShowRequest(model=config.ollama_model(model))),
    )


async def capabilities(model: str | None = None, host: str | None = None) -> frozenset[str]:
    """What ``model`` can do, as the host reports it (``{"completion", "tools"}``).
    Raises the typed error when the host cannot answer."""
    return frozenset((await show(model, host)).capabilities)


async def supports_tools(model: str | None = None, host: str | None = None) -> bool:
    """Whether ``model`` has the ``tools`` capability. Ask before sending tools:
    a model without it has no tools section in its chat template, and the
    schemas only spend its context length. False for an unreachable host too,
    since a wrong yes spends that context length."""
    try:
        return "tools" in await capabilities(model, host)
    except (errors.LLMError, ValueError):
        return False


async def context_length(model: str | None = None, host: str | None = None) -> int | None:
    """The context length ``model`` was trained for (``<arch>.context_length``
    in ``model_info``), or None when the host does not say. This is the
    ceiling, not what a request asks for: that is ``num_ctx``."""
    info = (await show(model, host)).model_info
    arch = info.get("general.architecture")
    keys = [f"{arch}.context_length"] if isinstance(arch, str) else []
    keys += sorted(k for k in info if k.endswith(".context_length"))
    for key in keys:
        value = info.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


_PREFILL_SENTENCE: Final = (
    "The quick brown fox jumps over the lazy dog while the knowledge base "
    "records that every spider is an arachnid and no arachnid is an insect. "
)


def _prefill(num_ctx: int) -> str:
    """Roughly a quarter of ``num_ctx`` tokens of ordinary prose (about 30
    tokens per sentence): the size of a real turn's prompt, so the first real
    turn finds its buffers allocated."""
    sentences = max(1, num_ctx // 4 // 30)
    return _PREFILL_SENTENCE * sentences


async def warm(
    host: str | None = None,
    model: str | None = None,
    num_ctx: int | None = None,
    keep_alive: str | None = None,
    *,
    timeout_ms: int = WARM_TIMEOUT_MS,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Load ``model`` (default: the generation model) and hold it resident.

    Sends a prefill of realistic size at the configured context length and
    generates one token; Ollama keys a loaded model by its ``num_ctx``, so a
    warm-up at any other length would be evicted by the first real turn.
    Returns that turn (its ``usage.load_duration`` tells a cold load from a
    warm one). Raises the typed error when the host cannot do it: a caller
    asking for a resident model wants to know it is not there. ``headers``
    are sent with it, as a provider sends its own.
    """
    url = base_url(host)
    ctx = config.ollama_num_ctx(num_ctx)
    request = Request(
        messages=[Message(role="user", content=_prefill(ctx) + "\nAnswer with one word: ready.")],
        max_tokens=1,
        timeout_ms=timeout_ms,
    )
    ep = endpoint(url)
    body = chat_body(
        request,
        model=config.ollama_generation_model(model),
        num_ctx=ctx,
        keep_alive=config.ollama_keep_alive(keep_alive),
        stream=False,
        label=ep.label,
    )
    chunk = await transport.request_json(
        transport.probe_session(),
        ep,
        "POST",
        url + "/api/chat",
        deadline=transport.Deadline.after_ms(timeout_ms),
        decoder=CHUNK_DECODER,
        body=body,
        headers=headers,
    )
    return _whole(chunk, ep.label)
