"""Many tool calls in one turn (#36 item 5): reassembly is linear in them with
``deltas=True``, and a turn holds at most ``MAX_TOOL_CALLS`` on every wire.

Linear is shown by counting work, not by a clock: the lines the reassembly
runs and the comparisons it makes between calls (the scan a per-call
``list.index`` or ``in`` does compares each earlier call) while a stream of
``n`` and of ``4 n`` calls is fed to it."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from tests.support.deltas_check import assert_deltas_make_the_blocks
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import merged
from tests.support.fake_ollama import tool_call
from tests.support.fake_openai import Call
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import Turn
from tests.support.fake_openai import transcript
from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._wire.sse import SSEDecoder
from vaelii_llm.providers import _turn
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers.openai._assemble import ChunkAssembler

BOUND = _turn.MAX_TOOL_CALLS
WATCHED = {
    str(Path(_turn.__file__)),
    str(Path(sys.modules[ChunkAssembler.__module__].__file__ or "")),
}


def ask() -> Request:
    return Request(messages=[Message(role="user", content="q")])


def calls_turn(n: int) -> Turn:
    return Turn(
        text=["Looking it up."],
        calls=[
            Call(id=f"call_{i}", name="kb_query", pieces=['{"n": ', f"{i}}}"]) for i in range(n)
        ],
        finish_reason="tool_calls",
    )


@contextlib.contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Count the lines run in the two modules that reassemble a Chat
    Completions turn, and every comparison of one call with another."""
    seen = {"lines": 0, "compared": 0}

    def compare(self: object, other: object) -> Any:
        seen["compared"] += 1
        return self is other

    monkeypatch.setattr(_turn.Part, "__eq__", compare, raising=False)

    def trace(frame: FrameType, event: str, _arg: object) -> Any:
        if frame.f_code.co_filename not in WATCHED:
            return None
        if event == "line":
            seen["lines"] += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        yield seen
    finally:
        sys.settrace(previous)
        monkeypatch.undo()


def reassembled(n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, int], list[Any]]:
    frames = SSEDecoder().feed_frames(transcript(calls_turn(n)).sse())
    assembler = ChunkAssembler(deltas=True)
    with counted(monkeypatch) as seen:
        items = list(assembler.feed(frames))
    assert assembler.finished
    items.append(assembler.result())
    return seen, items


