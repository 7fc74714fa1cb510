"""The Ollama backend: request and response mapping, the stream reassembler,
hosts, probes and turns against a fake Ollama on loopback."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import aclosing
from typing import Any

import msgspec
import pytest
import yarl
from aioresponses import CallbackResult
from aioresponses import aioresponses
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.conftest import MockedResponse
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import Transcript
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import hello
from tests.support.fake_ollama import merged
from tests.support.fake_ollama import tool_call
from vaelii_llm import _backends
from vaelii_llm import errors
from vaelii_llm import providers
from vaelii_llm._base_url import normalize_host
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
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm.providers import ollama
from vaelii_llm.providers.ollama._assemble import ChatAssembler
from vaelii_llm.providers.ollama._assemble import ChatChunk
from vaelii_llm.providers.ollama._assemble import response_of
from vaelii_llm.providers.ollama._assemble import stop_reason
from vaelii_llm.providers.ollama._chat import chat_body

LABEL = "Ollama at test"


def ask(text: str, **kw: Any) -> Request:
    return Request(messages=[Message(role="user", content=text)], **kw)


def body_of(request: Request, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"model": "m", "num_ctx": 8192, "keep_alive": "30m", "stream": True}
    args.update(kw)
    out: dict[str, Any] = json.loads(chat_body(request, **args))
    return out


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def whole(obj: dict[str, Any]) -> Response:
    """The Response of a non-streamed answer, as ``complete`` builds it."""
    return response_of(msgspec.json.decode(line(obj), type=ChatChunk), LABEL)


def feed(asm: ChatAssembler, obj: dict[str, Any]) -> list[StreamItem]:
    return list(asm.feed([line(obj)]))


def assemble(objs: list[dict[str, Any]]) -> tuple[list[list[StreamItem]], Response]:
    """A streamed turn, one line at a time: what each line handed over, and the result."""
    asm = ChatAssembler(LABEL)
    closed = [feed(asm, o) for o in objs]
    return closed, asm.result()


TOOL = ToolSchema(
    name="kb_types_of",
    description="The types a term belongs to.",
    input_schema={
        "type": "object",
        "properties": {"term": {"type": "string"}},
        "required": ["term"],
    },
    strict=True,
)


# ---------------------------------------------------------------- request mapping


def test_body_always_sends_keep_alive_num_ctx_num_predict_and_temperature_zero() -> None:
    body = body_of(ask("hi", max_tokens=77))
    assert body["model"] == "m"
    assert body["stream"] is True
    assert body["keep_alive"] == "30m"
    assert body["options"] == {"num_ctx": 8192, "temperature": 0, "num_predict": 77}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in body
    assert "format" not in body


def test_request_values_beat_the_provider_defaults() -> None:
    req = ask(
        "hi",
        model="llama3.2",
        num_ctx=2048,
        keep_alive="5m",
        temperature=0.7,
        stop_sequences=["\n\n"],
        format={"type": "object"},
        system="Be brief.",
    )
    body = body_of(req, stream=False)
    assert body["model"] == "llama3.2"
    assert body["stream"] is False
    assert body["keep_alive"] == "5m"
    assert body["options"]["num_ctx"] == 2048
    assert body["options"]["temperature"] == 0.7
    assert body["options"]["stop"] == ["\n\n"]
    assert body["format"] == {"type": "object"}
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_tools_are_reshaped_and_strict_is_dropped() -> None:
    body = body_of(ask("hi", tools=[TOOL]))
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "kb_types_of",
                "description": "The types a term belongs to.",
                "parameters": TOOL.input_schema,
            },
        }
    ]
    assert "strict" not in json.dumps(body["tools"])


def test_a_tool_round_trip_maps_to_assistant_tool_calls_and_tool_messages() -> None:
    raw_call = {
        "id": "abc",
        "function": {"index": 0, "name": "kb_types_of", "arguments": {"term": "Muffet"}},
    }
    req = Request(
        messages=[
            Message(role="user", content="What is Muffet?"),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(thinking="Look it up."),
                    TextBlock(text="Let me check."),
                    ToolUseBlock(id="call_0", name="kb_types_of", input={"term": "Muffet"}),
                    ToolUseBlock(
                        id="abc", name="kb_types_of", input={"term": "Muffet"}, raw=raw_call
                    ),
                ],
            ),
            Message(
                role="user",
                content=[
                    ToolResultBlock(tool_use_id="call_0", content="(Spider)"),
                    ToolResultBlock(tool_use_id="abc", content="oops", is_error=True),
                    TextBlock(text="And so?"),
                ],
            ),
        ]
    )
    messages = body_of(req)["messages"]
    assert messages == [
        {"role": "user", "content": "What is Muffet?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "thinking": "Look it up.",
            "tool_calls": [
                {"function": {"name": "kb_types_of", "arguments": {"term": "Muffet"}}},
                raw_call,
            ],
        },
        {"role": "tool", "content": "(Spider)", "tool_name": "kb_types_of"},
        {"role": "tool", "content": "oops", "tool_name": "kb_types_of"},
        {"role": "user", "content": "And so?"},
    ]


def test_a_tool_call_another_vendor_made_is_rebuilt_not_echoed() -> None:
    foreign = ToolUseBlock(
        id="toolu_1",
        name="kb_ask",
        input={"q": "x"},
        raw={"type": "tool_use", "id": "toolu_1", "name": "kb_ask", "input": {"q": "x"}},
    )
    req = Request(messages=[Message(role="assistant", content=[foreign])])
    (message,) = body_of(req)["messages"]
    assert message["tool_calls"] == [{"function": {"name": "kb_ask", "arguments": {"q": "x"}}}]


@pytest.mark.parametrize(
    "block",
    [
        RedactedThinkingBlock(data="xyz"),
        OpaqueBlock(type="server_tool_use", raw={"type": "server_tool_use"}),
    ],
)
def test_a_block_with_no_ollama_shape_is_refused(block: Any) -> None:
    req = Request(messages=[Message(role="assistant", content=[block])])
    with pytest.raises(errors.LLMEncode) as info:
        chat_body(req, model="m", num_ctx=1, keep_alive="0", stream=False)
    assert info.value.type == "llm-encode"


def test_a_tool_use_in_a_user_message_is_refused() -> None:
    req = Request(
        messages=[Message(role="user", content=[ToolUseBlock(id="x", name="n", input={})])]
    )
    with pytest.raises(errors.LLMEncode):
        chat_body(req, model="m", num_ctx=1, keep_alive="0", stream=False)


# ---------------------------------------------------------------- response mapping


def test_a_non_streamed_answer_maps_content_usage_and_stop_reason() -> None:
    obj = merged([chunk("Hello", thinking="Greet them."), chunk(" there."), final()])
    closed, response = assemble([obj])
    assert whole(obj) == response
    assert response.content == [
        ThinkingBlock(thinking="Greet them."),
        TextBlock(text="Hello there."),
    ]
    assert closed == [response.content]
    assert (response.stop_reason, response.vendor_stop_reason) == ("end_turn", "stop")
    assert response.model == "phi4:14b"
    assert response.usage == Usage(
        input_tokens=26,
        output_tokens=282,
        prompt_eval_count=26,
        eval_count=282,
        total_duration=4883583458,
        load_duration=1334875,
        prompt_eval_duration=342546000,
        eval_duration=4535599000,
    )


def test_a_stream_hands_its_blocks_over_at_done_in_their_final_order() -> None:
    """The whole answer is one message (thinking, text, calls), so a block is
    final only at ``done: true``: nothing is handed over before it."""
    closed, response = assemble(
        [
            chunk(thinking="Hm"),
            chunk(thinking="m."),
            chunk("The"),
            chunk(" answer", tool_calls=[tool_call("kb_ask", {"q": "(dog ?x)"})]),
            chunk(tool_calls=[tool_call("kb_ask", {"q": "(cat ?x)"}, id="given")]),
            final(done_reason="stop"),
        ]
    )
    think, text = ThinkingBlock(thinking="Hmm."), TextBlock(text="The answer")
    first = ToolUseBlock(
        id="call_0",
        name="kb_ask",
        input={"q": "(dog ?x)"},
        raw=tool_call("kb_ask", {"q": "(dog ?x)"}),
    )
    second = ToolUseBlock(
        id="given",
        name="kb_ask",
        input={"q": "(cat ?x)"},
        raw=tool_call("kb_ask", {"q": "(cat ?x)"}, id="given"),
    )
    assert closed == [[], [], [], [], [], [think, text, first, second]]
    assert response.content == [think, text, first, second]
    assert (response.stop_reason, response.vendor_stop_reason) == ("tool_use", "stop")


@pytest.mark.parametrize(
    ("done_reason", "calls", "neutral"),
    [
        ("stop", False, "end_turn"),
        ("stop", True, "tool_use"),
        ("length", False, "max_tokens"),
        ("length", True, "max_tokens"),
        ("load", False, "end_turn"),
        ("unload", False, "end_turn"),
        ("something-new", False, "end_turn"),
        ("something-new", True, "tool_use"),
        (None, False, None),
        (None, True, None),
    ],
)
def test_done_reason_maps_to_a_neutral_stop_reason_and_is_kept(
    done_reason: str | None, calls: bool, neutral: str | None
) -> None:
    objs = [chunk(tool_calls=[tool_call("kb_ask", {})])] if calls else [chunk("Hi.")]
    last = final(done_reason="stop")
    if done_reason is None:
        del last["done_reason"]
    else:
        last["done_reason"] = done_reason
    _, response = assemble([*objs, last])
    assert response.stop_reason == neutral
    assert response.vendor_stop_reason == done_reason
    assert stop_reason(done_reason, calls) == neutral


def test_deltas_come_before_their_block_at_its_index() -> None:
    asm = ChatAssembler(LABEL, deltas=True)
    items = [
        item
        for o in [
            chunk(thinking="Hm"),
            chunk(thinking="m."),
            chunk("The"),
            chunk(" answer", tool_calls=[tool_call("kb_ask", {"q": "(dog ?x)"})]),
            final(),
        ]
        for item in feed(asm, o)
    ]
    think, text = ThinkingBlock(thinking="Hmm."), TextBlock(text="The answer")
    call = ToolUseBlock(
        id="call_0",
        name="kb_ask",
        input={"q": "(dog ?x)"},
        raw=tool_call("kb_ask", {"q": "(dog ?x)"}),
    )
    assert items == [
        ThinkingDelta(index=0, thinking="Hm"),
        ThinkingDelta(index=0, thinking="m."),
        TextDelta(index=1, text="The"),
        TextDelta(index=1, text=" answer"),
        think,
        text,
        ToolUseStart(index=2, id="call_0", name="kb_ask"),
        call,
    ]
    assert asm.result().content == [think, text, call]


def test_tool_ids_count_positions_across_a_turns_chunks() -> None:
    _, response = assemble(
        [
            chunk(tool_calls=[tool_call("a", {})]),
            chunk(tool_calls=[tool_call("b", {}, id="keep"), tool_call("c", {})]),
            chunk(tool_calls=[tool_call("d", {})]),
            final(),
        ]
    )
    ids = [b.id for b in response.content if isinstance(b, ToolUseBlock)]
    assert ids == ["call_0", "keep", "call_2", "call_3"]


def test_an_error_field_is_an_api_error_with_status_200() -> None:
    asm = ChatAssembler(LABEL)
    feed(asm, chunk("Partial"))
    with pytest.raises(errors.LLMApiError) as info:
        feed(asm, {"error": "an error was encountered while running the model"})
    assert info.value.status == 200
    assert "running the model" in info.value.body


def test_a_stream_without_done_is_a_bad_response() -> None:
    asm = ChatAssembler(LABEL)
    feed(asm, chunk("Partial"))
    with pytest.raises(errors.LLMBadResponse, match="without done: true"):
        asm.result()


def test_a_chunk_after_done_is_a_bad_response() -> None:
    asm = ChatAssembler(LABEL)
    feed(asm, final())
    with pytest.raises(errors.LLMBadResponse, match="after done"):
        feed(asm, chunk("more"))


def test_a_tool_call_that_will_not_decode_is_a_bad_response() -> None:
    asm = ChatAssembler(LABEL)
    with pytest.raises(errors.LLMBadResponse, match="tool call"):
        feed(asm, chunk(tool_calls=[{"function": {"name": "x", "arguments": "[1"}}]))


def test_a_done_object_without_message_is_accepted() -> None:
    final_obj = {k: v for k, v in final().items() if k != "message"}
    _, response = assemble([chunk("Hi"), final_obj])
    assert response.content == [TextBlock(text="Hi")]


# ---------------------------------------------------------------- stream == complete

_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=12)
_args = st.dictionaries(
    st.text(alphabet="abcdefgh_", min_size=1, max_size=6),
    st.one_of(st.integers(), st.text(max_size=8), st.booleans(), st.none()),
    max_size=3,
)


_call = st.builds(
    lambda name, args, given: tool_call(name, args, **({"id": given} if given else {})),
    st.sampled_from(["kb_ask", "kb_types_of"]),
    _args,
    st.sampled_from([None, None, "given"]),
)
_piece = st.one_of(
    _text.map(lambda t: chunk(t)),
    _text.map(lambda t: chunk(thinking=t)),
    st.lists(_call, min_size=1, max_size=2).map(lambda calls: chunk(tool_calls=calls)),
    st.builds(  # one object carrying several kinds at once
        lambda t, c, calls: chunk(c, thinking=t, tool_calls=calls or None),
        _text,
        _text,
        st.lists(_call, max_size=1),
    ),
)


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    """A turn as a stream may send it: text, thinking and whole tool calls in
    any order (thinking after text, text after a call), then the done object."""
    objs = draw(st.lists(_piece, max_size=12))
    reason = draw(st.sampled_from(["stop", "length"]))
    objs.append(final(done_reason=reason, eval_count=draw(st.integers(0, 10**6))))
    return objs


def streamed(objs: Transcript, cuts: list[int], *, deltas: bool) -> list[StreamItem]:
    """Every item a stream of ``objs`` hands over, its lines fed in batches cut
    at ``cuts``, then the result."""
    lines = [line(o) for o in objs]
    asm = ChatAssembler(LABEL, deltas=deltas)
    items: list[StreamItem] = []
    bounds = [0, *sorted({c % (len(lines) + 1) for c in cuts}), len(lines)]
    for start, stop in itertools.pairwise(bounds):
        items.extend(asm.feed(lines[start:stop]))
    assert asm.finished
    items.append(asm.result())
    return items


def thinking_follows_text(objs: Transcript) -> bool:
    """Whether the first thinking comes after the first text (the one order
    that makes an early text delta's index stale; see ChatAssembler)."""
    kinds = [
        kind for o in objs for kind in ("thinking", "content") if (o.get("message") or {}).get(kind)
    ]
    return (
        "thinking" in kinds
        and "content" in kinds
        and kinds.index("content") < kinds.index("thinking")
    )


def check_stream(objs: Transcript, cuts: list[int]) -> None:
    answer = whole(merged(objs))
    plain = streamed(objs, cuts, deltas=False)
    assert plain[-1] == answer  # the streamed Response is the non-streamed one
    assert plain[:-1] == answer.content  # each block handed over is its final self
    items = streamed(objs, cuts, deltas=True)
    assert [i for i in items if not isinstance(i, TextDelta | ThinkingDelta | ToolUseStart)] == (
        plain
    )
    final_content = items[-1].content if isinstance(items[-1], Response) else []
    texts = [b.text for b in final_content if isinstance(b, TextBlock)]
    thoughts = [b.thinking for b in final_content if isinstance(b, ThinkingBlock)]
    text_deltas = [i for i in items if isinstance(i, TextDelta)]
    thinking_deltas = [i for i in items if isinstance(i, ThinkingDelta)]
    assert ["".join(d.text for d in text_deltas)] == (texts or [""])
    assert ["".join(d.thinking for d in thinking_deltas)] == (thoughts or [""])
    assert {d.index for d in thinking_deltas} <= {0}
    if not thinking_follows_text(objs):
        assert {d.index for d in text_deltas} <= {len(thoughts)}
    for n, item in enumerate(items):
        if isinstance(item, ToolUseStart):
            block = items[n + 1]
            assert isinstance(block, ToolUseBlock)
            assert final_content[item.index] is block
            assert (item.id, item.name) == (block.id, block.name)
        elif isinstance(item, TextDelta | ThinkingDelta):  # a delta comes before its block
            assert not any(isinstance(i, TextBlock | ThinkingBlock) for i in items[:n])


def test_text_then_a_tool_call_then_text_streams_as_it_completes() -> None:
    call = tool_call("kb_ask", {"q": "(dog ?x)"})
    objs = [chunk("A"), chunk(tool_calls=[call]), chunk("B"), final()]
    _, response = assemble(objs)
    assert response.content == [
        TextBlock(text="AB"),
        ToolUseBlock(id="call_0", name="kb_ask", input={"q": "(dog ?x)"}, raw=call),
    ]
    assert response == whole(merged(objs))
    check_stream(objs, [1, 2])


def test_thinking_after_text_is_the_one_thinking_block_first() -> None:
    objs = [chunk(thinking="t1"), chunk("A"), chunk(thinking="t2"), chunk("B"), final()]
    _, response = assemble(objs)
    assert response.content == [ThinkingBlock(thinking="t1t2"), TextBlock(text="AB")]
    assert response == whole(merged(objs))
    check_stream(objs, [])
    check_stream([chunk("A"), chunk(thinking="t"), final()], [1])


@settings(max_examples=300, deadline=None)
@given(transcripts(), st.lists(st.integers(0, 20), max_size=4))
def test_reassembled_stream_equals_the_non_streamed_answer(
    objs: Transcript, cuts: list[int]
) -> None:
    check_stream(objs, cuts)


# ---------------------------------------------------------------- hosts


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:11434"),
        ("10.0.0.5:8080", "http://10.0.0.5:8080"),
        ("localhost", "http://localhost:11434"),
        ("gpu1:11434", "http://gpu1:11434"),
        ("http://gpu1", "http://gpu1:80"),
        ("https://ollama.example.com", "https://ollama.example.com:443"),
        ("http://gpu1:9000/", "http://gpu1:9000"),
        ("HTTPS://gpu1:8443", "https://gpu1:8443"),
        ("::1", "http://[::1]:11434"),
        ("[::1]", "http://[::1]:11434"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("http://[fe80::1]", "http://[fe80::1]:80"),
        ("  example.com  ", "http://example.com:11434"),
        ("https://proxy.example.com/ollama/", "https://proxy.example.com:443/ollama"),
    ],
)
def test_normalize_host_reads_a_host_as_ollama_does(host: str, url: str) -> None:
    assert normalize_host(host) == url


