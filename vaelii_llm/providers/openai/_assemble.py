"""The answer on the wire: a chat completion, whole or as SSE chunks, and the turn built from it.

A Chat Completions turn is one assistant message, streamed or not, so that is
what a turn is here: at most one :class:`~vaelii_llm._protocol.ThinkingBlock`
(``reasoning_content``, or ``reasoning`` where a server names it so: vLLM,
llama.cpp's server, DeepSeek-style servers), then at most one
:class:`~vaelii_llm._protocol.TextBlock` (``content``), then the tool calls
in the order their indexes first came. Both paths fill one :class:`_Turn`,
which builds the :class:`~vaelii_llm._protocol.Response`, so a streamed
turn's Response equals the whole one's; its thinking, text and calls are
kept, counted and bounded by the one accumulator every wire feeds
(:mod:`vaelii_llm.providers._turn`), in the layout of a turn sent as one
message the Ollama wire shares.

Stop reasons (:func:`stop_reason`); ``finish_reason`` stays on
``Response.vendor_stop_reason``:

====================  ======================================================
``finish_reason``     ``stop_reason``
====================  ======================================================
any, with a refusal   ``refusal`` (OpenAI's ``message.refusal``; its text on
                      ``stop_details["explanation"]``)
``length``            ``max_tokens`` (the last tool call, when one was being
                      written, is ``partial=True``: never to be run)
``content_filter``    ``refusal``
``stop``              ``tool_use`` with tool calls (servers differ), else
                      ``stop_sequence`` when vLLM names the matched string in
                      ``stop_reason`` (kept on ``Response.stop_sequence``),
                      else ``end_turn``
``tool_calls``, any   :func:`~vaelii_llm._protocol.nearest_stop_reason`:
other word            ``tool_use`` with tool calls, else ``end_turn``
none sent             None (a whole answer); a stream without one is refused
====================  ======================================================

Usage: ``prompt_tokens`` and ``completion_tokens`` are ``input_tokens`` and
``output_tokens``, ``prompt_tokens_details.cached_tokens`` is
``cache_read_input_tokens``, every other usage field stays on
``Usage.extra``. A stream takes the last usage it carries (the final chunk's,
whose ``choices`` is empty, with ``stream_options.include_usage``).

A tool call's ``arguments`` string is parsed once, whole; it keeps its
original JSON in ``raw`` (``{"id", "type": "function", "function": {"name",
"arguments"}}``, the arguments as the model wrote them), which the encoder
sends back as it came. A call with no id gets ``call_<n>``, its position.
Text carries no block JSON on this wire (``raw=None``); thinking keeps the
field it came in as ``raw`` (``{"reasoning_content": text}`` or
``{"reasoning": text}``), so the encoder sends it back under that name.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import Final
from typing import Literal

import msgspec

from vaelii_llm import errors
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import Usage
from vaelii_llm._protocol import nearest_stop_reason
from vaelii_llm._wire.sse import Frame
from vaelii_llm.providers._turn import MessageParts
from vaelii_llm.providers._turn import Part
from vaelii_llm.providers._turn import count_call
from vaelii_llm.providers._turn import lenient_object
from vaelii_llm.providers._turn import thinking_block
from vaelii_llm.providers.openai._shared import count
from vaelii_llm.providers.openai._shared import no_event

__all__ = [
    "WHOLE_DECODER",
    "ChunkAssembler",
    "Completion",
    "not_sse",
    "response_of",
    "stop_reason",
]

"""One SSE event as the decoder hands it over: its type and its data."""

DONE: Final = b"[DONE]"
"""The data of the stream's terminal event."""


# -- the whole answer -------------------------------------------------------------


class _Function(msgspec.Struct, frozen=True, gc=False):
    name: str = ""
    arguments: str = ""


class _ToolCall(msgspec.Struct, frozen=True, gc=False):
    function: _Function
    id: str | None = None


class _Message(msgspec.Struct, frozen=True, gc=False):
    content: str | None = None
    reasoning_content: Any = None
    reasoning: Any = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _WholeChoice(msgspec.Struct, frozen=True, gc=False):
    message: _Message
    index: int = 0
    finish_reason: str | None = None
    stop_reason: Any = None  # vLLM: the stop string matched (or a token id)


