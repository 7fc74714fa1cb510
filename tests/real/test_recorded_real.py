"""A real llama-server's own bytes, replayed on loopback: the hermetic
suite reads what a far end nobody here wrote sent (recorded by
``tests/real/record_llama_server.py``; the server's version and command are in
the recording). Each answer is checked against an oracle read from the
recorded JSON here, by hand: text, stop reason, usage in ``Usage``'s one
meaning, the whole answer equal to the streamed one on each of its three wires
(Chat Completions, the Messages API, Responses), a refusal typed, and a real
tool call (from the server run with the tool template) on the first two."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from llama_server import worked_exchanges

import vaelii_llm
from tests.support.loopback import serve
from vaelii_llm import ImageBlock
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import ToolUseBlock
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.errors import LLMApiError
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses

RECORDED = json.loads((Path(__file__).parent / "recorded" / "llama_server.json").read_text())
CASES: dict[str, dict[str, Any]] = RECORDED["cases"]
PNG = Path(__file__).resolve().parents[2] / "examples" / "red_square.png"


def _replaying(case: dict[str, Any]) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        kind = case["content_type"].split(";")[0]
        return web.Response(status=case["status"], body=case["body"].encode(), content_type=kind)

    app = web.Application()
    app.router.add_post(case["path"], answer)
    return app


def _request(case: dict[str, Any]) -> Request:
    asked = case["request"]
    if "input" in asked:  # the Responses wire: the question as its input
        return Request(
            messages=[Message(role="user", content=asked["input"])],
            max_tokens=asked["max_output_tokens"],
        )
    content: str | list[Any] = asked["messages"][0]["content"]
    if not isinstance(content, str):  # the image case: the picture the recorder sent, then words
        content = [ImageBlock.from_path(PNG), TextBlock(text=content[-1]["text"])]
    fields: dict[str, Any] = {}
    if "response_format" in asked:
        fields["format"] = asked["response_format"]["json_schema"]["schema"]
    return Request(
        messages=[Message(role="user", content=content)],
        max_tokens=asked["max_tokens"],
        **fields,
    )


def _frames(body: str) -> list[dict[str, Any]]:
    """The oracle's reading of an SSE body: every ``data:`` line's JSON."""
    return [
        json.loads(line[5:])
        for line in body.split("\n")
        if line.startswith("data:") and line[5:].strip() != "[DONE]"
    ]


def _expected(name: str) -> tuple[str, str, int, int]:
    """Text, the far end's stop word, input and output tokens, by hand from the bytes."""
    case = CASES[name]
    if name.startswith("responses"):
        if name.endswith("-stream"):
            frames = _frames(case["body"])
            text = "".join(f["delta"] for f in frames if f["type"] == "response.output_text.delta")
            whole = next(
                f["response"]
                for f in frames
                if f["type"] in ("response.completed", "response.incomplete")
            )
        else:
            whole = json.loads(case["body"])
            text = "".join(
                part["text"]
                for item in whole["output"]
                if item["type"] == "message"
                for part in item["content"]
                if part["type"] == "output_text"
            )
        reason = (whole.get("incomplete_details") or {}).get("reason")
        stop = "max_tokens" if reason == "max_output_tokens" else whole["status"]
        usage = whole["usage"]
        return text, stop, usage["input_tokens"], usage["output_tokens"]
    if name.startswith("openai"):
        if name.endswith("-stream"):
            frames = _frames(case["body"])
            text = "".join(
                f["choices"][0]["delta"].get("content") or "" for f in frames if f["choices"]
            )
            stop = next(
                f["choices"][0]["finish_reason"]
                for f in frames
                if f["choices"] and f["choices"][0]["finish_reason"]
            )
            usage = next(f["usage"] for f in reversed(frames) if f.get("usage"))
        else:
            whole = json.loads(case["body"])
            text, stop = (
                whole["choices"][0]["message"]["content"],
                whole["choices"][0]["finish_reason"],
            )
            usage = whole["usage"]
        return text, stop, usage["prompt_tokens"], usage["completion_tokens"]
    if name.endswith("-stream"):
        frames = _frames(case["body"])
        text = "".join(f["delta"]["text"] for f in frames if f["type"] == "content_block_delta")
        stop = next(f["delta"]["stop_reason"] for f in frames if f["type"] == "message_delta")
        start = next(f["message"]["usage"] for f in frames if f["type"] == "message_start")
        counted = {**start, **next(f["usage"] for f in frames if f["type"] == "message_delta")}
    else:
        whole = json.loads(case["body"])
        text = "".join(b["text"] for b in whole["content"] if b["type"] == "text")
        stop, counted = whole["stop_reason"], whole["usage"]
    prompt = (
        counted["input_tokens"]
        + (counted.get("cache_read_input_tokens") or 0)
        + (counted.get("cache_creation_input_tokens") or 0)
    )
    return text, stop, prompt, counted["output_tokens"]


