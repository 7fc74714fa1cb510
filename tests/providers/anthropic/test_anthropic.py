"""The Messages API backend: encoder, decoder, SSE reassembly, and turns against a loopback fake."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import stat
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import Literal

import msgspec
import pytest
from aiohttp.test_utils import TestServer
from aioresponses import CallbackResult
from aioresponses import aioresponses
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from yarl import URL

from tests.conftest import MockedResponse
from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Seen
from tests.support.anthropic_fake import Transcript
from tests.support.anthropic_fake import frame
from tests.support.anthropic_fake import generate
from tests.support.loopback import refused_url
from tests.support.polling import until
from vaelii_llm import errors
from vaelii_llm import providers
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._wire.sse import SSEDecoder
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMEncode
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMNoCredential
from vaelii_llm.providers import anthropic
from vaelii_llm.providers.anthropic import AnthropicProvider
from vaelii_llm.providers.anthropic._codec import API_VERSION
from vaelii_llm.providers.anthropic._credentials import OAUTH_BETA
from vaelii_llm.providers.anthropic._credentials import Credential
from vaelii_llm.providers.anthropic._decode import decode_response
from vaelii_llm.providers.anthropic._encode import FALLBACK_BETA
from vaelii_llm.providers.anthropic._encode import NEVER_SENT
from vaelii_llm.providers.anthropic._encode import betas
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.anthropic._encode import encode_block
from vaelii_llm.providers.anthropic._stream import StreamAssembler

SECRET = "sk-ant-test-SECRET-9876543210"
SLEEP = shutil.which("sleep") or "/bin/sleep"


def req(**kw: Any) -> Request:
    kw.setdefault("messages", [Message(role="user", content="hi")])
    return Request(**kw)


@pytest.fixture(autouse=True)
def bin_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No credential in the environment and no real ant CLI on PATH."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path


def fake_ant(bin_dir: Path, script: str) -> None:
    path = bin_dir / "ant"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@contextlib.asynccontextmanager
async def serving(api: FakeMessagesAPI) -> AsyncIterator[str]:
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


BASE = "http://messages.test"
"""The base URL of the mocked API (aioresponses: no server, no socket)."""


@contextlib.contextmanager
def mocked(t: Transcript) -> Iterator[Callable[[], list[Seen]]]:
    """``POST /v1/messages`` at :data:`BASE` answered by aioresponses with
    ``t`` (SSE when the body asks to stream, else the whole message), for a
    test that checks only the request a provider builds; what each request
    carried, headers (the session's joined) and body, read back from the mock."""
    url = BASE + "/v1/messages"

    def answer(_url: Any, **kwargs: Any) -> CallbackResult:
        if msgspec.json.decode(kwargs["data"]).get("stream"):
            return CallbackResult(
                body=t.sse(), content_type="text/event-stream", response_class=MockedResponse
            )
        return CallbackResult(
            body=json.dumps(t.message),
            content_type="application/json",
            response_class=MockedResponse,
        )

    with aioresponses() as mock:
        mock.post(url, callback=answer, repeat=True, response_class=MockedResponse)
        # the reachability probe selection sends first: any answer will do
        mock.get(BASE + "/v1/models", status=404, repeat=True, response_class=MockedResponse)
        yield lambda: [
            Seen(dict(call.kwargs["headers"]), msgspec.json.decode(call.kwargs["data"]))
            for call in mock.requests.get(("POST", URL(url)), [])
        ]


async def drain(items: AsyncGenerator[Any, None], into: list[Any] | None = None) -> None:
    async with contextlib.aclosing(items):
        async for item in items:
            if into is not None:
                into.append(item)


def one(asm: StreamAssembler, event: str, data: str) -> list[Any]:
    """What one event, fed alone, completes."""
    return list(asm.feed([(event.encode(), data.encode("utf-8", "surrogatepass"))]))


# ---------------------------------------------------------------------------
# the request encoder


def test_body_defaults_and_never_sent() -> None:
    body = build_body(req(temperature=0.7, system="be brief", stop_sequences=["END"]))
    assert not NEVER_SENT & body.keys()
    assert {"temperature", "top_p", "top_k", "tool_choice"} == NEVER_SENT
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "medium"}
    assert body["fallbacks"] == "default"
    assert body["model"] == "claude-opus-5-5"
    assert body["system"] == "be brief"
    assert body["stop_sequences"] == ["END"]
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "stream" not in body
    assert betas(req()) == (FALLBACK_BETA,)