class Completion(msgspec.Struct, frozen=True, gc=False):
    """A non-streamed ``chat.completion`` (or an error a server put in a 200).

    Fields the protocol has no place for (``created``, ``system_fingerprint``,
    ``logprobs``…) are skipped by the decoder.
    """

    id: str | None = None
    model: str | None = None
    choices: list[_WholeChoice] = []
    usage: dict[str, Any] | None = None
    error: Any = None
    object: str | None = None  # vLLM's error object says "error" here
    message: Any = None  # ... and its text here


WHOLE_DECODER: Final = msgspec.json.Decoder(Completion)


# -- the streamed chunks ------------------------------------------------------------


class _FunctionDelta(msgspec.Struct, frozen=True, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, frozen=True, gc=False):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, frozen=True, gc=False):
    content: str | None = None
    reasoning_content: Any = None
    reasoning: Any = None
    refusal: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, frozen=True, gc=False):
    delta: _Delta | None = None
    index: int = 0
    finish_reason: str | None = None
    stop_reason: Any = None


class _Chunk(msgspec.Struct, frozen=True, gc=False):
    id: str | None = None
    model: str | None = None
    choices: list[_Choice] = []
    usage: dict[str, Any] | None = None
    error: Any = None
    object: str | None = None
    message: Any = None


class _TextOnly(msgspec.Struct, frozen=True, gc=False):
    """A delta that only continues the text: every other field absent or null."""

    content: str
    reasoning_content: None = None
    reasoning: None = None
    refusal: None = None
    tool_calls: None = None


class _TextChoice(msgspec.Struct, frozen=True, gc=False):
    delta: _TextOnly
    index: Literal[0] = 0
    finish_reason: None = None


class _TextChunk(msgspec.Struct, frozen=True, gc=False):
    """A chunk that only continues the text of choice 0: nearly every chunk of a turn."""

    choices: tuple[_TextChoice]
    usage: None = None
    error: None = None


_CHUNK_DECODER: Final = msgspec.json.Decoder(_Chunk)
_TEXT_DECODER: Final = msgspec.json.Decoder(_TextChunk)
_ANY_JSON: Final = msgspec.json.Decoder()
_ENCODER: Final = msgspec.json.Encoder()


# -- the turn -----------------------------------------------------------------------


_STOP_REASONS: Final[dict[str, StopReason]] = {
    "length": "max_tokens",
    "content_filter": "refusal",
}


def stop_reason(
    finish_reason: str | None, called_tools: bool, refused: bool, stop_string: bool
) -> StopReason | None:
    """The neutral stop reason for ``finish_reason`` (the table in the module docstring)."""
    if refused:
        return "refusal"
    if finish_reason is None:
        return None
    mapped = _STOP_REASONS.get(finish_reason)
    if mapped is not None:
        return mapped
    if finish_reason == "stop" and stop_string and not called_tools:
        return "stop_sequence"
    return nearest_stop_reason(called_tools)


def _text_of(value: Any) -> str | None:
    """A reasoning field's text: a string; any other value (a server's own
    object) carries none this wire names."""
    return value if type(value) is str and value else None


def _reasoning(message: _Message | _Delta) -> tuple[str, str] | None:
    """A message's or delta's reasoning and the field it came in
    (``reasoning_content`` read first), or None when it has none."""
    text = _text_of(message.reasoning_content)
    if text is not None:
        return text, "reasoning_content"
    text = _text_of(message.reasoning)
    return None if text is None else (text, "reasoning")


