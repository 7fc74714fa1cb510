"""``Request.stall_ms`` (#51): a far end that goes quiet, or only sends
keep-alives, ends a turn long before its ``timeout_ms``.

Loopback aiohttp servers speak each wire: the opening of an answer, one
content piece, then keep-alives of that wire only (the Messages API's ``ping``
and SSE comments, Chat Completions chunks with no choices or an empty delta,
Ollama lines with empty content and ``done: false``, the Responses API's
``response.in_progress``, empty deltas and comments). Keep-alives come every
50 ms, well inside the 300 ms stall bound, so only a count of content (not of
bytes) can see the stall. Time bounds are wide: a stall ends far below the
turn's 30 s, never "on time to the millisecond".

A new wire adds its row to :data:`WIRES` (its opening, a piece of content,
its keep-alives and its ending).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from aiohttp import web

from tests.support.anthropic_fake import frame
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn
from tests.support.loopback import serve
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses
from vaelii_llm.providers._http import HTTPProvider

STALL_MS = 300
LONG_MS = 30_000
BEAT = 0.05  # between keep-alives


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _cc(delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return _sse({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": choices})


def _ndjson(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


@dataclass(frozen=True)
class Wire:
    """One wire's far end, in pieces."""

    content_type: str
    opening: bytes  # the answer begun, no content yet
    piece: Callable[[str], bytes]  # one piece of text
    keepalives: tuple[bytes, ...]  # sent in turn between pieces
    ending: bytes
    make: Callable[[str], HTTPProvider[Any, Any]]
    whole: Callable[[str], bytes]  # a non-streamed answer's body


_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}

_TEXT_BLOCK = {"type": "text", "text": ""}
_USAGE = {"output_tokens": 2}


def _text_delta(text: str) -> dict[str, str]:
    return {"type": "text_delta", "text": text}


def _said(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


_RESPONSE = Turn(items=[Item("message")]).response(final=False)
_ON = {"item_id": "msg_0", "output_index": 0, "content_index": 0}


def _ev(obj: dict[str, Any]) -> bytes:
    return frame(str(obj["type"]), obj)


def _text_piece(text: str, index: int = 0) -> bytes:
    return _ev({"type": "response.output_text.delta", **_ON, "output_index": index, "delta": text})


WIRES: dict[str, Wire] = {
    "anthropic": Wire(
        "text/event-stream",
        frame("message_start", {"type": "message_start", "message": _MESSAGE})
        + frame(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": _TEXT_BLOCK},
        ),
        lambda text: frame(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": _text_delta(text)},
        ),
        (
            frame("ping", {"type": "ping"}),
            b": keep-alive\n\n",
            # (#58) empty events, which restarted the bound
            frame(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": _text_delta("")},
            ),
            frame("message_delta", {"type": "message_delta", "delta": {}, "usage": _USAGE}),
            frame(
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": None}, "usage": _USAGE},
            ),
        ),
        frame("content_block_stop", {"type": "content_block_stop", "index": 0})
        + frame(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": _USAGE},
        )
        + frame("message_stop", {"type": "message_stop"}),
        lambda url: anthropic.provider(credential="sk-test", base_url=url, model="claude-x"),
        lambda text: json.dumps(
            {**_MESSAGE, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
        ).encode(),
    ),
    "openai": Wire(
        "text/event-stream",
        _cc({"role": "assistant"}),
        lambda text: _cc({"content": text}),
        (_cc(None), _cc({}), _cc({"content": ""}), b": keep-alive\n\n"),
        _cc({}, "stop") + b"data: [DONE]\n\n",
        lambda url: openai.provider(base_url=url + "/v1", model="m"),
        lambda text: json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
            }
        ).encode(),
    ),
    "ollama": Wire(
        "application/x-ndjson",
        b"",
        lambda text: _ndjson(chunk(text)),
        (_ndjson(chunk("")),),
        _ndjson(final()),
        lambda url: ollama.provider(host=url),
        lambda text: json.dumps({**final(), "message": _said(text)}).encode(),
    ),
    "openai-responses": Wire(
        "text/event-stream",
        _ev({"type": "response.created", "response": _RESPONSE})
        + _ev({"type": "response.in_progress", "response": _RESPONSE})
        + _ev(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": Item("message", id="msg_0").opened(),
            }
        )
        + _ev(
            {
                "type": "response.content_part.added",
                **_ON,
                "part": {"type": "output_text", "text": "", "annotations": []},
            }
        ),
        _text_piece,
        (
            _ev({"type": "response.in_progress", "response": _RESPONSE}),
            _text_piece(""),
            b": keep-alive\n\n",
        ),
        # the end lists no items: the message is what its pieces made
        _ev({"type": "response.completed", "response": {**_RESPONSE, "status": "completed"}}),
        lambda url: openai_responses.provider(base_url=url + "/v1", model="m"),
        lambda text: json.dumps(Turn(items=[Item("message", [text])]).response()).encode(),
    ),
}


