"""The OpenAI-compatible backend: its body, its answers whole and streamed,
its key, its probes, and its far ends, honest and hostile, on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any
from typing import get_args

import msgspec
import pytest
from deltas_check import assert_deltas_make_the_blocks
from fake_openai import MODEL
from fake_openai import MODELS
from fake_openai import Call
from fake_openai import FakeOpenAI
from fake_openai import Transcript
from fake_openai import Turn
from fake_openai import hello
from fake_openai import random_turn
from fake_openai import transcript
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kb_model import GOAL
from kb_model import NAMES
from kb_model import QUESTION
from kb_model import answer_from

from vaelii_llm import errors
from vaelii_llm import providers
from vaelii_llm import telemetry
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm.providers import openai
from vaelii_llm.providers.openai._assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._assemble import ChunkAssembler
from vaelii_llm.providers.openai._assemble import response_of
from vaelii_llm.providers.openai._chat import chat_body
from vaelii_llm.providers.openai._chat import token_field
from vaelii_llm.providers.openai._key import APIKey

SECRET = "sk-proj-SECRET-do-not-show-1234"
DELTAS = get_args(Delta)


@pytest.fixture(autouse=True)
def _no_ambient_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "VAELII_OPENAI_MODEL", "VAELII_OPENAI_HOSTS"):
        monkeypatch.delenv(name, raising=False)


def ask(text: str = "hi", **kw: Any) -> Request:
    return Request(messages=[Message(role="user", content=text)], **kw)


def body_of(request: Request, *, stream: bool = False, **kw: Any) -> dict[str, Any]:
    opts: dict[str, Any] = {"model": MODEL, "max_tokens_field": "max_tokens", **kw}
    out: dict[str, Any] = json.loads(chat_body(request, stream=stream, **opts))
    return out


def whole(t: Transcript) -> Response:
    return response_of(WHOLE_DECODER.decode(json.dumps(t.completion).encode()))


def streamed(t: Transcript, cuts: list[int] | None = None, *, deltas: bool = False) -> list[Any]:
    """The transcript's SSE bytes through the codec's decoder and assembler,
    cut at ``cuts`` (byte offsets), as the skeleton's pump drives them."""
    from vaelii_llm._wire.sse import SSEFrames
    from vaelii_llm.providers.openai._assemble import not_sse

    data = t.sse()
    points = sorted({c % (len(data) + 1) for c in cuts or []})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    decoder = SSEFrames("test", not_sse)
    asm = ChunkAssembler("test", deltas=deltas)
    items: list[Any] = []
    for piece in filter(None, pieces):  # b"" would mark the end
        items.extend(asm.feed(decoder.feed(piece)))
        if asm.finished:
            break
    if not asm.finished:
        items.extend(asm.feed(decoder.feed(b"")))
    items.append(asm.result())
    return items


# ---------------------------------------------------------------- the body


def test_body_sends_the_token_limit_and_only_what_is_set() -> None:
    body = body_of(ask(max_tokens=99))
    assert body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 99,
    }  # no temperature unless asked for: GPT-5 and the o-series refuse any but 1 (#59)
    streamed_body = body_of(ask(temperature=0.7), stream=True, model=None)
    assert "model" not in streamed_body  # none set: the server answers with what it serves
    assert streamed_body["temperature"] == 0.7
    assert streamed_body["stream"] is True
    assert streamed_body["stream_options"] == {"include_usage": True}
    assert body_of(ask(model="other"))["model"] == "other"  # the request's own wins


@pytest.mark.parametrize(
    ("base_url", "explicit", "field"),
    [
        ("https://api.openai.com/v1", None, "max_completion_tokens"),
        ("https://my-res.openai.azure.com/openai/deployments/d", None, "max_completion_tokens"),
        ("http://127.0.0.1:8000/v1", None, "max_tokens"),
        ("https://api.groq.com/openai/v1", None, "max_tokens"),
        ("https://api.openai.com.evil.example/v1", None, "max_tokens"),
        ("http://127.0.0.1:8000/v1", "max_completion_tokens", "max_completion_tokens"),
        ("https://api.openai.com/v1", "max_tokens", "max_tokens"),
    ],
)
def test_the_token_field_is_chosen_by_host_and_a_caller_overrides_it(
    base_url: str, explicit: str | None, field: str
) -> None:
    assert token_field(base_url, explicit) == field
    p = openai.provider(base_url=base_url, max_tokens_field=explicit)
    body = json.loads(p._codec.body(ask(max_tokens=7), stream=False))
    assert body[field] == 7
    assert {"max_tokens", "max_completion_tokens"} - {field} - set(body) == {
        "max_tokens",
        "max_completion_tokens",
    } - {field}


def test_an_unknown_token_field_is_refused_at_build() -> None:
    with pytest.raises(ValueError, match="max_tokens_field"):
        openai.provider(max_tokens_field="max_new_tokens")


