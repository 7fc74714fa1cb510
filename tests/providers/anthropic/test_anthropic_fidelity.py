"""The streamed Messages API turn equals the whole one, on transcripts shaped as the API sends them.

Each case is served by a loopback fake that answers the same turn both ways
(SSE built from the whole message by :mod:`messages_transcripts`, and the JSON
message itself), and checked streamed and not: the final streamed Response
equals ``complete()``'s, the blocks streamed are its content, and every block's
``raw`` is the block the non-streamed API returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any
from typing import get_args

import msgspec
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Transcript
from tests.support.messages_transcripts import Plan
from tests.support.messages_transcripts import Turn
from tests.support.messages_transcripts import citation
from tests.support.messages_transcripts import compaction
from tests.support.messages_transcripts import fallback
from tests.support.messages_transcripts import lenient
from tests.support.messages_transcripts import message
from tests.support.messages_transcripts import messages
from tests.support.messages_transcripts import server_tool_use
from tests.support.messages_transcripts import text
from tests.support.messages_transcripts import thinking
from tests.support.messages_transcripts import tool_use
from tests.support.messages_transcripts import transcript
from tests.support.messages_transcripts import web_search_result
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._wire.sse import SSEDecoder
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.providers import anthropic
from vaelii_llm.providers.anthropic._decode import decode_response
from vaelii_llm.providers.anthropic._stream import StreamAssembler

KEY = "sk-ant-test-fidelity-0123456789"


def req(**kw: Any) -> Request:
    kw.setdefault("messages", [Message(role="user", content="hi")])
    return Request(**kw)


@contextlib.asynccontextmanager
async def serving(api: FakeMessagesAPI) -> AsyncIterator[str]:
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def whole(t: Transcript) -> Response:
    """What ``complete()`` decodes from the non-streamed message."""
    return decode_response(msgspec.json.encode(t.message))


def assemble(t: Transcript, rng: random.Random) -> tuple[list[Block], Response]:
    """The stream sans-IO: the SSE bytes cut at random points, fed through
    the decoder and the assembler; the blocks yielded and the final Response."""
    data = t.sse()
    frames = SSEDecoder("test")
    asm = StreamAssembler("test")
    blocks: list[Block] = []
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 96)
        blocks.extend(asm.feed(frames.feed_frames(data[pos : pos + step])))
        pos += step
    frames.feed(b"")
    return blocks, asm.result()


async def both_ways(t: Transcript) -> tuple[list[Any], Response]:
    """The turn over loopback, streamed then whole: what ``stream()`` yielded
    and what ``complete()`` returned."""
    api = FakeMessagesAPI(transcript=t, chunk_most=64)
    async with serving(api) as url, anthropic.provider(credential=KEY, base_url=url) as p:
        items = [item async for item in p.stream(req())]
        watched = [item async for item in p.stream(req(), deltas=True)]
        done = await p.complete(req())
    # Deltas only add: without them the watched stream is the plain one.
    assert [i for i in watched if not isinstance(i, get_args(Delta))] == items
    return items, done


def check_equal(t: Transcript, items: list[Any], done: Response) -> Response:
    """The streamed turn is the whole one: same Response, its content streamed
    block by block, every raw the message's own block."""
    assert isinstance(items[-1], Response)
    assert items[-1] == done
    assert items[:-1] == done.content
    assert [b.raw for b in done.content] == t.message["content"]
    assert done == whole(t)
    return done


async def served(t: Transcript) -> Response:
    items, done = await both_ways(t)
    return check_equal(t, items, done)


# ---------------------------------------------------------------------------
# 1. server-side fallback


@pytest.mark.parametrize(
    ("hops", "served_by"),
    [
        ([("claude-opus-5-5", "claude-sonnet-5")], "claude-sonnet-5"),
        (
            [("claude-opus-5-5", "claude-sonnet-5"), ("claude-sonnet-5", "claude-haiku-5")],
            "claude-haiku-5",
        ),
    ],
)
async def test_a_fallback_stream_names_the_model_that_served(
    hops: list[tuple[str, str]], served_by: str
) -> None:
    content = [fallback(a, b) for a, b in hops] + [text("Here is what I can say.")]
    msg = message(content, model=served_by)
    t = transcript(msg, random.Random(1))
    assert t.events[0][1]["message"]["model"] == "claude-opus-5-5"  # the start names the first
    done = await served(t)
    assert done.model == served_by
    assert isinstance(done.content[0], OpaqueBlock)
    assert done.content[0].raw == content[0]