def ask(**fields: Any) -> Request:
    return Request(messages=[Message(role="user", content="hi")], max_tokens=8, **fields)


def far_end(wire: Wire, *, pieces: int, gap: float, then_keepalives: bool) -> web.RequestHandler:
    """A streamed answer: its opening, ``pieces`` pieces ``gap`` apart (keep-alives
    between them), then keep-alives forever, or (``then_keepalives`` False) its
    ending; a turn not streamed is answered whole at once."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if (await request.json()).get("stream") is not True:
            said = "".join(f"w{n} " for n in range(pieces))
            return web.Response(body=wire.whole(said), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": wire.content_type})
        await response.prepare(request)
        if wire.opening:
            await response.write(wire.opening)

        async def keep_alive_for(seconds: float) -> None:
            until = time.monotonic() + seconds
            beat = 0
            while time.monotonic() < until:
                await asyncio.sleep(min(BEAT, max(0.0, until - time.monotonic())))
                await response.write(wire.keepalives[beat % len(wire.keepalives)])
                beat += 1

        for n in range(pieces):
            if n:
                await keep_alive_for(gap)
            await response.write(wire.piece(f"w{n} "))
        if then_keepalives:
            await keep_alive_for(3600)
        await response.write(wire.ending)
        await response.write_eof()
        return response

    return handle


def silent(wire: Wire) -> web.RequestHandler:
    """The head, then nothing at all."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": wire.content_type})
        await response.prepare(request)
        await asyncio.sleep(3600)
        return response

    return handle


async def run_stream(provider: HTTPProvider[Any, Any], request: Request) -> Response:
    last: object = None
    async with aclosing(provider.stream(request)) as items:
        async for item in items:
            last = item
    assert isinstance(last, Response)
    return last


def text(response: Response) -> str:
    return "".join(b.text for b in response.content if isinstance(b, TextBlock))


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_one_piece_then_only_keepalives_stalls_long_before_the_budget(wire: str) -> None:
    spec = WIRES[wire]
    handler = far_end(spec, pieces=1, gap=0, then_keepalives=True)
    async with serve(handler) as url, spec.make(url) as provider:
        started = time.monotonic()
        with pytest.raises(LLMTimeout) as caught:
            await run_stream(provider, ask(stall_ms=STALL_MS, timeout_ms=LONG_MS))
        took = time.monotonic() - started
    err = caught.value
    assert err.phase == "stall"
    assert err.timeout_ms == STALL_MS
    assert err.chunks >= 1
    assert f"no content for {STALL_MS} ms" in str(err)
    assert STALL_MS / 1000 <= took < 10, took


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_without_stall_ms_the_same_far_end_ends_at_the_whole_budget(wire: str) -> None:
    spec = WIRES[wire]
    handler = far_end(spec, pieces=1, gap=0, then_keepalives=True)
    async with serve(handler) as url, spec.make(url) as provider:
        started = time.monotonic()
        with pytest.raises(LLMTimeout) as caught:
            await run_stream(provider, ask(timeout_ms=1_000))
        took = time.monotonic() - started
    assert caught.value.phase == "body"
    assert took >= 1.0


