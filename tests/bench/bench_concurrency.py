"""Benchmark: many small streamed turns at once, on each wire, against the floor.

N turns (N = 1, 64, 512, 2,048) are started together, each a small stream of
200 text deltas, on the Messages API, Ollama and OpenAI-compatible wires, from
one fake server in its own process on loopback (``--serve``) that answers
every request with the same pre-encoded body, so its work stays out of the
figures. Each wire is read by:

* the *floor*: plain aiohttp with its default pool (100 connections, reused)
  reading the stream with the least work that makes the final message: the
  wire's own bench's floor (``bench_anthropic.floor_stream``,
  ``bench_ollama.floor_big``, ``bench_openai.floor_stream``: the body split on
  newlines in batches, each line decoded by one typed msgspec decoder, the
  text joined once);
* ``vaelii_llm``: the wire's provider, ``stream`` under ``aclosing`` to its
  final Response, default options (its own default pool);
* the official client (``anthropic``, ``ollama``, ``openai``) where installed,
  skipped at 2,048 unless ``--official-2048`` (at about 12 ms a turn one run
  takes half a minute, and its figure is not in question).

Two figures per reader and N: time per turn (the wall time of the N turns
over N; at N = 1, 256 turns one after another) and peak memory growth per
turn (tracemalloc's peak over what was traced before the turns began, over
N, in passes of their own so tracing never slows the timed ones). The floor
and ours run in turn, order alternating, :data:`RUNS` times (the machine is
shared); each figure is the median of the runs, each ratio the median of the
runs' ratios to the floor's run beside it.

``--sweep`` instead times ours at N = 512 and 2,048 under several
``max_connections`` (0: no bound) against the floor: the measurement behind
:data:`vaelii_llm._transport.settings.DEFAULT_MAX_CONNECTIONS`.

Run: ``.venv/bin/python tests/bench/bench_concurrency.py`` (a few minutes).
Must show at 512 and 2,048: ours/floor <= 1.15 in time and <= 1.2 in memory.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from timing import beside_server

DELTAS = int(os.environ.get("BENCH_DELTAS", "200"))
SIZES = (1, 64, 512, 2048)
RUNS = 5
MEMORY_RUNS = 3
"""Memory passes are fewer: tracemalloc makes each several times slower, and
a peak moves far less from run to run than a time."""
OFFICIAL_RUNS = 2
SWEEP_RUNS = 3
SEQUENTIAL = 256
"""Turns one after another at N = 1 (one turn alone is too short to time)."""
SWEEP = (16, 32, 100, 256, 0)
MODEL = "bench-model"
WIRES = ("anthropic", "ollama", "openai")
PIECE = "word "
EXPECTED = PIECE * DELTAS

Turn = Callable[[], Awaitable[str]]


# --- the server: one pre-encoded body per wire -------------------------------------------


def _sse(name: str | None, data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {text}\n\n".encode()


def anthropic_body() -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_c",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": PIECE},
    }
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": DELTAS},
    }
    return b"".join(
        [
            _sse("message_start", start),
            _sse("content_block_start", block),
            *(_sse("content_block_delta", delta) for _ in range(DELTAS)),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse("message_delta", end),
            _sse("message_stop", {"type": "message_stop"}),
        ]
    )


def ollama_body() -> bytes:
    def line(content: str, done: bool, **extra: Any) -> bytes:
        obj = {
            "model": MODEL,
            "created_at": "2025-10-26T17:15:24.097767Z",
            "message": {"role": "assistant", "content": content},
            "done": done,
            **extra,
        }
        return json.dumps(obj, separators=(",", ":")).encode() + b"\n"

    tail = line("", True, done_reason="stop", prompt_eval_count=10, eval_count=DELTAS)
    return b"".join([*(line(PIECE, False) for _ in range(DELTAS)), tail])


def openai_body() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = {
            "id": "chatcmpl-c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return _sse(None, obj)

    first = chunk({"role": "assistant", "content": ""})
    return b"".join(
        [first, *(chunk({"content": PIECE}) for _ in range(DELTAS)), chunk({}, "stop")]
    ) + _sse(None, "[DONE]")


async def _serve() -> None:
    from aiohttp import web

    bodies = {
        "/v1/messages": (anthropic_body(), "text/event-stream; charset=utf-8"),
        "/api/chat": (ollama_body(), "application/x-ndjson"),
        "/v1/chat/completions": (openai_body(), "text/event-stream; charset=utf-8"),
    }

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        body, content_type = bodies[request.path]
        resp = web.StreamResponse(headers={"content-type": content_type})
        await resp.prepare(request)
        await resp.write(body)
        await resp.write_eof()
        return resp

    app = web.Application()
    for path in bodies:
        app.router.add_post(path, handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


# --- the floor: the other benches' own, the least work that makes each wire's final message


def floor_turn(session: aiohttp.ClientSession, url: str, wire: str) -> Turn:
    """The floor of the wire's own bench (``bench_<wire>.py``): the same
    function, so every bench holds ours to one floor per wire."""
    if wire == "anthropic":
        import bench_anthropic

        async def a_turn() -> str:
            message = await bench_anthropic.floor_stream(session, url, "hi")
            return str(message["content"][0]["text"])

        return a_turn
    if wire == "ollama":
        import bench_ollama

        async def o_turn() -> str:
            return await bench_ollama.floor_big(session, url)

        return o_turn
    import bench_openai

    body = msgspec.json.encode(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )

    async def c_turn() -> str:
        return str((await bench_openai.floor_stream(session, url + "/v1", body))["text"])

    return c_turn


# --- ours and the official clients --------------------------------------------------------


def ours_turn(provider: Any) -> Turn:
    from vaelii_llm import Message
    from vaelii_llm import Request
    from vaelii_llm import Response
    from vaelii_llm import TextBlock

    request = Request(messages=[Message(role="user", content="hi")], timeout_ms=600_000)

    async def turn() -> str:
        final: Response | None = None
        async with aclosing(provider.stream(request)) as items:
            async for item in items:
                if isinstance(item, Response):
                    final = item
        assert final is not None
        return "".join(b.text for b in final.content if isinstance(b, TextBlock))

    return turn


def ours_provider(wire: str, url: str, **options: Any) -> Any:
    from vaelii_llm.providers import anthropic
    from vaelii_llm.providers import ollama
    from vaelii_llm.providers import openai

    if wire == "anthropic":
        return anthropic.provider(credential="sk-bench", base_url=url, model=MODEL, **options)
    if wire == "ollama":
        return ollama.provider(host=url, model=MODEL, **options)
    return openai.provider(base_url=url + "/v1", api_key="sk-bench", model=MODEL, **options)


def official_turn(wire: str, url: str) -> tuple[Turn, Callable[[], Awaitable[None]]] | None:
    """The official client's turn and its close, or None when it is not installed."""
    if importlib.util.find_spec(wire) is None:
        return None
    hi = [{"role": "user", "content": "hi"}]
    if wire == "anthropic":
        import anthropic

        a_client = anthropic.AsyncAnthropic(
            api_key="sk-bench", base_url=url, max_retries=0, timeout=600
        )

        async def a_turn() -> str:
            async with a_client.messages.stream(
                model=MODEL,
                max_tokens=1024,
                messages=hi,  # type: ignore[arg-type]
            ) as stream:
                message = await stream.get_final_message()
            return "".join(b.text for b in message.content if b.type == "text")

        return a_turn, a_client.close
    if wire == "ollama":
        import ollama

        o_client = ollama.AsyncClient(host=url, timeout=600)

        async def o_turn() -> str:
            parts: list[str] = []
            async for part in await o_client.chat(model=MODEL, messages=hi, stream=True):
                parts.append(part.message.content or "")
            return "".join(parts)

        async def o_close() -> None:
            await o_client._client.aclose()

        return o_turn, o_close
    import openai

    c_client = openai.AsyncOpenAI(
        api_key="sk-bench", base_url=url + "/v1", max_retries=0, timeout=600
    )

    async def c_turn() -> str:
        parts: list[str] = []
        stream = await c_client.chat.completions.create(
            model=MODEL,
            messages=hi,  # type: ignore[arg-type]
            stream=True,
        )
        async for chunk in stream:
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
        return "".join(parts)

    return c_turn, c_client.close