def test_a_fallback_with_no_block_keeps_the_start_model() -> None:
    """A turn where no model declined carries no fallback block: the start's model served."""
    t = transcript(message([text("hi")], model="claude-opus-5-5"), random.Random(2))
    _, resp = assemble(t, random.Random(2))
    assert resp.model == "claude-opus-5-5"


# ---------------------------------------------------------------------------
# 2. deltas for block types the package does not model


@pytest.mark.parametrize("seed", range(6))
async def test_compaction_deltas_fill_the_block_and_it_goes_back_whole(seed: int) -> None:
    block = compaction("The user asked about birds; we found three species. " * 3)
    msg = message([block, text("Continuing: the third species is the wren.")])
    t = transcript(msg, random.Random(seed))
    deltas = [d for n, d in t.events if n == "content_block_delta" and d["index"] == 0]
    assert deltas
    assert {d["delta"]["type"] for d in deltas} == {"compaction_delta"}
    start = next(d for n, d in t.events if n == "content_block_start")
    assert start["content_block"]["encrypted_content"] is None
    api = FakeMessagesAPI(transcript=t, chunk_most=64, seed=seed)
    async with serving(api) as url, anthropic.provider(credential=KEY, base_url=url) as p:
        items = [item async for item in p.stream(req())]
        done = await p.complete(req())
        check_equal(t, items, done)
        got = done.content[0]
        assert isinstance(got, OpaqueBlock)
        assert got.raw["encrypted_content"] == block["encrypted_content"]
        assert got.raw["content"] == block["content"]
        # The next turn echoes the streamed block, encrypted content and all.
        streamed = items[-1]
        assert isinstance(streamed, Response)
        follow = [
            Message(role="user", content="hi"),
            Message(role="assistant", content=streamed.content),
            Message(role="user", content="go on"),
        ]
        await p.complete(req(messages=follow))
    assert api.seen[-1].body["messages"][1]["content"][0] == block


async def test_a_failed_compaction_round_trips_its_nulls() -> None:
    """Compaction that produced no summary: ``content`` stays null on both paths."""
    await served(transcript(message([compaction(None), text("ok")]), random.Random(3)))


PLAN = Plan("gadget_delta", strings=("note", "code"), lists=("steps",), scalars=("score", "meta"))


@pytest.mark.parametrize("seed", range(8))
def test_an_unknown_block_is_filled_by_the_documented_rule(seed: int) -> None:
    """Strings of one delta type accumulate in order, lists extend, other
    values: the last one wins; a null in a delta carries nothing."""
    block = {
        "type": "gadget",
        "note": "a note é😀 in pieces",
        "code": "",
        "steps": [1, {"two": 2}, [3], "four"],
        "score": 0.75,
        "meta": {"k": [1, 2]},
        "fixed": {"untouched": True},
    }
    t = transcript(message([block]), random.Random(seed), plans={"gadget": PLAN})
    assert any(n == "content_block_delta" for n, _ in t.events)
    blocks, resp = assemble(t, random.Random(seed))
    assert resp == whole(t)
    assert blocks == resp.content
    assert resp.content[0].raw == block


async def test_an_unknown_block_over_the_wire() -> None:
    block = {"type": "gadget", "note": "streamed", "code": "x = 1", "steps": ["a", "b"]}
    block |= {"score": 3, "meta": None, "fixed": 1}
    t = transcript(message([text("before"), block]), random.Random(4), plans={"gadget": PLAN})
    await served(t)


def test_unknown_deltas_on_a_modelled_block_are_skipped() -> None:
    """The typed fast path: a text block ignores a delta type it does not know."""
    t = transcript(message([text("hello")]), random.Random(5), pings=False)
    extra = (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "future_delta", "text": "NOT TEXT"},
        },
    )
    stop = next(i for i, (n, _) in enumerate(t.events) if n == "content_block_stop")
    t.events.insert(stop, extra)
    _, resp = assemble(t, random.Random(5))
    assert resp == whole(t)


# ---------------------------------------------------------------------------
# 3. max_tokens inside a tool input

