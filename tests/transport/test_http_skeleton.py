"""What the shared HTTP skeleton promises, held for both backends at once.

The closed state (``LLMClosed``, closing twice harmless), a session closed
under the provider made again, the User-Agent on every request (turns and
probes), and deltas that only add: the final Response still equals
``complete``'s. Each case runs against the loopback fakes of both wires.
"""

from __future__ import annotations

import ast
import asyncio
import random
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import aclosing
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from typing import get_args

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from tests.support.deltas_check import input_json
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import tool_call
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import random_turn
from tests.support.fake_openai import transcript
from tests.support.fake_openai_responses import FakeResponses
from tests.support.loopback import serve
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._transport.settings import USER_AGENT
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses
from vaelii_llm.providers._http import HTTPProvider

BACKENDS = ["ollama", "anthropic", "openai", "openai-responses"]
DELTAS = get_args(Delta)


def ask() -> Request:
    return Request(messages=[Message(role="user", content="hi")], timeout_ms=600_000)


def thinking_text_and_a_call(_body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        chunk(thinking="Let me "),
        chunk(thinking="look."),
        chunk("Asking"),
        chunk(" the KB."),
        chunk(tool_calls=[tool_call("kb_query", {"goal": "(dog ?x)"})]),
        final(),
    ]


@asynccontextmanager
async def backend(
    kind: str, headers: dict[str, str] | None = None, seed: int = 3
) -> AsyncIterator[tuple[HTTPProvider[Any, Any], Callable[[], list[str | None]]]]:
    """A provider of ``kind`` on its loopback fake, and what the fake saw as User-Agents."""
    if kind == "ollama":
        fake = await FakeOllama(script=thinking_text_and_a_call).start()
        try:
            async with ollama.provider(host=fake.url, headers=headers) as p:
                yield p, lambda: [ua for _, ua in fake.user_agents]
        finally:
            await fake.stop()
        return
    if kind == "openai-responses":
        responses = await FakeResponses().start()
        try:
            async with openai_responses.provider(base_url=responses.base_url, headers=headers) as p:
                yield p, lambda: [h.get("User-Agent") for h in responses.headers]
        finally:
            await responses.stop()
        return
    if kind == "openai":
        chat = transcript(random_turn(random.Random(seed), calls=1))
        server = await FakeOpenAI(script=lambda _b: chat).start()
        try:
            async with openai.provider(base_url=server.base_url, headers=headers) as p:
                yield p, lambda: [h.get("User-Agent") for h in server.headers]
        finally:
            await server.stop()
        return
    api = FakeMessagesAPI(transcript=generate(random.Random(seed), error=False))
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        async with anthropic.provider(credential="sk-test", base_url=url, headers=headers) as p:
            yield p, lambda: [s.headers.get("User-Agent") for s in api.seen]
    finally:
        await server.close()


async def collect(p: HTTPProvider[Any, Any], *, deltas: bool = False) -> list[StreamItem]:
    async with aclosing(p.stream(ask(), deltas=deltas)) as items:
        return [item async for item in items]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_closed_provider_refuses_every_turn_with_llm_closed(kind: str) -> None:
    async with backend(kind) as (p, _):
        await p.complete(ask())
        await p.aclose()
        await p.aclose()  # closing twice is harmless
        assert p.closed
        with pytest.raises(LLMClosed) as info:
            await p.complete(ask())
        assert info.value.type == "llm-closed"
        with pytest.raises(LLMClosed):
            await collect(p)
        with pytest.raises(LLMClosed):
            await collect(p, deltas=True)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_session_closed_under_the_provider_is_made_again(kind: str) -> None:
    async with backend(kind) as (p, _):
        first = await p.complete(ask())
        session = p._sessions.current()
        assert session is not None
        await session.close()
        assert await p.complete(ask()) == first
        assert p._sessions.current() is not None
        assert p._sessions.current() is not session
        assert (await collect(p))[-1] == first


@pytest.mark.parametrize("kind", BACKENDS)
async def test_every_turn_carries_the_user_agent(kind: str) -> None:
    async with backend(kind) as (p, seen):
        await p.complete(ask())
        await collect(p)
        await collect(p, deltas=True)
        assert seen() == [USER_AGENT] * 3
    assert USER_AGENT.startswith("vaelii-llm/0.1.0 Python/3.")
    async with backend(kind, headers={"user-agent": "my-gateway-client/2"}) as (p, seen):
        await p.complete(ask())
        assert seen() == ["my-gateway-client/2"]  # a caller's own User-Agent wins, alone


