"""One turn's parts as they arrive, on every wire: the one accumulator.

Every wire's assembler feeds a :class:`Parts` and keeps only its event
decoding. A :class:`Part` is one block to be (text, thinking, a tool call, or
a kind only its wire names) holding its pieces in order, joined once, at its
end, and its ``index``, the block index its deltas name; the wire keys its
parts by its own id for them (a block index, an output index, a call's
index). :class:`Parts` holds what every wire counts the same way:

* :attr:`Parts.pieces`, the content taken so far, which the stream pump
  compares to tell content from keep-alives (each wire adds its own events:
  a finish, a terminal event, a block's start);
* :attr:`Parts.calls`, the tool calls opened, at most :data:`MAX_TOOL_CALLS`:
  one more ends the turn with :class:`~vaelii_llm.errors.LLMBadResponse`
  naming the bound, so a far end cannot make a turn of unbounded calls,
  each a block, its ``raw``, and with deltas a start, for the agent to run;
* the deltas: a piece handed over as it comes when asked for, a call's
  :class:`~vaelii_llm._protocol.ToolUseStart` with the argument pieces that
  came before it joined, then each later piece.

:class:`MessageParts` is the layout of the wires that send a turn as one
message (Ollama's ``/api/chat``, Chat Completions): at most one thinking
block, then at most one text block, then the calls in the order they were
opened, so no block is final before the turn's end. The work per piece is
constant: a call knows its number from its opening and its block index once
started, so no piece looks at another call, and a turn of many calls costs
in proportion to its size, with deltas or without.
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
    "MessageParts",
    "Part",
    "Parts",
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
    already, when that would pass :data:`MAX_TOOL_CALLS` (a whole answer
    counts its own with it; a stream's :class:`Parts` does)."""
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


class Part:
    """One block to be: its pieces in order, the block index its deltas
    name, and for a tool call its number, id and name and whether its start
    was handed over (after which its argument pieces are handed over too)."""

    __slots__ = ("id", "index", "kind", "name", "number", "pieces", "started")

    def __init__(
        self,
        kind: str,
        index: int = 0,
        number: int = 0,
        call_id: str | None = None,
        name: str | None = None,
    ) -> None:
        self.kind = kind
        self.index = index
        self.number = number  # a call's place among the turn's calls, from 0
        self.id = call_id
        self.name = name
        self.pieces: list[str] = []
        self.started = False

    @property
    def call_id(self) -> str:
        """Its id, or ``call_<n>`` (its number) when the far end sent none."""
        return self.id or f"call_{self.number}"


class Parts:
    """The parts of one turn so far (the module docstring): the content
    counter, the tool-call bound and the deltas, for every wire.

    A wire's fast path may append to a part's pieces directly, count them
    into :attr:`pieces` and hand over the delta itself.
    """

    __slots__ = ("calls", "deltas", "label", "pieces")

    def __init__(self, label: str, *, deltas: bool) -> None:
        self.label = label
        self.deltas = deltas
        self.pieces = 0  # content taken so far; a keep-alive adds nothing
        self.calls = 0  # tool calls opened

    def count_calls(self, more: int = 1) -> int:
        """Open ``more`` tool calls, refused past :data:`MAX_TOOL_CALLS`
        (none opened then); the first one's number."""
        first = self.calls
        count_call(first + more - 1, self.label)
        self.calls = first + more
        return first

    def text(self, part: Part, piece: str, out: list[StreamItem]) -> None:
        """A non-empty piece of text."""
        part.pieces.append(piece)
        self.pieces += 1
        if self.deltas:
            out.append(TextDelta(index=part.index, text=piece))

    def thinking(self, part: Part, piece: str, out: list[StreamItem]) -> None:
        """A non-empty piece of thinking."""
        part.pieces.append(piece)
        self.pieces += 1
        if self.deltas:
            out.append(ThinkingDelta(index=part.index, thinking=piece))

    def arguments(self, part: Part, piece: str, out: list[StreamItem]) -> None:
        """A non-empty piece of a call's arguments; handed over once started."""
        part.pieces.append(piece)
        self.pieces += 1
        if part.started and self.deltas:
            out.append(ToolInputDelta(index=part.index, partial_json=piece))

    def start(self, part: Part, index: int, out: list[StreamItem]) -> None:
        """Hand over ``part``'s start at block ``index``, with the argument
        pieces that came before it, joined."""
        part.index = index
        part.started = True
        out.append(ToolUseStart(index=index, id=part.call_id, name=part.name or ""))
        if part.pieces:
            out.append(ToolInputDelta(index=index, partial_json="".join(part.pieces)))