CUTS = [
    ('{"query": "birds", "limit": 1', {"query": "birds", "limit": 1}),
    ('{"query": "bir', {"query": "bir"}),
    ('{"query": "birds", "lim', {"query": "birds"}),
    ('{"query": "birds", "limit": tr', {"query": "birds"}),
    ('{"q": "caf\\u00e', {"q": "caf"}),
    ('{"q": ["a", {"b": "c', {"q": ["a", {"b": "c"}]}),
    ('{"query": "birds"}', {"query": "birds"}),  # whole-looking, still cut: never run
    ("", {}),
]


@pytest.mark.parametrize("stopped", [True, False], ids=["block-stopped", "left-open"])
@pytest.mark.parametrize(("cut", "expected"), CUTS)
async def test_a_turn_cut_inside_a_tool_input_ends_as_max_tokens(
    cut: str, expected: dict[str, Any], stopped: bool
) -> None:
    assert lenient(cut) == expected  # the fake's non-streamed reading is the lenient one
    content = [
        thinking("Let me look."),
        text("I'll search the KB."),
        tool_use("kb_query", expected),
    ]
    msg = message(content, stop_reason="max_tokens")
    t = transcript(msg, random.Random(len(cut)), cut=cut, cut_stopped=stopped)
    done = await served(t)
    assert done.stop_reason == "max_tokens"
    think, said, call = done.content
    assert isinstance(think, ThinkingBlock)
    assert isinstance(said, TextBlock)
    assert said.text == "I'll search the KB."
    assert isinstance(call, ToolUseBlock)
    assert call.partial
    assert call.input == expected


async def test_a_whole_tool_call_before_the_cut_one_is_not_partial() -> None:
    first = tool_use("kb_query", {"query": "wren"}, "toolu_whole")
    cut = '{"query": "rob'
    msg = message(
        [first, tool_use("kb_query", lenient(cut), "toolu_cut")], stop_reason="max_tokens"
    )
    done = await served(transcript(msg, random.Random(6), cut=cut))
    whole_call, cut_call = done.content
    assert isinstance(whole_call, ToolUseBlock)
    assert isinstance(cut_call, ToolUseBlock)
    assert not whole_call.partial
    assert cut_call.partial


async def test_a_tool_call_ended_by_tool_use_is_whole() -> None:
    msg = message(
        [text("Searching."), tool_use("kb_query", {"query": "wren"})], stop_reason="tool_use"
    )
    done = await served(transcript(msg, random.Random(7)))
    call = done.content[-1]
    assert isinstance(call, ToolUseBlock)
    assert not call.partial


@pytest.mark.parametrize("stop_reason", ["tool_use", "end_turn"])
def test_a_cut_input_under_another_stop_reason_is_bad_response(stop_reason: str) -> None:
    """Only max_tokens may cut a tool input; under any other stop it is a broken stream."""
    cut = '{"query": "bir'
    msg = message([text("x"), tool_use("kb_query", lenient(cut))], stop_reason="max_tokens")
    t = transcript(msg, random.Random(8), cut=cut)
    for _, data in t.events:
        if data["type"] == "message_delta":
            data["delta"]["stop_reason"] = stop_reason
    with pytest.raises(LLMBadResponse, match="not JSON"):
        assemble(t, random.Random(8))


def test_a_block_after_a_cut_input_is_bad_response() -> None:
    cut = '{"query": "bir'
    msg = message([tool_use("kb_query", lenient(cut)), text("after")], stop_reason="max_tokens")
    t = transcript(msg, random.Random(9))
    for _, data in t.events:  # the first block's input is cut, yet a block follows it
        delta = data.get("delta", {})
        if delta.get("type") == "input_json_delta":
            delta["partial_json"] = ""
    first = next(d for _, d in t.events if d.get("delta", {}).get("type") == "input_json_delta")
    first["delta"]["partial_json"] = cut
    with pytest.raises(LLMBadResponse, match="not JSON"):
        assemble(t, random.Random(9))


# ---------------------------------------------------------------------------
# 4. a delta or a stop for an index that never started


def _events(*pairs: tuple[str, dict[str, Any]]) -> Transcript:
    return Transcript([(n, {"type": n, **d}) for n, d in pairs], {})


