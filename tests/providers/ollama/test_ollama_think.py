"""Ollama's ``think``: one neutral request field, sent as Ollama's ``think``
only when set, in a body the ``ollama`` package's own request type accepts;
the other wires never send it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.providers import ollama
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.ollama._chat import chat_body
from vaelii_llm.providers.openai._chat import chat_body as openai_body

ollama_types = pytest.importorskip("ollama._types")

THINKS: list[Any] = [None, True, False, "low", "medium", "high"]


def request(think: Any) -> Request:
    call = ToolUseBlock(id="t1", name="kb_a", input={"x": 1})
    return Request(
        system=[TextBlock(text="Answer from the KB."), TextBlock(text="Be brief.")],
        messages=[
            Message(role="user", content="q"),
            Message(role="assistant", content=[ThinkingBlock(thinking="h"), call]),
            Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content="r")]),
        ],
        tools=[ToolSchema(name="kb_a", description="A.", input_schema={"type": "object"})],
        stop_sequences=["END"],
        format={"type": "object"},
        think=think,
        cache=Cache(system=True, tools=True),
    )


def body(think: Any, stream: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        chat_body(request(think), model="m", num_ctx=8, keep_alive="1m", stream=stream)
    )
    return out


@pytest.mark.parametrize("think", THINKS)
def test_think_is_sent_as_given_and_only_when_set(think: Any) -> None:
    sent = body(think)
    if think is None:
        assert "think" not in sent
    else:
        assert sent["think"] == think  # False too: "off" is said, not left out
    assert sent["messages"][0] == {"role": "system", "content": "Answer from the KB.\n\nBe brief."}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("think", THINKS)
def test_the_body_is_one_the_ollama_packages_request_type_accepts(think: Any, stream: bool) -> None:
    sent = body(think, stream)
    parsed = ollama_types.ChatRequest.model_validate(sent)
    assert parsed.think == think
    assert set(sent) <= set(ollama_types.ChatRequest.model_fields)  # no key it does not name


@pytest.mark.parametrize("bad", ["max", "on", 1, 0.5, ["high"]])
def test_a_think_ollama_does_not_take_is_refused_before_sending(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=r"Request\.think takes True, False"):
        body(bad)


def test_the_other_wires_never_send_think() -> None:
    plain, thinking = request(None), request("high")
    assert build_body(thinking) == build_body(plain)
    built = [
        openai_body(r, model="m", max_tokens_field="max_tokens", stream=False)
        for r in (plain, thinking)
    ]
    assert built[0] == built[1]


async def test_think_reaches_the_host_and_its_thinking_comes_back() -> None:
    fake = await FakeOllama(
        script=lambda _body: [chunk(thinking="Hm."), chunk(content="Yes."), final()]
    ).start()
    try:
        async with ollama.provider(host=fake.url, model="qwen3-coder:30b") as model:
            response = await model.complete(
                Request(messages=[Message(role="user", content="q")], think="low")
            )
    finally:
        await fake.stop()
    assert fake.bodies[-1]["think"] == "low"
    assert [type(b).__name__ for b in response.content] == ["ThinkingBlock", "TextBlock"]