async def test_ollama_probes_carry_the_user_agent() -> None:
    fake = await FakeOllama().start()
    try:
        await ollama.version(fake.url)
        await ollama.capabilities("phi4:14b", host=fake.url)
        await ollama.warm(fake.url, model="phi4:14b", num_ctx=2048)
    finally:
        await fake.stop()
    assert [path for path, _ in fake.user_agents] == ["/api/version", "/api/show", "/api/chat"]
    assert {ua for _, ua in fake.user_agents} == {USER_AGENT}


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("seed", [3, 5, 8])
async def test_deltas_only_add_and_the_final_response_equals_complete(kind: str, seed: int) -> None:
    async with backend(kind, seed=seed) as (p, _):
        whole = await p.complete(ask())
        plain = await collect(p)
        with_deltas = await collect(p, deltas=True)
    assert plain == [*whole.content, whole]
    assert [x for x in with_deltas if not isinstance(x, DELTAS)] == plain
    assert isinstance(with_deltas[-1], Response)
    assert with_deltas[-1] == whole
    pieces: dict[int, list[str]] = {}
    starts: dict[int, ToolUseStart] = {}
    for item in with_deltas:
        if isinstance(item, TextDelta):
            pieces.setdefault(item.index, []).append(item.text)
        elif isinstance(item, ThinkingDelta):
            pieces.setdefault(item.index, []).append(item.thinking)
        elif isinstance(item, ToolUseStart):
            starts[item.index] = item
        elif isinstance(item, ToolInputDelta):
            assert item.index in starts  # after its call's start
            pieces.setdefault(item.index, []).append(item.partial_json)
        elif not isinstance(item, Response):  # a whole block: its deltas came before it
            index = whole.content.index(item)
            if isinstance(item, TextBlock):
                assert "".join(pieces.pop(index, [])) == item.text
            elif isinstance(item, ThinkingBlock):
                assert "".join(pieces.pop(index, [])) == item.thinking
            elif isinstance(item, ToolUseBlock):
                assert (starts[index].id, starts[index].name) == (item.id, item.name)
                if kind != "ollama":  # Ollama sends whole calls: no input pieces
                    assert input_json(pieces.pop(index, [])) == item.input
    assert not pieces  # no delta was handed over for a block that never came
    if kind == "ollama":  # the scripted turn has all three kinds
        wanted = {TextDelta, ThinkingDelta, ToolUseStart, ThinkingBlock, ToolUseBlock}
        assert {type(x) for x in with_deltas} >= wanted  # Ollama sends no input pieces


def test_no_vendor_module_imports_an_http_library() -> None:
    sources = [
        path
        for module in (ollama, anthropic, openai)
        for path in Path(str(module.__file__)).parent.glob("*.py")
    ]
    assert len(sources) > 3  # every module of each vendor package
    for source in sources:
        tree = ast.parse(source.read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert "aiohttp" not in imported, source
    assert issubclass(ollama.OllamaProvider, HTTPProvider)
    assert issubclass(anthropic.AnthropicProvider, HTTPProvider)
    assert issubclass(openai.OpenAIProvider, HTTPProvider)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_turn_in_flight_when_the_provider_closes_is_llm_closed(
    kind: str, streamed: bool
) -> None:
    async with stalled(kind) as (p, arrived):
        turn = asyncio.create_task(collect(p) if streamed else p.complete(ask()))
        await arrived.wait()  # the request reached the far end, which now stalls
        await p.aclose()
        with pytest.raises(LLMClosed) as info:
            await turn
        # cut by the close, not left to its ten-minute deadline
        assert not isinstance(info.value.__cause__, LLMTimeout)


@asynccontextmanager
async def stalled(kind: str) -> AsyncIterator[tuple[HTTPProvider[Any, Any], asyncio.Event]]:
    """A provider whose far end sends a streamed answer's head, or nothing, then
    stalls; and the event it sets once it has (the request has arrived)."""
    arrived = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if (await request.json()).get("stream"):
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b"\n")
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError

    async with serve(handler) as url:
        built: HTTPProvider[Any, Any] = (
            ollama.provider(host=url)
            if kind == "ollama"
            else openai.provider(base_url=url)
            if kind == "openai"
            else openai_responses.provider(base_url=url)
            if kind == "openai-responses"
            else anthropic.provider(credential="sk-test", base_url=url)
        )
        async with built as p:
            yield p, arrived