START = ("message_start", {"message": {"id": "m", "model": "claude-opus-5-5", "content": []}})
TEXT0 = ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
STOP0 = ("content_block_stop", {"index": 0})
END = [
    ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
    ("message_stop", {}),
]


@pytest.mark.parametrize(
    "middle",
    [
        [("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "lost"}})],
        [("content_block_stop", {"index": 1})],
        [
            (
                "content_block_delta",
                {"index": 7, "delta": {"type": "compaction_delta", "content": "x"}},
            )
        ],
        [
            ("content_block_start", {"index": 2, "content_block": {"type": "text", "text": ""}}),
            ("content_block_stop", {"index": 2}),
        ],
    ],
    ids=["delta", "stop", "unknown-delta", "skipped-index"],
)
async def test_an_index_that_never_started_is_a_lost_block(
    middle: list[tuple[str, dict[str, Any]]],
) -> None:
    t = _events(START, TEXT0, STOP0, *middle, *END)
    with pytest.raises(LLMBadResponse, match="block"):
        assemble(t, random.Random(10))
    api = FakeMessagesAPI(payload=t.sse())
    got: list[Any] = []

    async def collect(p: anthropic.AnthropicProvider) -> None:
        async for item in p.stream(req()):
            got.append(item)

    async with serving(api) as url, anthropic.provider(credential=KEY, base_url=url) as p:
        with pytest.raises(LLMBadResponse, match="block"):
            await collect(p)
    assert not any(isinstance(i, Response) for i in got)


# ---------------------------------------------------------------------------
# the rest of a real transcript: refusal, usage, extra fields, server tools


async def test_refusal_with_stop_details_and_partial_text() -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "This could enable harm."}
    msg = message([text("I can help with part of")], stop_reason="refusal", stop_details=details)
    done = await served(transcript(msg, random.Random(11)))
    assert done.stop_reason == "refusal"
    assert done.stop_details == details


async def test_usage_missing_from_message_start() -> None:
    t = transcript(message([text("hi")]), random.Random(12), usage_at_start=False)
    assert "usage" not in t.events[0][1]["message"]
    done = await served(t)
    assert (done.usage.input_tokens, done.usage.cache_read_input_tokens) == (484, 12)  # 472 + 12
    assert done.usage.output_tokens == 89


async def test_unmodelled_top_level_and_usage_fields_are_kept() -> None:
    container = {"id": "container_011", "expires_at": "2026-12-01T08:00:00Z"}
    edits = {"applied_edits": [{"type": "clear_thinking_20251015", "cleared_thinking_turns": 1}]}
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": None,
        "cache_read_input_tokens": 0,
        "output_tokens": 30,
        "service_tier": "standard",
        "inference_geo": "us",
        "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
        "output_tokens_details": {"thinking_tokens": 12},
    }
    msg = message(
        [text("done")],
        usage=usage,
        container=container,
        context_management=edits,
        diagnostics=None,
        x_brand_new={"n": 1},
    )
    t = transcript(msg, random.Random(13))
    start = t.events[0][1]["message"]
    assert start["container"] is None  # its value arrives with message_delta
    done = await served(t)
    assert done.extra == {
        "container": container,
        "context_management": edits,
        "x_brand_new": {"n": 1},
    }
    assert done.usage.extra == {
        "service_tier": "standard",
        "inference_geo": "us",
        "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0},
        "output_tokens_details": {"thinking_tokens": 12},
    }
    assert done.usage.input_tokens == 10


async def test_a_plain_turn_has_no_extra() -> None:
    done = await served(transcript(message([text("hi")]), random.Random(14)))
    assert done.extra is None
    assert done.usage.extra is None


async def test_thinking_server_tools_and_citations() -> None:
    content = [
        thinking("The user wants birds; search first."),
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
        server_tool_use("wrens of europe"),
        web_search_result(),
        text("Wrens are small.", [citation("Wrens are small"), citation("brown")]),
        tool_use("kb_query", {"query": "wren", "limit": 3, "filters": {"tags": ["bird", "é😀"]}}),
    ]
    msg = message(content, stop_reason="tool_use")
    t = transcript(msg, random.Random(15))
    kinds = [d["delta"]["type"] for n, d in t.events if n == "content_block_delta"]
    for kind in (
        "thinking_delta",
        "signature_delta",
        "input_json_delta",
        "text_delta",
        "citations_delta",
    ):
        assert kind in kinds
    done = await served(t)
    assert [type(b) for b in done.content] == [
        ThinkingBlock,
        RedactedThinkingBlock,
        OpaqueBlock,
        OpaqueBlock,
        TextBlock,
        ToolUseBlock,
    ]
    search = done.content[2]
    assert isinstance(search, OpaqueBlock)
    assert search.raw["input"] == {"query": "wrens of europe"}


