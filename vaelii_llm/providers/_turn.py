"""One turn's thinking, text and tool calls as they arrive, for the wires that
send a turn as one message (Ollama's ``/api/chat`` NDJSON, Chat Completions'
SSE chunks, each streamed or whole).

On both wires a turn is at most one
:class:`~vaelii_llm._protocol.ThinkingBlock` (every piece of thinking, in
order), then at most one :class:`~vaelii_llm._protocol.TextBlock` (every piece
of text), then the tool calls in the order they were opened, so no block is
final before the turn's end. An :class:`Accumulator` keeps the pieces (each
kind joined once, at the end), numbers the calls as they open, hands over the
deltas as they come when asked for, and builds the blocks in that order; the
assemblers keep only what their wire alone has (how a line or chunk is read,
its stop reasons, its usage).

The work per piece is constant: a call knows its number from its opening and
its block index once started, so no piece looks at another call, and a turn
of many calls costs in proportion to its size, with deltas or without.

A turn holds at most :data:`MAX_TOOL_CALLS` tool calls on every wire (the
Messages API's assembler and decoder count theirs with :func:`count_call`):
one more ends the turn with :class:`~vaelii_llm.errors.LLMBadResponse` naming
the bound, so a far end cannot make a turn of unbounded calls, each a block,
its ``raw``, and with deltas a start, for the agent to run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import Final

from vaelii_llm import errors
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart

__all__ = [
    "MAX_TOOL_CALLS",
    "Accumulator",
    "Call",
    "count_call",
    "lenient_object",
    "thinking_block",
]

MAX_TOOL_CALLS: Final = 1024
"""The most tool calls one turn may hold, on every wire; far above what a
model asks for in parallel, far below what would stall a turn's reassembly."""


def thinking_block(text: str, field: str | None) -> ThinkingBlock:
    """The turn's thinking, its ``raw`` naming the ``field`` it came in (None: no ``raw``)."""
    return ThinkingBlock(thinking=text, raw=None if field is None else {field: text})


def count_call(calls: int, label: str) -> None:
    """Refuse opening one more tool call in a turn that holds ``calls``
    already, when that would pass :data:`MAX_TOOL_CALLS`."""
    if calls >= MAX_TOOL_CALLS:
        raise errors.LLMBadResponse(
            label, f"answered more than MAX_TOOL_CALLS ({MAX_TOOL_CALLS}) tool calls in one turn"
        )


def lenient_object(arguments: str) -> dict[str, Any]:
    """What a tool call's arguments cut by the token budget hold: whole
    members kept, a cut string up to the cut (jiter's partial mode); anything
    unreadable, or no object, is no argument."""
    from jiter import from_json  # on the first cut call only: listed in tests/house/test_imports.py

    try:
        value = from_json(arguments.encode(), partial_mode="trailing-strings")
    except Exception:
        return {}
    return value if type(value) is dict else {}


class Call:
    """One tool call of a turn: its id and name, its arguments in pieces."""

    __slots__ = ("arguments", "id", "name", "number", "position")

    def __init__(self, number: int, call_id: str | None, name: str | None) -> None:
        self.number = number  # its place among the turn's calls, from 0
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.position: int | None = None  # its block index, once its start was handed over

    @property
    def call_id(self) -> str:
        """Its id, or ``call_<n>`` (its number) when the far end sent none."""
        return self.id or f"call_{self.number}"


