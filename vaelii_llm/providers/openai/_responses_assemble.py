"""The answer on the wire: a ``response``, whole or as SSE events, and the turn built from it.

A turn is the response's ``output`` items, in order, each read by one rule
(:func:`blocks_of`) on both paths, so a streamed turn's Response equals the
whole one's:

* ``message``: its ``output_text`` parts joined, one
  :class:`~vaelii_llm._protocol.TextBlock` (none when empty), the item kept
  whole in ``raw`` (its ``id``, its ``phase`` and what this package does not
  model, which the request encoder sends back); a ``refusal``
  part makes the turn a refusal, its text on ``stop_details["explanation"]``;
* ``function_call``: a :class:`~vaelii_llm._protocol.ToolUseBlock` (its id is
  the ``call_id`` a ``function_call_output`` names), the arguments string
  parsed once, the item kept whole in ``raw``; an item whose ``status`` is
  ``incomplete`` was cut by the token limit: read leniently, ``partial=True``,
  never to be run; any other whose arguments are no JSON object is refused;
* ``reasoning``: its summary texts (else its ``reasoning_text`` content)
  joined by a blank line, a :class:`~vaelii_llm._protocol.ThinkingBlock`; one
  with no text but ``encrypted_content`` a
  :class:`~vaelii_llm._protocol.RedactedThinkingBlock`; the item in ``raw``
  either way (the request encoder sends it back when it is encrypted);
* any other type (a hosted tool's call): an
  :class:`~vaelii_llm._protocol.OpaqueBlock` holding it.

Stop reasons (:func:`stop_reason`); ``vendor_stop_reason`` keeps the status,
or for an ``incomplete`` one its ``incomplete_details.reason``:

=========================================  =================================
``status`` (and reason)                    ``stop_reason``
=========================================  =================================
any, with a refusal part                   ``refusal``
``completed``                              ``tool_use`` with a function call,
                                           else ``end_turn``
``incomplete``, ``max_output_tokens``      ``max_tokens``
``incomplete``, ``content_filter``         ``refusal``
``incomplete``, any other reason           as ``completed``
``completed``, output at ``max_tokens``    ``max_tokens`` (:func:`cut_at_cap`)
``failed``                                 :class:`~vaelii_llm.errors.LLMApiError`
anything else (``in_progress``…)           None
=========================================  =================================

Usage: ``input_tokens`` and ``output_tokens`` as they are (the input count
holds the cached part, as OpenTelemetry's meaning does);
``input_tokens_details.cached_tokens`` is ``cache_read_input_tokens``,
``cache_write_tokens`` ``cache_creation_input_tokens``; every other field
(``output_tokens_details.reasoning_tokens`` among them) stays on ``Usage.extra``.

The stream hands each item's blocks over at its ``response.output_item.done``
(the item whole, as the final response lists it); ``response.completed`` or
``response.incomplete`` ends the turn with the response's id, model, status
and usage (one whose status is ``failed`` is refused as the whole answer is).
A server that lists its items only there has them read from it. A turn holds
at most :data:`MAX_OUTPUT_ITEMS` items on both paths.
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
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm._protocol import nearest_stop_reason
from vaelii_llm._wire.sse import Frame
from vaelii_llm.providers._turn import MAX_TOOL_CALLS
from vaelii_llm.providers._turn import Part
from vaelii_llm.providers._turn import Parts
from vaelii_llm.providers._turn import count_call
from vaelii_llm.providers._turn import lenient_object
from vaelii_llm.providers.openai._shared import count
from vaelii_llm.providers.openai._shared import no_event

__all__ = [
    "WHOLE_DECODER",
    "EventAssembler",
    "Whole",
    "blocks_of",
    "cut_at_cap",
    "not_sse",
    "response_of",
    "stop_reason",
]

SUMMARY_JOIN: Final = "\n\n"
"""What joins a reasoning item's summary parts into one thinking text."""

