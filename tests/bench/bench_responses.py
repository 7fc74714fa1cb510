"""Benchmark: our Responses API provider against the official ``openai`` client.

Both read the same fake Responses API server, run in its own process on
loopback (``--serve``), serving one pre-encoded ~4 MiB SSE turn written as
OpenAI's API reference shows the wire (``tests/support/fake_openai_responses.py``):
a reasoning summary in many deltas, tens of thousands of
``response.output_text.delta`` events, a function call whose arguments come
in many pieces, ``response.completed``; each reassembled to the final turn.

Each is timed beside the *floor*, the least work on the same bytes from the
same server (:func:`floor_stream`: a plain aiohttp request, the body split on
newlines in batches, each ``data:`` line decoded by one typed msgspec decoder
holding only what reassembly needs, the pieces joined once, the arguments
parsed once), in turn with ours, order alternating; the ratio quoted is the
median of the runs' ratios.

Run: ``.venv/bin/python tests/bench/bench_responses.py`` (under a minute).
Prints the medians, ours over the floor (target: at most 1.00) and the
official client over the floor.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from timing import beside_server
from timing import timed

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support

from tests.support.fake_openai_responses import MODEL
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn
from tests.support.fake_openai_responses import sse

PAIRED_RUNS = 9
THEIR_RUNS = 5
BIG_BYTES = 4 * 2**20
"""The least size of the big turn's SSE body (the run prints its size)."""


def _big_turn() -> Turn:
    """A turn whose SSE body is about :data:`BIG_BYTES`."""
    rng = random.Random(4)
    words = ["the ", "spider ", "sat ", "beside ", "Miss ", "Muffet, ", "and ", "— ", "ü "]
    arguments = json.dumps({"rows": [{"i": i, "name": f"row {i}"} for i in range(300)]})
    text = Item("message", [])
    turn = Turn(
        items=[
            Item("reasoning", parts=[["hmm, let me see. "] * 200]),
            text,
            Item(
                "function_call",
                [arguments[i : i + 12] for i in range(0, len(arguments), 12)],
                name="kb_query",
                call_id="call_big",
            ),
        ],
        id="resp_big",
    )
    while len(sse(turn.events())) < BIG_BYTES:
        text.pieces.extend("".join(rng.choice(words) for _ in range(4)) for _ in range(1000))
    return turn


SMALL = json.dumps(Turn(items=[Item("message", ["Yes."])], id="resp_small").response()).encode()
"""The small whole answer (a request not streamed): one message, "Yes."."""


async def _serve() -> None:
    from aiohttp import web

    big = sse(_big_turn().events())

    async def handle(request: web.Request) -> web.StreamResponse:
        if not msgspec.json.decode(await request.read()).get("stream"):
            return web.Response(body=SMALL, content_type="application/json")
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        for i in range(0, len(big), 16_384):
            await resp.write(big[i : i + 16_384])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/responses", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------------------
# the floor: the least work that turns the bytes into a final turn


class _FItem(msgspec.Struct, gc=False):
    type: str
    call_id: str | None = None
    name: str | None = None


class _FUsage(msgspec.Struct, gc=False):
    input_tokens: int
    output_tokens: int


class _FResponse(msgspec.Struct, gc=False):
    id: str
    status: str
    usage: _FUsage | None = None


class _FEvent(msgspec.Struct, gc=False):
    type: str
    delta: str | None = None
    item: _FItem | None = None
    response: _FResponse | None = None


_F_EVENT = msgspec.json.Decoder(_FEvent)
_F_ANY = msgspec.json.Decoder()
_F_HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


class _FPart(msgspec.Struct, gc=False):
    type: str
    text: str = ""


class _FOutput(msgspec.Struct, gc=False):
    type: str
    content: list[_FPart] = []


class _FSmall(msgspec.Struct, gc=False):
    """A whole answer with what a caller reads: the text, the status, the counts."""

    id: str
    status: str
    output: list[_FOutput]
    usage: _FUsage | None = None


_F_SMALL = msgspec.json.Decoder(_FSmall)


async def floor_small(session: aiohttp.ClientSession, url: str, body: bytes) -> None:
    """The small-turn floor: a plain aiohttp POST of a pre-encoded body, the
    whole answer read and decoded by one typed msgspec decoder."""
    async with session.post(url + "/responses", data=body, headers=_F_HEADERS) as resp:
        answer = _F_SMALL.decode(await resp.read())
    assert answer.status == "completed"


