"""The Responses API backend: its body, its answers whole and streamed, its
failures, its count, its headers, and its far end on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from contextlib import aclosing
from contextlib import suppress
from typing import Any
from typing import get_args

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.deltas_check import assert_deltas_make_the_blocks
from tests.support.fake_openai import json_value
from tests.support.fake_openai import split
from tests.support.fake_openai import words
from tests.support.fake_openai_responses import MODEL
from tests.support.fake_openai_responses import RATE_HEADERS
from tests.support.fake_openai_responses import REQUEST_ID
from tests.support.fake_openai_responses import FakeResponses
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn
from tests.support.fake_openai_responses import sse
from vaelii_llm import errors
from vaelii_llm import providers
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import DocumentBlock
from vaelii_llm._protocol import ImageBlock
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._wire.sse import SSEFrames
from vaelii_llm.providers import openai_responses
from vaelii_llm.providers.openai._responses_assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._responses_assemble import EventAssembler
from vaelii_llm.providers.openai._responses_assemble import not_sse
from vaelii_llm.providers.openai._responses_assemble import response_of
from vaelii_llm.providers.openai._responses_request import responses_body

SECRET = "sk-proj-SECRET-responses-do-not-show-5678"
DELTAS = get_args(Delta)


@pytest.fixture(autouse=True)
def _no_ambient_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "VAELII_OPENAI_MODEL", "VAELII_OPENAI_HOSTS"):
        monkeypatch.delenv(name, raising=False)


def ask(text: str = "hi", **kw: Any) -> Request:
    return Request(messages=[Message(role="user", content=text)], **kw)


def body_of(request: Request, **kw: Any) -> dict[str, Any]:
    opts: dict[str, Any] = {"model": MODEL, "store": False, "stream": False, **kw}
    out: dict[str, Any] = json.loads(responses_body(request, **opts))
    return out


def whole(turn: Turn) -> Response:
    return response_of(WHOLE_DECODER.decode(json.dumps(turn.response()).encode()))


def streamed(data: bytes, cuts: list[int] | None = None, *, deltas: bool = False) -> list[Any]:
    """``data`` through the codec's decoder and assembler, cut at ``cuts``
    (byte offsets), as the skeleton's pump drives them."""
    points = sorted({c % (len(data) + 1) for c in cuts or []})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    decoder = SSEFrames("test", not_sse)
    asm = EventAssembler("test", deltas=deltas)
    items: list[Any] = []
    for piece in filter(None, pieces):
        items.extend(asm.feed(decoder.feed(piece)))
        if asm.finished:
            break
    if not asm.finished:
        items.extend(asm.feed(decoder.feed(b"")))
    items.append(asm.result())
    return items


def tool_turn() -> Turn:
    return Turn(
        items=[
            Item("reasoning", parts=[["Two ", "lookups."], ["Then answer."]], encrypted="gAAA-enc"),
            Item("message", ["Looking", " it up."]),
            Item("function_call", ['{"goal": ', '"(isa ?x Dog)"}'], name="kb_query", call_id="c1"),
            Item("function_call", ['{"term":"Muffet"}'], name="kb_types_of", call_id="c2"),
        ]
    )


# ---------------------------------------------------------------- the body


def test_the_body_sends_only_what_is_set_and_store_false() -> None:
    assert body_of(ask(max_tokens=99)) == {
        "model": MODEL,
        "input": [{"type": "message", "role": "user", "content": "hi"}],
        "max_output_tokens": 99,
        "store": False,
        "include": ["reasoning.encrypted_content"],  # nothing stored: reasoning comes encrypted
    }
    body = body_of(
        ask(system="Be brief.", temperature=0.5, effort="high", thinking_display="summarized"),
        model=None,
        stream=True,
        store=True,
    )
    assert "model" not in body  # none set: a server serving one model answers with it
    assert body["instructions"] == "Be brief."
    assert body["temperature"] == 0.5
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert body["store"] is True
    assert "include" not in body  # stored: the far end holds the reasoning itself
    assert body["stream"] is True
    assert body_of(ask(model="other"))["model"] == "other"
    assert "temperature" not in body_of(ask())  # OpenAI's reasoning models refuse it


