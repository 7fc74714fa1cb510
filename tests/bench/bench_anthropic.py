"""Benchmark: our Messages API provider against the official ``anthropic`` client.

Both talk to the same fake Messages API, run in its own process on loopback
(``--serve``) so its work does not share our event loop, serving pre-encoded
bodies so its own JSON work stays out of the figures:

* one ~4 MB SSE turn (tens of thousands of ``text_delta`` events, a thinking
  block with its signature, a tool_use with many ``input_json_delta`` pieces)
  reassembled to the final message: median seconds per turn;
* small turns at concurrency 32, non-streamed and streamed: median turns per second.

The big turn is also timed for the *floor*: the least possible work on the
same bytes from the same server (:func:`floor_stream`: a plain aiohttp
request, the body split on newlines in batches, each ``data:`` line decoded by
one typed msgspec decoder built once with only the fields reassembly needs,
text joined once from a list, the tool input parsed once), in turn with ours,
order alternating; the ratio quoted is the median of the runs' ratios.

Run: ``.venv/bin/python tests/bench/bench_anthropic.py`` (under a minute).
Prints the medians, ours over the floor and the official client over the
floor (lower is better), and the small-turn ratio ours over theirs (> 1 means
we are faster).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from timing import beside_server
from timing import throughput
from timing import timed

MODEL = "claude-opus-5-5"
BIG_RUNS = 9
SMALL_RUNS = 3
PAIRED_RUNS = 9
"""Small-turn runs of ours against the floor, in turn (order alternating):
the ratio quoted is the median of the runs' ratios, which a shared, noisy
machine moves far less than a ratio of two medians taken apart."""
SMALL_TURNS = 512
CONCURRENCY = 32
BIG_BYTES = 4 * 2**20


def small_turns_per_s(turn: Callable[[], Awaitable[object]]) -> Awaitable[float]:
    return throughput(turn, SMALL_TURNS, CONCURRENCY)


def _frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _big() -> tuple[bytes, int]:
    """A ~4 MB SSE body and the length of its text."""
    rng = random.Random(4)
    out = [
        _frame(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_big",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
    ]
    out.append(
        _frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
        )
    )
    for _ in range(200):
        out.append(
            _frame(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "hmm, let me see. "},
                },
            )
        )
    out.append(
        _frame(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "Sig" * 100},
            },
        )
    )
    out.append(_frame("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(
        _frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
        )
    )
    size = sum(map(len, out))
    text_len = 0
    words = ["the ", "spider ", "sat ", "beside ", "Miss ", "Muffet, ", "and ", "— ", "ü "]
    n = 0
    while size < BIG_BYTES - 20_000:
        piece = "".join(rng.choice(words) for _ in range(4))
        frame = _frame(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": piece},
            },
        )
        out.append(frame)
        size += len(frame)
        text_len += len(piece)
        n += 1
        if n % 500 == 0:
            out.append(_frame("ping", {"type": "ping"}))
    out.append(_frame("content_block_stop", {"type": "content_block_stop", "index": 1}))
    tool_json = json.dumps({"rows": [{"i": i, "name": f"row {i}"} for i in range(300)]})
    out.append(
        _frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "kb_query",
                    "input": {},
                },
            },
        )
    )
    for i in range(0, len(tool_json), 12):
        out.append(
            _frame(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 2,
                    "delta": {"type": "input_json_delta", "partial_json": tool_json[i : i + 12]},
                },
            )
        )
    out.append(_frame("content_block_stop", {"type": "content_block_stop", "index": 2}))
    out.append(
        _frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": n},
            },
        )
    )
    out.append(_frame("message_stop", {"type": "message_stop"}))
    return b"".join(out), text_len


def _small_events() -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_s",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Yes."},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


SMALL_JSON = json.dumps(
    {
        "id": "msg_s",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "Yes."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
).encode()


async def _serve() -> None:
    from aiohttp import web

    big, _ = _big()
    small_sse = b"".join(_frame(n, d) for n, d in _small_events())

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=SMALL_JSON, content_type="application/json")
        payload = big if body["messages"][0]["content"] == "big" else small_sse
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        for i in range(0, len(payload), 16_384):
            await resp.write(payload[i : i + 16_384])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------------------
# the floor: the least work that turns the SSE bytes into a final message


class _FUsage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _FStartMessage(msgspec.Struct, gc=False):
    id: str
    model: str
    usage: _FUsage


class _FMessageStart(msgspec.Struct, tag="message_start", gc=False):
    message: _FStartMessage


class _FBlock(msgspec.Struct, gc=False):
    type: str
    id: str | None = None
    name: str | None = None


class _FBlockStart(msgspec.Struct, tag="content_block_start", gc=False):
    index: int
    content_block: _FBlock


class _FTextDelta(msgspec.Struct, tag="text_delta", gc=False):
    text: str


class _FThinkingDelta(msgspec.Struct, tag="thinking_delta", gc=False):
    thinking: str


class _FSignatureDelta(msgspec.Struct, tag="signature_delta", gc=False):
    signature: str


class _FJsonDelta(msgspec.Struct, tag="input_json_delta", gc=False):
    partial_json: str


class _FBlockDelta(msgspec.Struct, tag="content_block_delta", gc=False):
    index: int
    delta: _FTextDelta | _FThinkingDelta | _FSignatureDelta | _FJsonDelta


class _FBlockStop(msgspec.Struct, tag="content_block_stop", gc=False):
    index: int


class _FStop(msgspec.Struct, gc=False):
    stop_reason: str | None = None


class _FMessageDelta(msgspec.Struct, tag="message_delta", gc=False):
    delta: _FStop
    usage: _FUsage


class _FMessageStop(msgspec.Struct, tag="message_stop", gc=False):
    pass


class _FPing(msgspec.Struct, tag="ping", gc=False):
    pass


_FEvent = (
    _FMessageStart
    | _FBlockStart
    | _FBlockDelta
    | _FBlockStop
    | _FMessageDelta
    | _FMessageStop
    | _FPing
)
_F_DECODER = msgspec.json.Decoder(_FEvent)
_F_ANY = msgspec.json.Decoder()


class _FSmallBlock(msgspec.Struct, gc=False):
    type: str
    text: str | None = None


class _FSmallMessage(msgspec.Struct, gc=False):
    """A non-streamed message with what a caller reads: content, stop, usage."""

    id: str
    model: str
    content: list[_FSmallBlock]
    stop_reason: str | None
    usage: _FUsage


_F_SMALL = msgspec.json.Decoder(_FSmallMessage)
_F_HEADERS = {
    "x-api-key": "sk-bench",
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
    "accept": "application/json",
}


async def floor_small(session: aiohttp.ClientSession, url: str, body: bytes) -> None:
    """The small-turn floor: a plain aiohttp POST of a pre-encoded body, the
    whole answer read and decoded by one typed msgspec decoder."""
    async with session.post(url + "/v1/messages", data=body, headers=_F_HEADERS) as resp:
        message = _F_SMALL.decode(await resp.read())
    assert message.content


async def floor_stream(session: aiohttp.ClientSession, url: str, text: str) -> dict[str, Any]:
    """The floor: aiohttp, batch line splits, one typed decoder, list joins."""
    body = msgspec.json.encode(
        {
            "model": MODEL,
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": text}],
            "stream": True,
        }
    )
    decode = _F_DECODER.decode
    starts: dict[int, _FBlock] = {}
    parts: dict[int, list[str]] = {}
    signatures: dict[int, str] = {}
    head: _FStartMessage | None = None
    stop: str | None = None
    out_tokens: int | None = None
    stopped = False
    async with session.post(
        url + "/v1/messages", data=body, headers={"content-type": "application/json"}
    ) as resp:
        tail = b""
        async for chunk in resp.content.iter_any():
            lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line.startswith(b"data: "):
                    continue
                ev = decode(line[6:])
                if type(ev) is _FBlockDelta:
                    d = ev.delta
                    if type(d) is _FTextDelta:
                        parts[ev.index].append(d.text)
                    elif type(d) is _FJsonDelta:
                        parts[ev.index].append(d.partial_json)
                    elif type(d) is _FThinkingDelta:
                        parts[ev.index].append(d.thinking)
                    else:
                        signatures[ev.index] = d.signature
                elif type(ev) is _FBlockStart:
                    starts[ev.index] = ev.content_block
                    parts[ev.index] = []
                elif type(ev) is _FMessageStart:
                    head = ev.message
                elif type(ev) is _FMessageDelta:
                    stop = ev.delta.stop_reason
                    out_tokens = ev.usage.output_tokens
                elif type(ev) is _FMessageStop:
                    stopped = True
    assert stopped
    assert head is not None
    content: list[dict[str, Any]] = []
    for index in sorted(starts):
        start = starts[index]
        joined = "".join(parts[index])
        if start.type == "text":
            content.append({"type": "text", "text": joined})
        elif start.type == "thinking":
            content.append(
                {"type": "thinking", "thinking": joined, "signature": signatures.get(index, "")}
            )
        else:
            tool_input = _F_ANY.decode(joined)
            content.append(
                {"type": start.type, "id": start.id, "name": start.name, "input": tool_input}
            )
    return {
        "id": head.id,
        "model": head.model,
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": head.usage.input_tokens, "output_tokens": out_tokens},
    }


async def main(url: str) -> None:  # noqa: C901
    import anthropic as official

    from vaelii_llm._protocol import Message
    from vaelii_llm._protocol import Request
    from vaelii_llm._protocol import Response
    from vaelii_llm._protocol import TextBlock
    from vaelii_llm.providers import anthropic as ours

    def ask(text: str) -> Request:
        return Request(messages=[Message(role="user", content=text)], timeout_ms=120_000)

    client = official.AsyncAnthropic(api_key="sk-bench", base_url=url, max_retries=0)
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 1024}

    async def ours_stream(p: ours.AnthropicProvider, text: str) -> Response:
        final: Response | None = None
        async with aclosing(p.stream(ask(text))) as items:
            async for item in items:
                if isinstance(item, Response):
                    final = item
        assert final is not None
        return final

    async def theirs_stream(text: str) -> Any:
        async with client.messages.stream(
            messages=[{"role": "user", "content": text}], **params
        ) as stream:
            return await stream.get_final_message()

    async def ours_small(p: ours.AnthropicProvider) -> None:
        await p.complete(ask("hi"))

    async def theirs_small() -> None:
        await client.messages.create(messages=[{"role": "user", "content": "hi"}], **params)

    async with (
        ours.provider(credential="sk-bench", base_url=url) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as floor_session,
    ):
        try:
            a, b = await ours_stream(p, "big"), await theirs_stream("big")
            f = await floor_stream(floor_session, url, "big")
            block = a.content[1]
            assert isinstance(block, TextBlock)
            assert block.text == b.content[1].text, "the two clients disagree on the big turn"
            assert block.text == f["content"][1]["text"], "the floor disagrees on the big turn"
            assert a.content[2].raw == b.content[2].to_dict()
            assert a.content[2].raw["input"] == f["content"][2]["input"]
            big_ours: list[float] = []
            big_floor: list[float] = []
            big_theirs: list[float] = []
            for n in range(BIG_RUNS):  # ours and the floor in turn, order alternating
                for first in (True, False) if n % 2 else (False, True):
                    if first:
                        big_ours.append(await timed(lambda: ours_stream(p, "big")))
                    else:
                        big_floor.append(
                            await timed(lambda: floor_stream(floor_session, url, "big"))
                        )
                big_theirs.append(await timed(lambda: theirs_stream("big")))
            figures: dict[str, tuple[list[float], list[float]]] = {
                "non-streamed": ([], []),
                "streamed": ([], []),
            }
            small_floor: list[float] = []
            hi = [{"role": "user", "content": "hi"}]
            small_body = msgspec.json.encode({"model": MODEL, "max_tokens": 1024, "messages": hi})
            await ours_small(p)
            await theirs_small()
            await floor_small(floor_session, url, small_body)
            paired: list[float] = []
            for n in range(PAIRED_RUNS):
                ours_fig = floor_fig = 0.0
                for first in (True, False) if n % 2 else (False, True):
                    if first:
                        ours_fig = await small_turns_per_s(lambda: ours_small(p))
                    else:
                        floor_fig = await small_turns_per_s(
                            lambda: floor_small(floor_session, url, small_body)
                        )
                paired.append(ours_fig / floor_fig)
                small_floor.append(floor_fig)
            for _ in range(SMALL_RUNS):
                figures["non-streamed"][0].append(await small_turns_per_s(lambda: ours_small(p)))
                figures["non-streamed"][1].append(await small_turns_per_s(theirs_small))
                figures["streamed"][0].append(await small_turns_per_s(lambda: ours_stream(p, "hi")))
                figures["streamed"][1].append(await small_turns_per_s(lambda: theirs_stream("hi")))
        finally:
            await client.close()
    mo, mf, mt = (statistics.median(x) for x in (big_ours, big_floor, big_theirs))
    _, text_len = _big()
    print(
        f"big streamed turn ({BIG_BYTES / 2**20:.0f} MiB of SSE, {text_len:,} characters "
        f"of text), median of {BIG_RUNS}:"
    )
    print(
        f"  vaelii_llm {mo * 1e3:8.1f} ms   floor {mf * 1e3:8.1f} ms   anthropic {mt * 1e3:8.1f} ms"
    )
    ratio = statistics.median(o / f for o, f in zip(big_ours, big_floor, strict=True))
    print(
        f"  vaelii_llm/floor x{ratio:.2f} (median of the runs' ratios)   "
        f"anthropic/floor x{mt / mf:.2f}   "
        f"speed-up over anthropic x{mt / mo:.2f}"
    )
    for name, (so_list, st_list) in figures.items():
        so, st = statistics.median(so_list), statistics.median(st_list)
        print(
            f"small {name} turns at concurrency {CONCURRENCY} ({SMALL_TURNS} turns), "
            f"median of {SMALL_RUNS}:"
        )
        print(f"  vaelii_llm {so:8.0f} /s   anthropic {st:8.0f} /s   speed-up x{so / st:.2f}")
        if name == "non-streamed":
            sf = statistics.median(small_floor)
            print(
                f"  floor {sf:8.0f} /s   vaelii_llm/floor x{statistics.median(paired):.2f} "
                f"of its turns/s (median of {PAIRED_RUNS} paired runs)"
            )


def run() -> None:
    if "--serve" in sys.argv:
        asyncio.run(_serve())
        return
    beside_server([sys.executable, str(Path(__file__).resolve()), "--serve"], main)


if __name__ == "__main__":
    run()