class MessageParts(Parts):
    """The parts of a turn sent as one message (the module docstring).

    :attr:`thinking` and :attr:`text` are the two prose parts (the text
    part's index is 1 once thinking has come, else 0). With ``deltas``,
    :meth:`add_thinking` and :meth:`add_text` append the matching delta to
    ``out``; a call's start goes out once its name is known
    (:meth:`add_arguments`), or, for a call never started, just before its
    block at :meth:`close`. A start's index is the block index the call
    will have given what came before it: text first arriving after a started
    call makes that index stale, as thinking first arriving after text makes
    a text delta's.
    """

    __slots__ = ("call_parts", "text_part", "thinking_field", "thinking_part")

    def __init__(self, label: str, *, deltas: bool) -> None:
        super().__init__(label, deltas=deltas)
        self.thinking_part = Part("thinking")
        self.text_part = Part("text")
        # the wire's field the thinking came in, kept as the block's raw (None: none)
        self.thinking_field: str | None = None
        self.call_parts: list[Part] = []

    def add_thinking(self, piece: str, out: list[StreamItem]) -> None:
        part = self.thinking_part
        if not part.pieces:
            self.text_part.index = 1
        self.thinking(part, piece, out)

    def add_text(self, piece: str, out: list[StreamItem]) -> None:
        self.text(self.text_part, piece, out)

    def open_call(self, call_id: str | None, name: str | None) -> Part:
        """A new call, numbered next; refused past :data:`MAX_TOOL_CALLS`."""
        call = Part("call", number=self.count_calls(), call_id=call_id, name=name)
        self.pieces += 1
        self.call_parts.append(call)
        return call

    def add_arguments(self, call: Part, piece: str | None, out: list[StreamItem]) -> None:
        """A piece of ``call``'s arguments (None or empty: none, as when a
        delta only names the call); with deltas, its start once it has a name."""
        if piece:
            self.arguments(call, piece, out)
        if self.deltas and not call.started and call.name:
            self._start(call, out)

    def _start(self, call: Part, out: list[StreamItem]) -> None:
        prose = (1 if self.thinking_part.pieces else 0) + (1 if self.text_part.pieces else 0)
        self.start(call, prose + call.number, out)

    def _prose(self) -> list[Block]:
        """The thinking block and the text block, each when it has a piece."""
        content: list[Block] = []
        thinking = self.thinking_part.pieces
        if thinking:
            content.append(thinking_block("".join(thinking), self.thinking_field))
        text = self.text_part.pieces
        if text:
            content.append(TextBlock(text="".join(text)))
        return content

    def blocks(self, tool_use: Callable[[Part], ToolUseBlock]) -> list[Block]:
        """The turn's blocks in their final order; ``tool_use`` builds each call's."""
        content = self._prose()
        content.extend(map(tool_use, self.call_parts))
        return content

    def close(
        self, tool_use: Callable[[Part], ToolUseBlock]
    ) -> tuple[list[Block], list[StreamItem]]:
        """:meth:`blocks`, and what a stream hands over at the turn's end: the
        blocks, each call not yet started preceded by its start when deltas
        are asked for."""
        if not self.deltas:
            content = self.blocks(tool_use)
            return content, list(content)
        content = self._prose()
        out: list[StreamItem] = list(content)
        for call in self.call_parts:
            block = tool_use(call)
            if not call.started:
                self._start(call, out)
            out.append(block)
            content.append(block)
        return content, out