def test_tools_and_format_are_shaped_for_this_wire() -> None:
    schema = {
        "title": "Verdict",
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    tools = [
        ToolSchema(name="kb_query", description="Ask.", input_schema={"type": "object"}),
        ToolSchema(name="kb_x", description="X.", input_schema={"type": "object"}, strict=True),
    ]
    body = body_of(ask(tools=tools, format=schema))
    assert body["tools"] == [
        {
            "type": "function",
            "name": "kb_query",
            "description": "Ask.",
            "parameters": {"type": "object"},
            "strict": False,  # named: an absent one reads as strict on OpenAI's API (#59)
        },
        {
            "type": "function",
            "name": "kb_x",
            "description": "X.",
            "parameters": {"type": "object"},
            "strict": True,
        },
    ]
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "Verdict", "schema": schema, "strict": True}
    }


def test_stop_sequences_are_refused_before_sending() -> None:
    with pytest.raises(errors.LLMEncode, match="stop sequences"):
        responses_body(ask(stop_sequences=["END"]), model=None, store=False, stream=False)


def test_a_tool_turn_goes_back_as_items_in_order_reasoning_encrypted_only() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
    call_raw = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "c1",
        "name": "kb_query",
        "arguments": '{ "goal" : "x" }',
        "status": "completed",
    }
    assistant = Message(
        role="assistant",
        content=[
            RedactedThinkingBlock(data="gAAA", raw=reasoning),
            ThinkingBlock(thinking="from another wire"),  # no item: dropped
            ThinkingBlock(thinking="kept by id only", raw={"type": "reasoning", "id": "rs_0"}),
            TextBlock(text="Looking."),
            ToolUseBlock(id="c1", name="kb_query", input={"goal": "x"}, raw=call_raw),
            ToolUseBlock(id="t2", name="kb_other", input={"a": [1]}),
            OpaqueBlock(type="web_search_call", raw={"type": "web_search_call", "id": "ws_1"}),
        ],
    )
    user = Message(
        role="user",
        content=[
            ToolResultBlock(tool_use_id="c1", content="(isa Muffet Dog)"),
            ToolResultBlock(tool_use_id="t2", content=[TextBlock(text="a"), TextBlock(text="b")]),
            TextBlock(text="Go on."),
        ],
    )
    request = Request(messages=[Message(role="user", content="q"), assistant, user])
    assert body_of(request)["input"] == [
        {"type": "message", "role": "user", "content": "q"},
        reasoning,
        {"type": "message", "role": "assistant", "content": "Looking."},
        call_raw,  # the item whole: its id and status too (#59)
        {"type": "function_call", "call_id": "t2", "name": "kb_other", "arguments": '{"a":[1]}'},
        {"type": "web_search_call", "id": "ws_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "(isa Muffet Dog)"},
        {"type": "function_call_output", "call_id": "t2", "output": "ab"},
        {"type": "message", "role": "user", "content": "Go on."},
    ]


def test_images_and_documents_are_input_parts() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    image = ImageBlock(data=png, media_type="image/png")
    pdf = DocumentBlock(data=b"%PDF-1.4 fake", media_type="application/pdf", title="a.pdf")
    text_doc = DocumentBlock(text="body", title="Notes")
    shot = ToolResultBlock(tool_use_id="c1", content=[TextBlock(text="see:"), image])
    request = Request(
        messages=[
            Message(role="user", content=[TextBlock(text="Look"), image, pdf, text_doc, shot])
        ]
    )
    items = body_of(request)["input"]
    url = items[0]["content"][1]["image_url"]
    assert url.startswith("data:image/png;base64,")
    assert items[0]["content"] == [
        {"type": "input_text", "text": "Look"},
        {"type": "input_image", "image_url": url, "detail": "auto"},
        {
            "type": "input_file",
            "filename": "a.pdf",
            "file_data": "data:application/pdf;base64,JVBERi0xLjQgZmFrZQ==",
        },
        {"type": "input_text", "text": "Notes\n\nbody"},
    ]
    assert items[1] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "see:"},
            {"type": "input_image", "image_url": url, "detail": "auto"},
        ],
    }