@pytest.mark.parametrize("host", ["", "   ", "ftp://x", "http://", "gpu1:notaport"])
def test_normalize_host_refuses_what_names_no_host(host: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        normalize_host(host)


@pytest.mark.parametrize("host", ["https://u:s3cret@gw.example.com/ollama", "u:s3cret@gpu1:8080"])
def test_normalize_host_refuses_a_password_without_quoting_it(host: str) -> None:
    with pytest.raises(ValueError, match="headers=") as info:
        normalize_host(host)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    ("ours", "theirs", "url"),
    [
        (None, None, "http://localhost:11434"),
        ("gpu1", "gpu2", "http://gpu1:11434"),
        (None, "gpu2:9000", "http://gpu2:9000"),
        (None, "0.0.0.0", "http://localhost:11434"),
        (None, "0.0.0.0:11434", "http://localhost:11434"),
        (None, "::", "http://localhost:11434"),
        (None, "[::]:11434", "http://localhost:11434"),
        (None, "*", "http://localhost:11434"),
        (None, "http://0.0.0.0:11434", "http://localhost:11434"),
        ("  ", "10.1.2.3", "http://10.1.2.3:11434"),
    ],
)
def test_base_url_skips_bind_addresses(
    monkeypatch: pytest.MonkeyPatch, ours: str | None, theirs: str | None, url: str
) -> None:
    for name, value in (("VAELII_OLLAMA_HOST", ours), ("OLLAMA_HOST", theirs)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert ollama.base_url() == url
    assert ollama.base_url("gpu9") == "http://gpu9:11434"


def test_provider_is_built_without_io_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_HOST", "gpu3:1234")
    monkeypatch.setenv("VAELII_OLLAMA_MODEL", "llama3.2")
    monkeypatch.setenv("VAELII_OLLAMA_GENERATION_MODEL", "qwen3")
    p = ollama.provider()
    assert (p.base_url, p.model) == ("http://gpu3:1234", "llama3.2")
    assert ollama.generation_provider().model == "qwen3"
    assert ollama.generation_provider(model="x").model == "x"
    monkeypatch.delenv("VAELII_OLLAMA_MODEL")
    monkeypatch.delenv("VAELII_OLLAMA_GENERATION_MODEL")
    assert ollama.provider().model == "phi4:14b"
    assert ollama.generation_provider().model == "qwen3-coder:30b"


@pytest.mark.parametrize("factory", [ollama.provider, ollama.generation_provider])
def test_the_factories_take_each_option_by_name(factory: Any) -> None:
    """Selection reads which options a backend takes from these signatures
    (``**options: Unpack[Options]``: the keys of the one TypedDict)."""
    assert _backends.takes(factory) == {
        "host",
        "model",
        "num_ctx",
        "keep_alive",
        "headers",
        "proxy",
        "ssl",
        "max_connections",
        "session",
    }
    with pytest.raises(TypeError, match="hots"):
        factory(hots="gpu1")
    with pytest.raises(TypeError):
        factory("gpu1")


# ---------------------------------------------------------------- against a fake host


@pytest.fixture
async def fake() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama().start()
    try:
        yield server
    finally:
        await server.stop()


async def collect(p: ollama.OllamaProvider, req: Request) -> list[StreamItem]:
    async with aclosing(p.stream(req)) as items:
        return [item async for item in items]


async def test_complete_and_stream_against_the_fake(fake: FakeOllama) -> None:
    async with ollama.provider(host=fake.url) as p:
        whole = await p.complete(ask("hi"))
        items = await collect(p, ask("hi"))
    assert whole.content == [TextBlock(text="Hello! How are you today?")]
    assert (whole.stop_reason, whole.vendor_stop_reason) == ("end_turn", "stop")
    assert whole.model == "phi4:14b"
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (26, 282)
    assert whole.usage.eval_count == 282
    assert items == [*whole.content, whole]
    assert [b["stream"] for b in fake.bodies] == [False, True]


URL = "http://gpu7:11434"


def answer(_url: yarl.URL, **kwargs: Any) -> CallbackResult:
    """A plain turn, as the request asked for it: one object, or NDJSON lines."""
    if json.loads(kwargs["data"])["stream"]:
        lines = b"".join(line(o) + b"\n" for o in hello({}))
        return CallbackResult(
            body=lines, content_type="application/x-ndjson", response_class=MockedResponse
        )
    return CallbackResult(payload=merged(hello({})), response_class=MockedResponse)


@pytest.fixture
def mocked() -> Iterator[aioresponses]:
    """Request building, no server: ``URL`` answers every chat with a plain
    turn and its version probe, and each request is kept (see :func:`sent`)."""
    with aioresponses() as m:
        m.post(URL + "/api/chat", callback=answer, repeat=True)
        m.get(
            URL + "/api/version",
            payload={"version": "0.12.6"},
            response_class=MockedResponse,
            repeat=True,
        )
        yield m


def sent(m: aioresponses) -> list[tuple[dict[str, Any], Mapping[str, str]]]:
    """The body and headers of each chat request, in order."""
    calls = m.requests[("POST", yarl.URL(URL + "/api/chat"))]
    return [(json.loads(c.kwargs["data"]), c.kwargs["headers"]) for c in calls]


async def test_the_wire_body_carries_keep_alive_num_ctx_temperature_and_tools(
    mocked: aioresponses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "16384")
    monkeypatch.setenv("VAELII_OLLAMA_KEEP_ALIVE", "1h")
    async with ollama.provider(host=URL) as p:
        await p.complete(ask("hi", tools=[TOOL]))
        monkeypatch.delenv("VAELII_OLLAMA_NUM_CTX")
        monkeypatch.delenv("VAELII_OLLAMA_KEEP_ALIVE")
        await p.complete(ask("hi"))
    (body, _), (default, _) = sent(mocked)
    assert body["stream"] is False
    assert body["keep_alive"] == "1h"
    assert body["options"]["num_ctx"] == 16384
    assert body["options"]["temperature"] == 0
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": TOOL.name,
                "description": TOOL.description,
                "parameters": TOOL.input_schema,
            },
        }
    ]
    assert default["keep_alive"] == "30m"
    assert default["options"]["num_ctx"] == 8192
    assert default["options"]["temperature"] == 0
    assert "tools" not in default