@pytest.mark.parametrize("wire", sorted(WIRES))
@pytest.mark.parametrize("mode", ["stream", "complete"])
async def test_a_far_end_silent_after_its_head_stalls(wire: str, mode: str) -> None:
    spec = WIRES[wire]
    async with serve(silent(spec)) as url, spec.make(url) as provider:
        request = ask(stall_ms=STALL_MS, timeout_ms=LONG_MS)
        started = time.monotonic()
        turn = run_stream(provider, request) if mode == "stream" else provider.complete(request)
        with pytest.raises(LLMTimeout) as caught:
            await turn
        took = time.monotonic() - started
    assert (caught.value.phase, caught.value.chunks) == ("stall", 0)
    assert STALL_MS / 1000 <= took < 10, took


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_content_slower_than_keepalives_but_inside_the_bound_answers(wire: str) -> None:
    """Pieces 100 ms apart (keep-alives between) under a 300 ms bound: the
    stall restarts at each piece, and the Response shows what a caller
    would choose its bound from."""
    spec = WIRES[wire]
    handler = far_end(spec, pieces=6, gap=0.1, then_keepalives=False)
    async with serve(handler) as url, spec.make(url) as provider:
        answer = await run_stream(provider, ask(stall_ms=STALL_MS, timeout_ms=LONG_MS))
        whole = await provider.complete(ask(stall_ms=STALL_MS, timeout_ms=LONG_MS))
    assert text(answer) == "w0 w1 w2 w3 w4 w5 "
    assert answer.first_chunk_ms is not None
    assert answer.longest_gap_ms is not None
    assert 0 <= answer.first_chunk_ms < 10_000
    assert 80 <= answer.longest_gap_ms < 10_000  # the far end waited 100 ms between pieces
    assert (whole.first_chunk_ms, whole.longest_gap_ms) == (None, None)


def dripping(body: bytes, gap: float) -> web.RequestHandler:
    """A whole (non-streamed) body sent a few bytes at a time, ``gap`` apart."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        await response.prepare(request)
        step = max(1, len(body) // 8)
        for at in range(0, len(body), step):
            await response.write(body[at : at + step])
            await asyncio.sleep(gap)
        await response.write_eof()
        return response

    return handle


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_a_whole_body_read_in_steps_restarts_the_bound_at_each_read(wire: str) -> None:
    """Eight reads 100 ms apart (longer in all than the 300 ms bound) answer;
    the same body held back past the bound stalls."""
    spec = WIRES[wire]
    body = spec.whole("slow but steady")
    request = ask(stall_ms=STALL_MS, timeout_ms=LONG_MS)
    async with serve(dripping(body, 0.1)) as url, spec.make(url) as provider:
        assert text(await provider.complete(request)) == "slow but steady"
    async with serve(dripping(body, 1.0)) as url, spec.make(url) as provider:
        with pytest.raises(LLMTimeout) as caught:
            await provider.complete(request)
    assert caught.value.phase == "stall"
    assert caught.value.chunks >= 1


@pytest.mark.parametrize("stall_ms", [0, -5, True, 1.5])
async def test_a_stall_bound_that_is_no_whole_positive_number_is_refused(stall_ms: Any) -> None:
    spec = WIRES["ollama"]
    async with spec.make("http://127.0.0.1:9") as provider:
        with pytest.raises((TypeError, ValueError), match=r"Request\.stall_ms takes"):
            await provider.complete(ask(stall_ms=stall_ms))


async def test_a_votes_turns_take_stall_ms_from_the_request() -> None:
    from vaelii_llm.pool import Pool
    from vaelii_llm.pool import vote

    spec = WIRES["ollama"]
    request = ask(stall_ms=STALL_MS, timeout_ms=LONG_MS)
    async with serve(silent(spec)) as url, Pool([spec.make(url)]) as pool:
        started = time.monotonic()
        result = await vote(pool, request, votes=2)
        took = time.monotonic() - started
    assert result.failed == 2
    assert [(e.type, getattr(e, "phase", None)) for e in result.errors] == [
        ("llm-timeout", "stall")
    ] * 2
    assert took < 10, took


_CONTENT: dict[str, list[bytes]] = {
    "anthropic": [
        frame(
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": _TEXT_BLOCK},
        ),
        WIRES["anthropic"].piece("w"),
        frame("content_block_stop", {"type": "content_block_stop", "index": 1}),
        frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
        ),
        frame(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "thinking_delta", "thinking": "hm"},
            },
        ),
        frame("content_block_stop", {"type": "content_block_stop", "index": 2}),
        frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 3,
                "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
            },
        ),
        frame(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
            },
        ),
    ],
    "openai": [
        _cc({"reasoning_content": "hm"}),
        _cc({"content": "w"}),
        _cc({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]}),
        _cc({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
    ],
    "ollama": [
        _ndjson(chunk(thinking="hm")),
        _ndjson(chunk("w")),
        _ndjson(chunk(tool_calls=[{"function": {"name": "f", "arguments": {"a": 1}}}])),
    ],
    "openai-responses": [
        _ev({"type": "response.reasoning_summary_text.delta", "output_index": 1, "delta": "hm"}),
        _text_piece("w"),
        _ev(
            {
                "type": "response.output_item.added",
                "output_index": 2,
                "item": Item("function_call", name="f", call_id="c1", id="fc_2").opened(),
            }
        ),
        _ev({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"a"'}),
        _ev({"type": "response.refusal.delta", "output_index": 3, "delta": "no"}),
        _ev(
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": Item("message", ["ww"], id="msg_0").whole(),
            }
        ),
    ],
}


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_thinking_text_and_tool_input_are_content_and_keepalives_are_not(wire: str) -> None:
    """What the pump counts (sans-IO): every content piece moves the
    assembler's count, every keep-alive of the wire leaves it."""
    spec = WIRES[wire]
    codec = spec.make("http://127.0.0.1:9")._codec
    decoder, assembler = codec.stream_decoder(), codec.assembler(deltas=False)

    def fed(data: bytes) -> int:
        list(assembler.feed(decoder.feed(data)))
        return int(assembler.pieces)

    seen = fed(spec.opening + spec.piece("w"))
    assert seen >= 1
    for data in [*spec.keepalives, *spec.keepalives]:
        assert fed(data) == seen, data
    for data in _CONTENT[wire]:
        now = fed(data)
        assert now > seen, data
        seen = now
        for keepalive in spec.keepalives:
            assert fed(keepalive) == seen, keepalive