def test_a_block_this_wire_has_no_shape_for_is_refused() -> None:
    wrong = Message(role="user", content=[ToolUseBlock(id="x", name="n", input={})])
    with pytest.raises(errors.LLMEncode):
        body_of(Request(messages=[wrong]))


# ---------------------------------------------------------------- the answer


def test_whole_answer_reads_items_in_order() -> None:
    response = whole(tool_turn())
    thinking, text, first, second = response.content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == "Two lookups.\n\nThen answer."
    assert thinking.raw is not None
    assert thinking.raw["encrypted_content"] == "gAAA-enc"
    assert text == TextBlock(text="Looking it up.", raw=whole(tool_turn()).content[1].raw)
    assert text.raw is not None
    assert (text.raw["id"], text.raw["type"]) == ("msg_1", "message")  # the item whole
    assert isinstance(first, ToolUseBlock)
    assert isinstance(second, ToolUseBlock)
    assert (first.id, first.name, first.input) == ("c1", "kb_query", {"goal": "(isa ?x Dog)"})
    assert first.raw is not None
    assert first.raw["arguments"] == '{"goal": "(isa ?x Dog)"}'
    assert second.input == {"term": "Muffet"}
    assert response.stop_reason == "tool_use"
    assert response.vendor_stop_reason == "completed"
    assert (response.id, response.model) == ("resp_fake_1", MODEL)


def test_usage_has_one_meaning() -> None:
    turn = Turn(items=[Item("message", ["hi"])])
    turn.usage = {
        "input_tokens": 2006,
        "input_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 64},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 256},
        "total_tokens": 2306,
    }
    usage = whole(turn).usage
    assert (usage.input_tokens, usage.output_tokens) == (2006, 300)
    assert usage.cache_read_input_tokens == 1920
    assert usage.cache_creation_input_tokens == 64
    assert usage.extra is not None
    assert usage.extra["output_tokens_details"] == {"reasoning_tokens": 256}


@pytest.mark.parametrize(
    ("status", "reason", "items", "stop"),
    [
        ("completed", None, [Item("message", ["hi"])], "end_turn"),
        (
            "incomplete",
            "max_output_tokens",
            [Item("message", ["h"], status="incomplete")],
            "max_tokens",
        ),
        ("incomplete", "content_filter", [], "refusal"),
        ("completed", None, [Item("message", ["I can't help."], refusal=True)], "refusal"),
        ("in_progress", None, [], None),
    ],
)
def test_stop_reasons(status: str, reason: str | None, items: list[Item], stop: str | None) -> None:
    turn = Turn(items=items, status=status, reason=reason)
    response = whole(turn)
    assert response.stop_reason == stop
    assert response.vendor_stop_reason == (reason or status)
    if any(item.refusal for item in items):
        assert response.content == []
        assert response.stop_details == {"type": "refusal", "explanation": "I can't help."}


def test_a_call_cut_by_the_token_limit_is_partial_and_read_leniently() -> None:
    cut = Item(
        "function_call", ['{"goal": "(isa Muf'], name="kb_query", call_id="c9", status="incomplete"
    )
    turn = Turn(items=[cut], status="incomplete", reason="max_output_tokens")
    for response in (whole(turn), streamed(sse(turn.events()))[-1]):
        (call,) = response.content
        assert isinstance(call, ToolUseBlock)
        assert call.partial is True
        assert call.input == {"goal": "(isa Muf"}
        assert response.stop_reason == "max_tokens"


def test_a_whole_call_whose_arguments_are_not_json_is_refused() -> None:
    bad = Turn(items=[Item("function_call", ["{nope"], name="f", call_id="c")])
    with pytest.raises(errors.LLMBadResponse, match="not JSON"):
        whole(bad)


