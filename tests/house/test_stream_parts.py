"""One stream accumulator and one OpenAI package (#61 items 6 and 2): every
wire's assembler is the turn's parts and keeps only its event decoding, and
the two OpenAI wires share what they share through one module of their
package, never through each other's."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from vaelii_llm import errors
from vaelii_llm.providers import _turn
from vaelii_llm.providers.anthropic._stream import StreamAssembler
from vaelii_llm.providers.ollama._assemble import ChatAssembler
from vaelii_llm.providers.openai import _shared
from vaelii_llm.providers.openai._assemble import ChunkAssembler
from vaelii_llm.providers.openai._responses_assemble import EventAssembler

ASSEMBLERS = [ChatAssembler, ChunkAssembler, EventAssembler, StreamAssembler]
OPENAI = Path(_shared.__file__).parent
CHAT = {"_chat", "_assemble", "_provider"}
RESPONSES = {"_responses_request", "_responses_assemble", "_responses_codec", "_responses_provider"}


@pytest.mark.parametrize("assembler", ASSEMBLERS, ids=lambda cls: cls.__module__)
def test_every_wire_feeds_the_one_accumulator(assembler: type[Any]) -> None:
    """Each assembler is a :class:`~vaelii_llm.providers._turn.Parts`: the
    content counter, the label and the tool-call bound are the accumulator's,
    none written again by a wire."""
    made = assembler(deltas=True)
    assert isinstance(made, _turn.Parts)
    for cls in assembler.__mro__:
        if cls is not _turn.Parts:
            assert {"pieces", "calls", "count_calls"}.isdisjoint(vars(cls)), cls
    assert made.pieces == 0
    assert made.label
    assert made.deltas is True


def test_the_tool_call_bound_is_counted_by_the_accumulator_on_every_wire() -> None:
    """Each wire's opened calls go through :meth:`Parts.count_calls`: past
    :data:`~vaelii_llm.providers._turn.MAX_TOOL_CALLS` it refuses, naming the bound."""
    for assembler in ASSEMBLERS:
        parts = assembler(deltas=False)
        parts.calls = _turn.MAX_TOOL_CALLS
        with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
            parts.count_calls()
        assert parts.calls == _turn.MAX_TOOL_CALLS  # none opened by the refusal


def _imported(path: Path) -> set[str]:
    """The modules of the OpenAI package that ``path`` imports from."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:3] == ["vaelii_llm", "providers", "openai"] and len(parts) == 4:
                found.add(parts[3])
    return found


@pytest.mark.parametrize(("wire", "other"), [(CHAT, RESPONSES), (RESPONSES, CHAT)])
def test_neither_openai_wire_reaches_into_the_other(wire: set[str], other: set[str]) -> None:
    for name in sorted(wire):
        reached = _imported(OPENAI / f"{name}.py") & other
        assert not reached, f"{name} imports {reached}: shared parts belong in _shared"


def test_both_openai_wires_take_the_shared_parts_from_one_module() -> None:
    assert "_shared" in _imported(OPENAI / "_chat.py")
    assert "_shared" in _imported(OPENAI / "_responses_request.py")
    assert "_shared" in _imported(OPENAI / "_responses_codec.py")