# --- measuring ----------------------------------------------------------------------------


async def _batch(turn: Turn, n: int) -> None:
    if n == 1:
        for _ in range(SEQUENTIAL):
            assert await turn() == EXPECTED
        return
    answers = await asyncio.gather(*(turn() for _ in range(n)))
    assert all(a == EXPECTED for a in answers)


async def per_turn_s(turn: Turn, n: int) -> float:
    """Seconds per turn, ``n`` turns at once."""
    gc.collect()
    started = time.perf_counter()
    await _batch(turn, n)
    return (time.perf_counter() - started) / (SEQUENTIAL if n == 1 else n)


async def growth_per_turn(turn: Turn, n: int) -> float:
    """Peak traced bytes over those traced before, per turn, ``n`` turns at once."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        await _batch(turn, n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (peak - before) / n


def _median_ratio(ours: list[float], floor: list[float]) -> float:
    return statistics.median(o / f for o, f in zip(ours, floor, strict=True))


async def paired(
    turns: dict[str, Turn], n: int, runs: int, measure: Callable[[Turn, int], Awaitable[float]]
) -> dict[str, list[float]]:
    """``runs`` runs of each reader, the order turning each run."""
    figures: dict[str, list[float]] = {name: [] for name in turns}
    names = list(turns)
    for run in range(runs):
        order = names if run % 2 == 0 else names[::-1]
        for name in order:
            figures[name].append(await measure(turns[name], n))
    return figures


async def _official(
    official: tuple[Turn, Callable[[], Awaitable[None]]] | None,
    n: int,
    official_2048: bool,
    floor_s: float,
    floor_bytes: float,
) -> str:
    """The official client's figures at ``n`` (one memory pass), or why there are none."""
    if official is None:
        return "not run" if "--no-official" in sys.argv else "not installed"
    if n >= 2048 and not official_2048:
        return "skipped (--official-2048)"
    turn = official[0]
    try:
        await _batch(turn, min(n, 64))
        tt = statistics.median([await per_turn_s(turn, n) for _ in range(OFFICIAL_RUNS)])
        mt = await growth_per_turn(turn, n)
    except Exception as exc:  # a client that cannot keep up at this N: say so, go on
        return f"failed: {type(exc).__name__}"
    return f"{tt * 1e3:6.2f} ms  {mt / 1e3:7.1f} kB  x{tt / floor_s:5.1f}  x{mt / floor_bytes:4.1f}"