def _provider(name: str, base: str) -> Any:
    if name.startswith("responses"):
        return openai_responses.provider(base_url=base + "/v1", model="smollm2")
    if name.startswith("openai"):
        return openai.provider(base_url=base + "/v1", model="smollm2")
    return anthropic.provider(base_url=base, credential="sk-none", model="smollm2")


async def _replayed(name: str) -> Response:
    case = CASES[name]
    async with serve(_replaying(case)) as base, _provider(name, base) as model:
        if not name.endswith("-stream"):
            return await model.complete(_request(case))
        last = None
        async for item in model.stream(_request(case)):
            last = item
        assert isinstance(last, Response)
        return last


ANSWERED = sorted(name for name, case in CASES.items() if case["status"] == 200)


def test_the_recording_names_its_server_and_holds_every_case() -> None:
    assert RECORDED["server"].startswith("version: ")
    assert "--temp 0" in RECORDED["command"]
    assert len(ANSWERED) == 14  # 3 wires: text and max tokens, whole and streamed; format


@pytest.mark.parametrize("name", ANSWERED)
async def test_a_recorded_answer_reads_as_its_bytes_say(name: str) -> None:
    text, stop, prompt, generated = _expected(name)
    answer = await _replayed(name)
    assert "".join(getattr(b, "text", "") for b in answer.content) == text
    assert answer.vendor_stop_reason == stop
    if name.startswith("responses"):  # it answers "completed" for a cut too (#60): the same
        stop = _expected(name.replace("responses", "openai", 1))[1]  # turn's word on its twin
    assert answer.stop_reason == ("max_tokens" if stop in ("length", "max_tokens") else "end_turn")
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (prompt, generated)


def _no_raw(block: Any) -> Any:
    return msgspec.structs.replace(block, raw=None) if isinstance(block, TextBlock) else block


@pytest.mark.parametrize("name", [n for n in ANSWERED if not n.endswith("-stream")])
async def test_the_whole_answer_equals_the_streamed_one(name: str) -> None:
    whole, flowed = await _replayed(name), await _replayed(name + "-stream")
    # each recorded run named its own output items (Responses: msg_<random>), kept in raw
    assert [_no_raw(b) for b in whole.content] == [_no_raw(b) for b in flowed.content]
    assert (whole.stop_reason, whole.usage.output_tokens) == (
        flowed.stop_reason,
        flowed.usage.output_tokens,
    )


@pytest.mark.parametrize("name", ["openai-format", "openai-format-stream"])
async def test_structured_output_recorded_parses_against_its_schema(name: str) -> None:
    answer = await _replayed(name)
    parsed = json.loads("".join(getattr(b, "text", "") for b in answer.content))
    assert isinstance(parsed["name"], str)
    assert isinstance(parsed["legs"], int)
    assert set(parsed) == {"name", "legs"}