def test_the_timings_are_measurements_not_part_of_the_answer() -> None:
    """Two Responses that answer alike are equal (and not unequal) whatever
    their timings; any other field still tells them apart."""
    plain = Response(content=[TextBlock(text="a")], stop_reason="end_turn")
    timed = msgspec.structs.replace(plain, first_chunk_ms=12.5, longest_gap_ms=40.0)
    assert timed == plain
    assert plain == timed
    assert not timed != plain  # noqa: SIM202 - the other operator, on purpose
    other = msgspec.structs.replace(timed, content=[TextBlock(text="b")])
    assert other != plain
    assert other != timed
    assert msgspec.structs.replace(plain, stop_reason="max_tokens") != plain


async def test_a_bad_deadline_on_one_turn_is_refused_and_delays_no_other_turn() -> None:
    """(#58) ``Request(timeout_ms=float("nan"))`` was accepted, and with NaN on
    the shared timer heap two ordinary turns with 1 s and 1.5 s budgets never
    timed out. Now the bad values are refused typed as the third turn's
    request is made, a NaN or 400-digit deadline that reaches the timer
    anyway is refused or held far away, and the two turns end at their
    budgets (bounds wide: each well under twice its budget)."""
    from vaelii_llm import _timers as timers

    spec = WIRES["ollama"]
    for bad, kind in (
        ({"timeout_ms": float("nan")}, TypeError),
        ({"timeout_ms": 10**400}, ValueError),
        ({"stall_ms": 10**400}, ValueError),
        ({"stall_ms": float("nan")}, TypeError),
    ):
        with pytest.raises(kind, match=r"Request\.(timeout|stall)_ms takes a whole number of ms"):
            ask(**bad)
    async with serve(silent(spec)) as url, spec.make(url) as provider:

        async def turn(timeout_ms: int) -> float:
            started = time.monotonic()
            with pytest.raises(LLMTimeout) as caught:
                await provider.complete(ask(timeout_ms=timeout_ms))
            assert caught.value.phase in {"headers", "body"}
            return time.monotonic() - started

        async def third() -> None:
            with pytest.raises(ValueError, match="not NaN"):
                timers.timeout_at(float("nan"))
            with timers.timeout_at(10**400):
                await asyncio.sleep(2.5)

        took = await asyncio.wait_for(asyncio.gather(turn(1_000), turn(1_500), third()), 20)
    assert 1.0 <= took[0] < 2.0, took
    assert 1.5 <= took[1] < 3.0, took