async def test_an_explicit_value_beats_the_switch_and_the_request_beats_both(
    mocked: aioresponses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "16384")
    monkeypatch.setenv("VAELII_OLLAMA_KEEP_ALIVE", "1h")
    async with ollama.provider(host=URL, num_ctx=2048, keep_alive="5m") as p:
        await p.complete(ask("hi"))
        await p.complete(ask("hi", num_ctx=1024, keep_alive="0"))
    (explicit, _), (asked, _) = sent(mocked)
    assert (explicit["options"]["num_ctx"], explicit["keep_alive"]) == (2048, "5m")
    assert (asked["options"]["num_ctx"], asked["keep_alive"]) == (1024, "0")


async def test_a_switch_changed_between_two_turns_is_on_the_wire_at_the_next(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each switch is read at the turn that uses it, not when the provider is built."""
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "4096")
    monkeypatch.setenv("VAELII_OLLAMA_KEEP_ALIVE", "1h")
    async with ollama.provider(host=fake.url) as p:
        await p.complete(ask("hi"))
        monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "16384")
        monkeypatch.setenv("VAELII_OLLAMA_KEEP_ALIVE", "2h")
        await collect(p, ask("hi"))
        monkeypatch.delenv("VAELII_OLLAMA_NUM_CTX")
        await p.complete(ask("hi"))
    assert [(b["options"]["num_ctx"], b["keep_alive"]) for b in fake.bodies] == [
        (4096, "1h"),
        (16384, "2h"),
        (8192, "2h"),
    ]


async def test_tool_calls_stream_as_blocks(fake: FakeOllama) -> None:
    def script(_body: dict[str, Any]) -> Transcript:
        return [
            chunk(thinking="I should look."),
            chunk("Checking."),
            chunk(tool_calls=[tool_call("kb_types_of", {"term": "Muffet"})]),
            chunk(tool_calls=[tool_call("kb_types_of", {"term": "Tom"})]),
            final(),
        ]

    fake.script = script
    async with ollama.provider(host=fake.url, model="llama3.2") as p:
        items = await collect(p, ask("who?", tools=[TOOL]))
        whole = await p.complete(ask("who?", tools=[TOOL]))
    assert items[-1] == whole
    uses = [b for b in whole.content if isinstance(b, ToolUseBlock)]
    assert [(u.id, u.input) for u in uses] == [
        ("call_0", {"term": "Muffet"}),
        ("call_1", {"term": "Tom"}),
    ]


async def test_an_error_mid_stream_is_an_api_error(fake: FakeOllama) -> None:
    fake.mode = "error_mid_stream"
    seen: list[StreamItem] = []
    async with ollama.provider(host=fake.url) as p:

        async def consume() -> None:
            async with aclosing(p.stream(ask("hi"))) as items:
                async for item in items:
                    seen.append(item)

        with pytest.raises(errors.LLMApiError) as info:
            await consume()
    assert info.value.status == 200
    assert "running the model" in info.value.body
    assert seen == []


async def test_an_error_field_in_a_200_body_is_an_api_error(fake: FakeOllama) -> None:
    fake.script = lambda _b: [{"error": "unexpected server status"}]
    async with ollama.provider(host=fake.url) as p:
        with pytest.raises(errors.LLMApiError, match="unexpected server status"):
            await p.complete(ask("hi"))


async def test_a_stream_ending_without_done_is_a_bad_response(fake: FakeOllama) -> None:
    fake.mode = "no_done"
    async with ollama.provider(host=fake.url) as p:
        with pytest.raises(errors.LLMBadResponse, match="without done"):
            await collect(p, ask("hi"))


async def test_a_stall_mid_stream_is_a_timeout_inside_the_turn_budget(fake: FakeOllama) -> None:
    """The far end never ends the body: the turn's budget is what ends it."""
    fake.mode = "stall"
    async with ollama.provider(host=fake.url) as p:
        with pytest.raises(errors.LLMTimeout) as info:
            await collect(p, ask("hi", timeout_ms=300))
    assert info.value.timeout_ms == 300
    await fake.wait_disconnects(1)  # and the connection was cut, not left hanging


@pytest.mark.parametrize("mode", ["held_after_done", "cut_after_done"])
async def test_a_body_that_does_not_end_cleanly_after_done_keeps_the_answer(
    fake: FakeOllama, mode: str
) -> None:
    """The held body never ends, so the turn ending at all (inside its hour-long
    budget) is the drain at work; the connection is then closed, not reused."""
    fake.script = lambda _b: [chunk(thinking="t"), chunk("Hel"), chunk("lo"), final()]
    async with ollama.provider(host=fake.url) as p:
        whole = await p.complete(ask("hi"))
        fake.mode = mode
        items = await collect(p, ask("hi", timeout_ms=3_600_000))
        if mode == "held_after_done":
            await fake.wait_disconnects(1)
    assert items[-1] == whole
    assert items[:-1] == whole.content == [ThinkingBlock(thinking="t"), TextBlock(text="Hello")]


async def test_extra_headers_go_on_every_turn(mocked: aioresponses) -> None:
    gateway = {"X-Gateway-Key": "g-SECRET-1"}
    async with ollama.provider(host=URL, headers=gateway) as p:
        await p.complete(ask("hi"))
        await collect(p, ask("hi"))
        assert "g-SECRET-1" not in repr(p)
    built = await providers.provider("ollama", host=URL, headers=gateway)
    async with built:
        assert isinstance(built, ollama.OllamaProvider)
        await built.complete(ask("hi"))
    await providers.warm("ollama", host=URL, headers=gateway)
    bodies_headers = sent(mocked)
    assert [h.get("X-Gateway-Key") for _, h in bodies_headers] == ["g-SECRET-1"] * 4
    assert [b["stream"] for b, _ in bodies_headers] == [False, True, False, False]
    assert all(h.get("Content-Type") == "application/json" for _, h in bodies_headers)
    async with ollama.provider(host=URL, headers={"X-Gateway-Key": "a\nb"}) as bad:
        with pytest.raises(errors.LLMBadCredential) as info:
            await bad.complete(ask("hi"))
    assert info.value.header == "X-Gateway-Key"
    assert "a\nb" not in str(info.value)
    assert len(sent(mocked)) == 4  # refused before anything was sent


async def test_an_unknown_model_is_the_hosts_404(fake: FakeOllama) -> None:
    async with ollama.provider(host=fake.url, model="nope:1b") as p:
        with pytest.raises(errors.LLMApiError) as info:
            await p.complete(ask("hi"))
        assert info.value.status == 404
        assert "not found" in info.value.body
        with pytest.raises(errors.LLMApiError) as streamed:
            await collect(p, ask("hi"))
        assert streamed.value.status == 404


async def test_html_from_a_proxy_is_a_bad_response_or_api_error(fake: FakeOllama) -> None:
    fake.mode = "html"
    async with ollama.provider(host=fake.url) as p:
        with pytest.raises(errors.LLMBadResponse) as info:
            await p.complete(ask("hi"))
        assert "nginx" in info.value.excerpt
        with pytest.raises(errors.LLMBadResponse):
            await collect(p, ask("hi"))
        fake.mode = "bad_gateway"
        with pytest.raises(errors.LLMApiError) as gateway:
            await p.complete(ask("hi"))
    assert gateway.value.status == 502
    assert "Bad Gateway" in gateway.value.body


async def test_concurrent_turns_reuse_the_providers_connection_pool(fake: FakeOllama) -> None:
    turns = 32
    async with ollama.provider(host=fake.url) as p:

        async def wave() -> None:
            await asyncio.gather(
                *(p.complete(ask("hi")) for _ in range(turns // 2)),
                *(collect(p, ask("hi")) for _ in range(turns // 2)),
            )

        await wave()
        first = fake.connections
        for _ in range(3):
            await wave()
    assert len(fake.bodies) == 4 * turns
    assert 1 <= first <= turns
    assert fake.connections == first  # every later turn rode a pooled connection


async def test_sequential_streams_reuse_one_connection(fake: FakeOllama) -> None:
    async with ollama.provider(host=fake.url) as p:
        for _ in range(5):
            await collect(p, ask("hi"))
            await p.complete(ask("hi"))
    assert fake.connections == 1


async def test_breaking_out_of_a_stream_releases_its_response(fake: FakeOllama) -> None:
    fake.script = lambda _b: (
        [chunk(thinking="t"), chunk("x" * 10)] + [chunk("y") for _ in range(2000)] + [final()]
    )
    fake.chunk_delay = 0.001
    async with ollama.provider(host=fake.url) as p:
        async with aclosing(p.stream(ask("hi"), deltas=True)) as items:
            async for item in items:
                assert item == ThinkingDelta(index=0, thinking="t")
                break
        await fake.wait_disconnects(1)  # released at once: the server sees the connection go
        assert fake.connections == 1
        fake.chunk_delay = 0.0
        fake.script = lambda _b: [chunk("ok"), final()]
        assert (await p.complete(ask("again"))).content == [TextBlock(text="ok")]
    assert fake.disconnects == 1
    assert fake.connections == 2  # the broken connection was closed, not reused


# ---------------------------------------------------------------- probes and selection


async def test_probes_read_version_show_capabilities_and_context_length(
    fake: FakeOllama,
) -> None:
    assert await ollama.version(fake.url) == "0.12.6"
    assert await ollama.available(fake.url) is True
    assert await ollama.capabilities("phi4:14b", fake.url) == {"completion"}
    assert await ollama.capabilities("llama3.2", fake.url) == {"completion", "tools"}
    assert await ollama.supports_tools("phi4:14b", fake.url) is False
    assert await ollama.supports_tools("llama3.2", fake.url) is True
    assert await ollama.context_length("phi4:14b", fake.url) == 16384
    assert await ollama.context_length("qwen3-coder:30b", fake.url) == 262144
    with pytest.raises(errors.LLMApiError) as info:
        await ollama.capabilities("nope", fake.url)
    assert info.value.status == 404
    assert await ollama.supports_tools("nope", fake.url) is False


async def test_probes_on_an_unreachable_host(unused_tcp_port: int) -> None:
    dead = f"127.0.0.1:{unused_tcp_port}"
    assert await ollama.available(dead) is False
    assert await ollama.supports_tools("llama3.2", dead) is False
    with pytest.raises(errors.LLMUnreachable):
        await ollama.version(dead)
    with pytest.raises(errors.LLMUnreachable):
        await ollama.warm(dead)
    assert await ollama.available("http://") is False


async def test_warm_prefills_at_the_configured_context_and_generates_one_token(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_OLLAMA_NUM_CTX", "4096")
    response = await ollama.warm(fake.url)
    body = fake.bodies[-1]
    assert body["model"] == "qwen3-coder:30b"
    assert body["stream"] is False
    assert body["keep_alive"] == "30m"
    assert body["options"]["num_ctx"] == 4096
    assert body["options"]["num_predict"] == 1
    prompt = body["messages"][-1]["content"]
    assert 2_000 < len(prompt) < 4096 * 4  # about a quarter of the context, in tokens
    assert response.usage.load_duration == 1334875
    assert await providers.warm("ollama", host=fake.url) == response


async def test_selection_builds_ollama_or_falls_back_to_the_stub(
    fake: FakeOllama, unused_tcp_port: int
) -> None:
    assert await providers.available("ollama", host=fake.url) is True
    assert await providers.available("ollama", host=f"127.0.0.1:{unused_tcp_port}") is False
    p = await providers.provider("ollama", host=fake.url)
    assert isinstance(p, ollama.OllamaProvider)
    assert isinstance(p, Provider)
    async with p:
        answer = await p.complete(ask("hi"))
        assert answer.content == [TextBlock(text="Hello! How are you today?")]
    g = await providers.generation_provider("ollama", host=fake.url)
    assert isinstance(g, ollama.OllamaProvider)
    assert g.model == "qwen3-coder:30b"
    await g.aclose()
    fallback = await providers.provider(
        "ollama", host=f"127.0.0.1:{unused_tcp_port}", stub={"script": ["from the stub"]}
    )
    async with fallback:
        assert not isinstance(fallback, ollama.OllamaProvider)
        assert (await fallback.complete(ask("hi"))).content == [TextBlock(text="from the stub")]


async def test_a_closed_provider_refuses_a_turn(fake: FakeOllama) -> None:
    p = ollama.provider(host=fake.url)
    await p.aclose()
    await p.aclose()
    with pytest.raises(errors.LLMClosed, match="closed"):
        await p.complete(ask("hi"))


# ---------------------------------------------------------------- many transcripts, on the wire


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(objs=transcripts())
async def test_stream_and_complete_are_equal_on_the_wire(
    fake: FakeOllama, objs: Transcript
) -> None:
    fake.script = lambda _b: objs
    async with ollama.provider(host=fake.url) as p:
        whole = await p.complete(ask("hi"))
        items = await collect(p, ask("hi"))
        async with aclosing(p.stream(ask("hi"), deltas=True)) as stream:
            with_deltas = [item async for item in stream]
    assert items[-1] == whole
    assert items[:-1] == whole.content
    deltas = (TextDelta, ThinkingDelta, ToolUseStart)
    assert [i for i in with_deltas if not isinstance(i, deltas)] == items
    texts = [b.text for b in whole.content if isinstance(b, TextBlock)]
    assert ["".join(d.text for d in with_deltas if isinstance(d, TextDelta))] == (texts or [""])