def test_tools_stop_and_format_are_shaped_for_the_wire() -> None:
    schema = {
        "title": "Verdict",
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    request = ask(
        tools=[
            ToolSchema(name="kb_query", description="Ask.", input_schema={"type": "object"}),
            ToolSchema(name="kb_x", description="X.", input_schema={"type": "object"}, strict=True),
        ],
        stop_sequences=["END"],
        format=schema,
    )
    body = body_of(request)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "kb_query",
                "description": "Ask.",
                "parameters": {"type": "object"},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "kb_x",
                "description": "X.",
                "parameters": {"type": "object"},
                "strict": True,
            },
        },
    ]
    assert body["stop"] == ["END"]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": schema, "strict": True},
    }
    loose = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert body_of(ask(format=loose))["response_format"]["json_schema"] == {
        "name": "response",
        "schema": loose,
        "strict": False,  # OpenAI refuses a strict schema that leaves a property optional
    }
    wrapped = {"type": "json_schema", "json_schema": {"name": "x", "schema": loose}}
    assert body_of(ask(format=wrapped))["response_format"] == wrapped


def test_a_tool_round_trip_maps_to_tool_calls_and_tool_messages() -> None:
    came = ToolUseBlock(
        id="call_1",
        name="kb_query",
        input={"goal": "(a ?x)"},
        raw={
            "id": "call_1",
            "type": "function",
            "function": {"name": "kb_query", "arguments": '{"goal":  "(a ?x)"}'},
        },
    )
    built = ToolUseBlock(id="toolu_2", name="kb_types_of", input={"term": "Muffet"})
    other_vendor = ToolUseBlock(
        id="call_3",
        name="kb_x",
        input={"n": 1},
        raw={"function": {"name": "kb_x", "arguments": {"n": 1}}},  # Ollama's shape
    )
    request = Request(
        system="Be brief.",
        messages=[
            Message(role="user", content="q"),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="let me see", signature="sig"),
                    RedactedThinkingBlock(data="xx"),
                    TextBlock(text="Asking."),
                    came,
                    built,
                    other_vendor,
                ],
            ),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="call_1", content="r1"),
                    ToolResultBlock(tool_use_id="toolu_2", content="r2", is_error=True),
                    ToolResultBlock(tool_use_id="call_3", content="r3"),
                    TextBlock(text="and?"),
                ],
            ),
            Message(role="assistant", content=[came]),
        ],
    )
    messages = body_of(request)["messages"]
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "Asking.",
            "tool_calls": [
                came.raw,  # as the model wrote it, its spacing kept
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "kb_types_of", "arguments": '{"term":"Muffet"}'},
                },
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "kb_x", "arguments": '{"n":1}'},
                },
            ],
            "reasoning_content": "let me see",  # the thinking back; redacted has no text (#59)
        },
        {"role": "tool", "content": "r1", "tool_call_id": "call_1"},
        {"role": "tool", "content": "r2", "tool_call_id": "toolu_2"},
        {"role": "tool", "content": "r3", "tool_call_id": "call_3"},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": None, "tool_calls": [came.raw]},
    ]


def test_a_call_this_wire_made_is_rebuilt_for_ollama() -> None:
    from vaelii_llm.providers.ollama._chat import chat_body as ollama_body

    came = ToolUseBlock(
        id="call_1",
        name="kb_query",
        input={"goal": "g"},
        raw={
            "id": "call_1",
            "type": "function",
            "function": {"name": "kb_query", "arguments": "{}"},
        },
    )
    request = Request(messages=[Message(role="assistant", content=[came])])
    sent = json.loads(ollama_body(request, model="m", num_ctx=1, keep_alive="1m", stream=False))
    call = sent["messages"][0]["tool_calls"][0]
    assert call == {"function": {"name": "kb_query", "arguments": {"goal": "g"}}}


@pytest.mark.parametrize(
    "message",
    [
        Message(role="assistant", content=[OpaqueBlock(type="server_tool_use", raw={"a": 1})]),
        Message(role="assistant", content=[ToolResultBlock(tool_use_id="x", content="r")]),
        Message(role="user", content=[ToolUseBlock(id="x", name="n", input={})]),
        Message(role="user", content=[ThinkingBlock(thinking="t")]),
    ],
)
def test_a_block_with_no_shape_on_this_wire_is_refused(message: Message) -> None:
    with pytest.raises(errors.LLMEncode):
        body_of(Request(messages=[message]))


# ---------------------------------------------------------------- the answer


