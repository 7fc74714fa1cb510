"""One tool loop, written once against the neutral types, runs unchanged on every backend.

The loop below knows no vendor: it branches on ``stop_reason``, runs every
``tool_use`` block through a :class:`~vaelii_llm.tools.Toolset` on the sample
KB, echoes the assistant's content and sends :class:`ToolResultBlock` s back.
It runs on the stub, on a loopback Ollama, on a loopback Messages API and on a
loopback Chat Completions server (written as vLLM writes it) and on a loopback
Responses API, each chosen by
``providers.provider(kind, ...)`` with the same options, and by ``complete``,
by ``stream`` and by ``stream(deltas=True)``.

Each far end asks for the same two tool calls, then answers with the tool
results it was sent quoted back, so the final answer holds facts only the real
tool calls on the KB could have produced, carried over each wire and back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from contextlib import asynccontextmanager
from typing import Any
from typing import Literal
from typing import get_args

import pytest
from aiohttp import web

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Transcript
from tests.support.deltas_check import assert_deltas_make_the_blocks
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import tool_call
from tests.support.fake_openai import Call
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import Transcript as ChatTranscript
from tests.support.fake_openai import Turn
from tests.support.fake_openai import split
from tests.support.fake_openai import transcript
from tests.support.fake_openai_responses import FakeResponses
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn as ResponsesTurn
from tests.support.loopback import serve
from tests.support.messages_transcripts import message
from tests.support.messages_transcripts import transcript as messages_of
from vaelii_llm import kb
from vaelii_llm import providers
from vaelii_llm import tools
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock

Mode = Literal["complete", "stream", "deltas"]

QUESTION = "Who is Miss Muffet afraid of, and what kind of thing is Muffet?"
CALLS = [
    ("kb_query", {"goal": "(afraidOf MissMuffet ?who)"}),
    ("kb_types_of", {"term": "Muffet"}),
]
KEY = "sk-ant-neutral-loop-test"
FACTS = ["ItsyBitsy", "Fang", "Arachnid", "Arthropod"]
"""What only the two tool calls on the sample KB can tell."""


def answer_from(results: list[str]) -> str:
    """What every far end answers once it holds the tool results: them, quoted."""
    return "From the KB: " + " | ".join(results)


# ---------------------------------------------------------------------------
# The loop, written once


DELTAS = get_args(Delta)


async def turn(model: Provider, request: Request, mode: Mode) -> Response:
    """One turn by ``complete`` or by ``stream``; a stream is checked against
    what it claims (its blocks are the Response's, its deltas join to them)."""
    if mode == "complete":
        return await model.complete(request)
    items: list[StreamItem] = []
    async with aclosing(model.stream(request, deltas=mode == "deltas")) as stream:
        async for item in stream:
            items.append(item)
    response = items[-1]
    assert isinstance(response, Response)
    deltas = [i for i in items[:-1] if isinstance(i, DELTAS)]
    blocks = [i for i in items[:-1] if not isinstance(i, DELTAS)]
    assert blocks == response.content
    if mode == "stream":
        assert deltas == []
    else:
        assert deltas, "stream(deltas=True) yielded no delta"
        whole_calls = type(model).__name__ == "OllamaProvider"  # no argument pieces
        assert_deltas_make_the_blocks(deltas, response.content, streams_inputs=not whole_calls)
    return response


async def tool_loop(
    model: Provider, toolset: tools.Toolset, question: str, mode: Mode, turns: int = 4
) -> tuple[Response, list[Message]]:
    """Ask, run the tools the model asks for, send the results back, until it stops."""
    messages = [Message(role="user", content=question)]
    for _ in range(turns):
        request = Request(messages=messages, tools=toolset.schemas(), max_tokens=512)
        response = await turn(model, request, mode)
        messages.append(Message(role="assistant", content=response.content))
        if response.stop_reason != "tool_use":
            return response, messages
        results: list[ToolResultBlock] = []
        for block in response.content:
            if isinstance(block, ToolUseBlock) and not block.partial:
                result = await toolset.call(block.name, block.input)
                results.append(result.block(block.id))
        messages.append(Message(role="user", content=list(results)))
    raise AssertionError(f"the model still asked for tools after {turns} turns")


# ---------------------------------------------------------------------------
# The far ends: each speaks its own wire, and checks what the loop echoed


class StubFarEnd:
    """The stub's script: two tool calls, then the results it was sent, quoted."""

    def __init__(self) -> None:
        self.model: Any = None

    def expand(self, entry: Any) -> Any:
        if entry.get("answer"):
            last = self.model.requests()[-1].messages
            sent = [b for b in last[-1].content if isinstance(b, ToolResultBlock)]
            echoed = [b for b in last[-2].content if isinstance(b, ToolUseBlock)]
            assert [b.tool_use_id for b in sent] == [b.id for b in echoed]
            return answer_from([b.content for b in sent])
        return entry

    def opts(self) -> dict[str, Any]:
        script = [{"tools": [{"tool": name, "input": args} for name, args in CALLS]}, {"answer": 1}]
        return {"script": script, "expand": self.expand}


def ollama_script(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Ollama's turns: tool calls (``done_reason`` ``stop``, as Ollama sends it),
    then, once tool messages come back, the answer in three chunks."""
    messages = body["messages"]
    if messages[-1]["role"] != "tool":
        calls = [tool_call(name, args) for name, args in CALLS]
        return [chunk("", tool_calls=calls), final(done_reason="stop")]
    sent = [m for m in messages if m["role"] == "tool"]
    assert [m.get("tool_name") for m in sent] == [name for name, _ in CALLS]
    (echoed,) = [m for m in messages if m["role"] == "assistant"]
    assert [c["function"]["name"] for c in echoed["tool_calls"]] == [n for n, _ in CALLS]
    text = answer_from([m["content"] for m in sent])
    third = len(text) // 3
    pieces = [text[:third], text[third : 2 * third], text[2 * third :]]
    return [*(chunk(piece) for piece in pieces), final(done_reason="stop")]


def messages_transcript(n: int, blocks: list[dict[str, Any]], stop_reason: str) -> Transcript:
    """A Messages API turn as SSE events and as the non-streamed message."""
    return messages_of(message(blocks, stop_reason=stop_reason, id=f"msg_neutral_{n}"))


class MessagesFarEnd(FakeMessagesAPI):
    """The loopback Messages API, choosing its transcript from what it was sent."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        messages = (await request.json())["messages"]
        content = messages[-1]["content"]
        sent = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if not sent:
            calls = [
                {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
                for i, (name, args) in enumerate(CALLS)
            ]
            self.transcript = messages_transcript(len(self.seen), calls, "tool_use")
        else:
            echoed = messages[-2]["content"]
            assert [b["id"] for b in echoed] == [b["tool_use_id"] for b in sent]
            text = answer_from([b["content"] for b in sent])
            blocks = [{"type": "text", "text": text}]
            self.transcript = messages_transcript(len(self.seen), blocks, "end_turn")
        return await super().handle(request)


def chat_script(body: dict[str, Any]) -> ChatTranscript:
    """The Chat Completions turns: tool calls whose arguments come in pieces,
    then, once tool messages come back, the answer in pieces."""
    import random

    rng = random.Random(len(body["messages"]))
    messages = body["messages"]
    if messages[-1]["role"] != "tool":
        calls = [
            Call(f"chatcmpl-tool-{n}", name, split(rng, json.dumps(args), 5))
            for n, (name, args) in enumerate(CALLS)
        ]
        return transcript(
            Turn(thinking=["Two ", "lookups."], calls=calls, finish_reason="tool_calls")
        )
    sent = [m for m in messages if m["role"] == "tool"]
    (echoed,) = [m for m in messages if m["role"] == "assistant"]
    assert [c["id"] for c in echoed["tool_calls"]] == [m["tool_call_id"] for m in sent]
    assert [c["function"]["name"] for c in echoed["tool_calls"]] == [n for n, _ in CALLS]
    text = answer_from([m["content"] for m in sent])
    return transcript(Turn(text=split(rng, text, 6), finish_reason="stop"))


def responses_script(body: dict[str, Any]) -> ResponsesTurn:
    """The Responses API turns: encrypted reasoning and two function calls
    whose arguments come in pieces, then, once their outputs come back (after
    the reasoning item and the calls, echoed in order), the answer in pieces."""
    import random

    items = body["input"]
    rng = random.Random(len(items))
    sent = [i for i in items if i.get("type") == "function_call_output"]
    if not sent:
        calls = [
            Item("function_call", split(rng, json.dumps(args), 5), name=name, call_id=f"call_{n}")
            for n, (name, args) in enumerate(CALLS)
        ]
        reasoning = Item("reasoning", parts=[["Two ", "lookups."]], encrypted="gAAA-neutral")
        return ResponsesTurn(items=[reasoning, *calls])
    echoed = [i for i in items if i.get("type") in ("reasoning", "function_call")]
    assert [i["type"] for i in echoed] == ["reasoning", "function_call", "function_call"]
    assert echoed[0]["encrypted_content"] == "gAAA-neutral"
    assert [i["call_id"] for i in echoed[1:]] == [i["call_id"] for i in sent]
    assert [i["name"] for i in echoed[1:]] == [n for n, _ in CALLS]
    text = answer_from([i["output"] for i in sent])
    return ResponsesTurn(items=[Item("message", split(rng, text, 6))])


@asynccontextmanager
async def far_ends() -> AsyncIterator[dict[str, Any]]:
    """The options one ``providers.provider`` call takes for every kind."""
    ollama = await FakeOllama(script=ollama_script).start()
    chat = await FakeOpenAI(script=chat_script).start()
    responses = await FakeResponses(script=responses_script).start()
    stub_end = StubFarEnd()
    try:
        async with serve(MessagesFarEnd().app()) as api_url:
            yield {
                "host": ollama.url,
                "credential": KEY,
                "base_url": api_url,
                "api_key": KEY,
                "stub": stub_end.opts(),
                "_stub_end": stub_end,
                "_chat_url": chat.base_url,
                "_responses_url": responses.base_url,
            }
    finally:
        await ollama.stop()
        await chat.stop()
        await responses.stop()


@pytest.mark.parametrize("mode", ["complete", "stream", "deltas"])
@pytest.mark.parametrize("kind", ["stub", "ollama", "anthropic", "openai", "openai-responses"])
async def test_one_loop_runs_unchanged_on_every_backend(
    kind: str, mode: Mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "VAELII_OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    toolset = tools.Toolset(kb.sample())
    async with far_ends() as opts:
        stub_end: StubFarEnd = opts.pop("_stub_end")
        chat_url = opts.pop("_chat_url")
        responses_url = opts.pop("_responses_url")
        if kind == "openai":  # base_url is both the Messages API's option and this one's
            opts["base_url"] = chat_url
        if kind == "openai-responses":
            opts["base_url"] = responses_url
        model = await providers.provider(kind, **opts)
        module = f"vaelii_llm.providers.{kind.replace('-', '_')}"
        assert type(model).__module__.startswith(module), "fell back"
        stub_end.model = model
        async with model:
            response, messages = await tool_loop(model, toolset, QUESTION, mode)

    assert response.stop_reason == "end_turn"
    text = "".join(b.text for b in response.content if isinstance(b, TextBlock))
    assert text.startswith("From the KB: ")
    for fact in FACTS:
        assert fact in text, (fact, text)
    # question, the tool calls, their results, the answer: the loop ran two turns.
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    calls = [b for b in messages[1].content if isinstance(b, ToolUseBlock)]
    assert [(c.name, c.input) for c in calls] == CALLS
    assert len({c.id for c in calls}) == len(calls)
    results = messages[2].content
    assert all(isinstance(r, ToolResultBlock) and not r.is_error for r in results)


async def test_the_suite_runs_on_the_event_loop_its_lane_names() -> None:
    from tests.conftest import TEST_LOOP

    loop = asyncio.get_running_loop()
    if TEST_LOOP == "uvloop":
        import uvloop

        assert isinstance(loop, uvloop.Loop)
    else:
        assert type(loop).__module__.startswith("asyncio.")
    assert loop.get_debug()  # asyncio_debug holds on either loop
