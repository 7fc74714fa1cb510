"""The wires as the vendors speak them today (#59): loopback far ends that
answer as the vendors' current documentation says, refusals word for word.

* OpenAI's GPT-5 and o-series on Chat Completions refuse any temperature but
  their default, and read ``reasoning_effort``; like OpenAI's API they refuse
  a top-level argument they do not know.
* DeepSeek's thinking mode refuses a tool loop's next turn whose assistant
  message lacks the ``reasoning_content`` it sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from tests.support.loopback import serve
from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.providers import openai
from vaelii_llm.providers.openai._chat import ChatCodec

params = pytest.importorskip("openai.types.chat.completion_create_params")

TEMPERATURE_REFUSED = (
    "Unsupported value: 'temperature' does not support {value} with this model. "
    "Only the default (1) value is supported."
)
"""OpenAI's 400 for a temperature a GPT-5 or o-series model does not take."""

REASONING_MISSING = "The `reasoning_content` in the thinking mode must be passed back to the API."
"""DeepSeek's 400 for a thinking-mode turn whose assistant message lost its reasoning."""

TOOL = ToolSchema(
    name="kb_types_of",
    description="Types of a term.",
    input_schema={"type": "object", "properties": {"term": {"type": "string"}}},
)


def _invalid(message: str, param: str | None, code: str | None) -> web.Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return web.json_response({"error": error}, status=400)


