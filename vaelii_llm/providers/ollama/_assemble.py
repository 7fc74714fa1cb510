"""The answer on the wire: ``/api/chat`` objects, and one turn reassembled from them.

Ollama's whole (non-streamed) answer is one message holding all of the turn's
thinking, all of its text and its tool calls, so that is what a turn is here,
streamed or not: at most one :class:`~vaelii_llm._protocol.ThinkingBlock`
(every piece of thinking, in order), then at most one
:class:`~vaelii_llm._protocol.TextBlock` (every piece of text), then the tool
calls in the order they came. Text, a tool call, then more text is one text
block and the call; thinking after text is still the one thinking block,
first. So no block is final before ``done: true``: a streamed turn hands its
blocks over then, each equal to its place in the final
:class:`~vaelii_llm._protocol.Response`, and that Response equals the one the
same answer gives whole. The pieces are kept, counted and bounded by the
one accumulator every wire feeds (:mod:`vaelii_llm.providers._turn`), in the
layout of a turn sent as one message the Chat Completions wire shares.

``stop_reason`` is neutral (:func:`stop_reason`); ``done_reason`` stays on
``Response.vendor_stop_reason``:

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

``usage.input_tokens`` and ``usage.output_tokens`` are the host's
``prompt_eval_count`` and ``eval_count``, which stay beside them with the
durations (ns). Prose carries no block JSON on this wire, so text and thinking
blocks have ``raw=None``; a tool call keeps its original object in ``raw``. A
tool call with no id gets ``call_<n>``, its position in the turn.
"""

from __future__ import annotations

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
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import Usage
from vaelii_llm._protocol import nearest_stop_reason
from vaelii_llm._wire.ndjson import refuse_line
from vaelii_llm.providers._turn import MessageParts
from vaelii_llm.providers._turn import count_call

__all__ = ["CHUNK_DECODER", "ChatAssembler", "ChatChunk", "response_of", "stop_reason"]


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
    cycle: the garbage collector need not track them (``gc=False``).
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
    """A message that only continues the text: text, no thinking, no tool call."""

    piece: str = ""
    other: Literal[""] = ""
    tool_calls: None = None


class _ThinkingPiece(
    msgspec.Struct, frozen=True, gc=False, rename={"piece": "thinking", "other": "content"}
):
    """A message that only continues the thinking: thinking, no text, no tool call."""

    piece: str = ""
    other: Literal[""] = ""
    tool_calls: None = None


class _TextLine(msgspec.Struct, frozen=True, gc=False):
    """A streamed line that only continues the text: not done, no error."""

    message: _TextPiece
    done: Literal[False] = False
    error: None = None


class _ThinkingLine(msgspec.Struct, frozen=True, gc=False):
    """:class:`_TextLine` for thinking."""

    message: _ThinkingPiece
    done: Literal[False] = False
    error: None = None


_Run = Literal["text", "thinking"]

_CONTINUATION_DECODERS: Final[dict[_Run, msgspec.json.Decoder[Any]]] = {
    "text": msgspec.json.Decoder(_TextLine),
    "thinking": msgspec.json.Decoder(_ThinkingLine),
}
"""Per kind of the last piece, the decoder of a line that only continues it
(see :meth:`ChatAssembler.feed`): a line it refuses is decoded whole."""


_STOP_REASONS: Final[dict[str, StopReason]] = {"stop": "end_turn", "length": "max_tokens"}


def stop_reason(done_reason: str | None, called_tools: bool) -> StopReason | None:
    """The neutral stop reason for Ollama's ``done_reason`` (the table in the
    module docstring): a turn that called tools is ``tool_use`` unless it was
    cut (``length``); an unknown word is the nearest, ``tool_use`` or
    ``end_turn``; no word at all is None."""
    if done_reason is None:
        return None
    if _STOP_REASONS.get(done_reason) == "max_tokens":
        return "max_tokens"
    return nearest_stop_reason(called_tools)


