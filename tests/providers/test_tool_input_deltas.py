"""Tool-call arguments as they arrive: for random tool inputs whose JSON is
split at random points, each wire that streams them (the Messages API's
``input_json_delta``, the OpenAI-compatible argument deltas) hands over
:class:`ToolInputDelta` pieces between the call's :class:`ToolUseStart` and
its whole block; joined, they are the block's input JSON; and the final
Response still equals the whole (``complete``) one. Without deltas, none."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any
from typing import get_args

import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Transcript
from tests.support.anthropic_fake import generate
from tests.support.deltas_check import assert_deltas_make_the_blocks
from tests.support.deltas_check import input_json
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm.providers import anthropic
from vaelii_llm.providers.anthropic._decode import from_parsed
from vaelii_llm.providers.anthropic._stream import StreamAssembler
from vaelii_llm.providers.openai._assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._assemble import ChunkAssembler
from vaelii_llm.providers.openai._assemble import response_of

DELTAS = get_args(Delta)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
inputs = st.dictionaries(st.text(max_size=10), _values, max_size=6)


def split(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at ``cuts`` (character offsets, wrapped); empty pieces kept."""
    points = sorted(c % (len(text) + 1) for c in cuts)
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def check(items: list[Any], plain: list[Any], whole: Response) -> list[ToolInputDelta]:
    """Deltas only add; the final Response is the whole one; the pieces come
    between each call's start and its block and join to its input."""
    assert [i for i in items if not isinstance(i, DELTAS)] == plain
    assert plain[-1] == whole
    assert_deltas_make_the_blocks(items, whole.content)
    for n, item in enumerate(items):
        if isinstance(item, ToolInputDelta):
            block = whole.content[item.index]
            assert isinstance(block, ToolUseBlock)
            assert any(isinstance(i, ToolUseStart) and i.index == item.index for i in items[:n])
            assert block in items[n:]  # its whole block comes after
    return [i for i in items if isinstance(i, ToolInputDelta)]


# -- the Messages API -----------------------------------------------------------------


TOOL_START = {"type": "tool_use", "id": "t", "name": "n", "input": {}}


def messages_turn(tool_input: dict[str, Any], pieces: list[str], text: str) -> Transcript:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {"id": "m", "model": "c"}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        (
            "content_block_start",
            {
                "index": 1,
                "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}},
            },
        ),
    ]
    for piece in pieces:
        delta = {"type": "input_json_delta", "partial_json": piece}
        events.append(("content_block_delta", {"index": 1, "delta": delta}))
    events += [
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
        ("message_stop", {}),
    ]
    message = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": "t", "name": "n", "input": tool_input},
        ],
        "stop_reason": "tool_use",
        "usage": {"output_tokens": 3},
    }
    return Transcript(events, message)


def messages_items(t: Transcript, *, deltas: bool) -> list[Any]:
    asm = StreamAssembler("test", deltas=deltas)
    frames = [(name.encode(), json.dumps(data).encode()) for name, data in t.events]
    return [*asm.feed(frames), asm.result()]


@settings(max_examples=200, deadline=None)
@given(
    tool_input=inputs,
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(0, 10**6), max_size=12),
    text=st.text(max_size=20),
)
def test_messages_api_pieces_join_to_the_input(
    tool_input: dict[str, Any], ascii_only: bool, cuts: list[int], text: str
) -> None:
    written = json.dumps(tool_input, ensure_ascii=ascii_only) if tool_input else ""
    t = messages_turn(tool_input, split(written, cuts), text)
    whole = from_parsed(t.message, "test")
    pieces = check(messages_items(t, deltas=True), messages_items(t, deltas=False), whole)
    assert "".join(p.partial_json for p in pieces) == written
    assert all(p.partial_json for p in pieces)  # an empty piece is not handed over
    assert input_json(p.partial_json for p in pieces) == tool_input


# -- the OpenAI-compatible wire -------------------------------------------------------