# ---------------------------------------------------------------------------
# the property: random turns of random block types


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.booleans(), st.randoms(use_true_random=False))
def test_streamed_equals_whole_for_random_turns(
    turn: Turn, cut_stopped: bool, rng: random.Random
) -> None:
    t = turn.transcript(cut_stopped)
    blocks, resp = assemble(t, rng)
    expected = whole(t)
    assert resp == expected
    assert blocks == resp.content
    assert [b.raw for b in resp.content] == t.message["content"]
    fallbacks = [b for b in t.message["content"] if b["type"] == "fallback"]
    if fallbacks:
        assert resp.model == fallbacks[-1]["to"]["model"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_streamed_equals_whole_for_random_turns_over_the_wire(turn: Turn) -> None:
    t = turn.transcript()

    async def run() -> None:
        items, done = await both_ways(t)
        check_equal(t, items, done)

    asyncio.run(run(), debug=True)


def test_the_strategies_reach_every_case() -> None:
    """The random turns do hold what the property is about (a check on the generator)."""
    seen: set[str] = set()

    # Enough turns that each case (the rarest near one in ten) is all but
    # sure to come up on every Python and Hypothesis the lanes run.
    @settings(max_examples=500, deadline=None, database=None, derandomize=True)
    @given(messages())
    def collect(turn: Turn) -> None:
        for block in turn.message["content"]:
            seen.add(block["type"] if not block["type"].startswith("x_") else "x_")
        if turn.cut is not None:
            seen.add("cut")
        if turn.plans:
            seen.add("plan")
        if not turn.usage_at_start:
            seen.add("no-start-usage")
        if {"container", "context_management"} & turn.message.keys():
            seen.add("extra")

    collect()
    wanted = {
        "text",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "server_tool_use",
        "mcp_tool_use",
        "web_search_tool_result",
        "compaction",
        "fallback",
        "x_",
        "cut",
        "plan",
        "no-start-usage",
        "extra",
    }
    assert wanted <= seen, wanted - seen


def test_transcripts_are_json() -> None:
    """The builder's events are what the SSE frames carry (a guard on the builder)."""
    t = transcript(message([compaction("s"), text("t")]), random.Random(16))
    for name, data in t.events:
        assert data["type"] == name
        json.dumps(data)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list('{}[]":,\\ u0123456789abcdeE.-+tfnrl\u00e9\U0001f600')))
    | st.text(max_size=30),
    st.sampled_from(["max_tokens", "tool_use", "end_turn"]),
    st.booleans(),
)
def test_any_cut_input_is_a_response_or_a_typed_refusal(cut: str, stop: str, stopped: bool) -> None:
    """Whatever text a tool input stops at: a Response (under max_tokens, when
    it reads as a JSON object prefix) or LLMBadResponse, nothing else."""
    head = message([tool_use("kb_query", {})], stop_reason="max_tokens")
    t = transcript(head, random.Random(17), pings=False)
    events = [e for e in t.events if e[1].get("delta", {}).get("type") != "input_json_delta"]
    start = next(i for i, (n, _) in enumerate(events) if n == "content_block_start")
    piece = {"type": "input_json_delta", "partial_json": cut}
    events.insert(
        start + 1,
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": piece}),
    )
    if not stopped:
        events = [e for e in events if e[0] != "content_block_stop"]
    for _, data in events:
        if data["type"] == "message_delta":
            data["delta"]["stop_reason"] = stop
    try:
        _, resp = assemble(Transcript(events, {}), random.Random(18))
    except LLMBadResponse:
        return
    call = resp.content[0]
    assert isinstance(call, ToolUseBlock)
    assert call.partial == (stop == "max_tokens")
    if stop != "max_tokens":
        assert call.input == (json.loads(cut) if cut.strip() else {})