class Animal(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    legs: int


@pytest.mark.parametrize("name", ["openai-format", "openai-format-stream"])
async def test_a_typed_answer_recorded_is_its_struct(name: str) -> None:
    """(#62) The recorded answer to a schema, as ``vaelii_llm.answer`` reads it:
    the Struct whole, or streamed, partial values then the Struct."""
    case = CASES[name]
    expected = msgspec.json.decode(_expected(name)[0], type=Animal)
    request = msgspec.structs.replace(_request(case), format=None)
    async with serve(_replaying(case)) as base, _provider(name, base) as model:
        if not name.endswith("-stream"):
            assert await vaelii_llm.answer(model, request, into=Animal) == expected
            return
        async with aclosing(vaelii_llm.answer(model, request, into=Animal).stream()) as parts:
            seen = [part async for part in parts]
    assert seen[-1] == expected
    assert seen[-2] == msgspec.to_builtins(expected)
    assert all(isinstance(part, dict) for part in seen[:-1])


@pytest.mark.parametrize("name", ["openai-image", "openai-image-stream"])
async def test_an_image_to_a_text_only_model_is_the_server_s_typed_refusal(name: str) -> None:
    with pytest.raises(LLMApiError) as refused:
        await _replayed(name)
    assert refused.value.status == 500
    assert "image input is not supported" in str(refused.value)


TOOL_CASES: dict[str, dict[str, Any]] = RECORDED["tool_cases"]


def _expected_call(name: str) -> tuple[str, dict[str, Any], str]:
    """The call's name and input, and the stop word, by hand from the bytes."""
    body = TOOL_CASES[name]["body"]
    if name.startswith("openai"):
        if not name.endswith("-stream"):
            choice = json.loads(body)["choices"][0]
            call = choice["message"]["tool_calls"][0]["function"]
            return call["name"], json.loads(call["arguments"]), choice["finish_reason"]
        frames = [f["choices"][0] for f in _frames(body) if f["choices"]]
        pieces = [c["delta"]["tool_calls"][0] for c in frames if c["delta"].get("tool_calls")]
        named = next(p["function"]["name"] for p in pieces if p["function"].get("name"))
        arguments = "".join(p["function"].get("arguments") or "" for p in pieces)
        stop = next(c["finish_reason"] for c in frames if c["finish_reason"])
        return named, json.loads(arguments), stop
    if not name.endswith("-stream"):
        whole = json.loads(body)
        call = next(b for b in whole["content"] if b["type"] == "tool_use")
        return call["name"], call["input"], whole["stop_reason"]
    frames = _frames(body)
    started = next(f["content_block"] for f in frames if f["type"] == "content_block_start")
    arguments = "".join(
        f["delta"]["partial_json"]
        for f in frames
        if f["type"] == "content_block_delta" and f["delta"]["type"] == "input_json_delta"
    )
    stop = next(f["delta"]["stop_reason"] for f in frames if f["type"] == "message_delta")
    return started["name"], json.loads(arguments), stop


async def _replayed_call(name: str) -> Response:
    case = TOOL_CASES[name]
    asked = Request(
        messages=[*worked_exchanges(), Message(role="user", content="What is Muffet?")],
        tools=[tools.Toolset(kb.sample()).schema(tools.op_of("kb_types_of"))],
        max_tokens=case["request"]["max_tokens"],
    )
    async with serve(_replaying(case)) as base, _provider(name, base) as model:
        if not name.endswith("-stream"):
            return await model.complete(asked)
        last = None
        async for item in model.stream(asked):
            last = item
        assert isinstance(last, Response)
        return last


def test_the_recording_holds_a_real_tool_call_on_each_wire() -> None:
    assert "--chat-template-file" in RECORDED["tool_command"]
    assert sorted(TOOL_CASES) == [
        "anthropic-tool-call",
        "anthropic-tool-call-stream",
        "openai-tool-call",
        "openai-tool-call-stream",
    ]


@pytest.mark.parametrize("name", sorted(TOOL_CASES))
async def test_a_recorded_tool_call_reads_as_its_bytes_say(name: str) -> None:
    named, arguments, stop = _expected_call(name)
    answer = await _replayed_call(name)
    calls = [b for b in answer.content if isinstance(b, ToolUseBlock)]
    assert [(c.name, c.input, c.partial) for c in calls] == [(named, arguments, False)]
    assert answer.vendor_stop_reason == stop
    assert answer.stop_reason == "tool_use"