class _Turn(MessageParts):
    """What a turn said so far: its parts (:class:`~vaelii_llm.providers._turn.MessageParts`)
    and what only this wire has; :meth:`response` builds it, whichever path filled it."""

    __slots__ = ("finish", "id", "model", "refusal", "stop_string", "usage")

    def __init__(self, label: str, *, deltas: bool = False) -> None:
        super().__init__(label, deltas=deltas)
        self.refusal: list[str] = []
        self.finish: str | None = None
        self.stop_string: str | None = None
        self.usage: dict[str, Any] | None = None
        self.id: str | None = None
        self.model: str | None = None

    def tool_use(self) -> Callable[[Part], ToolUseBlock]:
        """What builds each call's block: a call whose arguments are no JSON
        object is refused, but the last one of a turn cut by ``length``, which
        is read leniently and marked partial."""
        label = self.label
        cut = self.finish == "length"
        last = self.calls - 1
        return lambda call: _tool_use(call, cut and call.number == last, label)

    def response(self, content: list[Block]) -> Response:
        return _response(
            content,
            self.finish,
            "".join(self.refusal),
            self.stop_string,
            called=bool(self.calls),
            model=self.model,
            id=self.id,
            usage=self.usage,
        )


def _response(
    content: list[Block],
    finish: str | None,
    refusal: str,
    stop_string: str | None,
    *,
    called: bool,
    model: str | None,
    id: str | None,
    usage: dict[str, Any] | None,
) -> Response:
    """The turn, from its blocks and what this wire says of it."""
    reason = stop_reason(finish, called, bool(refusal), stop_string is not None)
    return Response(
        content=content,
        stop_reason=reason,
        vendor_stop_reason=finish,
        model=model,
        id=id,
        stop_sequence=stop_string if reason == "stop_sequence" else None,
        stop_details={"type": "refusal", "explanation": refusal} if refusal else None,
        usage=_usage(usage),
    )


def _tool_use(call: Part, may_be_cut: bool, label: str) -> ToolUseBlock:
    arguments = "".join(call.pieces)
    call_id = call.call_id
    name = call.name or ""
    raw = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    partial = False
    try:
        parsed = _ANY_JSON.decode(arguments) if arguments.strip() else {}
    except Exception as exc:  # a hostile string may raise anything
        if not may_be_cut:
            raise errors.LLMBadResponse(
                label, f"answered a tool call to {name!r} whose arguments are not JSON", arguments
            ) from exc
        parsed = lenient_object(arguments)
        partial = True
    if parsed is None:
        parsed = {}
    if type(parsed) is not dict:
        raise errors.LLMBadResponse(
            label, f"answered a tool call to {name!r} whose arguments are no object", arguments
        )
    if may_be_cut:
        partial = True  # the last call of a cut turn is never run, whole or not
    return ToolUseBlock(id=call_id, name=name, input=parsed, partial=partial, raw=raw)


_COUNTED: Final = frozenset({"prompt_tokens", "completion_tokens"})


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if type(details) is dict else None
    extra = {k: v for k, v in usage.items() if k not in _COUNTED and v is not None}
    return Usage(
        input_tokens=count(usage.get("prompt_tokens")),
        output_tokens=count(usage.get("completion_tokens")),
        cache_read_input_tokens=count(cached),
        extra=extra or None,
    )


def _refuse_error(parsed: _Chunk | Completion, label: str) -> None:
    """An error a server put where an answer belongs: ``error`` (OpenAI,
    newer vLLM) or ``object: "error"`` (older vLLM): LLMApiError, status 200."""
    if parsed.error is not None:
        raise errors.LLMApiError(label, 200, _ENCODER.encode({"error": parsed.error}).decode())
    if parsed.object == "error":
        raise errors.LLMApiError(
            label, 200, _ENCODER.encode({"object": "error", "message": parsed.message}).decode()
        )


def response_of(parsed: Completion, label: str = "the Chat Completions API") -> Response:
    """The Response for a whole answer: its first choice, the blocks a stream
    of it would make, in their order, refused as a stream of it would be,
    built straight from its one message (``tests/providers`` holds it equal
    to the stream's way on generated answers)."""
    _refuse_error(parsed, label)
    if not parsed.choices:
        raise errors.LLMBadResponse(label, "answered a completion with no choices")
    choice = parsed.choices[0]
    message = choice.message
    finish = choice.finish_reason
    content: list[Block] = []
    thinking = _reasoning(message)
    if thinking is not None:
        content.append(thinking_block(*thinking))
    if message.content:
        content.append(TextBlock(text=message.content))
    calls = message.tool_calls
    if calls:
        count_call(len(calls) - 1, label)
        cut = len(calls) - 1 if finish == "length" else -1  # the one call read leniently
        for number, raw in enumerate(calls):
            call = Part("call", number=number, call_id=raw.id, name=raw.function.name)
            if raw.function.arguments:
                call.pieces.append(raw.function.arguments)
            content.append(_tool_use(call, number == cut, label))
    return _response(
        content,
        finish,
        message.refusal or "",
        choice.stop_reason if type(choice.stop_reason) is str else None,
        called=bool(calls),
        model=parsed.model,
        id=parsed.id,
        usage=parsed.usage,
    )