class ChatAssembler(MessageParts):
    """Sans-IO reassembly of one chat turn from its NDJSON lines.

    :meth:`feed` takes the lines a chunk of the stream completed (as
    :class:`~vaelii_llm._wire.ndjson.NDJSONDecoder` hands them over) and
    yields what they completed: nothing until ``done: true``, then every block
    of the turn in its final order (see the module docstring), each the very
    object the final :class:`Response` holds. :attr:`finished` says
    ``done: true`` has arrived; :meth:`result` returns that Response.

    With ``deltas``, each piece of thinking or text is also yielded as it
    arrives, as a :class:`~vaelii_llm._protocol.ThinkingDelta` (index 0: the
    thinking block is always first) or a :class:`~vaelii_llm._protocol.TextDelta`
    (index 1 once thinking has come, else 0), and a
    :class:`~vaelii_llm._protocol.ToolUseStart` just before each tool call's
    block. Joined, a kind's deltas are its block. One case makes an earlier
    text delta's index stale: thinking that first arrives after text (no
    Ollama parser sends it: thinking is read from the start of the output),
    where text deltas sent before it said 0 and the text block is at 1.

    An ``error`` field is :class:`~vaelii_llm.errors.LLMApiError` (status
    200); a line that will not decode, a chunk after ``done: true`` or a tool
    call that will not decode is :class:`~vaelii_llm.errors.LLMBadResponse`,
    and so is :meth:`result` with no ``done: true``. What the lines before a
    refused one completed is yielded before the refusal; a refused line
    yields nothing of its own.

    It is the turn's parts (:class:`~vaelii_llm.providers._turn.MessageParts`):
    :attr:`pieces` counts pieces of thinking and text, tool calls, and
    ``done: true``; a line with empty content and ``done: false`` (a
    keep-alive) adds nothing.
    """

    __slots__ = ("_calls", "_done", "_model", "_response", "_run")

    def __init__(self, label: str = "Ollama", *, deltas: bool = False) -> None:
        super().__init__(label, deltas=deltas)
        self._calls: list[ToolUseBlock] = []  # by their number: this wire sends calls whole
        self._run: _Run | None = None  # the kind of the last piece, until done
        self._model: str | None = None
        self._done = False
        self._response: Response | None = None

    @property
    def finished(self) -> bool:
        """Whether ``done: true`` has arrived."""
        return self._done

    def feed(self, lines: Iterable[bytes]) -> Iterator[StreamItem]:
        """Apply each line before the next is decoded (no chunk outlives its
        line); yield what they completed.

        A line is decoded whole by :data:`CHUNK_DECODER` (an empty one
        skipped, any other that will not decode left to
        :func:`~vaelii_llm._wire.ndjson.refuse_line`: a blank one skipped,
        else refused), except a line that only continues the last piece's
        kind, which is nearly every line of a turn. That one is read by a
        decoder whose types admit nothing else (a message of that kind only,
        no tool call, not done, no error; any other line fails it and is
        decoded whole), so its piece is appended with no test in Python. It
        is read for its message alone: a model, ``done_reason``, count or
        duration on it is not used (the model is the first line's that names
        one, the rest the done line's), so it is not read, as ``created_at``
        never is.
        """
        decode_whole = CHUNK_DECODER.decode
        label = self.label
        deltas = self.deltas
        rest = iter(lines)
        while True:
            run = self._run
            if run is not None and self._model is not None:
                decode = _CONTINUATION_DECODERS[run].decode
                thinking = run == "thinking"
                part = self.thinking_part if thinking else self.text_part
                pieces = part.pieces
                append = pieces.append
                index = part.index
                before = len(pieces)  # counted at the run's end (read after a feed)
                for line in rest:
                    try:
                        piece: str = decode(line).message.piece
                    except Exception:  # no plain continuation: decoded whole below
                        break
                    if piece:
                        append(piece)
                        if deltas:
                            yield (
                                ThinkingDelta(index=index, thinking=piece)
                                if thinking
                                else TextDelta(index=index, text=piece)
                            )
                else:
                    self.pieces += len(pieces) - before
                    return
                self.pieces += len(pieces) - before
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
            yield from self._apply(chunk)

    def result(self) -> Response:
        """The whole turn; LLMBadResponse when ``done: true`` never came."""
        if self._response is None:
            raise errors.LLMBadResponse(self.label, "ended the stream without done: true")
        return self._response

    def _apply(self, chunk: ChatChunk) -> list[StreamItem]:
        """One decoded object: its pieces kept, its tool calls decoded, and at
        ``done: true`` the turn built. Returns the items it hands over."""
        if chunk.error is not None:
            raise errors.LLMApiError(self.label, 200, chunk.error)
        if self._done:
            raise errors.LLMBadResponse(self.label, "sent a chunk after done: true")
        if self._model is None:
            self._model = chunk.model
        out: list[StreamItem] = []
        message = chunk.message
        if message is not None:
            if message.tool_calls:  # first: a refused call leaves the turn as it was
                raw_calls, start, label = message.tool_calls, len(self._calls), self.label
                count_call(start + len(raw_calls) - 1, label)
                calls = [_tool_use(raw, start + n, label) for n, raw in enumerate(raw_calls)]
                for call in calls:
                    self.open_call(call.id, call.name)
                self._calls += calls
            if message.thinking:
                self.add_thinking(message.thinking, out)
                self._run = "thinking"
            if message.content:
                self.add_text(message.content, out)
                self._run = "text"
        if chunk.done:
            out.extend(self._finish(chunk))
        return out

    def _finish(self, chunk: ChatChunk) -> list[StreamItem]:
        """The turn at ``done: true``: every block, in its final order."""
        self._done = True
        self.pieces += 1
        self._run = None
        calls = self._calls
        content, out = self.close(lambda call: calls[call.number])
        self._response = _response(chunk, content, self._model, called=bool(calls))
        return out


