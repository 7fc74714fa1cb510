"""Stream reassembly for the Messages API (sans-IO): SSE events into whole blocks.

:class:`StreamAssembler` yields each block when its ``content_block_stop``
arrives, its ``raw`` equal to what the non-streamed API returns for it, then
the same :class:`~vaelii_llm._protocol.Response` the whole message decodes
to; with ``deltas=True`` the text and thinking pieces and each tool call's
start come before their block. An ``error`` event is an
:class:`~vaelii_llm.errors.LLMApiError`; a stream ending before
``message_stop`` is an :class:`~vaelii_llm.errors.LLMBadResponse`.

Streamed turns equal whole ones:

* A message's top-level and usage fields come from ``message_start`` and
  then ``message_delta`` (its ``delta`` and the fields beside it), a null
  never replacing a value, a later value replacing an earlier one.
* A server-side fallback: ``message_start`` names the model first asked;
  each ``fallback`` block's ``to.model`` served what follows, so the
  Response names the last one, as the whole message does.
* A block type the package does not model takes the deltas the typed path
  does not read (``compaction_delta`` on a ``compaction`` block, any other)
  by one rule, applied to its ``raw`` in order: a delta's ``type`` is not
  copied and a null carries nothing; a string is appended to the field's
  string (a null, absent or non-string field counts as ``""``); a list
  extends the field's list (likewise ``[]``); any other value replaces the
  field (the last one wins). ``input_json_delta`` and ``citations_delta`` do
  on it what they do on a modelled block (a ``server_tool_use`` input, the
  citations). A modelled block skips a delta type it does not know.
* ``max_tokens`` inside a tool input: the turn ends as ``max_tokens`` with
  the blocks as they came; a cut input is read leniently, as the whole
  message carries it. Under ``max_tokens`` the last block, when a
  ``tool_use``, is ``partial=True`` on both paths, so it is never run;
  streamed, a tool call is handed over once the next block starts or the
  stop reason comes, so it is never handed over whole first. A cut input
  under any other stop reason, or followed by another block, is an
  ``LLMBadResponse``.
* Blocks are numbered from 0 in order: a start out of turn, or a delta or a
  stop for a block that is not open, is an ``LLMBadResponse`` (a lost
  block), never a shorter message.
* A turn holds at most :data:`~vaelii_llm.providers._turn.MAX_TOOL_CALLS`
  ``tool_use`` blocks, as on every wire: the start of one more is an
  ``LLMBadResponse`` naming the bound (the whole message counts its own).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._wire.sse import Frame
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.providers._turn import Part
from vaelii_llm.providers._turn import Parts
from vaelii_llm.providers.anthropic._decode import WHOLE_DECODER
from vaelii_llm.providers.anthropic._decode import Top
from vaelii_llm.providers.anthropic._decode import decode_block
from vaelii_llm.providers.anthropic._decode import lenient
from vaelii_llm.providers.anthropic._decode import mark_cut

__all__ = ["StreamAssembler"]

"""One SSE event as the decoder hands it over: its type and its data, UTF-8 bytes."""


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
_DECODERS: Final[dict[bytes, msgspec.json.Decoder[Any]]] = {
    b"message_start": msgspec.json.Decoder(_MessageStart),
    b"content_block_start": msgspec.json.Decoder(_BlockStart),
    b"content_block_delta": _DELTA_DECODER,
    b"content_block_stop": msgspec.json.Decoder(_BlockStop),
    b"message_delta": WHOLE_DECODER,
}
_ANY_JSON: Final = msgspec.json.Decoder()
_TYPED: Final = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
"""The block types the typed path reassembles; every other type's deltas
follow the generic rule (the module docstring)."""


def _flush(raw: dict[str, Any], key: str, pieces: list[str]) -> None:
    base = raw.get(key)
    raw[key] = (base if type(base) is str else "") + "".join(pieces)


class _OpenBlock(Part):
    """A block between its start and its stop: a part whose pieces (its
    text, its thinking, or its input JSON, as its type says) are joined once
    at the stop."""

    __slots__ = ("citations", "pending", "signature", "start", "work")

    def __init__(self, index: int, start: dict[str, Any]) -> None:
        kind = start.get("type")
        super().__init__(kind if type(kind) is str else "", index)
        self.start = start
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
        kind, pieces = self.kind, self.pieces
        prose = pieces and (kind == "text" or kind == "thinking")
        if prose:
            raw[kind] = str(raw.get(kind) or "") + "".join(pieces)
        if self.signature is not None:
            raw["signature"] = self.signature
        if self.citations:
            raw["citations"] = [*(raw.get("citations") or []), *self.citations]
        cut = None
        if pieces and not prose:  # a tool input, or a block type not modelled
            joined = "".join(pieces)
            if joined:
                try:
                    raw["input"] = _ANY_JSON.decode(joined)
                except Exception:
                    raw["input"] = lenient(joined, self.kind, label)
                    cut = joined
        return raw, cut


class StreamAssembler(Parts):
    """Turns the Messages API's SSE events into whole blocks and a Response.

    Sans-IO, in the words every assembler speaks (:mod:`vaelii_llm.providers._http`):
    :meth:`feed` takes the decoder's ``(event, data)`` pairs and hands back
    what they completed; :attr:`finished` says ``message_stop`` has arrived;
    :meth:`result` gives the final :class:`Response`. Text, thinking
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
    :class:`~vaelii_llm._protocol.ThinkingDelta`, a ``tool_use`` block's
    start as a :class:`~vaelii_llm._protocol.ToolUseStart` and each non-empty
    ``input_json_delta`` piece of it as a
    :class:`~vaelii_llm._protocol.ToolInputDelta`; ``index`` is the event's
    block index, which the API numbers by position in the content.

    It is the turn's parts (:class:`~vaelii_llm.providers._turn.Parts`: the
    count, the tool-call bound), keyed by block index. :attr:`pieces` counts
    every event of the message but ``ping``, the types this package does not
    know, a delta whose piece is empty and a ``message_delta`` whose
    ``delta`` carries nothing (usage counts alone): a keep-alive adds nothing.
    """

    __slots__ = ("_blocks", "_held", "_open", "_started", "_stopped", "_top")

    def __init__(self, label: str = "the Messages API", *, deltas: bool = False) -> None:
        super().__init__(label, deltas=deltas)  # its calls: tool_use blocks started
        self._top: Top | None = None
        self._open: dict[int, _OpenBlock] = {}  # by block index
        self._blocks: dict[int, Block] = {}
        self._started = 0
        self._held: tuple[int, Block, str | None] | None = None
        self._stopped = False

    @property
    def finished(self) -> bool:
        """Whether ``message_stop`` has arrived."""
        return self._stopped

    def feed(self, frames: Iterable[Frame]) -> Iterator[StreamItem]:
        """Apply the decoder's ``(event, data)`` pairs; hand back what they
        completed (blocks, and deltas when asked for), in order, as it goes:
        what came before a refused event is handed over before the refusal.

        A ``content_block_delta`` of text on an open text block (nearly
        every event of a turn) is applied here in one step; every other
        event goes through :meth:`_event`, the rule for any one event.
        """
        decode = _DELTA_DECODER.decode
        opened = self._open
        deltas = self.deltas
        live = not self._stopped and self._top is not None
        texts: list[str] | None = None  # the pieces of the open text block last seen
        last = -1  # its index (only _event opens or closes a block)
        # The type of the last delta taken here: a decoder hands over one
        # object per type, so the next is known by identity, not compared.
        taken: bytes | None = None
        for event, data in frames:
            if event is not taken:
                if not live or event != b"content_block_delta":
                    yield from self._event(event, data)
                    live = not self._stopped and self._top is not None
                    last = -1
                    taken = None
                    continue
                taken = event
            try:
                parsed = decode(data)
            except Exception as exc:
                raise LLMBadResponse(
                    self.label, "streamed a content_block_delta event that will not parse", data
                ) from exc
            index = parsed.index
            if index != last:
                block = opened.get(index)
                texts = block.pieces if block is not None and block.kind == "text" else None
                last = index
            delta = parsed.delta
            if texts is not None and delta.type == "text_delta":
                text = delta.text
                if type(text) is str:  # else _delta refuses it
                    if text:
                        self.pieces += 1
                    texts.append(text)
                    if deltas:
                        yield TextDelta(index=index, text=text)
                    continue
            item = self._delta(parsed, data)
            if item is not None:
                yield item

    def _event(self, event: bytes, data: bytes) -> list[StreamItem]:
        """Apply any one event; what it completed, in order."""
        if self._stopped or event == b"ping":
            return []
        if event == b"error":
            raise LLMApiError(self.label, 200, data.decode("utf-8", "replace"))
        decoder = _DECODERS.get(event)
        if decoder is None:
            if event == b"message_stop":
                self.pieces += 1
                return self._finish()
            return []  # an event type this package does not know yet
        try:
            parsed = decoder.decode(data)
        except Exception as exc:
            raise LLMBadResponse(
                self.label, f"streamed a {event.decode()} event that will not parse", data
            ) from exc
        self.pieces += _carries(parsed)
        if isinstance(parsed, _MessageStart):
            if self._top is not None:
                raise LLMBadResponse(self.label, "streamed a second message_start", data)
            self._top = Top(self.label)
            self._top.take_message(parsed.message)
            return []
        top = self._top
        if top is None:
            raise LLMBadResponse(
                self.label, f"streamed {event.decode()} before message_start", data
            )
        if isinstance(parsed, _BlockDelta):
            delta = self._delta(parsed, data)
            return [] if delta is None else [delta]
        if isinstance(parsed, _BlockStart):
            return self._start(parsed, data, top)
        if isinstance(parsed, _BlockStop):
            block = self._open.pop(parsed.index, None)
            if block is None:
                raise LLMBadResponse(
                    self.label, f"stopped block {parsed.index}, which is not open", data
                )
            out = self._release(final=False)
            raw, cut = block.close(self.label)
            done = decode_block(raw, self.label)
            self._blocks[parsed.index] = done
            if cut is not None or isinstance(done, ToolUseBlock):
                self._held = (parsed.index, done, cut)
            else:
                out.append(done)
            return out
        if type(parsed) is not dict:
            raise LLMBadResponse(self.label, "streamed a message_delta that is no object", data)
        top.take_delta(parsed)
        return self._release(final=True)

    def _start(self, parsed: _BlockStart, data: bytes, top: Top) -> list[StreamItem]:
        index = parsed.index
        if index != self._started:
            if index < self._started:
                raise LLMBadResponse(self.label, f"started block {index} twice", data)
            raise LLMBadResponse(
                self.label,
                f"started block {index} before block {self._started}: a block was lost",
                data,
            )
        block = parsed.content_block
        tool_use = block.get("type") == "tool_use"
        if tool_use:
            self.count_calls()
        out = self._release(final=False)
        self._started = index + 1
        if block.get("type") == "fallback":  # a server-side fallback: the next model serves
            to = block.get("to")
            model = to.get("model") if type(to) is dict else None
            if type(model) is str:
                top.model = model
        opened = self._open[index] = _OpenBlock(index, block)
        opened.started = tool_use  # its input pieces are handed over
        if self.deltas:
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
                self.label, f"streamed a {block.type!r} block whose input is not JSON", cut
            )
        if cut_allowed and index == self._started - 1:
            content = [block]
            mark_cut(content, 0)
            block = self._blocks[index] = content[0]
        return [block]

    def _delta(self, parsed: _BlockDelta, data: bytes) -> Delta | None:
        """Apply one delta to its open block; the delta item to hand back, if asked for."""
        block = self._open.get(parsed.index)
        if block is None:
            raise LLMBadResponse(
                self.label, f"streamed a delta for block {parsed.index}, which is not open", data
            )
        delta = parsed.delta
        kind = delta.type
        block_type = block.kind
        if kind == "input_json_delta":
            if block_type == "tool_use" or block_type not in _TYPED:
                piece = self._str(delta, delta.partial_json, "partial_json", data)
                if piece:
                    self.pieces += 1
                    block.pieces.append(piece)
                    if self.deltas and block.started:
                        return ToolInputDelta(index=parsed.index, partial_json=piece)
        elif kind == "citations_delta":
            if block_type == "text" or block_type not in _TYPED:
                self.pieces += 1
                block.citations.append(delta.citation)
        elif block_type not in _TYPED:
            self.pieces += 1
            block.apply(_WHOLE_DELTA_DECODER.decode(data).delta)
        elif kind == "text_delta":
            if block_type == "text":
                return self._prose(block, self._str(delta, delta.text, "text", data))
        elif kind == "thinking_delta":
            if block_type == "thinking":
                return self._prose(block, self._str(delta, delta.thinking, "thinking", data))
        elif kind == "signature_delta" and block_type == "thinking":
            block.signature = self._str(delta, delta.signature, "signature", data)
            self.pieces += block.signature != ""
        # any other delta on a modelled block: added by a later API version; skipped
        return None

    def _prose(self, block: _OpenBlock, piece: str) -> Delta | None:
        """A piece of a text or thinking block (an empty one kept, not
        counted); its delta when asked for."""
        if piece:
            self.pieces += 1
        block.pieces.append(piece)
        if not self.deltas:
            return None
        if block.kind == "text":
            return TextDelta(index=block.index, text=piece)
        return ThinkingDelta(index=block.index, thinking=piece)

    def _str(self, delta: _Delta, value: Any, key: str, data: bytes) -> str:
        if not isinstance(value, str):
            raise LLMBadResponse(
                self.label, f"streamed a {delta.type} with no {key!r} string", data
            )
        return value

    def _finish(self) -> list[StreamItem]:
        top = self._top
        if top is None:
            raise LLMBadResponse(self.label, "streamed message_stop before message_start")
        self._stopped = True
        closed = self._release(final=True)
        last = self._started - 1
        for index in sorted(self._open):
            raw, cut = self._open.pop(index).close(self.label)
            if cut is not None and not top.max_tokens():
                raise LLMBadResponse(
                    self.label,
                    f"streamed a {raw.get('type')!r} block whose input is not JSON",
                    cut,
                )
            content = [decode_block(raw, self.label)]
            if index == last and top.max_tokens():
                mark_cut(content, 0)
            self._blocks[index] = content[0]
            closed.append(content[0])
        return closed

    def result(self) -> Response:
        """The whole turn. Before ``message_stop`` it is an ``LLMBadResponse``:
        the stream was cut short."""
        if not self._stopped or self._top is None:
            raise LLMBadResponse(self.label, "ended the stream without message_stop")
        return self._top.response([self._blocks[i] for i in sorted(self._blocks)])


def _carries(event: object) -> bool:
    """Whether a decoded event is content, counted here: a block's delta is
    not (:meth:`StreamAssembler._delta` counts it when its piece is not
    empty), nor a ``message_delta`` whose ``delta`` names no stop reason nor
    another field of the message (usage counts alone); any other is."""
    if type(event) is _BlockDelta:
        return False
    if type(event) is not dict:
        return True  # a typed event, or a message_delta refused where it is applied
    delta = event.get("delta")
    return type(delta) is not dict or any(value is not None for value in delta.values())


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