def test_body_overrides() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    tool = ToolSchema(name="kb_x", description="d", input_schema={"type": "object"}, strict=True)
    body = build_body(
        req(
            effort="max",
            thinking_display="summarized",
            format=schema,
            fallbacks=None,
            model="claude-x",
            tools=[tool],
            max_tokens=77,
        ),
        stream=True,
    )
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert body["output_config"] == {
        "effort": "max",
        "format": {"type": "json_schema", "schema": schema},
    }
    assert "fallbacks" not in body
    assert betas(req(fallbacks=None)) == ()
    assert body["model"] == "claude-x"
    assert body["max_tokens"] == 77
    assert body["stream"] is True
    assert body["tools"] == [
        {"name": "kb_x", "description": "d", "input_schema": {"type": "object"}, "strict": True}
    ]
    assert build_body(req(fallbacks=["claude-y"]))["fallbacks"] == ["claude-y"]
    assert build_body(req(), effort="high")["output_config"]["effort"] == "high"


def test_oauth_credential_adds_its_beta_first() -> None:
    cred = Credential(SECRET, "oauth")
    assert betas(req(), cred) == (OAUTH_BETA, FALLBACK_BETA)
    assert betas(req(fallbacks=None), cred) == (OAUTH_BETA,)
    plain = Credential(SECRET, "bearer")  # ANTHROPIC_AUTH_TOKEN's kind: no OAuth beta
    assert betas(req(), plain) == (FALLBACK_BETA,)
    assert betas(req(fallbacks=None), plain) == ()


def test_built_blocks_encode() -> None:
    assert encode_block(TextBlock(text="t")) == {"type": "text", "text": "t"}
    assert encode_block(ThinkingBlock(thinking="r", signature="s")) == {
        "type": "thinking",
        "thinking": "r",
        "signature": "s",
    }
    assert encode_block(RedactedThinkingBlock(data="x")) == {
        "type": "redacted_thinking",
        "data": "x",
    }
    assert encode_block(ToolUseBlock(id="1", name="n", input={"a": 1})) == {
        "type": "tool_use",
        "id": "1",
        "name": "n",
        "input": {"a": 1},
    }
    assert encode_block(ToolResultBlock(tool_use_id="1", content="ok", is_error=True)) == {
        "type": "tool_result",
        "tool_use_id": "1",
        "content": "ok",
        "is_error": True,
    }


def test_raw_is_sent_back_unchanged() -> None:
    raw = {"type": "thinking", "thinking": "edited?", "signature": "sig", "extra": [1]}
    block = ThinkingBlock(thinking="something else", signature="other", raw=raw)
    assert encode_block(block) is raw
    opaque = OpaqueBlock(type="server_tool_use", raw={"type": "server_tool_use", "id": "s"})
    body = build_body(req(messages=[Message(role="assistant", content=[block, opaque])]))
    assert body["messages"][0]["content"] == [raw, opaque.raw]


def test_a_tool_call_another_vendor_made_is_rebuilt_not_echoed() -> None:
    # Ollama keeps its own call object in raw; the Messages API cannot read it
    ollama_raw = {"id": "call_0", "function": {"name": "kb_ask", "arguments": {"q": 1}}}
    block = ToolUseBlock(id="call_0", name="kb_ask", input={"q": 1}, raw=ollama_raw)
    assert encode_block(block) == {
        "type": "tool_use",
        "id": "call_0",
        "name": "kb_ask",
        "input": {"q": 1},
    }


def test_block_with_no_wire_shape_is_refused() -> None:
    with pytest.raises(LLMEncode) as info:
        build_body(
            req(messages=[Message(role="user", content=[OpaqueBlock(type="video", raw={})])])
        )
    assert info.value.block_type == "video"

    class Foreign:
        type = "hologram"

    with pytest.raises(LLMEncode):
        encode_block(Foreign())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# the response decoder