def chat_turn(arguments: list[str], name_late: bool) -> tuple[list[dict[str, Any]], str]:
    """Chunks writing one tool call (its name in the first delta, or after
    the first argument piece), and the arguments whole."""
    chunks: list[dict[str, Any]] = []
    for n, piece in enumerate(arguments):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
        if n == (1 if name_late and len(arguments) > 1 else 0):
            call |= {"id": "call_1", "type": "function"}
            call["function"]["name"] = "kb_a"
        chunks.append(
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
        )
    done = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    chunks.append({"id": "c", "model": "m", "choices": [done]})
    return chunks, "".join(arguments)


def chat_items(chunks: list[dict[str, Any]], *, deltas: bool) -> list[Any]:
    asm = ChunkAssembler("test", deltas=deltas)
    frames = [(b"message", json.dumps(c).encode()) for c in chunks] + [(b"message", b"[DONE]")]
    return [*asm.feed(frames), asm.result()]


@settings(max_examples=200, deadline=None)
@given(
    tool_input=inputs,
    cuts=st.lists(st.integers(0, 10**6), min_size=0, max_size=12),
    name_late=st.booleans(),
)
def test_openai_pieces_join_to_the_arguments(
    tool_input: dict[str, Any], cuts: list[int], name_late: bool
) -> None:
    written = json.dumps(tool_input)
    chunks, arguments = chat_turn(split(written, cuts), name_late)
    completion = {
        "id": "c",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "kb_a", "arguments": arguments},
                        }
                    ]
                },
            }
        ],
    }
    whole = response_of(WHOLE_DECODER.decode(json.dumps(completion)))
    pieces = check(chat_items(chunks, deltas=True), chat_items(chunks, deltas=False), whole)
    assert "".join(p.partial_json for p in pieces) == written
    assert input_json(p.partial_json for p in pieces) == tool_input


# -- over loopback: the stream's Response is complete()'s ----------------------------


@contextlib.asynccontextmanager
async def messages_api(api: FakeMessagesAPI) -> AsyncIterator[anthropic.AnthropicProvider]:
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    try:
        async with anthropic.provider(credential="sk-test", base_url=url) as model:
            yield model
    finally:
        await server.close()


pytestmark = pytest.mark.usefixtures("_no_ambient_credential")


@pytest.mark.parametrize("seed", range(6))
async def test_over_loopback_the_streamed_response_equals_complete(seed: int) -> None:
    rng = random.Random(seed)
    t = generate(rng, kinds=["text", "tool_use", "tool_use"], stop_reason="tool_use")
    api = FakeMessagesAPI(transcript=t, seed=seed, chunk_most=7)
    request = Request(messages=[Message(role="user", content="q")])
    async with messages_api(api) as model:
        whole = await model.complete(request)
        items = [item async for item in model.stream(request, deltas=True)]
        plain = [item async for item in model.stream(request)]
    pieces = check(items, plain, whole)
    calls = [b for b in whole.content if isinstance(b, ToolUseBlock)]
    assert {p.index for p in pieces} == {whole.content.index(c) for c in calls if c.input}


async def test_the_pydantic_ai_face_builds_each_call_from_its_pieces() -> None:
    pai_agent = pytest.importorskip("pydantic_ai")
    messages = pytest.importorskip("pydantic_ai.messages")
    from vaelii_llm import kb
    from vaelii_llm.integrations.pydantic_ai import KBToolset
    from vaelii_llm.integrations.pydantic_ai import VaeliiModel
    from vaelii_llm.providers import stub

    goal = {"goal": "(afraidOf MissMuffet ?who)"}
    provider = stub.provider(script=[{"tool": "kb_query", "input": goal}, "Spiders."])
    runner = pai_agent.Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())])
    async with runner.run_stream("Who is Miss Muffet afraid of?") as run:
        assert await run.get_output() == "Spiders."
        calls = [
            part
            for message in run.all_messages()
            for part in getattr(message, "parts", [])
            if isinstance(part, messages.ToolCallPart)
        ]
    assert [(c.tool_name, c.args_as_dict()) for c in calls] == [("kb_query", goal)]
