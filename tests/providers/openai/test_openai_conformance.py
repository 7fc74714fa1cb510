"""Conformance: what this backend sends is a request the official ``openai``
package's own types accept, and what it reads of a stream is what the official
client reads of the same bytes.

The request check walks the package's ``CompletionCreateParams`` TypedDicts
(``typing`` only: required keys present, no key the type does not name,
literals and scalars of their type, every union tried), for the body of one
neutral request holding every shape the encoder writes (system, user text,
an assistant's text and tool calls, tool results, tools with and without
``strict``, stop sequences, a JSON schema format, the thinking sent back),
streamed and not.
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from tests.support.fake_openai import MODEL
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import random_turn
from tests.support.fake_openai import transcript
from tests.support.typed_conformance import conforms
from tests.support.typed_conformance import without_reasoning
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.providers import openai as ours
from vaelii_llm.providers.openai._chat import chat_body

sdk = pytest.importorskip("openai")
params = pytest.importorskip("openai.types.chat.completion_create_params")


def neutral_request() -> Request:
    call = ToolUseBlock(id="call_1", name="kb_query", input={"goal": "(afraidOf ?x ?y)"})
    return Request(
        system="Answer from the KB.",
        messages=[
            Message(role="user", content="Who is afraid of whom?"),
            Message(
                role="assistant",
                content=[ThinkingBlock(thinking="look it up"), TextBlock(text="Asking."), call],
            ),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="call_1", content="[{:bindings ...}]"),
                    TextBlock(text="Now answer."),
                ],
            ),
            Message(role="assistant", content=[call]),
            Message(role="user", content=[ToolResultBlock(tool_use_id="call_1", content="ok")]),
        ],
        tools=[
            ToolSchema(
                name="kb_query",
                description="Prove a goal.",
                input_schema={"type": "object", "properties": {"goal": {"type": "string"}}},
            ),
            ToolSchema(
                name="kb_types_of",
                description="Types of a term.",
                input_schema={
                    "type": "object",
                    "properties": {"term": {"type": "string"}},
                    "required": ["term"],
                    "additionalProperties": False,
                },
                strict=True,
            ),
        ],
        max_tokens=300,
        stop_sequences=["END"],
        format={"type": "object", "properties": {"answer": {"type": "string"}}},
        temperature=0.2,
    )


@pytest.mark.parametrize("send_reasoning", [False, True])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_request_is_one_the_official_types_accept(
    stream: bool, field: Any, send_reasoning: bool
) -> None:
    body = json.loads(
        chat_body(
            neutral_request(),
            model=MODEL,
            max_tokens_field=field,
            stream=stream,
            send_reasoning=send_reasoning,
        )
    )
    hint = (
        params.CompletionCreateParamsStreaming
        if stream
        else params.CompletionCreateParamsNonStreaming
    )
    assert without_reasoning(body) == (["look it up"] if send_reasoning else [])
    assert conforms(body, hint) == []
    assert body[field] == 300
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user", "assistant", "tool"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_system_prompt_of_blocks_cache_and_think_send_what_the_types_accept(
    stream: bool,
) -> None:
    """Blocks are joined into the one system string; a cache and a think send nothing."""
    plain = neutral_request()
    fancy = msgspec.structs.replace(
        plain,
        system=[TextBlock(text="Answer from"), TextBlock(text="the KB.")],
        cache=Cache(auto=True, tools=True, system=True, blocks=((0, 0),)),
        think="high",
    )
    sent = json.loads(chat_body(fancy, model=MODEL, max_tokens_field="max_tokens", stream=stream))
    without_reasoning(sent)
    hint = (
        params.CompletionCreateParamsStreaming
        if stream
        else params.CompletionCreateParamsNonStreaming
    )
    assert conforms(sent, hint) == []
    assert sent["messages"][0] == {"role": "system", "content": "Answer from\n\nthe KB."}
    joined = msgspec.structs.replace(plain, system="Answer from\n\nthe KB.")
    expected = json.loads(
        chat_body(joined, model=MODEL, max_tokens_field="max_tokens", stream=stream)
    )
    without_reasoning(expected)
    assert sent == expected


def test_the_checker_refuses_what_the_types_do_not_name() -> None:
    body = json.loads(
        chat_body(neutral_request(), model=MODEL, max_tokens_field="max_tokens", stream=False)
    )
    without_reasoning(body)
    body["max_tokenz"] = 1
    body["messages"][0]["role"] = "robot"
    body["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"goal": "x"}
    del body["messages"][3]["tool_call_id"]
    found = conforms(body, params.CompletionCreateParamsNonStreaming)
    assert "body.max_tokenz: CompletionCreateParamsNonStreaming names no such key" in found
    assert "body.messages[0]: no branch" in " ".join(found)
    assert "body.messages[2]: no branch" in " ".join(found)
    assert "body.messages[3]: no branch" in " ".join(found)


async def test_the_official_client_reads_the_same_turns_from_the_fake() -> None:
    """The fake writes a wire the official client reads, and both read one
    turn alike: text, reasoning aside (the client has no field for it), tool
    calls, finish reason and usage."""
    fake = await FakeOpenAI().start()
    client = sdk.AsyncOpenAI(api_key="sk-test", base_url=fake.base_url, max_retries=0)
    try:
        async with ours.provider(base_url=fake.base_url, api_key="sk-test", model=MODEL) as p:
            for seed in range(25):
                turn = random_turn(random.Random(seed))
                if turn.finish_reason == "length":  # the client's helper refuses a cut turn
                    turn.finish_reason = "stop"
                t = transcript(
                    turn,
                    random.Random(seed).choice(["vllm", "openai", "llamacpp"]),
                )
                fake.script = lambda _b, t=t: t
                request = Request(messages=[Message(role="user", content="hi")])
                mine = await p.complete(request)
                async with client.chat.completions.stream(
                    model=MODEL,
                    messages=[{"role": "user", "content": "hi"}],
                    stream_options={"include_usage": True},
                ) as stream:
                    theirs = await stream.get_final_completion()
                (choice,) = theirs.choices
                texts = [b.text for b in mine.content if isinstance(b, TextBlock)]
                assert (choice.message.content or "") == "".join(texts)
                calls = [b for b in mine.content if isinstance(b, ToolUseBlock)]
                assert [
                    (c.id, c.function.name, json.loads(c.function.arguments))
                    for c in choice.message.tool_calls or []
                ] == [(c.id, c.name, c.input) for c in calls]
                assert choice.finish_reason == mine.vendor_stop_reason
                assert theirs.usage is not None
                assert (theirs.usage.prompt_tokens, theirs.usage.completion_tokens) == (
                    mine.usage.input_tokens,
                    mine.usage.output_tokens,
                )
    finally:
        await client.close()
        await fake.stop()