MAX_OUTPUT_ITEMS: Final = 4 * MAX_TOOL_CALLS
"""The most output items one turn may hold, whole or streamed: far above a
turn's reasoning, messages and every call :data:`MAX_TOOL_CALLS` allows, and
small enough that a stream beginning a new item per event (each an open item
held until the end) cannot make the turn's memory many times its bytes."""


def count_item(items: int, label: str) -> None:
    """Refuse the ``items``-th output item of a turn past :data:`MAX_OUTPUT_ITEMS`."""
    if items > MAX_OUTPUT_ITEMS:
        raise errors.LLMBadResponse(
            label, f"answered more than MAX_OUTPUT_ITEMS ({MAX_OUTPUT_ITEMS}) output items"
        )


class Whole(msgspec.Struct, frozen=True, gc=False):
    """A ``response`` object (or an error a server put in a 200). Fields the
    protocol has no place for (``created_at``, ``tools``…) are skipped."""

    id: str | None = None
    model: str | None = None
    status: str | None = None
    output: list[dict[str, Any]] = []
    usage: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    error: Any = None


WHOLE_DECODER: Final = msgspec.json.Decoder(Whole)


class _Event(msgspec.Struct, frozen=True, gc=False):
    type: str = ""
    delta: str | None = None
    output_index: int | None = None
    summary_index: int | None = None
    item: dict[str, Any] | None = None
    response: Whole | None = None
    code: Any = None
    message: Any = None
    param: Any = None
    error: Any = None


class _TextDeltaEvent(msgspec.Struct, frozen=True, gc=False):
    """A ``response.output_text.delta``: nearly every event of a turn."""

    type: Literal["response.output_text.delta"]
    delta: str
    output_index: int


_EVENT_DECODER: Final = msgspec.json.Decoder(_Event)
_TEXT_DELTA_DECODER: Final = msgspec.json.Decoder(_TextDeltaEvent)
_TEXT_DELTA: Final = b"response.output_text.delta"
_ANY_JSON: Final = msgspec.json.Decoder()
_ENCODER: Final = msgspec.json.Encoder()

_TERMINAL: Final = frozenset({"response.completed", "response.incomplete"})
_FAILURES: Final = frozenset({"response.failed", "error"})
_THINKING_DELTAS: Final = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)
_ARGUMENTS_DELTA: Final = "response.function_call_arguments.delta"
_DELTAS: Final = _THINKING_DELTAS | {
    "response.output_text.delta",
    "response.refusal.delta",  # read whole at its item's end, content all the same
    _ARGUMENTS_DELTA,
}


# -- one item, one rule -----------------------------------------------------------------


def _texts(parts: Any, kind: str) -> list[str]:
    if type(parts) is not list:
        return []
    return [
        p["text"]
        for p in parts
        if type(p) is dict and p.get("type") == kind and type(p.get("text")) is str
    ]


def blocks_of(item: dict[str, Any], refusal: list[str], label: str) -> list[Block]:
    """The blocks of one output item (the module docstring); a refusal part's
    text is appended to ``refusal``."""
    kind = item.get("type")
    if kind == "message":
        content = item.get("content")
        parts = content if type(content) is list else []
        refusal.extend(
            p["refusal"]
            for p in parts
            if type(p) is dict and p.get("type") == "refusal" and type(p.get("refusal")) is str
        )
        text = "".join(_texts(item.get("content"), "output_text"))
        return [TextBlock(text=text, raw=item)] if text else []
    if kind == "function_call":
        return [_tool_use(item, label)]
    if kind == "reasoning":
        summary = _texts(item.get("summary"), "summary_text")
        text = SUMMARY_JOIN.join(summary or _texts(item.get("content"), "reasoning_text"))
        if text:
            return [ThinkingBlock(thinking=text, raw=item)]
        encrypted = item.get("encrypted_content")
        if type(encrypted) is str and encrypted:
            return [RedactedThinkingBlock(data=encrypted, raw=item)]
        return []
    if type(kind) is str:
        return [OpaqueBlock(type=kind, raw=item)]
    raise errors.LLMBadResponse(
        label, "answered an output item with no type", _ENCODER.encode(item)
    )