def test_streamed_calls_with_deltas_cost_work_linear_in_their_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small, small_items = reassembled(BOUND // 4, monkeypatch)
    large, large_items = reassembled(BOUND, monkeypatch)
    for items, n in ((small_items, BOUND // 4), (large_items, BOUND)):
        response = items[-1]
        assert isinstance(response, Response)
        calls = [b for b in response.content if isinstance(b, ToolUseBlock)]
        assert [c.input for c in calls] == [{"n": i} for i in range(n)]
        assert_deltas_make_the_blocks(items[:-1], response.content)
    assert small["compared"] == large["compared"] == 0  # no call is looked for among the others
    assert large["lines"] <= 4.5 * small["lines"]  # quadratic would be 16 times


def test_the_bound_names_itself() -> None:
    parts = _turn.MessageParts("Host", deltas=False)
    for _ in range(BOUND):
        parts.open_call(None, "f")
    with pytest.raises(errors.LLMBadResponse) as refused:
        parts.open_call(None, "f")
    assert "MAX_TOOL_CALLS" in str(refused.value)
    assert str(BOUND) in str(refused.value)
    assert parts.calls == BOUND


# -- every wire, over loopback: the bound, and one call fewer still answers ---------


@contextlib.asynccontextmanager
async def openai_serving(n: int) -> AsyncIterator[openai.OpenAIProvider]:
    script = transcript(calls_turn(n))
    server = await FakeOpenAI(script=lambda _body: script).start()
    try:
        async with openai.provider(base_url=server.base_url) as p:
            yield p
    finally:
        await server.stop()


@pytest.mark.parametrize("deltas", [True, False])
async def test_openai_a_streamed_turn_over_the_bound_is_refused(deltas: bool) -> None:
    async with openai_serving(BOUND + 1) as p:
        with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
            async for _ in p.stream(ask(), deltas=deltas):
                pass
        with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
            await p.complete(ask())


async def test_openai_a_turn_at_the_bound_answers_whole_and_streamed() -> None:
    async with openai_serving(BOUND) as p:
        whole = await p.complete(ask())
        items = [item async for item in p.stream(ask(), deltas=True)]
    assert items[-1] == whole
    assert sum(isinstance(b, ToolUseBlock) for b in whole.content) == BOUND
    assert_deltas_make_the_blocks(items[:-1], whole.content)


def ollama_turn(n: int) -> list[dict[str, Any]]:
    """``n`` calls, two per line (one line may carry several)."""
    lines = [chunk("Looking it up.")]
    for i in range(0, n, 2):
        lines.append(
            chunk(tool_calls=[tool_call("kb_query", {"n": j}) for j in range(i, min(n, i + 2))])
        )
    return [*lines, final()]


@pytest.mark.parametrize("n", [BOUND, BOUND + 1])
async def test_ollama_the_bound_holds_streamed_and_whole(n: int) -> None:
    lines = ollama_turn(n)
    whole_answer = merged(lines)
    streamed_fake = await FakeOllama(script=lambda _body: lines).start()
    try:
        async with ollama.provider(host=streamed_fake.url) as p:
            if n > BOUND:
                with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
                    async for _ in p.stream(ask(), deltas=True):
                        pass
            else:
                items = [item async for item in p.stream(ask(), deltas=True)]
                response = items[-1]
                assert isinstance(response, Response)
                assert sum(isinstance(b, ToolUseBlock) for b in response.content) == BOUND
                assert_deltas_make_the_blocks(items[:-1], response.content, streams_inputs=False)
    finally:
        await streamed_fake.stop()
    whole_fake = await FakeOllama(script=lambda _body: [whole_answer]).start()
    try:
        async with ollama.provider(host=whole_fake.url) as p:
            if n > BOUND:
                with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
                    await p.complete(ask())
            else:
                answer = await p.complete(ask())
                assert sum(isinstance(b, ToolUseBlock) for b in answer.content) == BOUND
    finally:
        await whole_fake.stop()


@pytest.mark.usefixtures("_no_ambient_credential")
@pytest.mark.parametrize("n", [BOUND, BOUND + 1])
async def test_messages_api_the_bound_holds_streamed_and_whole(n: int) -> None:
    t = generate(random.Random(n), kinds=["tool_use"] * n, stop_reason="tool_use", unknown=False)
    server = TestServer(FakeMessagesAPI(transcript=t, seed=n).app(), host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    try:
        async with anthropic.provider(credential="sk-test", base_url=url) as p:
            if n > BOUND:
                with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
                    async for _ in p.stream(ask(), deltas=True):
                        pass
                with pytest.raises(errors.LLMBadResponse, match="MAX_TOOL_CALLS"):
                    await p.complete(ask())
            else:
                whole = await p.complete(ask())
                items = [item async for item in p.stream(ask(), deltas=True)]
                assert items[-1] == whole
                assert sum(isinstance(b, ToolUseBlock) for b in whole.content) == BOUND
    finally:
        await server.close()


def test_a_call_never_named_is_started_just_before_its_block() -> None:
    turn = Turn(
        calls=[
            Call(id="call_a", name="", pieces=['{"n": 0}']),
            Call(id="call_b", name="kb_query", pieces=['{"n": 1}']),
        ],
        finish_reason="tool_calls",
    )
    assembler = ChunkAssembler(deltas=True)
    items = list(assembler.feed(SSEDecoder().feed_frames(transcript(turn).sse())))
    response = assembler.result()
    assert [(b.id, b.name) for b in response.content if isinstance(b, ToolUseBlock)] == [
        ("call_a", ""),
        ("call_b", "kb_query"),
    ]
    assert_deltas_make_the_blocks(items, response.content)
