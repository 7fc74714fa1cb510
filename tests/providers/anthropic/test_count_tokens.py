"""Counting tokens: ``count_tokens`` on the Messages API (its counting endpoint,
by the turn's body rules, refused as a turn is), and a typed refusal, with
nothing sent, on every backend that has no counting endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from tests.support.anthropic_fake import prompt_units
from tests.support.anthropic_fake import tokens
from vaelii_llm import ProviderBase
from vaelii_llm import errors
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import stub
from vaelii_llm.providers.anthropic._encode import FALLBACK_BETA

NOWHERE = "http://127.0.0.1:9"
"""A port nothing listens on: a backend that tried to send would be unreachable."""


pytestmark = pytest.mark.usefixtures("_no_ambient_credential")


def question(**fields: object) -> Request:
    return Request(
        messages=[Message(role="user", content="Who is afraid of whom?")],
        system="Answer from the KB.",
        tools=[ToolSchema(name="kb_query", description="Prove.", input_schema={"type": "object"})],
        **fields,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def test_the_count_is_the_far_ends_for_the_turns_body() -> None:
    api = FakeMessagesAPI(transcript=generate(random.Random(1), kinds=["text"]))
    request = question(
        temperature=0.5,
        stop_sequences=["END"],
        format={"type": "object"},
        effort="high",
        cache=Cache(system=True),
    )
    async with served(api.app()) as url, anthropic.provider(credential="sk-k", base_url=url) as p:
        count = await p.count_tokens(request)
        await p.complete(request)
    [counted] = api.counted
    [turn] = api.seen
    units, _ = prompt_units(counted.body)
    assert count == sum(tokens(u) for u in units)
    assert set(turn.body) - set(counted.body) == {"max_tokens", "stop_sequences", "fallbacks"}
    for same in ("model", "messages", "system", "tools", "thinking", "output_config"):
        assert counted.body[same] == turn.body[same], same
    assert counted.body["output_config"]["effort"] == "high"
    assert "temperature" not in counted.body
    sent = {k.lower(): v for k, v in counted.headers.items()}
    assert sent["x-api-key"] == "sk-k"
    assert sent["accept"] == "application/json"
    assert "anthropic-beta" not in sent  # the fallback beta is a turn's alone
    assert FALLBACK_BETA in {k.lower(): v for k, v in turn.headers.items()}["anthropic-beta"]


@pytest.mark.parametrize(
    ("answer", "refusal", "match"),
    [
        (web.json_response({"type": "error", "error": {"message": "x"}}, status=429), "api", "429"),
        (web.json_response({"type": "error", "error": {"type": "boom"}}), "api", "200"),
        (web.json_response({"tokens": 5}), "bad", "no input_tokens count"),
        (web.json_response({"input_tokens": "5"}), "bad", "no input_tokens count"),
        (web.json_response([1]), "bad", "no object"),
        (web.Response(text="<html>", content_type="text/html"), "bad", None),
    ],
)
async def test_a_count_is_refused_as_a_turn_is(
    answer: web.Response, refusal: str, match: str | None
) -> None:
    async def count(_: web.Request) -> web.Response:
        return answer

    app = web.Application()
    app.router.add_post("/v1/messages/count_tokens", count)
    expected = errors.LLMApiError if refusal == "api" else errors.LLMBadResponse
    async with served(app) as url, anthropic.provider(credential="sk-k", base_url=url) as p:
        with pytest.raises(expected, match=match) as info:
            await p.count_tokens(question())
    assert "sk-k" not in str(info.value)


async def test_a_count_after_close_is_refused_and_sends_nothing() -> None:
    api = FakeMessagesAPI()
    async with served(api.app()) as url:
        p = anthropic.provider(credential="sk-k", base_url=url)
        await p.aclose()
        with pytest.raises(errors.LLMClosed):
            await p.count_tokens(question())
    assert api.counted == []


async def test_a_count_runs_under_the_requests_budget() -> None:
    held = asyncio.Event()

    async def count(_: web.Request) -> web.Response:
        await held.wait()
        return web.json_response({"input_tokens": 1})

    app = web.Application()
    app.router.add_post("/v1/messages/count_tokens", count)
    async with served(app) as url, anthropic.provider(credential="sk-k", base_url=url) as p:
        with pytest.raises(errors.LLMTimeout):
            await p.count_tokens(question(timeout_ms=50))
        held.set()


@pytest.mark.parametrize("kind", ["ollama", "openai", "stub"])
async def test_a_backend_with_no_counting_endpoint_refuses_typed_sending_nothing(
    kind: str,
) -> None:
    model: ProviderBase
    if kind == "ollama":
        model = ollama.provider(host=NOWHERE, model="m")
        where = "Ollama at http://127.0.0.1:9"
    elif kind == "openai":
        model = openai.provider(base_url=NOWHERE + "/v1", model="m")
        where = "127.0.0.1:9"
    else:
        model = stub.provider()
        where = "StubProvider"
    async with model:
        with pytest.raises(errors.LLMUnsupported, match="counting tokens") as info:
            await model.count_tokens(question())
    assert info.value.type == "llm-unsupported"
    assert info.value.operation == "counting tokens"
    assert where in str(info.value)