def random_turn(rng: random.Random) -> Turn:
    items: list[Item] = []
    for n in range(rng.randint(0, 4)):
        kind = rng.choice(["message", "reasoning", "function_call"])
        if kind == "message":
            items.append(Item("message", split(rng, words(rng, rng.randint(1, 80)))))
        elif kind == "reasoning":
            parts = [split(rng, words(rng, rng.randint(1, 40))) for _ in range(rng.randint(1, 3))]
            items.append(Item("reasoning", parts=parts, encrypted=rng.choice([None, "gAAA"])))
        else:
            arguments = json.dumps({f"a{i}": json_value(rng) for i in range(rng.randint(0, 3))})
            items.append(
                Item("function_call", split(rng, arguments, 8), name=f"kb_{n}", call_id=f"c{n}")
            )
    turn = Turn(items=items, id=f"resp_{rng.randrange(10**9)}")
    turn.usage = {"input_tokens": rng.randint(1, 5000), "output_tokens": rng.randint(1, 5000)}
    return turn


@pytest.mark.parametrize("seed", range(40))
def test_a_stream_split_anywhere_equals_the_whole_answer_and_its_deltas_make_it(
    seed: int,
) -> None:
    rng = random.Random(seed)
    turn = random_turn(rng)
    expected = whole(turn)
    data = sse(turn.events())
    cuts = [rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 12))]
    plain = streamed(data, cuts)
    assert plain[-1] == expected
    assert plain[:-1] == expected.content
    with_deltas = streamed(data, cuts, deltas=True)
    assert with_deltas[-1] == expected
    assert [i for i in with_deltas[:-1] if not isinstance(i, DELTAS)] == expected.content
    deltas = [i for i in with_deltas if isinstance(i, DELTAS)]
    prose = [b for b in expected.content if isinstance(b, TextBlock | ThinkingBlock)]
    if prose or any(isinstance(b, ToolUseBlock) for b in expected.content):
        assert_deltas_make_the_blocks(deltas, expected.content)


def test_the_official_clients_incomplete_stream_ends_max_tokens_with_what_came() -> None:
    # The event sequence of openai/openai-python's tests/lib/responses/test_stream_incomplete.py:
    # a message begun, one text delta, its output_text.done, then response.incomplete
    # whose response lists no output (no output_item.done ever comes).
    response = {
        "id": "resp_test",
        "created_at": 1700000000.0,
        "model": "gpt-4o-mini",
        "object": "response",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "status": "in_progress",
    }
    on = {"output_index": 0, "content_index": 0, "item_id": "msg_test"}
    events = [
        {"type": "response.created", "response": response},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "id": "msg_test",
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            },
        },
        {
            "type": "response.content_part.added",
            **on,
            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        },
        {"type": "response.output_text.delta", **on, "delta": '{"val', "logprobs": []},
        {"type": "response.output_text.done", **on, "text": '{"val', "logprobs": []},
        {
            "type": "response.incomplete",
            "response": {
                **response,
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
            },
        },
    ]
    items = streamed(sse(events), deltas=True)
    final = items[-1]
    (cut,) = final.content
    assert cut == TextBlock(text='{"val', raw=cut.raw)
    assert cut.raw is not None
    assert (cut.raw["id"], cut.raw["status"]) == ("msg_test", "incomplete")
    assert final.stop_reason == "max_tokens"
    assert final.vendor_stop_reason == "max_output_tokens"
    assert_deltas_make_the_blocks([i for i in items if isinstance(i, DELTAS)], final.content)


def test_a_failed_response_and_an_error_event_are_api_errors() -> None:
    turn = Turn(items=[Item("message", ["hi"])])
    failure = {"code": "rate_limit_exceeded", "message": "Slow down."}
    failed = {
        "type": "response.failed",
        "response": {**turn.response(), "status": "failed", "error": failure},
    }
    with pytest.raises(errors.LLMApiError, match="rate_limit_exceeded") as caught:
        streamed(sse([turn.events()[0], failed]))
    assert caught.value.status == 200
    with pytest.raises(errors.LLMApiError, match="Slow down"):
        response_of(WHOLE_DECODER.decode(json.dumps(failed["response"]).encode()))
    error = {"type": "error", "code": "server_error", "message": "boom", "param": None}
    with pytest.raises(errors.LLMApiError, match="boom"):
        streamed(sse([turn.events()[0], error]))