def test_a_whole_answer_maps_content_usage_and_stop_reason() -> None:
    turn = Turn(
        thinking=["Look", "ing."],
        text=["The ", "answer."],
        calls=[Call("call_9", "kb_query", ['{"goal":', ' "(a ?x)"}'])],
        finish_reason="tool_calls",
        usage={
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    )
    response = whole(transcript(turn))
    assert response.content == [
        ThinkingBlock(thinking="Looking.", raw={"reasoning_content": "Looking."}),
        TextBlock(text="The answer."),
        ToolUseBlock(
            id="call_9",
            name="kb_query",
            input={"goal": "(a ?x)"},
            raw={
                "id": "call_9",
                "type": "function",
                "function": {"name": "kb_query", "arguments": '{"goal": "(a ?x)"}'},
            },
        ),
    ]
    assert response.stop_reason == "tool_use"
    assert response.vendor_stop_reason == "tool_calls"
    assert response.model == MODEL
    assert response.id == "chatcmpl-fake-1"
    assert response.usage == Usage(
        input_tokens=10,
        output_tokens=5,
        cache_read_input_tokens=4,
        extra={"total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 4}},
    )


@pytest.mark.parametrize(
    ("finish", "calls", "stop_string", "expected"),
    [
        ("stop", False, None, "end_turn"),
        ("stop", True, None, "tool_use"),  # servers differ; a call waits for its result
        ("stop", False, "END", "stop_sequence"),
        ("tool_calls", True, None, "tool_use"),
        ("tool_calls", False, None, "end_turn"),
        ("length", False, None, "max_tokens"),
        ("content_filter", False, None, "refusal"),
        ("function_call", True, None, "tool_use"),
        ("eos", False, None, "end_turn"),
        ("abort", True, None, "tool_use"),
    ],
)
def test_finish_reason_maps_to_the_neutral_word_and_is_kept(
    finish: str, calls: bool, stop_string: str | None, expected: str
) -> None:
    turn = Turn(text=["x"], finish_reason=finish, stop_string=stop_string)
    if calls:
        turn.calls = [Call("c", "kb_q", ["{}"])]
    for style in ("vllm", "openai", "llamacpp"):
        t = transcript(turn, style)  # type: ignore[arg-type]
        # only vLLM names the stop string; elsewhere a stop sequence is a plain stop
        wanted = "end_turn" if expected == "stop_sequence" and style != "vllm" else expected
        for response in (whole(t), streamed(t)[-1]):
            assert response.stop_reason == wanted
            assert response.vendor_stop_reason == finish
            assert response.stop_sequence == ("END" if wanted == "stop_sequence" else None)


def test_a_refusal_is_stop_reason_refusal_with_its_text_kept() -> None:
    turn = Turn(refusal=["I can't ", "help with that."], finish_reason="stop")
    t = transcript(turn, "openai")
    for response in (whole(t), streamed(t)[-1]):
        assert response.stop_reason == "refusal"
        assert response.vendor_stop_reason == "stop"
        assert response.content == []
        assert response.stop_details == {
            "type": "refusal",
            "explanation": "I can't help with that.",
        }


def test_reasoning_named_reasoning_is_thinking_too() -> None:
    completion = {
        "id": "x",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"content": "A", "reasoning": "R"}, "finish_reason": "stop"}
        ],
    }
    named = ThinkingBlock(thinking="R", raw={"reasoning": "R"})  # the field it came in
    assert response_of(msgspec.convert(completion, type=WHOLE_DECODER.type)).content == [
        named,
        TextBlock(text="A"),
    ]
    asm = ChunkAssembler()
    frames = [
        (b"message", json.dumps({"choices": [{"delta": {"reasoning": "R"}}]}).encode()),
        (b"message", json.dumps({"choices": [{"delta": {"content": "A"}}]}).encode()),
        (b"message", json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}).encode()),
    ]
    assert list(asm.feed(frames)) == [named, TextBlock(text="A")]


def test_deltas_come_before_their_block_at_its_index() -> None:
    turn = Turn(
        thinking=["th", "ink"],
        text=["a", "b"],
        calls=[Call("c1", "kb_a", ['{"x"', ": 1}"]), Call("c2", "kb_b", [])],
        finish_reason="tool_calls",
    )
    items = streamed(transcript(turn), deltas=True)
    response = items[-1]
    assert items[:-1] == [
        ThinkingDelta(index=0, thinking="th"),
        ThinkingDelta(index=0, thinking="ink"),
        TextDelta(index=1, text="a"),
        TextDelta(index=1, text="b"),
        ToolUseStart(index=2, id="c1", name="kb_a"),
        ToolInputDelta(index=2, partial_json='{"x"'),
        ToolInputDelta(index=2, partial_json=": 1}"),
        ToolUseStart(index=3, id="c2", name="kb_b"),
        *response.content,
    ]
    assert response.content[3] == ToolUseBlock(
        id="c2",
        name="kb_b",
        input={},
        raw={"id": "c2", "type": "function", "function": {"name": "kb_b", "arguments": ""}},
    )


def chunk_frame(delta: dict[str, Any], finish: str | None = None) -> tuple[bytes, bytes]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return (b"message", json.dumps({"id": "i", "model": "m", "choices": [choice]}).encode())


def test_tool_calls_are_assembled_by_index_whatever_the_interleaving() -> None:
    def call(index: int | None, **kw: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"function": {k: v for k, v in kw.items() if k != "id"}}
        if index is not None:
            out["index"] = index
        if "id" in kw:
            out["id"] = kw["id"]
        return out

    frames = [
        chunk_frame({"tool_calls": [call(0, id="a", name="kb_a", arguments="")]}),
        chunk_frame({"tool_calls": [call(1, id="b", name="kb_b", arguments='{"y"')]}),
        chunk_frame({"tool_calls": [call(0, arguments='{"x":'), call(1, arguments=": 2}")]}),
        chunk_frame({"tool_calls": [call(0, id="", arguments=" 1}")]}),  # "" continues
        # a server numbering a parallel call 0 again, with a new id: a new call
        chunk_frame({"tool_calls": [call(0, id="c", name="kb_c", arguments="{}")]}),
        # no index: a new id opens a call, none continues the last
        chunk_frame({"tool_calls": [call(None, id="d", name="kb_d", arguments='{"z"')]}),
        chunk_frame({"tool_calls": [call(None, arguments=": 3}")]}),
        chunk_frame({}, "tool_calls"),
    ]
    blocks = list(ChunkAssembler().feed(frames))
    assert [(b.id, b.name, b.input) for b in blocks if isinstance(b, ToolUseBlock)] == [
        ("a", "kb_a", {"x": 1}),
        ("b", "kb_b", {"y": 2}),
        ("c", "kb_c", {}),
        ("d", "kb_d", {"z": 3}),
    ]