def _completion(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


@asynccontextmanager
async def far_end(answer: Any, seen: list[dict[str, Any]]) -> AsyncIterator[str]:
    """``POST /v1/chat/completions`` answered by ``answer(body)``; each body kept in ``seen``."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return answer(body)  # type: ignore[no-any-return]

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serve(app) as url:
        yield url + "/v1"


KNOWN = frozenset(params.CompletionCreateParamsBase.__annotations__)
"""The top-level arguments OpenAI's API takes, as its official client names them."""


def gpt5(body: dict[str, Any]) -> web.Response:
    """A GPT-5 as OpenAI documents it: no argument it does not know, a
    temperature of 1 only, ``reasoning_effort`` read (its reasoning tokens
    grow with it)."""
    for name in body:
        if name not in KNOWN:
            return _invalid(f"Unrecognized request argument supplied: {name}", None, None)
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        shown = f"{temperature:g}"
        return _invalid(TEMPERATURE_REFUSED.format(value=shown), "temperature", "unsupported_value")
    effort = body.get("reasoning_effort", "medium")
    reasoning = {"minimal": 0, "low": 64, "medium": 256, "high": 1024}[effort]
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": reasoning + 2,
        "total_tokens": reasoning + 11,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    return web.json_response(_completion({"role": "assistant", "content": "Hi."}, "stop", usage))


async def test_a_default_turn_is_one_gpt5_takes() -> None:
    """Before #59 every turn sent ``temperature: 0.0`` and GPT-5 refused it."""
    seen: list[dict[str, Any]] = []
    async with far_end(gpt5, seen) as base, openai.provider(base_url=base, model="gpt-5") as p:
        answer = await p.complete(Request(messages=[Message(role="user", content="hi")]))
        assert answer.content == [TextBlock(text="Hi.")]
        assert "temperature" not in seen[-1]
        with pytest.raises(errors.LLMApiError) as refused:
            await p.complete(Request(messages=[Message(role="user", content="hi")], temperature=0))
        assert refused.value.status == 400
        assert TEMPERATURE_REFUSED.format(value="0") in refused.value.body
        taken = await p.complete(
            Request(messages=[Message(role="user", content="hi")], temperature=1.0)
        )
        assert seen[-1]["temperature"] == 1.0
        assert taken.content == [TextBlock(text="Hi.")]


async def test_effort_goes_as_reasoning_effort() -> None:
    """Before #59 ``effort`` was dropped: the model reasoned at its default."""
    seen: list[dict[str, Any]] = []
    async with far_end(gpt5, seen) as base, openai.provider(base_url=base, model="gpt-5") as p:
        spent = {}
        for effort in ("minimal", "high"):
            request = Request(messages=[Message(role="user", content="hi")], effort=effort)
            answer = await p.complete(request)
            assert seen[-1]["reasoning_effort"] == effort
            assert answer.usage.extra is not None
            spent[effort] = answer.usage.extra["completion_tokens_details"]["reasoning_tokens"]
        assert spent == {"minimal": 0, "high": 1024}
        await p.complete(Request(messages=[Message(role="user", content="hi")]))
        assert "reasoning_effort" not in seen[-1]


def deepseek(field: str) -> Any:
    """DeepSeek's thinking mode (``field`` names its reasoning, as a server
    that says ``reasoning`` does): a first turn reasons and calls the tool;
    a later turn whose assistant message lost its reasoning is refused, as
    DeepSeek documents for thinking mode with tool calls."""

    def answer(body: dict[str, Any]) -> web.Response:
        usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
        assistants = [m for m in body["messages"] if m["role"] == "assistant"]
        if not assistants:
            call = {
                "id": "call_0",
                "type": "function",
                "function": {"name": "kb_types_of", "arguments": '{"term": "Muffet"}'},
            }
            message = {
                "role": "assistant",
                "content": "",
                field: "Ask the KB.",
                "tool_calls": [call],
            }
            return web.json_response(_completion(message, "tool_calls", usage))
        for message in assistants:
            if message.get("tool_calls") and message.get(field) != "Ask the KB.":
                return _invalid(REASONING_MISSING, None, "invalid_request_error")
        message = {"role": "assistant", "content": "A dog.", field: "It said Dog."}
        return web.json_response(_completion(message, "stop", usage))

    return answer


async def _tool_loop(p: openai.OpenAIProvider) -> tuple[Response, Response]:
    request = Request(messages=[Message(role="user", content="What is Muffet?")], tools=[TOOL])
    first = await p.complete(request)
    (call,) = [b for b in first.content if isinstance(b, ToolUseBlock)]
    result = ToolResultBlock(tool_use_id=call.id, content="(Dog)")
    second = Request(
        messages=[
            *request.messages,
            Message(role="assistant", content=first.content),
            Message(role="user", content=[result]),
        ],
        tools=[TOOL],
    )
    return first, await p.complete(second)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_a_thinking_tool_loop_sends_its_reasoning_back(field: str) -> None:
    """Before #59 the second turn was refused: the thinking was never sent back."""
    seen: list[dict[str, Any]] = []
    async with (
        far_end(deepseek(field), seen) as base,
        openai.provider(base_url=base, model="deepseek-reasoner") as p,
    ):
        first, second = await _tool_loop(p)
    assert first.content[0] == ThinkingBlock(thinking="Ask the KB.", raw={field: "Ask the KB."})
    assert second.content[-1] == TextBlock(text="A dog.")
    (back,) = [m for m in seen[-1]["messages"] if m["role"] == "assistant"]
    assert back[field] == "Ask the KB."
    (other,) = {"reasoning_content", "reasoning"} - {field}
    assert other not in back  # the field the server named, not both


async def test_the_switch_turns_reasoning_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a server that refuses it: the option, else the variable, else by host."""
    seen: list[dict[str, Any]] = []
    async with (
        far_end(deepseek("reasoning_content"), seen) as base,
        openai.provider(base_url=base, send_reasoning=False) as p,
    ):
        with pytest.raises(errors.LLMApiError) as refused:
            await _tool_loop(p)
    assert REASONING_MISSING in refused.value.body
    (back,) = [m for m in seen[-1]["messages"] if m["role"] == "assistant"]
    assert "reasoning_content" not in back
    monkeypatch.setenv("VAELII_OPENAI_SEND_REASONING", "0")
    assert ChatCodec({"base_url": "http://127.0.0.1:1/v1"}).send_reasoning is False
    assert ChatCodec({"base_url": "http://127.0.0.1:1/v1", "send_reasoning": True}).send_reasoning
    monkeypatch.delenv("VAELII_OPENAI_SEND_REASONING")
    assert ChatCodec({"base_url": "http://127.0.0.1:1/v1"}).send_reasoning is True
    # OpenAI's own API sends no reasoning on this wire and takes no field for it
    assert ChatCodec({"base_url": "https://api.openai.com/v1"}).send_reasoning is False
    monkeypatch.setenv("VAELII_OPENAI_SEND_REASONING", "yes")
    assert ChatCodec({"base_url": "https://api.openai.com/v1"}).send_reasoning is True


# -- the Responses wire: every output item back whole, the reasoning asked for encrypted --

ENCRYPTED = "gAAAAB-chain-of-thought"
COMMENTARY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "phase": "commentary",
    "content": [{"type": "output_text", "text": "Looking it up.", "annotations": []}],
    "x_server_note": "kept",  # a field this package does not model
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "kb_types_of",
    "arguments": '{"term": "Muffet"}',
    "status": "completed",
}


def codex(body: dict[str, Any]) -> web.Response:
    """A gpt-5.3-codex as OpenAI documents it: with ``store: false`` its
    reasoning comes encrypted only when ``include`` asks for it (as on
    Azure/Foundry), and a follow-up that loses the reasoning or an assistant
    message's ``phase`` stops early."""
    items = body["input"]
    asked = "reasoning.encrypted_content" in body.get("include", ())
    usage = {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10}
    if not any(item.get("type") == "function_call_output" for item in items):
        reasoning: dict[str, Any] = {"id": "rs_1", "type": "reasoning", "summary": []}
        if asked:
            reasoning["encrypted_content"] = ENCRYPTED
        output = [reasoning, COMMENTARY, CALL]
    else:
        whole = reasoning_kept = False
        for item in items:
            whole = whole or item == COMMENTARY
            reasoning_kept = reasoning_kept or item.get("encrypted_content") == ENCRYPTED
        text = "Muffet is a dog." if whole and reasoning_kept and CALL in items else "Done."
        output = [
            {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "phase": "final_answer",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5.3-codex",
        "status": "completed",
        "output": output,
        "usage": usage,
    }
    return web.json_response(response)


async def test_the_responses_wire_sends_every_item_back_whole() -> None:
    """Before #59 the message went back without its id and phase, the call
    without its id, and the reasoning never came encrypted: the model stopped early."""
    from vaelii_llm.providers import openai_responses

    seen: list[dict[str, Any]] = []

    async def respond(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return codex(body)

    app = web.Application()
    app.router.add_post("/v1/responses", respond)
    async with (
        serve(app) as url,
        openai_responses.provider(base_url=url + "/v1", model="gpt-5.3-codex") as p,
    ):
        request = Request(messages=[Message(role="user", content="What is Muffet?")], tools=[TOOL])
        first = await p.complete(request)
        assert seen[0]["include"] == ["reasoning.encrypted_content"]
        result = ToolResultBlock(tool_use_id="call_1", content="(Dog)")
        follow = Request(
            messages=[
                *request.messages,
                Message(role="assistant", content=first.content),
                Message(role="user", content=[result]),
            ],
            tools=[TOOL],
        )
        second = await p.complete(follow)
    assert [b.text for b in second.content if isinstance(b, TextBlock)] == ["Muffet is a dog."]
    sent = seen[1]["input"]
    assert sent[1]["encrypted_content"] == ENCRYPTED
    assert sent[2:4] == [COMMENTARY, CALL]  # each item as it came, unknown fields and all


# -- a hosted Ollama: OLLAMA_API_KEY as Authorization: Bearer, withheld everywhere --

KEY = "ollama-key-59-never-shown"


async def test_a_hosted_ollama_is_sent_its_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before #59 no key was sent: ollama.com answered every request 401."""
    from tests.support.fake_ollama import FakeOllama
    from vaelii_llm import providers
    from vaelii_llm.providers import ollama

    hi = Request(messages=[Message(role="user", content="hi")])
    async with FakeOllama(key=KEY) as host:
        monkeypatch.setenv("OLLAMA_API_KEY", "  " + KEY + "\r\n")  # a .env file's line
        assert await providers.available("ollama", host=host.url) is True
        assert await ollama.capabilities("phi4:14b", host=host.url)
        async with ollama.provider(host=host.url) as p:
            answer = await p.complete(hi)
            assert KEY not in repr(p)
        assert answer.content
        assert host.headers[-1]["Authorization"] == f"Bearer {KEY}"
        # a caller's own Authorization beats the key, as in the official client
        async with ollama.provider(host=host.url, headers={"authorization": "Bearer x"}) as p:
            with pytest.raises(errors.LLMApiError) as refused:
                await p.complete(hi)
        assert refused.value.status == 401
        # a wrong key echoed by the far end shows nowhere
        monkeypatch.setenv("OLLAMA_API_KEY", "wrong-" + KEY)
        reason = await providers.unavailable_reason("ollama", host=host.url)
        async with ollama.provider(host=host.url) as p:
            with caplog.at_level("DEBUG"), pytest.raises(errors.LLMApiError) as refused:
                await p.complete(hi)
        shown = [str(refused.value), repr(refused.value), refused.value.body, reason or ""]
        shown += [record.getMessage() for record in caplog.records]
        assert refused.value.status == 401
        assert reason is not None
        assert "401" in reason
        assert all(KEY not in text for text in shown)
        monkeypatch.delenv("OLLAMA_API_KEY")
        assert await providers.available("ollama", host=host.url) is False