def test_a_stream_with_no_end_event_is_a_bad_response() -> None:
    events = Turn(items=[Item("message", ["hi"])]).events()[:-1]
    with pytest.raises(errors.LLMBadResponse, match=r"without response\.completed"):
        streamed(sse(events))
    with pytest.raises(errors.LLMBadResponse, match="will not parse"):
        streamed(b"data: {nope\n\n")


# ---------------------------------------------------------------- on loopback


async def drain(p: Any, request: Request) -> list[Any]:
    """Every item ``p.stream(request)`` yields."""
    async with aclosing(p.stream(request)) as stream:
        return [item async for item in stream]


async def test_a_turn_on_loopback_whole_and_streamed_with_request_id_and_rate_headers() -> None:
    async with (
        FakeResponses(script=lambda _b: tool_turn()) as server,
        openai_responses.provider(base_url=server.base_url, api_key=SECRET) as p,
    ):
        done = await p.complete(ask())
        async with aclosing(p.stream(ask())) as stream:
            items = [item async for item in stream]
    assert items[-1] == done
    assert done.request_id == REQUEST_ID
    assert done.headers == RATE_HEADERS
    assert done.stop_reason == "tool_use"
    assert server.bodies[0]["store"] is False
    assert server.bodies[1]["stream"] is True
    assert all(h["Authorization"] == f"Bearer {SECRET}" for h in server.headers)
    assert SECRET not in repr(p)


@pytest.mark.parametrize("mode", ["failed", "error_event", "error_200"])
async def test_failures_inside_a_200_carry_the_request_id(mode: str) -> None:
    async with (
        FakeResponses(mode=mode) as server,
        openai_responses.provider(base_url=server.base_url, api_key=SECRET) as p,
    ):
        for streaming in (False, True) if mode != "error_event" else (True,):
            with pytest.raises(errors.LLMApiError) as caught:
                await (drain(p, ask()) if streaming else p.complete(ask()))
            assert caught.value.request_id == REQUEST_ID
            assert SECRET not in str(caught.value)
            assert SECRET not in repr(vars(caught.value))


@pytest.mark.parametrize("mode", ["truncated", "cut", "html"])
async def test_a_stream_cut_short_or_not_sse_is_refused_typed(mode: str) -> None:
    async with (
        FakeResponses(mode=mode) as server,
        openai_responses.provider(base_url=server.base_url) as p,
    ):
        with pytest.raises(errors.LLMError) as caught:
            await drain(p, ask())
    assert isinstance(caught.value, errors.LLMBadResponse | errors.LLMUnreachable)


async def test_a_stalled_stream_ends_by_its_deadline_and_frees_the_connection() -> None:
    async with (
        FakeResponses(mode="stall") as server,
        openai_responses.provider(base_url=server.base_url) as p,
    ):
        with pytest.raises(errors.LLMTimeout):
            await drain(p, ask(timeout_ms=300))
        for _ in range(200):  # the server sees the client go: the slot is free
            if server.disconnects:
                break
            await asyncio.sleep(0.01)
    assert server.disconnects == 1


async def test_count_tokens_asks_input_tokens_with_the_turns_input() -> None:
    async with (
        FakeResponses(count=57) as server,
        openai_responses.provider(base_url=server.base_url, model=MODEL) as p,
    ):
        assert await p.count_tokens(ask("count me", system="S.")) == 57
    assert server.counted == [
        {
            "model": MODEL,
            "instructions": "S.",
            "input": [{"type": "message", "role": "user", "content": "count me"}],
        }
    ]


async def test_count_tokens_where_not_served_is_the_far_ends_404() -> None:
    async with (
        FakeResponses(mode="no_count") as server,
        openai_responses.provider(base_url=server.base_url) as p,
    ):
        with pytest.raises(errors.LLMApiError) as caught:
            await p.count_tokens(ask())
    assert caught.value.status == 404