def test_a_call_with_no_id_gets_its_position() -> None:
    frames = [
        chunk_frame(
            {"tool_calls": [{"index": 0, "function": {"name": "kb_a", "arguments": "{}"}}]}
        ),
        chunk_frame({}, "tool_calls"),
    ]
    (block,) = ChunkAssembler().feed(frames)
    assert isinstance(block, ToolUseBlock)
    assert block.id == "call_0"


def test_arguments_cut_by_length_are_read_leniently_and_never_run() -> None:
    turn = Turn(
        calls=[Call("c1", "kb_a", ['{"a": 1}']), Call("c2", "kb_b", ['{"goal": "(isa Muf'])],
        finish_reason="length",
    )
    t = transcript(turn)
    for response in (whole(t), streamed(t)[-1]):
        assert response.stop_reason == "max_tokens"
        first, last = response.content
        assert isinstance(first, ToolUseBlock)
        assert isinstance(last, ToolUseBlock)
        assert not first.partial
        assert last.partial
        assert last.input == {"goal": "(isa Muf"}


@pytest.mark.parametrize("arguments", ['{"goal": "(isa', "[1, 2]", '"text"'])
def test_arguments_that_are_no_json_object_are_a_bad_response(arguments: str) -> None:
    t = transcript(Turn(calls=[Call("c", "kb_a", [arguments])], finish_reason="tool_calls"))
    with pytest.raises(errors.LLMBadResponse, match="kb_a"):
        whole(t)
    with pytest.raises(errors.LLMBadResponse, match="kb_a"):
        streamed(t)


@pytest.mark.parametrize(
    "frame",
    [
        (b"message", b'{"error": {"message": "overloaded", "type": "server_error"}}'),
        (b"message", b'{"object": "error", "message": "boom", "type": "BadRequest", "code": 400}'),
        (b"error", b'{"error": {"message": "boom"}}'),
    ],
)
def test_an_error_frame_is_an_api_error_after_what_came_before(frame: tuple[bytes, bytes]) -> None:
    asm = ChunkAssembler(deltas=True)
    got: list[StreamItem] = []
    items = asm.feed([chunk_frame({"content": "He"}), chunk_frame({"content": "y"}), frame])
    with pytest.raises(errors.LLMApiError) as info:
        got.extend(item for item in items)
    assert info.value.status == 200
    assert got == [TextDelta(index=0, text="He"), TextDelta(index=0, text="y")]


def test_an_error_object_in_a_200_body_is_an_api_error() -> None:
    body = b'{"error": {"message": "The server had an error", "type": "server_error"}}'
    with pytest.raises(errors.LLMApiError, match="server had an error") as info:
        response_of(WHOLE_DECODER.decode(body))
    assert info.value.status == 200


@pytest.mark.parametrize(
    ("frames", "why"),
    [
        ([chunk_frame({"content": "He"}), (b"message", b"[DONE]")], "finish_reason"),
        ([chunk_frame({"content": "He"})], "finish_reason"),
        ([(b"message", b"{not json")], "will not parse"),
        ([(b"message", b"[" * 100_000)], "will not parse"),
        (
            [chunk_frame({}, "stop"), chunk_frame({"content": "late"})],
            "after its finish_reason",
        ),
    ],
)
def test_a_stream_cut_short_or_malformed_is_a_bad_response(
    frames: list[tuple[bytes, bytes]], why: str
) -> None:
    def run() -> Response:
        asm = ChunkAssembler()
        list(asm.feed(frames))
        return asm.result()

    with pytest.raises(errors.LLMBadResponse, match=why):
        run()


def test_a_finish_without_done_at_the_end_of_the_body_is_whole() -> None:
    t = transcript(Turn(text=["ok"]), "llamacpp")
    asm = ChunkAssembler()
    frames = [(b"message", json.dumps(c).encode()) for c in t.chunks]
    assert list(asm.feed(frames)) == [TextBlock(text="ok")]
    assert not asm.finished
    assert asm.result() == whole(t)


def test_no_choice_is_a_bad_response() -> None:
    with pytest.raises(errors.LLMBadResponse, match="no choices"):
        response_of(WHOLE_DECODER.decode(b'{"id": "x", "choices": []}'))


# ---------------------------------------------------------------- stream equals complete


@st.composite
def turns(draw: st.DrawFn) -> Transcript:
    seed = draw(st.integers(0, 2**32))
    style = draw(st.sampled_from(["vllm", "openai", "llamacpp"]))
    return transcript(random_turn(random.Random(seed)), style)


@settings(max_examples=300, deadline=None)
@given(t=turns(), cuts=st.lists(st.integers(0, 10**6), max_size=12))
def test_a_reassembled_stream_equals_the_whole_answer(t: Transcript, cuts: list[int]) -> None:
    """For random turns (reasoning, text, several tool calls whose arguments
    are split at random points), cut into random byte pieces: the stream's
    Response equals the whole one's, its blocks are that Response's content,
    and with deltas the rest is the same and the deltas join to the blocks."""
    expected = whole(t)
    plain = streamed(t, cuts)
    assert plain[-1] == expected
    assert plain[:-1] == expected.content
    with_deltas = streamed(t, cuts, deltas=True)
    assert [i for i in with_deltas if not isinstance(i, DELTAS)] == plain
    assert_deltas_make_the_blocks(with_deltas, expected.content)