def test_decode_keeps_raw_and_maps_types() -> None:
    t = generate(
        random.Random(1),
        kinds=["thinking", "text", "tool_use", "redacted_thinking", "mystery_block"],
        stop_reason="tool_use",
    )
    resp = decode_response(msgspec.json.encode(t.message))
    kinds = [type(b) for b in resp.content]
    assert kinds == [ThinkingBlock, TextBlock, ToolUseBlock, RedactedThinkingBlock, OpaqueBlock]
    assert [b.raw for b in resp.content] == t.message["content"]
    opaque = resp.content[4]
    assert isinstance(opaque, OpaqueBlock)
    assert opaque.type == "mystery_block"
    assert resp.stop_reason == "tool_use"
    counted = t.message["usage"]
    assert resp.usage.input_tokens == (
        counted["input_tokens"]
        + (counted.get("cache_creation_input_tokens") or 0)
        + (counted.get("cache_read_input_tokens") or 0)
    )
    # echoing the turn back sends every block exactly as received
    echoed = build_body(req(messages=[Message(role="assistant", content=resp.content)]))
    assert echoed["messages"][0]["content"] == t.message["content"]


def test_refusal_fabricates_nothing() -> None:
    body: dict[str, Any] = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "x",
        "content": [],
        "stop_reason": "refusal",
        "stop_sequence": None,
        "stop_details": {"type": "refusal", "category": None, "explanation": None},
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }
    resp = decode_response(msgspec.json.encode(body))
    assert resp.content == []
    assert resp.stop_reason == "refusal"
    assert resp.stop_details == body["stop_details"]


def test_error_in_200_and_junk() -> None:
    with pytest.raises(LLMApiError) as info:
        decode_response(b'{"type":"error","error":{"type":"overloaded_error","message":"x"}}')
    assert info.value.status == 200
    assert "overloaded_error" in info.value.body
    for junk in (
        b"<html>",
        b'{"type":"message"}',
        b"[" * 5000,
        b'{"type":"message","content":[{"type":"text"}]}',
    ):
        with pytest.raises(LLMBadResponse):
            decode_response(junk)


# ---------------------------------------------------------------------------
# the SSE reassembler (sans-IO)


def assemble(t: Transcript, rng: random.Random | None = None) -> tuple[list[Block], Response]:
    data = t.sse()
    frames = SSEDecoder("test")
    asm = StreamAssembler("test")
    blocks: list[Block] = []
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 64) if rng else len(data)
        for ev in frames.feed(data[pos : pos + step]):
            blocks.extend(one(asm, ev.event, ev.data))
        pos += step
    frames.feed(b"")
    return blocks, asm.result()


@pytest.mark.parametrize("seed", range(40))
def test_reassembled_raw_equals_non_streamed(seed: int) -> None:
    rng = random.Random(seed)
    t = generate(rng)
    blocks, resp = assemble(t, rng)
    assert blocks == resp.content
    assert [b.raw for b in resp.content] == t.message["content"]
    assert resp == decode_response(msgspec.json.encode(t.message))


def test_thinking_signature_and_tool_input() -> None:
    t = generate(random.Random(7), kinds=["thinking", "tool_use"], stop_reason="tool_use")
    pieces = [e for e in t.events if e[1].get("delta", {}).get("type") == "input_json_delta"]
    assert len(pieces) >= 2
    _, resp = assemble(t)
    thinking, tool = resp.content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.signature == t.message["content"][0]["signature"]
    assert isinstance(tool, ToolUseBlock)
    assert tool.input == t.message["content"][1]["input"]


def test_error_event_is_api_error() -> None:
    t = generate(random.Random(3), kinds=["text"], error=True)
    with pytest.raises(LLMApiError) as info:
        assemble(t)
    assert "overloaded_error" in info.value.body


def test_stream_without_message_stop_is_bad_response() -> None:
    t = generate(random.Random(4), kinds=["text"])
    t.events.pop()  # message_stop
    with pytest.raises(LLMBadResponse, match="message_stop"):
        assemble(t)