# -- the stream ---------------------------------------------------------------------


class ChunkAssembler(_Turn):
    """Sans-IO reassembly of one streamed turn from its SSE frames.

    :meth:`feed` takes the ``(event, data)`` pairs a chunk of the body
    completed and hands back what they completed: nothing until the
    ``finish_reason``, then every block of the turn in its final order, each
    the very object the final :class:`Response` holds. :attr:`finished` says
    ``data: [DONE]`` has arrived; :meth:`result` returns the Response (the
    usage is the last chunk's that carries one, which comes after the finish).

    Tool calls are assembled by their ``index``: the first delta of an index
    opens a call (its ``id`` and ``name``), the following ones add argument
    pieces; a delta with an ``id`` other than its index's call opens a new
    call (a server numbering parallel calls all 0), and a delta with no
    ``index`` continues the last call unless its ``id`` is new.

    With ``deltas``, each piece of reasoning or text is also handed back as
    it arrives, as a :class:`~vaelii_llm._protocol.ThinkingDelta` (index 0)
    or a :class:`~vaelii_llm._protocol.TextDelta` (index 1 once reasoning has
    come, else 0), a :class:`~vaelii_llm._protocol.ToolUseStart` when a
    call's name arrives, at the index its block will have given what came
    before it (a model writing text after a call makes that index stale),
    then its arguments as :class:`~vaelii_llm._protocol.ToolInputDelta`
    pieces at that index (what came before the name, joined, first): joined,
    they are the arguments string its block's ``raw`` keeps. A call whose
    name never came is started at the finish, just before its block.

    An ``error`` frame or chunk is :class:`~vaelii_llm.errors.LLMApiError`
    (status 200); a chunk that will not decode, content after the finish, or
    a tool call whose arguments are no JSON object is
    :class:`~vaelii_llm.errors.LLMBadResponse`, and so is :meth:`result` with
    no ``finish_reason``. What came before a refused frame is handed over first.

    It is the turn (:class:`_Turn`, its parts): :attr:`pieces` counts pieces
    of reasoning, text, refusal and tool calls, the finish and ``[DONE]``; a
    chunk with no choices or an empty delta (a keep-alive) adds nothing.
    """

    __slots__ = ("_by_index", "_content", "_done", "_finished", "_open")

    def __init__(self, label: str = "the Chat Completions API", *, deltas: bool = False) -> None:
        super().__init__(label, deltas=deltas)
        self._by_index: dict[int, Part] = {}
        self._finished = False  # the finish_reason came
        self._done = False  # data: [DONE] came
        self._content: list[Block] | None = None
        self._open = False  # a first chunk came and no finish yet: text may continue

    @property
    def finished(self) -> bool:
        """Whether ``data: [DONE]`` has arrived."""
        return self._done

    def feed(self, frames: Iterable[Frame]) -> Iterator[StreamItem]:
        """Apply each frame in order; hand back what they completed.

        A chunk that only continues the text (nearly every chunk of a turn)
        is read by a decoder whose types admit nothing else (one choice, a
        delta with text and no other field, no finish, no usage, no error),
        and its piece appended with no test in Python; any other frame is
        decoded whole and applied by :meth:`_apply`.
        """
        decode_text = _TEXT_DECODER.decode
        text = self.text_part
        texts = text.pieces
        before = len(texts)  # the pieces taken here, counted once before another frame
        deltas = self.deltas
        for event, data in frames:
            if self._done:
                continue  # after [DONE]: nothing counts (the pump stops reading)
            if event == b"message" and self._open:
                try:
                    piece = decode_text(data).choices[0].delta.content
                except Exception:  # no plain continuation: decoded whole below
                    pass
                else:
                    if piece:
                        texts.append(piece)
                        if deltas:
                            yield TextDelta(index=text.index, text=piece)
                    continue
            self.pieces += len(texts) - before
            yield from self._frame(event, data)
            before = len(texts)
        self.pieces += len(texts) - before

    def _frame(self, event: bytes, data: bytes) -> list[StreamItem]:
        if event == b"error":
            raise errors.LLMApiError(self.label, 200, data.decode("utf-8", "replace"))
        if data == DONE:
            self._done = True
            self.pieces += 1
            return []
        try:
            chunk = _CHUNK_DECODER.decode(data)
        except Exception as exc:  # a hostile frame may raise anything
            if not data.strip():
                return []
            raise errors.LLMBadResponse(
                self.label, "streamed a chunk that will not parse", data
            ) from exc
        return self._apply(chunk, data)

    def _apply(self, chunk: _Chunk, data: bytes) -> list[StreamItem]:
        _refuse_error(chunk, self.label)
        turn = self
        if turn.id is None:
            turn.id = chunk.id
        if turn.model is None:
            turn.model = chunk.model
        self._open = not self._finished
        if chunk.usage is not None:
            turn.usage = chunk.usage
        out: list[StreamItem] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # only one choice is asked for
            delta = choice.delta
            if delta is not None:
                if self._finished:
                    if delta.content or delta.tool_calls or delta.refusal:
                        raise errors.LLMBadResponse(
                            self.label, "streamed content after its finish_reason", data
                        )
                else:
                    self._delta(delta, out)
            if choice.finish_reason is not None and not self._finished:
                turn.finish = choice.finish_reason
                if type(choice.stop_reason) is str:
                    turn.stop_string = choice.stop_reason
                out.extend(self._finish())
        return out

    def _delta(self, delta: _Delta, out: list[StreamItem]) -> None:
        turn = parts = self
        thinking = _reasoning(delta)
        if thinking is not None:
            if parts.thinking_field is None:
                parts.thinking_field = thinking[1]
            parts.add_thinking(thinking[0], out)
        if delta.content:
            parts.add_text(delta.content, out)
        if delta.refusal:
            turn.refusal.append(delta.refusal)
            parts.pieces += 1
        for piece in delta.tool_calls or ():
            call = self._call(piece)
            function = piece.function
            arguments = None
            if function is not None:
                if function.name and not call.name:
                    call.name = function.name
                arguments = function.arguments
            parts.add_arguments(call, arguments, out)

    def _call(self, piece: _ToolCallDelta) -> Part:
        """The call a tool-call delta continues, or the one it opens."""
        parts = self
        calls = parts.call_parts
        index = piece.index
        call_id = piece.id or None  # some servers send "" on a continuing delta
        if index is None:
            if calls and (call_id is None or call_id == calls[-1].id):
                return calls[-1]
            index = -1 - len(calls)  # a key no server sends
        call = self._by_index.get(index)
        if call is not None and (call_id is None or call.id is None or call_id == call.id):
            if call.id is None:
                call.id = call_id
            return call
        name = piece.function.name if piece.function is not None else None
        call = parts.open_call(call_id, name or None)
        self._by_index[index] = call
        return call

    def _finish(self) -> list[StreamItem]:
        """The turn at its finish_reason: every block, in its final order."""
        self._finished = True
        self._open = False
        self.pieces += 1
        self._content, out = self.close(self.tool_use())
        return out

    def result(self) -> Response:
        """The whole turn; LLMBadResponse when no finish_reason came."""
        if self._content is None:
            raise errors.LLMBadResponse(self.label, "ended the stream without a finish_reason")
        return self.response(self._content)


def not_sse(opening: bytes, label: str) -> errors.LLMError:
    """The refusal of a streamed answer that held no event: the body's
    error (:func:`_refuse_error`), anything else LLMBadResponse."""
    return no_event(opening, label, WHOLE_DECODER.decode, _refuse_error)
