"""Benchmark: our Chat Completions provider against the official ``openai`` client.

Both talk to the same fake OpenAI-compatible server, run in its own process on
loopback (``--serve``) so its work does not share our event loop, serving
pre-encoded bodies written as vLLM writes them:

* one ~4 MiB SSE turn (tens of thousands of ``content`` chunks after some
  ``reasoning_content``, a tool call whose arguments come in many pieces, the
  usage chunk, ``[DONE]``) reassembled to the final message: median seconds;
* small non-streamed turns at concurrency 32: median turns per second.

Both are also timed for the *floor*: the least possible work on the same bytes
from the same server (:func:`floor_stream`: a plain aiohttp request, the body
split on newlines in batches, each ``data:`` line decoded by one typed msgspec
decoder holding only what reassembly needs, text joined once, the arguments
parsed once; :func:`floor_small`: a plain POST, the answer decoded by one typed
decoder), in turn with ours, order alternating; the ratio quoted is the
median of the runs' ratios, which a shared, noisy machine moves far less than
a ratio of two medians taken apart.

Run: ``.venv/bin/python tests/bench/bench_openai.py`` (under a minute; needs
the bench extra's ``openai``). Prints the medians, ours over the floor and the
official client over the floor (targets: the stream within 1.10× the floor,
small turns at least 0.85 of the floor's turns/s).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support

from tests.support.fake_openai import MODEL
from tests.support.fake_openai import Call
from tests.support.fake_openai import Turn
from tests.support.fake_openai import transcript

BIG_RUNS = 9
PAIRED_RUNS = 9
SMALL_RUNS = 3
SMALL_TURNS = 512
CONCURRENCY = 32
BIG_BYTES = 4 * 2**20


def _big_turn() -> Turn:
    """A turn whose vLLM-style SSE body is about :data:`BIG_BYTES`."""
    rng = random.Random(4)
    words = ["the ", "spider ", "sat ", "beside ", "Miss ", "Muffet, ", "and ", "— ", "ü "]
    arguments = json.dumps({"rows": [{"i": i, "name": f"row {i}"} for i in range(300)]})
    turn = Turn(
        thinking=["hmm, let me see. "] * 200,
        calls=[
            Call(
                "call_big",
                "kb_query",
                [arguments[i : i + 12] for i in range(0, len(arguments), 12)],
            )
        ],
        finish_reason="tool_calls",
        id="chatcmpl-big",
    )
    size = len(transcript(turn).sse())
    per_chunk = len(transcript(Turn(text=["the spider sat x"])).sse()) // 4
    while size < BIG_BYTES - 20_000:
        turn.text.append("".join(rng.choice(words) for _ in range(4)))
        size += per_chunk
    return turn


async def _serve() -> None:
    from aiohttp import web

    big = transcript(_big_turn()).sse()
    small = json.dumps(transcript(Turn(text=["Yes."])).completion).encode()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=small, content_type="application/json")
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        for i in range(0, len(big), 16_384):
            await resp.write(big[i : i + 16_384])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------------------
# the floor: the least work that turns the bytes into a final message


class _FFunction(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _FCall(msgspec.Struct, gc=False):
    index: int
    id: str | None = None
    function: _FFunction | None = None


class _FDelta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[_FCall] | None = None


class _FChoice(msgspec.Struct, gc=False):
    delta: _FDelta
    finish_reason: str | None = None


class _FUsage(msgspec.Struct, gc=False):
    prompt_tokens: int
    completion_tokens: int


class _FChunk(msgspec.Struct, gc=False):
    id: str
    model: str
    choices: list[_FChoice]
    usage: _FUsage | None = None


_F_CHUNK = msgspec.json.Decoder(_FChunk)
_F_ANY = msgspec.json.Decoder()


class _FMessage(msgspec.Struct, gc=False):
    content: str | None = None


class _FWholeChoice(msgspec.Struct, gc=False):
    message: _FMessage
    finish_reason: str | None = None


class _FWhole(msgspec.Struct, gc=False):
    id: str
    model: str
    choices: list[_FWholeChoice]
    usage: _FUsage


_F_WHOLE = msgspec.json.Decoder(_FWhole)
_F_HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


async def floor_small(session: aiohttp.ClientSession, url: str, body: bytes) -> None:
    async with session.post(url + "/chat/completions", data=body, headers=_F_HEADERS) as resp:
        whole = _F_WHOLE.decode(await resp.read())
    assert whole.choices[0].message.content


async def floor_stream(session: aiohttp.ClientSession, url: str, body: bytes) -> dict[str, Any]:
    """The floor: aiohttp, batch line splits, one typed decoder, list joins."""
    decode = _F_CHUNK.decode
    text: list[str] = []
    thinking: list[str] = []
    calls: dict[int, tuple[str | None, str | None, list[str]]] = {}
    finish: str | None = None
    usage: _FUsage | None = None
    head: _FChunk | None = None
    async with session.post(url + "/chat/completions", data=body, headers=_F_HEADERS) as resp:
        tail = b""
        async for chunk in resp.content.iter_any():
            lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                ev = decode(data)
                if head is None:
                    head = ev
                if ev.usage is not None:
                    usage = ev.usage
                for choice in ev.choices:
                    d = choice.delta
                    if d.content:
                        text.append(d.content)
                    elif d.reasoning_content:
                        thinking.append(d.reasoning_content)
                    elif d.tool_calls:
                        for c in d.tool_calls:
                            if c.index not in calls:
                                name = c.function.name if c.function else None
                                calls[c.index] = (c.id, name, [])
                            if c.function and c.function.arguments:
                                calls[c.index][2].append(c.function.arguments)
                    if choice.finish_reason:
                        finish = choice.finish_reason
    assert head is not None
    assert finish is not None
    return {
        "id": head.id,
        "thinking": "".join(thinking),
        "text": "".join(text),
        "calls": [(i, n, _F_ANY.decode("".join(a))) for i, n, a in calls.values()],
        "finish": finish,
        "usage": usage,
    }


async def main(url: str) -> None:
    import openai as official

    from vaelii_llm._protocol import Message
    from vaelii_llm._protocol import Request
    from vaelii_llm._protocol import Response
    from vaelii_llm._protocol import TextBlock
    from vaelii_llm._protocol import ToolUseBlock
    from vaelii_llm.providers import openai as ours

    def ask(text: str) -> Request:
        return Request(messages=[Message(role="user", content=text)], timeout_ms=120_000)

    client = official.AsyncOpenAI(api_key="sk-bench", base_url=url, max_retries=0)
    hi = [{"role": "user", "content": "hi"}]

    async def ours_stream(p: ours.OpenAIProvider) -> Response:
        final: Response | None = None
        async with aclosing(p.stream(ask("big"))) as items:
            async for item in items:
                if isinstance(item, Response):
                    final = item
        assert final is not None
        return final

    async def theirs_stream() -> Any:
        async with client.chat.completions.stream(
            model=MODEL,
            messages=[{"role": "user", "content": "big"}],
            stream_options={"include_usage": True},
        ) as stream:
            return await stream.get_final_completion()

    async def ours_small(p: ours.OpenAIProvider) -> None:
        await p.complete(ask("hi"))

    async def theirs_small() -> None:
        await client.chat.completions.create(model=MODEL, messages=hi)  # type: ignore[arg-type]

    big_body = msgspec.json.encode(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "big"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    small_body = msgspec.json.encode({"model": MODEL, "messages": hi})

    async def paired(
        ours_run: Callable[[], Awaitable[float]], floor_run: Callable[[], Awaitable[float]]
    ) -> tuple[list[float], list[float]]:
        mine: list[float] = []
        floor: list[float] = []
        for n in range(PAIRED_RUNS):
            for first in (True, False) if n % 2 else (False, True):
                if first:
                    mine.append(await ours_run())
                else:
                    floor.append(await floor_run())
        return mine, floor

    async with (
        ours.provider(base_url=url, api_key="sk-bench", model=MODEL) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as floor_session,
    ):
        try:
            a, b = await ours_stream(p), await theirs_stream()
            f = await floor_stream(floor_session, url, big_body)
            text = a.content[1]
            call = a.content[2]
            assert isinstance(text, TextBlock)
            assert isinstance(call, ToolUseBlock)
            assert text.text == b.choices[0].message.content == f["text"], "the clients disagree"
            assert call.input == f["calls"][0][2]
            assert call.input == json.loads(b.choices[0].message.tool_calls[0].function.arguments)
            big_ours, big_floor = await paired(
                lambda: timed(lambda: ours_stream(p)),
                lambda: timed(lambda: floor_stream(floor_session, url, big_body)),
            )
            big_theirs = [await timed(theirs_stream) for _ in range(BIG_RUNS)]
            await ours_small(p)
            await theirs_small()
            await floor_small(floor_session, url, small_body)
            small_ours, small_floor = await paired(
                lambda: throughput(lambda: ours_small(p), SMALL_TURNS, CONCURRENCY),
                lambda: throughput(
                    lambda: floor_small(floor_session, url, small_body), SMALL_TURNS, CONCURRENCY
                ),
            )
            small_theirs = [
                await throughput(theirs_small, SMALL_TURNS, CONCURRENCY) for _ in range(SMALL_RUNS)
            ]
        finally:
            await client.close()
    mo, mf, mt = (statistics.median(x) for x in (big_ours, big_floor, big_theirs))
    ratio = statistics.median(o / f for o, f in zip(big_ours, big_floor, strict=True))
    print(
        f"big streamed turn ({BIG_BYTES / 2**20:.0f} MiB of SSE, {len(text.text):,} characters "
        f"of text), median of {PAIRED_RUNS}:"
    )
    print(f"  vaelii_llm {mo * 1e3:8.1f} ms   floor {mf * 1e3:8.1f} ms   openai {mt * 1e3:8.1f} ms")
    print(
        f"  vaelii_llm/floor x{ratio:.2f} (median of the runs' ratios; target <= 1.10)   "
        f"openai/floor x{mt / mf:.2f}   speed-up over openai x{mt / mo:.2f}"
    )
    so, sf, st = (statistics.median(x) for x in (small_ours, small_floor, small_theirs))
    small_ratio = statistics.median(o / f for o, f in zip(small_ours, small_floor, strict=True))
    print(f"small non-streamed turns at concurrency {CONCURRENCY} ({SMALL_TURNS} turns):")
    print(f"  vaelii_llm {so:8.0f} /s   floor {sf:8.0f} /s   openai {st:8.0f} /s")
    print(
        f"  vaelii_llm/floor x{small_ratio:.2f} of its turns/s (median of {PAIRED_RUNS} paired "
        f"runs; target >= 0.85)   openai/floor x{st / sf:.2f}   speed-up over openai x{so / st:.2f}"
    )


def run() -> None:
    if "--serve" in sys.argv:
        asyncio.run(_serve())
        return
    beside_server([sys.executable, str(Path(__file__).resolve()), "--serve"], main)


if __name__ == "__main__":
    run()