def _tool_use(raw: msgspec.Raw, position: int, label: str) -> ToolUseBlock:
    try:
        call = _TOOL_CALL_DECODER.decode(raw)
        original = _RAW_DECODER.decode(raw)
    except Exception as exc:
        raise errors.LLMBadResponse(
            label, "sent a tool call that will not decode", bytes(raw)
        ) from exc
    return ToolUseBlock(
        id=call.id or f"call_{position}",
        name=call.function.name,
        input=call.function.arguments,
        raw=original,
    )


def _response(
    chunk: ChatChunk, content: list[Block], model: str | None, *, called: bool
) -> Response:
    """The turn, from its ``done: true`` object and its blocks."""
    return Response(
        content=content,
        stop_reason=stop_reason(chunk.done_reason, called),
        vendor_stop_reason=chunk.done_reason,
        model=chunk.model or model,
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


def response_of(chunk: ChatChunk, label: str) -> Response:
    """The Response of a non-streamed answer (one object, ``done: true``).

    Built straight from its one message: the blocks the assembler would make
    of it, in its order (thinking, text, the calls), refused as it would
    refuse it (an ``error``, a call that will not decode, one call too many,
    no ``done: true``), without its reassembly (``tests/providers`` holds the
    two equal on generated answers)."""
    if chunk.error is not None:
        raise errors.LLMApiError(label, 200, chunk.error)
    content: list[Block] = []
    called = False
    message = chunk.message
    if message is not None:
        raw_calls = message.tool_calls
        if message.thinking:
            content.append(ThinkingBlock(thinking=message.thinking))
        if message.content:
            content.append(TextBlock(text=message.content))
        if raw_calls:
            count_call(len(raw_calls) - 1, label)
            content += [_tool_use(raw, n, label) for n, raw in enumerate(raw_calls)]
            called = True
    if not chunk.done:
        raise errors.LLMBadResponse(label, "ended the stream without done: true")
    return _response(chunk, content, chunk.model, called=called)