class Accumulator:
    """The pieces of one turn so far (the module docstring).

    :attr:`thinking` and :attr:`text` are the pieces in order; an assembler's
    fast path may append to them directly and hand over the delta itself
    (:attr:`text_index` says where text goes). With ``deltas``, :meth:`add_thinking`
    and :meth:`add_text` append the matching delta to ``out``; a call's
    :class:`~vaelii_llm._protocol.ToolUseStart` goes out once its name is known
    (:meth:`add_arguments`, with the argument pieces that came before it,
    joined, as one :class:`~vaelii_llm._protocol.ToolInputDelta`, then each
    later piece), or, for a call never started, just before its block at
    :meth:`finish`. A start's index is the block index the call will have
    given what came before it: text first arriving after a started call makes
    that index stale, as thinking first arriving after text makes a text
    delta's.
    """

    __slots__ = ("calls", "deltas", "label", "text", "thinking", "thinking_field")

    def __init__(self, label: str, *, deltas: bool) -> None:
        self.label = label
        self.deltas = deltas
        self.thinking: list[str] = []
        # the wire's field the thinking came in, kept as the block's raw (None: none)
        self.thinking_field: str | None = None
        self.text: list[str] = []
        self.calls: list[Call] = []

    @property
    def pieces(self) -> int:
        """The content pieces taken so far: text, thinking, calls and their
        argument pieces (an empty piece is none: it carries nothing)."""
        calls = self.calls
        count = len(self.text) + len(self.thinking) + len(calls)
        for call in calls:
            count += len(call.arguments)
        return count

    @property
    def text_index(self) -> int:
        """The text block's index: 1 once thinking has come, else 0."""
        return 1 if self.thinking else 0

    def add_thinking(self, piece: str, out: list[StreamItem]) -> None:
        self.thinking.append(piece)
        if self.deltas:
            out.append(ThinkingDelta(index=0, thinking=piece))

    def add_text(self, piece: str, out: list[StreamItem]) -> None:
        self.text.append(piece)
        if self.deltas:
            out.append(TextDelta(index=self.text_index, text=piece))

    def open_call(self, call_id: str | None, name: str | None) -> Call:
        """A new call, numbered next; refused past :data:`MAX_TOOL_CALLS`."""
        calls = self.calls
        count_call(len(calls), self.label)
        call = Call(len(calls), call_id, name)
        calls.append(call)
        return call

    def add_arguments(self, call: Call, piece: str | None, out: list[StreamItem]) -> None:
        """A piece of ``call``'s arguments (None or empty: none, as when a
        delta only names the call); with deltas, its start once it has a name."""
        if piece:
            call.arguments.append(piece)
        if not self.deltas:
            return
        position = call.position
        if position is not None:
            if piece:
                out.append(ToolInputDelta(index=position, partial_json=piece))
        elif call.name:
            self._start(call, out)

    def _start(self, call: Call, out: list[StreamItem]) -> None:
        prose = (1 if self.thinking else 0) + (1 if self.text else 0)
        position = call.position = prose + call.number
        out.append(ToolUseStart(index=position, id=call.call_id, name=call.name or ""))
        if call.arguments:
            out.append(ToolInputDelta(index=position, partial_json="".join(call.arguments)))

    def _prose(self) -> list[Block]:
        """The thinking block and the text block, each when it has a piece."""
        content: list[Block] = []
        if self.thinking:
            content.append(thinking_block("".join(self.thinking), self.thinking_field))
        if self.text:
            content.append(TextBlock(text="".join(self.text)))
        return content

    def blocks(self, tool_use: Callable[[Call], ToolUseBlock]) -> list[Block]:
        """The turn's blocks in their final order; ``tool_use`` builds each call's."""
        content = self._prose()
        content.extend(map(tool_use, self.calls))
        return content

    def finish(
        self, tool_use: Callable[[Call], ToolUseBlock]
    ) -> tuple[list[Block], list[StreamItem]]:
        """:meth:`blocks`, and what a stream hands over at the turn's end: the
        blocks, each call not yet started preceded by its start when deltas
        are asked for."""
        if not self.deltas:
            content = self.blocks(tool_use)
            return content, list(content)
        content = self._prose()
        out: list[StreamItem] = list(content)
        for call in self.calls:
            block = tool_use(call)
            if call.position is None:
                self._start(call, out)
            out.append(block)
            content.append(block)
        return content, out