def test_protocol_violations() -> None:
    asm = StreamAssembler("test")
    with pytest.raises(LLMBadResponse):
        one(asm, "content_block_start", '{"index":0,"content_block":{"type":"text","text":""}}')
    asm = StreamAssembler("test")
    one(asm, "message_start", '{"type":"message_start","message":{"id":"m"}}')
    assert one(asm, "ping", '{"type":"ping"}') == []
    assert one(asm, "brand_new_event", "{}") == []
    with pytest.raises(LLMBadResponse):
        one(asm, "content_block_delta", '{"index":5,"delta":{"type":"text_delta","text":"x"}}')
    one(
        asm,
        "content_block_start",
        '{"index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}',
    )
    one(
        asm,
        "content_block_delta",
        '{"index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\": tru"}}',
    )
    # A cut input is held until the stop reason: only max_tokens may cut one.
    assert one(asm, "content_block_stop", '{"index":0}') == []
    with pytest.raises(LLMBadResponse, match="not JSON"):
        one(asm, "message_delta", '{"delta":{"stop_reason":"tool_use"},"usage":{}}')
    with pytest.raises(LLMBadResponse):
        one(StreamAssembler("t"), "message_start", "{not json")


def test_open_block_closed_at_message_stop() -> None:
    asm = StreamAssembler("test")
    one(asm, "message_start", '{"message":{"id":"m"}}')
    one(asm, "content_block_start", '{"index":0,"content_block":{"type":"text","text":""}}')
    one(asm, "content_block_delta", '{"index":0,"delta":{"type":"text_delta","text":"part"}}')
    one(asm, "message_delta", '{"delta":{"stop_reason":"refusal"},"usage":{"output_tokens":2}}')
    closed = one(asm, "message_stop", "{}")
    assert closed == [TextBlock(text="part", raw={"type": "text", "text": "part"})]
    result = asm.result()
    assert result.stop_reason == "refusal"
    assert result.content == closed
    assert result.usage.output_tokens == 2


