"""Benchmark: our Messages API provider against the official ``anthropic`` client.

Both talk to the same fake Messages API, run in its own process on loopback
(``--serve``) so its work does not share our event loop, serving pre-encoded
bodies so its own JSON work stays out of the figures:

* one ~4 MB SSE turn (tens of thousands of ``text_delta`` events, a thinking
  block with its signature, a tool_use with many ``input_json_delta`` pieces)
  reassembled to the final message: median seconds per turn;
* small turns at concurrency 32, non-streamed and streamed: median turns per second.

Run: ``.venv/bin/python tests/bench/bench_anthropic.py`` (under a minute).
Prints the medians and the ratio, ours over theirs (> 1 means we are faster).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

MODEL = "claude-opus-5-5"
BIG_RUNS = 5
SMALL_RUNS = 3
SMALL_TURNS = 512
CONCURRENCY = 32
BIG_BYTES = 4 * 2**20


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


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def throughput(turn: Callable[[], Awaitable[object]]) -> float:
    per_worker = SMALL_TURNS // CONCURRENCY

    async def worker() -> None:
        for _ in range(per_worker):
            await turn()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return per_worker * CONCURRENCY / (time.perf_counter() - started)


async def main(url: str) -> None:
    import anthropic as official

    from vaelii_llm.protocol import Message, Request, Response, TextBlock
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

    async with ours.provider(credential="sk-bench", base_url=url) as p:
        try:
            a, b = await ours_stream(p, "big"), await theirs_stream("big")
            block = a.content[1]
            assert isinstance(block, TextBlock)
            assert block.text == b.content[1].text, "the two clients disagree on the big turn"
            assert a.content[2].raw == b.content[2].to_dict()
            big_ours: list[float] = []
            big_theirs: list[float] = []
            for _ in range(BIG_RUNS):
                big_ours.append(await timed(lambda: ours_stream(p, "big")))
                big_theirs.append(await timed(lambda: theirs_stream("big")))
            figures: dict[str, tuple[list[float], list[float]]] = {
                "non-streamed": ([], []),
                "streamed": ([], []),
            }
            await ours_small(p)
            await theirs_small()
            for _ in range(SMALL_RUNS):
                figures["non-streamed"][0].append(await throughput(lambda: ours_small(p)))
                figures["non-streamed"][1].append(await throughput(theirs_small))
                figures["streamed"][0].append(await throughput(lambda: ours_stream(p, "hi")))
                figures["streamed"][1].append(await throughput(lambda: theirs_stream("hi")))
        finally:
            await client.close()
    mo, mt = statistics.median(big_ours), statistics.median(big_theirs)
    _, text_len = _big()
    print(
        f"big streamed turn ({BIG_BYTES / 2**20:.0f} MiB of SSE, {text_len:,} characters "
        f"of text), median of {BIG_RUNS}:"
    )
    print(
        f"  vaelii_llm {mo * 1e3:8.1f} ms   anthropic {mt * 1e3:8.1f} ms   speed-up x{mt / mo:.2f}"
    )
    for name, (so_list, st_list) in figures.items():
        so, st = statistics.median(so_list), statistics.median(st_list)
        print(
            f"small {name} turns at concurrency {CONCURRENCY} ({SMALL_TURNS} turns), "
            f"median of {SMALL_RUNS}:"
        )
        print(f"  vaelii_llm {so:8.0f} /s   anthropic {st:8.0f} /s   speed-up x{so / st:.2f}")


def run() -> None:
    if "--serve" in sys.argv:
        asyncio.run(_serve())
        return
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        asyncio.run(main(url))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    run()