async def test_the_kind_is_chosen_by_configuration_and_reads_the_openai_switches(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert providers.openai_responses is openai_responses
    async with FakeResponses() as server:
        monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai-responses")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        with caplog.at_level(logging.DEBUG):
            assert await providers.active_kind() == "openai-responses"
            async with await providers.provider() as p:
                assert isinstance(p, openai_responses.OpenAIResponsesProvider)
                text = (await p.complete(ask())).content
    assert [msgspec.structs.replace(b, raw=None) for b in text] == [
        TextBlock(text="Hello! How can I help?")
    ]
    assert all(SECRET not in record.getMessage() for record in caplog.records)


async def test_a_vote_spreads_over_two_servers_on_this_wire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vaelii_llm import pool

    def yes(_body: dict[str, Any]) -> Turn:
        return Turn(items=[Item("message", ["Yes."])])

    async with FakeResponses(script=yes) as one, FakeResponses(script=yes) as two:
        monkeypatch.setenv("VAELII_OPENAI_HOSTS", f"{one.base_url}*1,{two.base_url}*1")
        async with await pool.pool_from_config(kind="openai-responses") as vp:
            vote = await pool.vote(vp, "Is a spider an arachnid?", votes=4)
    assert vote.verdict == "yes"
    assert len(one.bodies) + len(two.bodies) == 4
    assert one.bodies
    assert two.bodies


# ---------------------------------------------------------------- hostile events

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["type", "text", "call_id"]), st.text(max_size=4), max_size=2),
)


def _mutated(event: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """``event`` with one field at any depth replaced by any JSON value."""
    out = json.loads(json.dumps(event))
    node: Any = out
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return out
        key = data.draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, dict | list) and child and data.draw(st.booleans()):
            node = child
            continue
        node[key] = data.draw(_VALUES)
        return out


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), data=st.data())
def test_a_hostile_event_raises_only_a_typed_error(seed: int, data: st.DataObject) -> None:
    turn = random_turn(random.Random(seed))
    events = turn.events()
    at = data.draw(st.integers(0, len(events) - 1))
    events[at] = _mutated(events[at], data)
    for deltas in (False, True):
        with suppress(errors.LLMError):
            streamed(sse(events), deltas=deltas)
    try:
        response_of(WHOLE_DECODER.decode(json.dumps(_mutated(turn.response(), data)).encode()))
    except errors.LLMError:
        pass
    except msgspec.ValidationError:
        pass  # the skeleton's typed decoder: a refusal the transport maps (tested there)


@pytest.mark.parametrize("seed", range(20))
def test_the_text_delta_quick_step_hands_over_what_the_one_rule_does(seed: int) -> None:
    """A frame named ``response.output_text.delta`` takes the quick step; the
    same frames unnamed (a server that writes no ``event:`` line) take the
    rule for any event: both hand over the same items, with deltas or not."""
    rng = random.Random(seed)
    events = random_turn(rng).events()
    named = sse(events)
    unnamed = b"".join(
        line + b"\n" for line in named.split(b"\n") if not line.startswith(b"event:")
    )
    cuts = [rng.randrange(len(unnamed) + 1) for _ in range(rng.randint(0, 8))]
    for deltas in (False, True):
        assert streamed(named, cuts, deltas=deltas) == streamed(unnamed, cuts, deltas=deltas)


async def test_the_command_runs_on_this_wire_from_its_record_alone() -> None:
    """``status``, ``ask`` and ``vote`` on kind ``openai-responses``: the
    command reads the record, so nothing in it names this backend."""
    import os
    import subprocess
    import sys

    def yes(_body: dict[str, Any]) -> Turn:
        return Turn(items=[Item("message", ["Yes", "."])])

    async with FakeResponses(script=yes) as server:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "OPENAI_"))},
            "VAELII_LLM_PROVIDER": "openai-responses",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": SECRET,
        }

        def command(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "vaelii_llm.cli", *argv],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
                check=False,
            )

        status, asked, voted, config = await asyncio.gather(
            *(
                asyncio.to_thread(command, *argv)
                for argv in (
                    ["status"],
                    ["ask", "Is fire hot?"],
                    ["vote", "Is fire hot?"],
                    ["config"],
                )
            )
        )
    for done in (status, asked, voted, config):
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stdout + done.stderr
    assert status.stdout.splitlines()[:2] == [
        "configured: openai-responses",
        "answering:  openai-responses",
    ]
    assert f"served:     {MODEL}" in status.stdout
    assert asked.stdout.strip().endswith("Yes.")
    assert voted.stdout.split()[:2] == ["verdict:", "yes"]
    assert all(body["store"] is False for body in server.bodies)