# ---------------------------------------------------------------- the key


@pytest.mark.parametrize("value", [" sk-1 \r\n", "sk-1\n"])
def test_a_key_is_trimmed(value: str) -> None:
    key = APIKey.of(value)
    assert key is not None
    assert key.headers() == {"Authorization": "Bearer sk-1"}


@pytest.mark.parametrize("value", ["sk-\x001", "sk-a\nb", "sk-\u20281"])
def test_a_key_with_a_control_character_is_refused_naming_the_header(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(errors.LLMBadCredential) as info:
        openai.provider(api_key=value)
    assert info.value.header == "Authorization"
    assert value.strip() not in str(info.value)
    if "\x00" not in value:  # no environment variable can hold a NUL
        monkeypatch.setenv("OPENAI_API_KEY", value)
        with pytest.raises(errors.LLMBadCredential):
            openai.provider()


def test_no_key_and_a_blank_key_send_no_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "Authorization" not in openai.provider()._codec.session_headers()
    assert "Authorization" not in openai.provider(api_key="  ")._codec.session_headers()
    monkeypatch.setenv("OPENAI_API_KEY", " \n")
    assert "Authorization" not in openai.provider()._codec.session_headers()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert openai.provider()._codec.session_headers()["Authorization"] == f"Bearer {SECRET}"


def test_the_key_is_in_no_repr() -> None:
    # one provider each: a URL's password and a key together are refused (#47)
    keyed = openai.provider(api_key=SECRET, base_url="http://gw.example/v1")
    p = openai.provider(base_url="http://u:pw-SECRET-2@gw.example/v1")
    key = APIKey.of(SECRET)
    shown = repr(keyed) + str(keyed) + repr(key) + str(key) + repr(keyed._codec)
    shown += repr(p) + str(p) + repr(p._codec) + p.endpoint.label
    assert SECRET not in shown
    assert "pw-SECRET-2" not in shown


# ---------------------------------------------------------------- over the wire


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


async def collect(p: Provider, req: Request, *, deltas: bool = False) -> list[StreamItem]:
    async with aclosing(p.stream(req, deltas=deltas)) as items:
        return [item async for item in items]


async def test_complete_and_stream_against_the_fake(fake: FakeOpenAI) -> None:
    t = transcript(
        Turn(
            thinking=["hm"],
            text=["Calling."],
            calls=[Call("call_1", "kb_query", ['{"goal"', ': "(a ?x)"}'])],
            finish_reason="tool_calls",
        )
    )
    fake.script = lambda _b: t
    async with openai.provider(base_url=fake.base_url, model=MODEL) as p:
        done = await p.complete(ask())
        items = await collect(p, ask())
        with_deltas = await collect(p, ask(), deltas=True)
    assert items == [*done.content, done]
    assert [i for i in with_deltas if not isinstance(i, DELTAS)] == items
    assert done == whole(t)
    sent_whole, sent_stream, _ = fake.bodies
    assert "stream" not in sent_whole
    assert sent_stream["stream"] is True
    assert sent_stream["stream_options"] == {"include_usage": True}
    assert {h["Content-Type"] for h in fake.headers} == {"application/json"}


async def test_the_key_and_headers_go_on_every_request_and_nowhere_else(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.key = SECRET
    gateway = {"X-Gateway-Key": "g-SECRET-1"}
    async with openai.provider(base_url=fake.base_url, api_key=SECRET, headers=gateway) as p:
        await p.complete(ask())
        await collect(p, ask())
        assert await openai.available(fake.base_url, api_key=SECRET, headers=gateway)
        assert SECRET not in repr(p)
    assert [h["Authorization"] for h in fake.headers] == [f"Bearer {SECRET}"] * 3
    assert [h["X-Gateway-Key"] for h in fake.headers] == ["g-SECRET-1"] * 3
    async with openai.provider(base_url=fake.base_url, api_key="wrong") as p:
        with pytest.raises(errors.LLMApiError) as info:
            await p.complete(ask())
    assert info.value.status == 401
    assert "invalid_api_key" in info.value.body
    assert await openai.available(fake.base_url) is False  # a 401 is no answer
    # a gateway's own Authorization wins over the key's
    async with openai.provider(
        base_url=fake.base_url, api_key="wrong", headers={"authorization": f"Bearer {SECRET}"}
    ) as p:
        assert (await p.complete(ask())).content
    for record in caplog.records:
        assert SECRET not in record.getMessage() + (record.exc_text or "")


async def test_an_unusable_key_makes_the_probe_answer_false_with_a_warning(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    assert await openai.available(fake.base_url, api_key="sk-\x01bad") is False
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "Authorization" in record.getMessage()
    assert "bad" not in record.getMessage()


async def test_an_unknown_model_is_the_servers_404(fake: FakeOpenAI) -> None:
    async with openai.provider(base_url=fake.base_url, model="nope") as p:
        with pytest.raises(errors.LLMApiError) as info:
            await p.complete(ask())
        assert info.value.status == 404
        with pytest.raises(errors.LLMApiError) as streamed_info:
            await collect(p, ask())
    assert streamed_info.value.status == 404
    assert len(fake.bodies) == 2  # no retry


async def test_probes_list_the_served_models(fake: FakeOpenAI, unused_tcp_port: int) -> None:
    assert await openai.models(fake.base_url) == MODELS
    assert await openai.available(fake.base_url) is True
    dead = f"http://127.0.0.1:{unused_tcp_port}/v1"
    assert await openai.available(dead) is False
    with pytest.raises(errors.LLMUnreachable):
        await openai.models(dead)
    assert await openai.available(fake.url) is False  # no /models there: a 404
    assert await openai.available("not a url") is False


async def test_selection_builds_openai_or_falls_back_to_the_stub(
    fake: FakeOpenAI, unused_tcp_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("VAELII_OPENAI_MODEL", MODEL)
    assert await providers.available("openai") is True
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
    assert await providers.active_kind() == "openai"
    p = await providers.provider()
    assert isinstance(p, openai.OpenAIProvider)
    assert isinstance(p, Provider)
    assert p.model == MODEL
    async with p:
        assert (await p.complete(ask())).content == [TextBlock(text="Hello! How are you today?")]
    g = await providers.generation_provider()
    assert isinstance(g, openai.OpenAIProvider)
    await g.aclose()
    dead = f"http://127.0.0.1:{unused_tcp_port}/v1"
    fallback = await providers.provider(base_url=dead, stub={"script": ["from the stub"]})
    async with fallback:
        assert not isinstance(fallback, openai.OpenAIProvider)
        assert (await fallback.complete(ask())).content == [TextBlock(text="from the stub")]
    assert await providers.warm() is None  # no warm-up on this wire


async def test_concurrent_turns_reuse_the_providers_connection_pool(fake: FakeOpenAI) -> None:
    async with openai.provider(base_url=fake.base_url) as p:

        async def wave() -> None:
            await asyncio.gather(
                *(p.complete(ask()) for _ in range(16)), *(collect(p, ask()) for _ in range(16))
            )

        await wave()
        first = fake.connections
        for _ in range(3):
            await wave()
    assert len(fake.bodies) == 128
    assert fake.connections == first  # every later turn rode a pooled connection


async def test_breaking_out_of_a_stream_releases_its_response(fake: FakeOpenAI) -> None:
    fake.mode = "stall"
    async with openai.provider(base_url=fake.base_url) as p:
        async with aclosing(p.stream(ask(timeout_ms=30_000), deltas=True)) as items:
            async for item in items:
                assert item == TextDelta(index=0, text="Hello")
                break
        await fake.wait_disconnects(1)  # released at once: the server sees the connection go
        fake.mode = None
        assert (await p.complete(ask())).content


async def test_a_body_held_open_after_done_keeps_the_answer(fake: FakeOpenAI) -> None:
    async with openai.provider(base_url=fake.base_url) as p:
        done = await p.complete(ask())
        fake.mode = "held_after_done"
        items = await collect(p, ask(timeout_ms=3_600_000))
        await fake.wait_disconnects(1)
    assert items[-1] == done


# ---------------------------------------------------------------- hostile far ends


HOSTILE: list[tuple[str, type[errors.LLMError], bool]] = [
    # the far end's mode, the refusal, and whether a whole answer meets it too
    ("stall", errors.LLMTimeout, True),
    ("drip", errors.LLMTimeout, True),
    ("bad_gateway", errors.LLMApiError, True),
    ("html", errors.LLMBadResponse, True),
    ("cut", errors.LLMBadResponse, True),
    ("truncated", errors.LLMBadResponse, True),
    ("huge", errors.LLMBadResponse, True),
    ("deep", errors.LLMBadResponse, True),
    ("error_200", errors.LLMApiError, True),
    ("error_mid_stream", errors.LLMApiError, False),
    ("error_event", errors.LLMApiError, False),
    ("no_done", errors.LLMBadResponse, False),
]
BUDGET_MS = 600
"""The budget that ends a stall or a drip (the rows refused LLMTimeout)."""
BOUND_MS = 60_000
"""The budget of every other row: its own refusal ends it, and a budget that
could pass first (a loaded machine reading the huge row's body up to the cap) would
answer LLMTimeout in its place."""


@pytest.mark.parametrize(("mode", "refusal", "whole_too"), HOSTILE)
async def test_a_hostile_far_end_ends_typed_within_the_budget(
    fake: FakeOpenAI, mode: str, refusal: type[errors.LLMError], whole_too: bool
) -> None:
    """Each turn ends in its typed error, its message short: a stall or a
    drip ends at the turn's budget (no clock is read here: a turn that hung
    would be no LLMTimeout of that budget)."""
    fake.mode = mode
    async with openai.provider(base_url=fake.base_url) as p:
        request = ask(timeout_ms=BUDGET_MS if refusal is errors.LLMTimeout else BOUND_MS)
        refused: list[errors.LLMError] = []
        if mode == "no_done":  # a finish, then EOF: the answer is whole
            assert (await collect(p, request))[-1] == whole(hello({}))
            fake.mode = "truncated"
        with pytest.raises(refusal) as streamed_info:
            await collect(p, request)
        refused.append(streamed_info.value)
        if whole_too:
            with pytest.raises(refusal) as whole_info:
                await p.complete(request)
            refused.append(whole_info.value)
    for err in refused:
        assert len(str(err)) < 450  # label, reason, a 200-character excerpt
        if isinstance(err, errors.LLMTimeout):
            assert err.timeout_ms == BUDGET_MS
        if isinstance(err, errors.LLMApiError) and mode == "bad_gateway":
            assert err.status == 502


async def test_a_closed_provider_refuses_a_turn(fake: FakeOpenAI) -> None:
    p = openai.provider(base_url=fake.base_url)
    await p.aclose()
    await p.aclose()
    with pytest.raises(errors.LLMClosed, match="closed"):
        await p.complete(ask())
    with pytest.raises(errors.LLMClosed):
        await collect(p, ask())


# ---------------------------------------------------------------- many transcripts, on the wire


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(t=turns())
async def test_stream_and_complete_are_equal_on_the_wire(fake: FakeOpenAI, t: Transcript) -> None:
    fake.script = lambda _b: t
    async with openai.provider(base_url=fake.base_url) as p:
        done = await p.complete(ask())
        items = await collect(p, ask())
        with_deltas = await collect(p, ask(), deltas=True)
    assert items == [*done.content, done]
    assert [i for i in with_deltas if not isinstance(i, DELTAS)] == items


# ---------------------------------------------------------------- a vote over a fleet; the command


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("gpu1:8000*4,gpu2:8000", [("http://gpu1:8000/v1", 4), ("http://gpu2:8000/v1", 2)]),
        ("https://api.example/openai/v1*3", [("https://api.example/openai/v1", 3)]),
        ("[::1]:8080/v1/*1", [("http://[::1]:8080/v1", 1)]),
        ("", []),
    ],
)
def test_openai_hosts_read_base_urls_in_the_pool_grammar(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: list[tuple[str, int]]
) -> None:
    from vaelii_llm import pool

    assert [tuple(h) for h in pool.hosts(value, kind="openai")] == expected
    monkeypatch.setenv("VAELII_OPENAI_HOSTS", value)
    assert [tuple(h) for h in pool.hosts(kind="openai")] == expected


def test_unset_openai_hosts_is_the_one_base_url_and_bad_ones_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vaelii_llm import pool

    assert [tuple(h) for h in pool.hosts(kind="openai")] == [("https://api.openai.com/v1", 2)]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1/")
    assert [tuple(h) for h in pool.hosts(kind="openai")] == [("http://127.0.0.1:8000/v1", 2)]
    for bad in ("a,,b", "a*0", "ftp://x", "http://u:pw-SECRET@h"):
        with pytest.raises(errors.LLMBadHosts) as info:
            pool.hosts(bad, kind="openai")
        assert "pw-SECRET" not in str(info.value)


async def test_a_vote_spreads_over_a_fleet_of_openai_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    from vaelii_llm import pool

    fleet = [await FakeOpenAI(script=lambda _b: transcript(Turn(text=["Yes."]))).start()]
    fleet.append(await FakeOpenAI(script=lambda _b: transcript(Turn(text=["No."]))).start())
    try:
        hosts = f"{fleet[0].base_url}*2,{fleet[1].base_url}*1"
        monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        async with await pool.pool_from_config(hosts, model=MODEL) as voters:
            assert voters.size == 3
            assert all(isinstance(p, openai.OpenAIProvider) for p in voters.providers)
            outcome = await pool.vote(voters, "Is a spider an insect?", votes=6)
        assert outcome.failed == 0
        assert outcome.tally["yes"] + outcome.tally["no"] == 6
        assert fleet[0].bodies  # both hosts voted
        assert fleet[1].bodies
        assert {h["Authorization"] for f in fleet for h in f.headers} == {f"Bearer {SECRET}"}
        assert {b["model"] for f in fleet for b in f.bodies} == {MODEL}
        with pytest.raises(errors.LLMBadHosts, match="VAELII_OPENAI_HOSTS"):
            await pool.pool_from_config("", kind="openai")
        with pytest.raises(ValueError, match="names no pool hosts; it votes on its one host"):
            await pool.pool_from_config(hosts, kind="anthropic")
        with pytest.raises(ValueError, match="not 'stub'"):
            await pool.pool_from_config(hosts, kind="stub")
    finally:
        for server in fleet:
            await server.stop()


async def test_status_lists_the_served_models_and_vote_runs_on_the_fleet(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vaelii_llm import cli

    fake.key = SECRET
    fake.script = lambda _b: transcript(Turn(text=["Yes, it is."]))
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("VAELII_OPENAI_MODEL", "not-served")

    def run(*argv: str) -> tuple[int, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        assert SECRET not in out + err
        return code, out

    # cli.main runs its own event loop: off this test's loop, in a thread
    code, out = await asyncio.to_thread(run, "status")
    assert code == 0
    assert "answering:  openai" in out
    assert f"served:     {', '.join(MODELS)}" in out
    assert "'not-served' is not among the served models" in out
    monkeypatch.setenv("VAELII_OPENAI_MODEL", MODEL)
    code, out = await asyncio.to_thread(run, "vote", "Is it?", "--votes", "3")
    assert code == 0
    assert "verdict: yes" in out
    code, out = await asyncio.to_thread(run, "config")
    assert "OPENAI_API_KEY                   set" in out


async def test_a_traced_turn_names_the_provider_openai_and_never_the_key(
    fake: FakeOpenAI, otel: Any
) -> None:
    fake.key = SECRET
    built = openai.provider(base_url=fake.base_url, api_key=SECRET, model=MODEL)
    async with telemetry.instrument(built, "openai") as p:
        otel.enable(capture_content=True)
        await p.complete(ask())
        await collect(p, ask())
    spans = otel.finished()
    assert otel.names() == [f"chat {MODEL}"] * 2
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
        assert SECRET not in repr(attributes) + repr([e.attributes for e in span.events])


def two_turns(body: dict[str, Any]) -> Transcript:
    """A call to ``kb_types_of``, then, once its result is back, an answer quoting it."""
    messages = body["messages"]
    if messages[-1]["role"] != "tool":
        pieces = ['{"term"', ': "Muffet"}']
        return transcript(
            Turn(calls=[Call("call_k", "kb_types_of", pieces)], finish_reason="tool_calls")
        )
    return transcript(Turn(text=["Types: ", messages[-1]["content"][:40]]))


async def test_the_agent_loop_and_pydantic_ai_run_on_it_unchanged(fake: FakeOpenAI) -> None:
    from pydantic_ai import Agent

    from vaelii_llm import agent
    from vaelii_llm import kb
    from vaelii_llm import tools
    from vaelii_llm.integrations.pydantic_ai import KBToolset
    from vaelii_llm.integrations.pydantic_ai import VaeliiModel

    fake.script = two_turns
    async with openai.provider(base_url=fake.base_url, model=MODEL) as p:
        result = await agent.run(p, tools.Toolset(kb.sample()), "What is Muffet?", deltas=True)
        assert result.stopped == "answered"
        assert [call.name for call in result.tool_calls] == ["kb_types_of"]
        assert result.answer.startswith("Types: ")
        assert "Arachnid" in result.answer or "Spider" in result.answer
        pai = Agent(VaeliiModel(p), toolsets=[KBToolset(kb.sample())])
        run = await pai.run("What is Muffet?")
    assert run.output.startswith("Types: ")
    tool_message = fake.bodies[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "call_k"


# -- the command, unchanged on this backend ------------------------------------


def reads_the_kb(body: dict[str, Any]) -> Transcript:
    """Ask for kb_query; once its result is back, answer from it word by word."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        arguments = json.dumps({"goal": GOAL})
        call = Call("call_ask_1", "kb_query", [arguments[:5], arguments[5:]])
        return transcript(Turn(calls=[call], finish_reason="tool_calls"))
    answer = answer_from(results[-1]["content"])
    return transcript(Turn(text=[w + " " for w in answer.split(" ")]))


async def test_ask_runs_unchanged_on_an_openai_compatible_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vaelii_llm import cli

    fake = await FakeOpenAI(script=reads_the_kb).start()
    try:
        monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("VAELII_OPENAI_MODEL", MODEL)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        code = await asyncio.to_thread(cli.main, ["ask", QUESTION, "--json"])
    finally:
        await fake.stop()
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [c["name"] for c in out["tool_calls"]] == ["kb_query"]
    assert out["answer"].strip() == answer_from(out["tool_calls"][0]["result"])
    assert all(name in out["answer"] for name in NAMES)
    assert [m["role"] for m in fake.bodies[1]["messages"]][-1] == "tool"


async def test_why_it_cannot_answer_names_the_server_the_cause_and_the_next_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopback import refused_url

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake = await FakeOpenAI(key="right-key").start()
    try:
        assert await openai.unavailable_reason(fake.base_url, "right-key") is None
        wrong = await openai.unavailable_reason(fake.base_url, "sk-wrong-SECRET")
        assert wrong is not None
        assert wrong.startswith("llm-api-error: ")
        assert wrong.endswith("set OPENAI_API_KEY to a key this server accepts")
        assert "SECRET" not in wrong
        bad = await openai.unavailable_reason(fake.base_url, "sk-\nSECRET")
        assert bad is not None
        assert "Authorization" in bad
        assert "SECRET" not in bad
        # selection asks the backend, passing what its probe takes
        routed = await providers.unavailable_reason(
            "openai", base_url=fake.base_url, api_key="right-key"
        )
        assert routed is None
    finally:
        await fake.stop()
    down = refused_url() + "/v1"
    reason = await openai.unavailable_reason(down)
    assert reason is not None
    assert reason.startswith("llm-unreachable: ")
    assert down.split("//")[1].split("/")[0] in reason
    assert reason.endswith("start the server there or point OPENAI_BASE_URL at one")
    assert await openai.available(down) is False


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (500, "the server there failed listing its models (see its log)"),
        (404, "point OPENAI_BASE_URL at the server's /v1"),
    ],
)
async def test_a_models_listing_that_fails_server_side_is_not_blamed_on_the_address(
    status: int, advice: str
) -> None:
    from aiohttp import web
    from loopback import serve

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "backend crashed"}}, status=status)

    async with serve(listing) as url:
        reason = await openai.unavailable_reason(f"{url}/v1")
    assert reason is not None
    assert reason.endswith(f"; {advice}")
    assert f"{status}" in reason
