"""The one check that a stream's deltas make the blocks they belong to."""

from __future__ import annotations

import json
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

from vaelii_llm import TextBlock
from vaelii_llm import TextDelta
from vaelii_llm import ThinkingBlock
from vaelii_llm import ThinkingDelta
from vaelii_llm import ToolInputDelta
from vaelii_llm import ToolUseBlock
from vaelii_llm import ToolUseStart


def input_json(pieces: Iterable[str]) -> Any:
    """What a tool call's :class:`ToolInputDelta` pieces say its input is:
    their join read as JSON, an empty join being no arguments."""
    joined = "".join(pieces)
    return json.loads(joined) if joined.strip() else {}


def assert_deltas_make_the_blocks(
    deltas: Iterable[Any], content: Sequence[Any], *, streams_inputs: bool = True
) -> None:
    """Each text and thinking block's deltas, joined, are its text; each tool
    call was started once, with its id and name, and its input pieces came
    after its start: joined, they are its input's JSON (on the OpenAI wire,
    the very arguments string its ``raw`` keeps; a call cut by ``max_tokens``
    is checked by that string alone, since its input was read leniently).
    A wire that sends whole calls (``streams_inputs=False``: Ollama) sends no
    input piece at all."""
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
            started = [
                n for n, d in enumerate(items) if isinstance(d, ToolUseStart) and d.index == index
            ]
            assert [(items[n].id, items[n].name) for n in started] == [(block.id, block.name)]
            at = [
                n for n, d in enumerate(items) if isinstance(d, ToolInputDelta) and d.index == index
            ]
            assert all(n > started[0] for n in at)
            pieces = [items[n].partial_json for n in at]
            if not streams_inputs:
                assert pieces == []
                continue
            function = (block.raw or {}).get("function")
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                assert "".join(pieces) == function["arguments"]
            if not block.partial:
                assert input_json(pieces) == block.input