def _tool_use(item: dict[str, Any], label: str) -> ToolUseBlock:
    name = item.get("name")
    call_id = item.get("call_id") or item.get("id")
    arguments = item.get("arguments")
    if type(name) is not str or type(call_id) is not str or type(arguments) is not str:
        raise errors.LLMBadResponse(
            label,
            "answered a function call with no name, call_id or arguments string",
            _ENCODER.encode(item),
        )
    cut = item.get("status") == "incomplete"
    try:
        parsed = _ANY_JSON.decode(arguments) if arguments.strip() else {}
    except Exception as exc:  # a hostile string may raise anything
        if not cut:
            raise errors.LLMBadResponse(
                label,
                f"answered a function call to {name!r} whose arguments are not JSON",
                arguments,
            ) from exc
        parsed = lenient_object(arguments)
    if type(parsed) is not dict:
        raise errors.LLMBadResponse(
            label, f"answered a function call to {name!r} whose arguments are no object", arguments
        )
    return ToolUseBlock(id=call_id, name=name, input=parsed, partial=cut, raw=item)


# -- the turn ---------------------------------------------------------------------------


def stop_reason(
    status: str | None, reason: str | None, called_tools: bool, refused: bool
) -> StopReason | None:
    """The neutral stop reason (the table in the module docstring)."""
    if refused:
        return "refusal"
    if status == "incomplete":
        if reason == "max_output_tokens":
            return "max_tokens"
        if reason == "content_filter":
            return "refusal"
        return nearest_stop_reason(called_tools)
    if status == "completed":
        return nearest_stop_reason(called_tools)
    return None


def cut_at_cap(response: Response, max_tokens: int) -> Response:
    """``response`` with ``stop_reason`` ``max_tokens`` when it ended
    ``end_turn`` on a ``completed`` status with its output tokens at the
    request's ``max_tokens``: llama.cpp's server answers ``completed`` for a
    turn it cut at ``max_output_tokens``, and a cut answer read as whole is
    the worse mistake. ``vendor_stop_reason`` keeps the server's word."""
    if (
        response.stop_reason == "end_turn"
        and response.vendor_stop_reason == "completed"
        and (response.usage.output_tokens or 0) >= max_tokens
    ):
        return msgspec.structs.replace(response, stop_reason="max_tokens")
    return response


_COUNTED: Final = frozenset({"input_tokens", "output_tokens"})


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    details = usage.get("input_tokens_details")
    details = details if type(details) is dict else {}
    extra = {k: v for k, v in usage.items() if k not in _COUNTED and v is not None}
    return Usage(
        input_tokens=count(usage.get("input_tokens")),
        output_tokens=count(usage.get("output_tokens")),
        cache_read_input_tokens=count(details.get("cached_tokens")),
        cache_creation_input_tokens=count(details.get("cache_write_tokens")),
        extra=extra or None,
    )


def _refuse_failure(parsed: Whole, label: str) -> None:
    """A failed response, or an error where a response belongs: LLMApiError, status 200."""
    if parsed.status == "failed" or (parsed.error is not None and parsed.status is None):
        raise errors.LLMApiError(label, 200, _ENCODER.encode({"error": parsed.error}).decode())


def _response(parsed: Whole, content: list[Block], refusal: list[str]) -> Response:
    details = parsed.incomplete_details
    reason = details.get("reason") if details is not None else None
    reason = reason if type(reason) is str else None
    called = any(isinstance(block, ToolUseBlock) for block in content)
    text = "".join(refusal)
    return Response(
        content=content,
        stop_reason=stop_reason(parsed.status, reason, called, bool(text)),
        vendor_stop_reason=reason if parsed.status == "incomplete" and reason else parsed.status,
        model=parsed.model,
        id=parsed.id,
        stop_details={"type": "refusal", "explanation": text} if text else None,
        usage=_usage(parsed.usage),
    )


