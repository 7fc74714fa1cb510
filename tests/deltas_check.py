"""The one check that a stream's deltas add up to the blocks they belong to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vaelii_llm import (
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
    ToolUseStart,
)


def assert_deltas_make_the_blocks(deltas: Iterable[Any], content: Sequence[Any]) -> None:
    """Each text and thinking block's deltas, joined, are its text; each tool
    call was started once, with its id and name."""
    items = list(deltas)
    for index, block in enumerate(content):
        if isinstance(block, TextBlock):
            said = [d.text for d in items if isinstance(d, TextDelta) and d.index == index]
            assert "".join(said) == block.text
        elif isinstance(block, ThinkingBlock):
            thought = [
                d.thinking for d in items if isinstance(d, ThinkingDelta) and d.index == index
            ]
            assert "".join(thought) == block.thinking
        elif isinstance(block, ToolUseBlock):
            started = [d for d in items if isinstance(d, ToolUseStart) and d.index == index]
            assert [(d.id, d.name) for d in started] == [(block.id, block.name)]
