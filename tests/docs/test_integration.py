"""The whole chain, end to end: a model (a fake server speaking the real wire)
asks for a KB tool, the quickstart's loop runs it through ``tools.call`` on the
sample KB, the result goes back on the wire, and the model answers from it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.doc_pages import load_example
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import tool_call
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import TextBlock
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama

GOAL = "(afraidOf MissMuffet ?who)"
QUESTION = "Who is Miss Muffet afraid of?"


def answer_text(blocks: list[Any]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


@pytest.fixture(scope="module")
def quickstart() -> ModuleType:
    return load_example("quickstart")  # with its folder on sys.path, as when run


@pytest.fixture(scope="module")
def sample() -> kb.KB:
    return kb.sample()


def request() -> Request:
    return Request(
        messages=[Message(role="user", content=QUESTION)], tools=tools.schemas(), max_tokens=256
    )


# -- Ollama ----------------------------------------------------------------------------


def ollama_model(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Ask for kb_query first; once a tool message is back, answer from it."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return [chunk(tool_calls=[tool_call("kb_query", {"goal": GOAL})]), final()]
    return [chunk("From the KB: "), chunk(results[-1]["content"][:60]), final()]


@pytest.fixture
async def fake_ollama() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama(script=ollama_model).start()
    try:
        yield server
    finally:
        await server.stop()


async def test_an_ollama_model_reads_the_kb_through_its_tools(
    fake_ollama: FakeOllama, quickstart: ModuleType, sample: kb.KB
) -> None:
    model = "qwen3-coder:30b"
    assert await ollama.supports_tools(model, host=fake_ollama.url)
    async with ollama.provider(host=fake_ollama.url, model=model) as p:
        final_turn = await quickstart.read_loop(p, sample, request())

    first, second = fake_ollama.bodies
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"kb_query", "kb_why_not"} <= offered
    assert not offered & {"kb_assert", "kb_retract", "kb_kb_diff"}
    (sent_back,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert sent_back["tool_name"] == "kb_query"
    assert "Muffet" in sent_back["content"]
    assert answer_text(final_turn.content).startswith("From the KB: [{:bindings {?who Muffet}")
    assert (final_turn.stop_reason, final_turn.vendor_stop_reason) == ("end_turn", "stop")


# -- the Messages API --------------------------------------------------------------------


class MessagesModel:
    """A Messages API that asks for kb_query, then answers from the tool result."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        last = body["messages"][-1]["content"]
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        usage = {"input_tokens": 10, "output_tokens": 5}
        base = {
            "id": f"msg_{len(self.bodies)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "stop_sequence": None,
            "usage": usage,
        }
        if not results:
            block = {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "kb_query",
                "input": {"goal": GOAL},
            }
            return web.json_response({**base, "content": [block], "stop_reason": "tool_use"})
        text = "From the KB: " + results[0]["content"][:60]
        return web.json_response(
            {**base, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
        )


async def test_a_messages_api_model_reads_the_kb_through_its_tools(
    quickstart: ModuleType, sample: kb.KB
) -> None:
    fake = MessagesModel()
    app = web.Application()
    app.router.add_post("/v1/messages", fake.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        async with anthropic.provider(credential="sk-test", base_url=url) as p:
            final_turn = await quickstart.read_loop(p, sample, request())
    finally:
        await server.close()

    first, second = fake.bodies
    assert {"kb_query", "kb_ask_p"} <= {t["name"] for t in first["tools"]}
    assistant, tool_turn = second["messages"][-2:]
    assert assistant["content"][0] == {  # echoed back exactly as it came
        "type": "tool_use",
        "id": "toolu_1",
        "name": "kb_query",
        "input": {"goal": GOAL},
    }
    (result,) = tool_turn["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_1")
    assert result.get("is_error", False) is False
    assert "Muffet" in result["content"]
    assert answer_text(final_turn.content).startswith("From the KB: [{:bindings {?who Muffet}")
    assert json.dumps(second).count("sk-test") == 0  # the key travels in a header only
    assert (final_turn.stop_reason, final_turn.vendor_stop_reason) == ("end_turn", "end_turn")