def _all_blocks(items: Iterable[dict[str, Any]], refusal: list[str], label: str) -> list[Block]:
    content: list[Block] = []
    calls = 0
    for number, item in enumerate(items, 1):
        count_item(number, label)
        if type(item) is not dict:
            raise errors.LLMBadResponse(label, "answered an output item that is no object")
        if item.get("type") == "function_call":
            count_call(calls, label)
            calls += 1
        content.extend(blocks_of(item, refusal, label))
    return content


def response_of(parsed: Whole, label: str = "the Responses API") -> Response:
    """The Response for a whole answer."""
    _refuse_failure(parsed, label)
    refusal: list[str] = []
    return _response(parsed, _all_blocks(parsed.output, refusal, label), refusal)


# -- the stream -------------------------------------------------------------------------


class _Open(Part):
    """An output item begun and not done: a part whose ``index`` is where
    its block goes, its item as begun, and its pieces so far (read only when
    the stream ends with the item never done and the final response listing none)."""

    __slots__ = ("item", "summary")

    def __init__(self, position: int, item: dict[str, Any] | None) -> None:
        super().__init__("item", position)
        self.item = item if item is not None else {}
        self.summary = 0  # the summary part the thinking deltas are in

    @property
    def call(self) -> tuple[str, str] | None:
        """A function call's ``call_id`` and name, once both are known."""
        item = self.item
        call_id, name = item.get("call_id"), item.get("name")
        if item.get("type") == "function_call" and type(call_id) is str and type(name) is str:
            return (call_id, name) if call_id and name else None
        return None

    def unfinished(self) -> dict[str, Any]:
        """The item as its pieces make it, marked ``incomplete``."""
        item, joined = self.item, "".join(self.pieces)
        kind = item.get("type")
        if kind == "function_call":
            return {**item, "arguments": joined, "status": "incomplete"}
        if kind == "reasoning":
            return {**item, "summary": [{"type": "summary_text", "text": joined}]}
        if kind == "message" or (not item and joined):
            content = [{"type": "output_text", "text": joined}]
            return {"type": "message", **item, "content": content, "status": "incomplete"}
        return item