def test_the_function_calling_guides_streamed_calls_read_as_two_tool_uses() -> None:
    # The streamed function call of OpenAI's function calling guide ("Streaming",
    # developers.openai.com/api/docs/guides/function-calling): events carrying
    # response_id and no sequence_number, items with no status; the second,
    # parallel call and the response.completed that ends the turn are ours.
    def call(n: int, city: str, pieces: list[str]) -> list[dict[str, Any]]:
        at = {"response_id": "resp_1234xyz", "output_index": n}
        item = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": "get_weather",
            "arguments": "",
        }
        whole_args = "".join(pieces)
        assert json.loads(whole_args) == {"location": city}
        return [
            {"type": "response.output_item.added", **at, "item": item},
            *(
                {
                    "type": "response.function_call_arguments.delta",
                    **at,
                    "item_id": f"fc_{n}",
                    "delta": piece,
                }
                for piece in pieces
            ),
            {
                "type": "response.function_call_arguments.done",
                **at,
                "item_id": f"fc_{n}",
                "arguments": whole_args,
            },
            {"type": "response.output_item.done", **at, "item": {**item, "arguments": whole_args}},
        ]

    events = [
        *call(0, "Paris, France", ['{"', "location", '":"', "Paris", ",", " France", '"}']),
        *call(1, "Bogotá, Colombia", ['{"location":"Bogot', 'á, Colombia"}']),
    ]
    final = {
        "id": "resp_1234xyz",
        "status": "completed",
        "model": "gpt-4.1",
        "output": [e["item"] for e in events if e["type"] == "response.output_item.done"],
    }
    events.append({"type": "response.completed", "response": final})
    data = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()
    for deltas in (False, True):
        items = streamed(data, deltas=deltas)
        response = items[-1]
        assert [(b.id, b.input) for b in response.content] == [
            ("call_0", {"location": "Paris, France"}),
            ("call_1", {"location": "Bogotá, Colombia"}),
        ]
        assert response.stop_reason == "tool_use"
        assert response == whole_of(final)
        if deltas:
            assert_deltas_make_the_blocks(
                [i for i in items if isinstance(i, DELTAS)], response.content
            )


def whole_of(response: dict[str, Any]) -> Response:
    return response_of(WHOLE_DECODER.decode(json.dumps(response).encode()))


def test_a_document_by_url_is_an_input_file_naming_it() -> None:
    # Chat Completions' file part takes bytes only; this wire's input_file takes a URL.
    by_url = DocumentBlock(url="https://example.com/a.pdf", media_type="application/pdf")
    items = body_of(Request(messages=[Message(role="user", content=[by_url])]))["input"]
    assert items == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_file", "file_url": "https://example.com/a.pdf"}],
        }
    ]


@pytest.mark.parametrize("drop", ["argument deltas", "item events"])
def test_deltas_still_make_the_blocks_when_a_server_sends_fewer_events(drop: str) -> None:
    """A server that sends a call's arguments only whole (no argument deltas),
    or lists its items only in the final response (no item events): the
    blocks are the whole answer's, and the deltas still join to them."""
    turn = tool_turn()
    events = turn.events()
    if drop == "argument deltas":
        events = [e for e in events if e["type"] != "response.function_call_arguments.delta"]
    else:
        events = [e for e in events if not e["type"].startswith("response.output_item.")]
    items = streamed(sse(events), deltas=True)
    assert items[-1] == whole(turn)
    assert [i for i in items[:-1] if not isinstance(i, DELTAS)] == whole(turn).content
    assert_deltas_make_the_blocks([i for i in items if isinstance(i, DELTAS)], items[-1].content)