async def wire_table(url: str, wire: str, official_2048: bool) -> list[str]:
    rows: list[str] = []
    provider = ours_provider(wire, url)
    official = None if "--no-official" in sys.argv else official_turn(wire, url)
    async with aiohttp.ClientSession() as floor_session:  # aiohttp's default pool
        turns = {"floor": floor_turn(floor_session, url, wire), "ours": ours_turn(provider)}
        try:
            for n in _sizes():
                for turn in turns.values():  # warm: the pools filled, the code paths run
                    await _batch(turn, min(n, 512))
                times = await paired(turns, n, RUNS, per_turn_s)
                mems = await paired(turns, n, MEMORY_RUNS, growth_per_turn)
                tf, to = statistics.median(times["floor"]), statistics.median(times["ours"])
                mf, mo = statistics.median(mems["floor"]), statistics.median(mems["ours"])
                rt = _median_ratio(times["ours"], times["floor"])
                rm = _median_ratio(mems["ours"], mems["floor"])
                flag = ""
                if n >= 512:
                    flag = "ok" if rt <= 1.15 and rm <= 1.2 else "MISSED"
                row = (
                    f"{wire:9} {n:5} | {tf * 1e3:6.3f} ms {mf / 1e3:6.1f} kB | "
                    f"{to * 1e3:6.3f} ms {mo / 1e3:6.1f} kB | "
                    f"x{rt:4.2f} x{rm:4.2f} {flag:6} | "
                )
                print(row, end="", flush=True)
                theirs = await _official(official, n, official_2048, tf, mf)
                print(theirs, flush=True)
                rows.append(row + theirs)
        finally:
            await provider.aclose()
            if official is not None:
                await official[1]()
    return rows


def _sizes() -> tuple[int, ...]:
    """``--sizes 64,512`` runs only those N (and ``--wires ollama`` only that wire)."""
    if "--sizes" in sys.argv:
        return tuple(int(n) for n in sys.argv[sys.argv.index("--sizes") + 1].split(","))
    return SIZES


def _wires() -> tuple[str, ...]:
    if "--wires" in sys.argv:
        return tuple(sys.argv[sys.argv.index("--wires") + 1].split(","))
    return WIRES


async def sweep(url: str) -> None:
    print("ours under max_connections=M (0: no bound), time and memory per turn over the floor's")
    print(f"(time: median of {SWEEP_RUNS} paired runs; memory: one paired run):")
    for wire in _wires():
        async with aiohttp.ClientSession() as floor_session:
            floor = floor_turn(floor_session, url, wire)
            for n in _sizes() if "--sizes" in sys.argv else (512, 2048):
                for cap in SWEEP:
                    provider = ours_provider(wire, url, max_connections=cap)
                    try:
                        turns = {"floor": floor, "ours": ours_turn(provider)}
                        for turn in turns.values():
                            await _batch(turn, n)
                        times = await paired(turns, n, SWEEP_RUNS, per_turn_s)
                        mems = await paired(turns, n, 1, growth_per_turn)
                    except Exception as exc:  # unbounded, a burst of connects may not all land
                        print(f"  {wire:9} N={n:5}  M={cap:4}: failed: {exc}", flush=True)
                        continue
                    finally:
                        await provider.aclose()
                    rt = _median_ratio(times["ours"], times["floor"])
                    rm = _median_ratio(mems["ours"], mems["floor"])
                    print(
                        f"  {wire:9} N={n:5}  M={cap:4}: time x{rt:.2f}  memory x{rm:.2f}",
                        flush=True,
                    )


async def main(url: str) -> None:
    if "--sweep" in sys.argv:
        await sweep(url)
        return
    official_2048 = "--official-2048" in sys.argv
    print(
        f"{DELTAS} text deltas a turn; time per turn and peak memory growth per turn; "
        f"medians of {RUNS} paired runs ({MEMORY_RUNS} for memory; "
        f"official: {OFFICIAL_RUNS}, memory once)"
    )
    print(
        "wire          N |  floor (aiohttp, 100 conns)  |  vaelii_llm               "
        "| ours/floor time mem  | official  time, mem, x floor"
    )
    for wire in _wires():
        await wire_table(url, wire, official_2048)


def run() -> None:
    if "--serve" in sys.argv:
        asyncio.run(_serve())
        return
    beside_server([sys.executable, str(Path(__file__).resolve()), "--serve"], main)


if __name__ == "__main__":
    run()