class EventAssembler(Parts):
    """Sans-IO reassembly of one streamed turn from its SSE frames.

    :meth:`feed` takes the ``(event, data)`` pairs a chunk of the body
    completed and hands back what they completed: an item's blocks at its
    ``response.output_item.done``, each the very object the final
    :class:`Response` holds. :attr:`finished` says ``response.completed`` or
    ``response.incomplete`` has arrived; :meth:`result` returns the Response.

    With ``deltas``, text (``response.output_text.delta``) and reasoning
    (``response.reasoning_summary_text.delta``, ``response.reasoning_text.delta``;
    a blank line between summary parts) are handed over as they come, a
    function call's :class:`~vaelii_llm._protocol.ToolUseStart` once its
    ``call_id`` and name are known, then its
    ``response.function_call_arguments.delta`` pieces: joined, they are the
    arguments string its block's ``raw`` keeps. A delta's index is the block
    its item will make, counted as items are begun (each server here begins
    an item once the one before it is done).

    ``response.failed``, an ``error`` event, or an ``event: error`` frame is
    :class:`~vaelii_llm.errors.LLMApiError` (status 200); an event that will
    not decode, a bad item, or :meth:`result` before the turn ended is
    :class:`~vaelii_llm.errors.LLMBadResponse`. What came before a refused
    frame is handed over first.

    :attr:`pieces` counts content: a non-empty text, reasoning, refusal or
    argument delta, a function call's item begun, an item done, the terminal
    event. ``response.created``, ``response.in_progress``, empty deltas and
    events this package does not read add nothing (SSE comments never reach
    it): a far end sending only those is stalled. It is the turn's parts
    (:class:`~vaelii_llm.providers._turn.Parts`: the count, the tool-call
    bound, the deltas), keyed by output index.
    """

    __slots__ = ("_blocks", "_end", "_open", "_refusal")

    def __init__(self, label: str = "the Responses API", *, deltas: bool = False) -> None:
        super().__init__(label, deltas=deltas)
        self._blocks: list[Block] = []
        self._refusal: list[str] = []
        self._open: dict[int, _Open] = {}  # by output_index (-1: none sent)
        self._end: Whole | None = None

    @property
    def finished(self) -> bool:
        """Whether the terminal event has arrived."""
        return self._end is not None

    def feed(self, frames: Iterable[Frame]) -> Iterator[StreamItem]:
        """Apply each frame in order; hand back what they completed.

        A frame named ``response.output_text.delta`` is read by a decoder
        whose types admit that event alone, and its piece appended to the
        item it continues with no other test; any other frame, or one that
        decoder refuses, is decoded whole and applied by :meth:`_frame`.
        """
        decode_text = _TEXT_DELTA_DECODER.decode
        deltas = self.deltas
        last: _Open | None = None  # the item the last text piece went to
        last_index = -2  # its output_index (-1 stands for none sent)
        for event, data in frames:
            if self._end is not None:
                continue  # after the end nothing counts (the pump stops reading)
            if event == _TEXT_DELTA:
                try:
                    text = decode_text(data)
                except Exception:  # not the plain event: read whole below
                    pass
                else:
                    piece = text.delta
                    begun = last
                    if begun is None or text.output_index != last_index:
                        last_index = text.output_index
                        begun = last = self._begun(last_index, None)
                    begun.pieces.append(piece)
                    if piece:
                        self.pieces += 1
                        if deltas:
                            yield TextDelta(index=begun.index, text=piece)
                    continue
            yield from self._frame(event, data)

    def _frame(self, event: bytes, data: bytes) -> list[StreamItem]:
        label = self.label
        if event == b"error":
            raise errors.LLMApiError(label, 200, data.decode("utf-8", "replace"))
        try:
            parsed = _EVENT_DECODER.decode(data)
        except Exception as exc:  # a hostile frame may raise anything
            if not data.strip() or data == b"[DONE]":
                return []
            raise errors.LLMBadResponse(
                label, "streamed an event that will not parse", data
            ) from exc
        kind = parsed.type
        out: list[StreamItem] = []
        if kind in _DELTAS:
            if parsed.delta:
                self._delta(kind, parsed.delta, parsed, out)
        elif kind == "response.output_item.added":
            begun = self._begun(parsed.output_index, parsed.item)
            call = begun.call
            if call is not None:  # a call begun is content; a message begun is not yet
                self.pieces += 1
            if self.deltas and call is not None:
                begun.started = True
                out.append(ToolUseStart(index=begun.index, id=call[0], name=call[1]))
        elif kind == "response.output_item.done":
            self.pieces += 1
            self._done(parsed, out)
        elif kind in _TERMINAL:
            self.pieces += 1
            self._finish(parsed.response, data, out)
        elif kind in _FAILURES:
            raise self._failure(parsed)
        return out

    def _failure(self, parsed: _Event) -> errors.LLMApiError:
        """``response.failed`` or an ``error`` event, as the error it carries."""
        if parsed.type == "response.failed":
            error = (parsed.response or Whole(status="failed")).error
        else:
            error = parsed.error
            if error is None:
                error = {"code": parsed.code, "message": parsed.message, "param": parsed.param}
        return errors.LLMApiError(self.label, 200, _ENCODER.encode({"error": error}).decode())

    def _begun(self, index: int | None, item: dict[str, Any] | None) -> _Open:
        """The open item at ``index``, begun now when it was not (its block
        goes after every block so far and every other open item's)."""
        key = -1 if index is None else index
        begun = self._open.get(key)
        if begun is None:
            position = len(self._blocks) + len(self._open)
            count_item(position + 1, self.label)
            begun = self._open[key] = _Open(position, item)
        elif item is not None and not begun.item:
            begun.item = item
        return begun

    def _delta(self, kind: str, piece: str, parsed: _Event, out: list[StreamItem]) -> None:
        """A non-empty delta: a piece of prose, or of a call's arguments (a
        refusal's pieces are read whole at its item's end)."""
        if kind == "response.refusal.delta":
            self.pieces += 1
            return
        begun = self._begun(parsed.output_index, None)
        if kind == _ARGUMENTS_DELTA:
            self.arguments(begun, piece, out)
        elif kind == "response.output_text.delta":
            self.text(begun, piece, out)
        else:
            summary = parsed.summary_index or 0
            if summary > begun.summary:
                begun.summary = summary
                piece = SUMMARY_JOIN + piece
            self.thinking(begun, piece, out)

    def _done(self, parsed: _Event, out: list[StreamItem]) -> None:
        item = parsed.item
        if type(item) is not dict:
            raise errors.LLMBadResponse(self.label, "streamed an output item that is no object")
        begun = self._open.pop(-1 if parsed.output_index is None else parsed.output_index, None)
        if begun is None:  # an item done that was never begun: one more all the same
            count_item(len(self._blocks) + len(self._open) + 1, self.label)
        if item.get("type") == "function_call":
            self.count_calls()
        for block in blocks_of(item, self._refusal, self.label):
            self._hand_over(block, begun, out)

    def _hand_over(self, block: Block, begun: _Open | None, out: list[StreamItem]) -> None:
        """``block``, the next of the turn; with deltas a call's start first
        when it was not handed over, and what its argument pieces lacked of
        the arguments it ended with (a server may send none)."""
        if self.deltas and isinstance(block, ToolUseBlock):
            found = (block.raw or {}).get("arguments")
            arguments = found if type(found) is str else ""
            if begun is None or not begun.started:
                position = len(self._blocks)
                out.append(ToolUseStart(index=position, id=block.id, name=block.name))
                if arguments:
                    out.append(ToolInputDelta(index=position, partial_json=arguments))
            else:
                sent = "".join(begun.pieces)
                if len(arguments) > len(sent) and arguments.startswith(sent):
                    rest = arguments[len(sent) :]
                    out.append(ToolInputDelta(index=begun.index, partial_json=rest))
        self._blocks.append(block)
        out.append(block)

    def _finish(self, response: Whole | None, data: bytes, out: list[StreamItem]) -> None:
        if response is None:
            raise errors.LLMBadResponse(self.label, "ended its stream with no response", data)
        _refuse_failure(response, self.label)  # a terminal event saying it failed, as whole
        if response.output and not self._blocks:
            # A server that listed its items only in the final response.
            listed = [(item, self._open.get(n)) for n, item in enumerate(response.output)]
        else:  # items never done, the response listing none: what their pieces made
            listed = [(self._open[n].unfinished(), self._open[n]) for n in sorted(self._open)]
        self._open.clear()
        for number, (item, begun) in enumerate(listed, len(self._blocks) + 1):
            count_item(number, self.label)
            if type(item) is not dict:
                raise errors.LLMBadResponse(self.label, "answered an output item that is no object")
            if item.get("type") == "function_call":
                self.count_calls()
            for block in blocks_of(item, self._refusal, self.label):
                self._hand_over(block, begun, out)
        self._end = response

    def result(self) -> Response:
        """The whole turn; LLMBadResponse when the stream ended before its end event."""
        end = self._end
        if end is None:
            raise errors.LLMBadResponse(
                self.label, "ended the stream without response.completed or response.incomplete"
            )
        return _response(end, self._blocks, self._refusal)


def not_sse(opening: bytes, label: str) -> errors.LLMError:
    """The refusal of a streamed answer that held no event: the body's
    ``error`` as LLMApiError, anything else LLMBadResponse."""
    return no_event(opening, label, WHOLE_DECODER.decode, _refuse_error)


def _refuse_error(parsed: Whole, label: str) -> None:
    if parsed.error is not None:
        raise errors.LLMApiError(label, 200, _ENCODER.encode({"error": parsed.error}).decode())
