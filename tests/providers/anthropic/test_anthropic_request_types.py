"""Conformance of what we send: the Messages API bodies this backend writes (a
turn, streamed or not, and a token count) are ones the official ``anthropic``
package's own request types accept, for a request holding every shape the
encoder writes and every kind of cache breakpoint; and the official client
counts the same tokens as this backend from the same loopback server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.typed_conformance import conforms
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.providers import anthropic
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.anthropic._encode import count_body

sdk = pytest.importorskip("anthropic")
turn_params = pytest.importorskip("anthropic.types.beta.message_create_params")
count_params = pytest.importorskip("anthropic.types.message_count_tokens_params")

CACHES = {
    "none": None,
    "auto": Cache(auto=True, ttl="1h"),
    "system": Cache(system=True),
    "tools": Cache(tools=True),
    "block": Cache(blocks=((2, 0),)),
    "string-message": Cache(blocks=((0, 0),)),
    "four": Cache(auto=True, tools=True, system=True, blocks=((1, -1),)),
}


pytestmark = pytest.mark.usefixtures("_no_ambient_credential")


def neutral_request(cache: Cache | None, system: Any = "Answer from the KB.") -> Request:
    call = ToolUseBlock(id="toolu_1", name="kb_query", input={"goal": "(afraidOf ?x ?y)"})
    return Request(
        system=system,
        messages=[
            Message(role="user", content="Who is afraid of whom?"),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="look", signature="sig"),
                    TextBlock(text="A"),
                    call,
                ],
            ),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="toolu_1", content="[...]", is_error=True),
                    TextBlock(text="Now answer."),
                ],
            ),
        ],
        tools=[
            ToolSchema(name="kb_query", description="Prove.", input_schema={"type": "object"}),
            ToolSchema(
                name="kb_types_of",
                description="Types.",
                input_schema={"type": "object", "properties": {"term": {"type": "string"}}},
                strict=True,
            ),
        ],
        stop_sequences=["END"],
        format={"type": "object", "properties": {"answer": {"type": "string"}}},
        thinking_display="summarized",
        temperature=0.3,  # never sent
        cache=cache,
    )


SYSTEMS = {"text": "Answer from the KB.", "blocks": [TextBlock(text="A."), TextBlock(text="B.")]}


@pytest.mark.parametrize("system", sorted(SYSTEMS))
@pytest.mark.parametrize("cache", sorted(CACHES))
def test_every_body_is_one_the_official_types_accept(cache: str, system: str) -> None:
    request = neutral_request(CACHES[cache], SYSTEMS[system])
    streamed = build_body(request, stream=True)
    assert conforms(streamed, turn_params.MessageCreateParamsStreaming) == []
    assert conforms(build_body(request), turn_params.MessageCreateParamsNonStreaming) == []
    counted = count_body(request)
    assert conforms(counted, count_params.MessageCountTokensParams) == []
    # the count takes the turn's body less what only a turn takes
    assert set(streamed) - set(counted) == {"max_tokens", "stop_sequences", "fallbacks", "stream"}
    assert {k: v for k, v in streamed.items() if k in counted} == counted
    assert "temperature" not in counted


def test_the_checker_refuses_a_cache_control_the_types_do_not_name() -> None:
    body = build_body(neutral_request(CACHES["four"]))
    body["cache_control"] = {"type": "ephemeral", "ttl": "2h"}
    body["tools"][-1]["cache_control"] = {"type": "persistent"}
    found = " ".join(conforms(body, turn_params.MessageCreateParamsNonStreaming))
    assert "body.cache_control" in found
    assert "body.tools[1]" in found


@contextlib.asynccontextmanager
async def served(api: FakeMessagesAPI) -> AsyncIterator[str]:
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def test_the_official_client_counts_what_we_count() -> None:
    api = FakeMessagesAPI()
    async with served(api) as url:
        client = sdk.AsyncAnthropic(api_key="sk-test", base_url=url, max_retries=0)
        try:
            async with anthropic.provider(credential="sk-test", base_url=url) as ours:
                request = neutral_request(CACHES["four"])
                mine = await ours.count_tokens(request)
            body = count_body(request)
            theirs = await client.messages.count_tokens(**body)
        finally:
            await client.close()
    assert mine == theirs.input_tokens > 0
    assert api.counted[0].body == api.counted[1].body == body