async def floor_stream(session: aiohttp.ClientSession, url: str, body: bytes) -> dict[str, Any]:
    """The floor: aiohttp, batch line splits, one typed decoder, list joins."""
    decode = _F_EVENT.decode
    text: list[str] = []
    thinking: list[str] = []
    arguments: list[str] = []
    call: _FItem | None = None
    end: _FResponse | None = None
    async with session.post(url + "/responses", data=body, headers=_F_HEADERS) as resp:
        tail = b""
        async for chunk in resp.content.iter_any():
            lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if not line.startswith(b"data: "):
                    continue
                ev = decode(line[6:])
                kind = ev.type
                if kind == "response.output_text.delta":
                    text.append(ev.delta or "")
                elif kind == "response.reasoning_summary_text.delta":
                    thinking.append(ev.delta or "")
                elif kind == "response.function_call_arguments.delta":
                    arguments.append(ev.delta or "")
                elif kind == "response.output_item.added" and ev.item and ev.item.call_id:
                    call = ev.item
                elif kind == "response.completed":
                    end = ev.response
    assert end is not None
    assert call is not None
    return {
        "id": end.id,
        "thinking": "".join(thinking),
        "text": "".join(text),
        "call": (call.call_id, call.name, _F_ANY.decode("".join(arguments))),
        "usage": end.usage,
    }


async def main(url: str) -> None:
    import openai as official

    from vaelii_llm._protocol import Message
    from vaelii_llm._protocol import Request
    from vaelii_llm._protocol import Response
    from vaelii_llm._protocol import TextBlock
    from vaelii_llm._protocol import ToolUseBlock
    from vaelii_llm.providers import openai_responses as ours

    request = Request(messages=[Message(role="user", content="big")], timeout_ms=120_000)
    client = official.AsyncOpenAI(api_key="sk-bench", base_url=url, max_retries=0)

    async def ours_stream(p: ours.OpenAIResponsesProvider) -> Response:
        final: Response | None = None
        async with aclosing(p.stream(request)) as items:
            async for item in items:
                if isinstance(item, Response):
                    final = item
        assert final is not None
        return final

    async def theirs_stream() -> Any:
        async with client.responses.stream(model=MODEL, input="big", store=False) as stream:
            return await stream.get_final_response()

    body = msgspec.json.encode({"model": MODEL, "input": "big", "stream": True, "store": False})

    async with (
        ours.provider(base_url=url, api_key="sk-bench", model=MODEL) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as floor_session,
    ):
        try:
            a, b = await ours_stream(p), await theirs_stream()
            f = await floor_stream(floor_session, url, body)
            text, call = a.content[1], a.content[2]
            assert isinstance(text, TextBlock)
            assert isinstance(call, ToolUseBlock)
            assert text.text == b.output_text == f["text"], "the clients disagree"
            assert call.input == f["call"][2]
            mine: list[float] = []
            floor: list[float] = []
            for n in range(PAIRED_RUNS):
                for first in (True, False) if n % 2 else (False, True):
                    if first:
                        mine.append(await timed(lambda: ours_stream(p)))
                    else:
                        floor.append(await timed(lambda: floor_stream(floor_session, url, body)))
            theirs = [await timed(theirs_stream) for _ in range(THEIR_RUNS)]
        finally:
            await client.close()
    size = len(sse(_big_turn().events()))
    mo, mf, mt = (statistics.median(x) for x in (mine, floor, theirs))
    ratio = statistics.median(o / f for o, f in zip(mine, floor, strict=True))
    print(
        f"big streamed Responses turn ({size / 2**20:.1f} MiB of SSE, "
        f"{len(text.text):,} characters of text), median of {PAIRED_RUNS}:"
    )
    print(f"  vaelii_llm {mo * 1e3:8.1f} ms   floor {mf * 1e3:8.1f} ms   openai {mt * 1e3:8.1f} ms")
    print(
        f"  vaelii_llm/floor x{ratio:.2f} (median of the runs' ratios; target <= 1.00)   "
        f"openai/floor x{mt / mf:.2f}   speed-up over openai x{mt / mo:.2f}"
    )


def run(argv: list[str] | None = None) -> None:
    args = sys.argv if argv is None else argv
    if "--serve" in args:
        asyncio.run(_serve())
        return
    beside_server([sys.executable, str(Path(__file__).resolve()), "--serve"], main)


if __name__ == "__main__":
    run()