@pytest.mark.parametrize(
    ("word", "tool_call", "neutral"),
    [
        *((w, False, w) for w in ("end_turn", "max_tokens", "stop_sequence", "refusal")),
        ("pause_turn", False, "pause_turn"),
        ("tool_use", True, "tool_use"),
        ("model_context_window_exceeded", False, "max_tokens"),
        ("a_word_from_the_future", False, "end_turn"),
        ("a_word_from_the_future", True, "tool_use"),
        (None, False, None),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
def test_stop_reason_is_neutral_and_the_word_is_kept(
    word: str | None, tool_call: bool, neutral: str | None, streamed: bool
) -> None:
    block = (
        {"type": "tool_use", "id": "t1", "name": "kb_ask", "input": {}}
        if tool_call
        else {"type": "text", "text": "hi"}
    )
    if streamed:
        asm = StreamAssembler("test")
        one(asm, "message_start", '{"message":{"id":"m"}}')
        one(asm, "content_block_start", json.dumps({"index": 0, "content_block": block}))
        one(asm, "content_block_stop", '{"index":0}')
        one(asm, "message_delta", json.dumps({"delta": {"stop_reason": word}, "usage": {}}))
        one(asm, "message_stop", "{}")
        result = asm.result()
    else:
        result = decode_response(
            json.dumps({"type": "message", "content": [block], "stop_reason": word}).encode()
        )
    assert result.stop_reason == neutral
    assert result.vendor_stop_reason == word


def test_deltas_come_before_their_block() -> None:
    asm = StreamAssembler("test", deltas=True)
    out: list[Any] = []

    def feed(event: str, **data: Any) -> None:
        out.extend(one(asm, event, json.dumps(data)))

    def delta(index: int, **body: Any) -> None:
        feed("content_block_delta", index=index, delta=body)

    feed("message_start", message={"id": "m"})
    feed("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""})
    delta(0, type="thinking_delta", thinking="Hm.")
    delta(0, type="signature_delta", signature="s")
    feed("content_block_stop", index=0)
    feed("content_block_start", index=1, content_block={"type": "text", "text": "A"})
    delta(1, type="text_delta", text="nd")
    feed("content_block_stop", index=1)
    start = {"type": "tool_use", "id": "t1", "name": "kb_ask", "input": {}}
    feed("content_block_start", index=2, content_block=start)
    delta(2, type="input_json_delta", partial_json="{}")
    feed("content_block_stop", index=2)
    feed("message_stop")
    content = asm.result().content
    assert out == [
        ThinkingDelta(index=0, thinking="Hm."),
        content[0],
        TextDelta(index=1, text="A"),
        TextDelta(index=1, text="nd"),
        content[1],
        ToolUseStart(index=2, id="t1", name="kb_ask"),
        ToolInputDelta(index=2, partial_json="{}"),
        content[2],
    ]
    assert [type(b) for b in content] == [ThinkingBlock, TextBlock, ToolUseBlock]


# ---------------------------------------------------------------------------
# turns against a loopback fake


async def test_complete_and_stream_agree_and_headers() -> None:
    t = generate(
        random.Random(11),
        kinds=["thinking", "text", "tool_use", "mystery_block"],
        stop_reason="tool_use",
    )
    api = FakeMessagesAPI(transcript=t)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        done = await p.complete(req(temperature=0.2))
        items = [item async for item in p.stream(req())]
    assert isinstance(items[-1], Response)
    assert items[-1] == done
    assert items[:-1] == done.content
    assert [b.raw for b in done.content] == t.message["content"]
    for seen in api.seen:
        assert seen.headers["x-api-key"] == SECRET
        assert seen.headers["anthropic-version"] == API_VERSION
        assert seen.headers["anthropic-beta"] == FALLBACK_BETA
        assert "Authorization" not in seen.headers
        assert not NEVER_SENT & seen.body.keys()
        assert seen.body["thinking"] == {"type": "adaptive"}
        assert seen.body["output_config"]["effort"] == "medium"
        assert seen.body["fallbacks"] == "default"
    assert api.seen[1].body["stream"] is True


@pytest.mark.parametrize("kind", ["oauth", "bearer"])
async def test_dropped_fallbacks_and_bearer(kind: Literal["oauth", "bearer"]) -> None:
    cred = Credential(SECRET, kind)
    with mocked(generate(random.Random(12), kinds=["text"])) as seen:
        async with anthropic.provider(credential=cred, base_url=BASE) as p:
            await p.complete(req(fallbacks=None))
            await p.complete(req())
            await p.complete(req(fallbacks=None))  # the turn headers are built once, kept apart
        first, second, third = seen()
    assert first.headers["Authorization"] == f"Bearer {SECRET}"
    assert "x-api-key" not in first.headers
    if kind == "oauth":
        assert first.headers["anthropic-beta"] == OAUTH_BETA
        assert second.headers["anthropic-beta"] == f"{OAUTH_BETA},{FALLBACK_BETA}"
    else:  # a plain bearer (ANTHROPIC_AUTH_TOKEN) never carries the OAuth beta
        assert "anthropic-beta" not in first.headers
        assert second.headers["anthropic-beta"] == FALLBACK_BETA
    assert "fallbacks" not in first.body
    assert third.headers.get("anthropic-beta") == first.headers.get("anthropic-beta")


@pytest.mark.parametrize("status", [429, 529])
async def test_busy_status_is_api_error(status: int) -> None:
    api = FakeMessagesAPI(status=status)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        with pytest.raises(LLMApiError) as info:
            await p.complete(req())
        assert info.value.status == status
        with pytest.raises(LLMApiError) as info:
            await drain(p.stream(req()))
        assert info.value.status == status
    assert len(api.seen) == 2  # no retry


async def test_error_event_and_truncation_over_the_wire() -> None:
    rng = random.Random(13)
    api = FakeMessagesAPI(transcript=generate(rng, kinds=["text", "text"], error=True))
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        got: list[Any] = []
        with pytest.raises(LLMApiError) as info:
            await drain(p.stream(req()), got)
        assert info.value.status == 200
        assert len(got) == 2  # the blocks before the error arrived whole
        cut = generate(rng, kinds=["text"])
        api.transcript = None
        api.payload = cut.sse()[: -len(frame("message_stop", {"type": "message_stop"})) - 3]
        with pytest.raises(LLMBadResponse, match="message_stop"):
            async for _ in p.stream(req()):
                pass


async def test_refusal_over_the_wire() -> None:
    t = generate(random.Random(14), kinds=[], stop_reason="refusal")
    api = FakeMessagesAPI(transcript=t)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        items = [i async for i in p.stream(req())]
        done = await p.complete(req())
    assert items == [done]
    assert done.content == []
    assert done.stop_reason == "refusal"
    assert done.stop_details == t.message["stop_details"]


async def test_breaking_out_releases_the_response() -> None:
    """Stopping early releases the connection at once: the far end, holding
    the body open, is let go only after the caller is out (waiting for the
    body's end would end in the turn's LLMTimeout instead)."""
    t = generate(random.Random(15), kinds=["text", "text", "text"])
    head = b"".join(frame(n, d) for n, d in t.events[:6])  # start, first block, and a little
    api = FakeMessagesAPI(payload=head, stalled=True)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        async with contextlib.aclosing(p.stream(req(timeout_ms=30_000))) as items:
            async for item in items:
                assert isinstance(item, TextBlock)
                break
        session = p._sessions.current()
        assert session is not None
        assert not session.connector._acquired  # type: ignore[union-attr]
        api.released.set()  # the far end is let go only now
        # the next turn gets a connection as usual
        api.payload, api.stalled, api.transcript = None, False, t
        assert (await p.complete(req())).content


async def test_server_holding_the_stream_open_after_message_stop() -> None:
    """The answer is whole at message_stop: the stream ends then, though the
    far end holds the body open until after the caller has the Response."""
    t = generate(random.Random(19), kinds=["text"])
    api = FakeMessagesAPI(transcript=t, stalled=True)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        items = [i async for i in p.stream(req(timeout_ms=30_000))]
        api.released.set()  # the far end is let go only now
        assert isinstance(items[-1], Response)
        assert [b.raw for b in items[-1].content] == t.message["content"]


async def test_a_cut_after_message_stop_keeps_the_whole_answer() -> None:
    t = generate(random.Random(20), kinds=["text", "tool_use"])
    api = FakeMessagesAPI(transcript=t, cut=True)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        items = [i async for i in p.stream(req())]
    assert isinstance(items[-1], Response)
    assert [b.raw for b in items[-1].content] == t.message["content"]


async def test_extra_headers_go_on_every_request() -> None:
    gateway = {"x-gateway-key": "g-SECRET-1", "anthropic-version": "2023-06-01"}
    with mocked(generate(random.Random(21), kinds=["text"])) as seen:
        async with anthropic.provider(credential=SECRET, base_url=BASE, headers=gateway) as p:
            await p.complete(req())
            async for _ in p.stream(req()):
                pass
            assert "g-SECRET-1" not in repr(p)
        built = await providers.provider(
            "anthropic", credential=SECRET, base_url=BASE, headers=gateway
        )
        async with built:
            assert isinstance(built, AnthropicProvider)
            await built.complete(req())
        sent = seen()
    assert [s.headers.get("x-gateway-key") for s in sent] == ["g-SECRET-1"] * 3
    assert all(s.headers["x-api-key"] == SECRET for s in sent)
    assert [s.headers["accept"] for s in sent] == [
        "application/json",
        "text/event-stream",
        "application/json",
    ]


async def test_userinfo_in_the_base_url_is_never_shown() -> None:
    api = FakeMessagesAPI(transcript=generate(random.Random(22), kinds=["text"]), status=529)
    async with serving(api) as url:
        base = url.replace("http://", "http://gw:pw-SECRET-7@")
        async with anthropic.provider(credential=SECRET, base_url=base) as p:
            assert "pw-SECRET-7" not in repr(p) + p.endpoint.label
            assert p.endpoint.label == f"the Messages API at {url}"
            with pytest.raises(LLMApiError) as info:
                await p.complete(req())
            assert "pw-SECRET-7" not in str(info.value)
        assert api.seen[0].headers["Authorization"].startswith("Basic ")  # still sent
        # aiohttp will not send both a URL's userinfo and a bearer header: typed, not ValueError
        bearer = Credential("tok-SECRET-8", "bearer", "explicit")
        async with anthropic.provider(credential=bearer, base_url=base) as p:
            with pytest.raises(LLMError) as refused:
                await p.complete(req())
            text = str(refused.value)
            assert "pw-SECRET-7" not in text
            assert "tok-SECRET-8" not in text


async def test_connection_reused_after_a_whole_stream() -> None:
    api = FakeMessagesAPI(transcript=generate(random.Random(16), kinds=["text"]))
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        for _ in range(3):
            async for _ in p.stream(req()):
                pass
        session = p._sessions.current()
        assert session is not None
        assert not session.connector._acquired  # type: ignore[union-attr]
        pooled = session.connector._conns.values()  # type: ignore[union-attr]
        assert sum(len(v) for v in pooled) == 1


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n', LLMApiError),
        (b"<html><body>" + b"Bad gateway. " * 30_000 + b"</body></html>", LLMBadResponse),
    ],
)
async def test_a_streamed_request_answered_without_sse_says_what_came(
    payload: bytes, error: type[Exception]
) -> None:
    api = FakeMessagesAPI(payload=payload)
    async with serving(api) as url, anthropic.provider(credential=SECRET, base_url=url) as p:
        with pytest.raises(error) as info:
            async for _ in p.stream(req()):
                pass
    message = str(info.value)
    assert len(message) < 400
    if error is LLMApiError:
        assert "overloaded_error" in message
        assert info.value.status == 200  # type: ignore[attr-defined]
    else:
        assert "no SSE event" in message
        assert "<html>" in message
        assert info.value.text == payload[: 64 * 1024].decode()  # type: ignore[attr-defined]


async def test_a_closed_provider_refuses_further_turns() -> None:
    api = FakeMessagesAPI(transcript=generate(random.Random(17), kinds=["text"]))
    async with serving(api) as url:
        p = anthropic.provider(credential=SECRET, base_url=url)
        async with p:
            await p.complete(req())
        assert len(p._sessions) == 0
        with pytest.raises(LLMClosed, match="closed"):
            await p.complete(req())
        with pytest.raises(LLMClosed, match="closed"):
            async for _ in p.stream(req()):
                pass
        await p.aclose()  # closing twice is harmless


async def test_credential_never_logged_or_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = FakeMessagesAPI(transcript=generate(random.Random(17), kinds=["text"]))
    async with serving(api) as url:
        p = anthropic.provider(credential=SECRET, base_url=url)
        async with p:
            await p.complete(req())
            assert SECRET not in repr(p)
            assert SECRET not in str(p)
        api.status = 529
        async with anthropic.provider(credential=SECRET, base_url=url) as p2:
            with pytest.raises(LLMApiError) as info:
                await p2.complete(req())
            assert SECRET not in str(info.value)
    for record in caplog.records:
        assert SECRET not in record.getMessage() + (record.exc_text or "")


async def test_first_turn_resolves_through_ant_once(bin_dir: Path, tmp_path: Path) -> None:
    count = tmp_path / "count"
    fake_ant(bin_dir, f'echo run >> {count}\nprintf "{SECRET}\\n"\n')
    with mocked(generate(random.Random(18), kinds=["text"])) as seen:
        async with anthropic.provider(base_url=BASE) as p:
            await asyncio.gather(*(p.complete(req()) for _ in range(5)))
            await p.complete(req())
        sent = seen()
    assert count.read_text().count("run") == 1
    assert len(sent) == 6
    for one_request in sent:
        assert one_request.headers["Authorization"] == f"Bearer {SECRET}"
        assert one_request.headers["anthropic-beta"] == f"{OAUTH_BETA},{FALLBACK_BETA}"


async def test_no_credential_anywhere_fails_the_turn() -> None:
    async with anthropic.provider(base_url="http://127.0.0.1:9") as p:
        with pytest.raises(LLMNoCredential):
            await p.complete(req())


async def test_cancelled_turn_kills_hung_ant(bin_dir: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake_ant(bin_dir, f"echo $$ > {pid_file}\nexec {SLEEP} 30\n")
    async with anthropic.provider(base_url="http://127.0.0.1:9") as p:
        task = asyncio.create_task(p.complete(req()))
        await until(lambda: pid_file.exists() and bool(pid_file.read_text().strip()), task)
        pid = int(pid_file.read_text())
        os.kill(pid, 0)  # running
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_selection_wiring() -> None:
    """A credential makes the Messages API available, as specified (#59): a
    host down when the backend is chosen does not leave it on the stub; the
    reason a command prints still probes the host and names the fix (#48)."""
    assert await providers.available("anthropic") is False
    async with serving(FakeMessagesAPI()) as url:
        assert await providers.available("anthropic", credential=SECRET, base_url=url) is True
        built = await providers.provider("anthropic", credential=SECRET, base_url=url)
        async with built:
            assert isinstance(built, AnthropicProvider)
            assert SECRET not in repr(built)
    dead = refused_url()
    assert await providers.available("anthropic", credential=SECRET, base_url=dead) is True
    reason = await providers.unavailable_reason("anthropic", credential=SECRET, base_url=dead)
    assert reason is not None
    assert reason.startswith(f"llm-unreachable: the Messages API at {dead} is unreachable")
    assert reason.endswith("point ANTHROPIC_BASE_URL at one that serves /v1/messages")
    assert SECRET not in reason
    async with await providers.provider("anthropic", credential=SECRET, base_url=dead) as chosen:
        assert isinstance(chosen, AnthropicProvider)
        with pytest.raises(errors.LLMUnreachable):  # the turn says so, typed
            await chosen.complete(Request(messages=[Message(role="user", content="hi")]))
    fallback = await providers.provider("anthropic")
    assert not isinstance(fallback, AnthropicProvider)


def test_constructor_does_no_io_and_reads_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://example.invalid:1/")
    p = anthropic.provider(credential=SECRET)
    assert p.endpoint.label == "the Messages API at http://example.invalid:1"
    assert p.model == "claude-opus-5-5"
    assert len(p._sessions) == 0


async def test_bad_explicit_credential_refused_at_construction() -> None:
    from vaelii_llm.errors import LLMBadCredential

    with pytest.raises(LLMBadCredential) as info:
        anthropic.provider(credential="abc\ndef")
    assert "abc" not in str(info.value)
    assert await anthropic.available(credential="abc\ndef") is False


EVENT_NAMES = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "other",
]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_only_typed_errors_escape_the_assembler(data: st.DataObject) -> None:
    """Mutated transcripts and junk: the assembler answers or raises an LLMError, nothing else."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    events = [(n, msgspec.json.encode(d).decode()) for n, d in generate(rng).events]
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(events) - 1))
        name, text = events[i]
        choice = data.draw(st.integers(0, 3))
        if choice == 0:
            events[i] = (data.draw(st.sampled_from(EVENT_NAMES)), text)
        elif choice == 1:
            events[i] = (name, text[: data.draw(st.integers(0, len(text)))])
        elif choice == 2:
            events[i] = (name, data.draw(st.text(max_size=40)))
        else:
            del events[i]
            if not events:
                break
    asm = StreamAssembler("fuzz")
    try:
        for name, text in events:
            one(asm, name, text)
        asm.result()
    except LLMError:
        pass


async def test_choosing_the_backend_and_its_first_turn_run_ant_once(
    bin_dir: Path, tmp_path: Path
) -> None:
    count = tmp_path / "count"
    fake_ant(bin_dir, f'echo run >> {count}\nprintf "{SECRET}\\n"\n')
    api = FakeMessagesAPI(transcript=generate(random.Random(19), kinds=["text"]))
    async with serving(api) as url:
        p = await providers.provider("anthropic", base_url=url)
        assert isinstance(p, AnthropicProvider)
        async with p:
            await p.complete(req())
    assert count.read_text().count("run") == 1


async def test_a_turn_waiting_on_the_ant_cli_when_the_provider_closes_is_llm_closed(
    bin_dir: Path, tmp_path: Path
) -> None:
    started, go = tmp_path / "started", tmp_path / "go"
    # The CLI answers only once the provider has closed (the test says when,
    # not a fixed sleep a loaded machine could outrun); 30 s at the most.
    fake_ant(
        bin_dir,
        f": > {started}\ni=0\n"
        f"while [ ! -e {go} ] && [ $i -lt 3000 ]; do {SLEEP} 0.01; i=$((i+1)); done\n"
        f'printf "{SECRET}\\n"\n',
    )
    api = FakeMessagesAPI(transcript=generate(random.Random(21), kinds=["text"]))
    async with serving(api) as url:
        p = anthropic.provider(base_url=url)
        turn = asyncio.create_task(p.complete(req()))
        await until(started.exists, turn)  # the CLI runs
        await p.aclose()
        go.touch()
        with pytest.raises(LLMClosed):
            await turn
    assert api.seen == []  # nothing went out after the close
