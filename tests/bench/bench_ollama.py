"""Benchmark: our Ollama provider against the official ``ollama`` client.

Both talk to the same fake Ollama (tests/support/fake_ollama.py), run in its own
process on loopback so its work does not share our event loop, and serving
pre-encoded bodies so its own JSON work stays out of the figures:

* one multi-MB streamed NDJSON turn (40,000 chunks) reassembled to the final
  message: median seconds per turn;
* small non-streamed turns at concurrency 32: median turns per second.

The big turn is also timed for the *floor*: the least possible work on the
same bytes from the same server (:func:`floor_big`: a plain aiohttp request,
the body split on newlines in batches, each line decoded by one typed msgspec
decoder built once with only the fields reassembly needs, the text joined
once from a list), in turn with ours, order alternating; the ratio quoted is
the median of the runs' ratios.

A turn reads ``VAELII_OLLAMA_NUM_CTX`` and ``VAELII_OLLAMA_KEEP_ALIVE`` when
its provider names neither (each switch is read at the call that uses it):
that read is timed alone too, and printed as a share of one small turn.

Run: ``.venv/bin/python tests/bench/bench_ollama.py`` (about 30 s). Prints the
medians, ours over the floor and the official client over the floor (lower is
better), and the small-turn ratio ours over theirs (> 1 means we are faster).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path

import aiohttp
import msgspec
import ollama as official

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support

from timing import beside_server
from timing import throughput
from timing import timed

from tests.support.fake_ollama import BIG
from tests.support.fake_ollama import BIG_TOKENS
from vaelii_llm import _backends
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm.providers import ollama as ours

MODEL = "phi4:14b"
OPTIONS = {"num_ctx": 8192, "temperature": 0, "num_predict": 1024}
BIG_RUNS = 9
SMALL_RUNS = 5
PAIRED_RUNS = 9
"""Small-turn runs of ours against the floor, in turn (order alternating):
the ratio quoted is the median of the runs' ratios, which a shared, noisy
machine moves far less than a ratio of two medians taken apart."""
SMALL_TURNS = 1_024
CONCURRENCY = 32


def switch_read_ns(reads: int = 200_000, runs: int = 7) -> float:
    """Median ns to read the two switches a turn reads when its provider names neither."""
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(reads):
            _backends.ollama_num_ctx(None)
            _backends.ollama_keep_alive(None)
        times.append((time.perf_counter_ns() - start) / reads)
    return statistics.median(times)


def small_turns_per_s(turn: Callable[[], Awaitable[object]]) -> Awaitable[float]:
    return throughput(turn, SMALL_TURNS, CONCURRENCY)


def ask(text: str) -> Request:
    return Request(messages=[Message(role="user", content=text)], timeout_ms=120_000)


async def ours_big(p: ours.OllamaProvider) -> str:
    final: Response | None = None
    async with aclosing(p.stream(ask("big"))) as items:
        async for item in items:
            if isinstance(item, Response):
                final = item
    assert final is not None
    block = final.content[0]
    assert isinstance(block, TextBlock)
    return block.text


async def theirs_big(client: official.AsyncClient) -> str:
    parts: list[str] = []
    stream = await client.chat(
        model=MODEL,
        messages=[{"role": "user", "content": "big"}],
        stream=True,
        options=OPTIONS,
        keep_alive="30m",
    )
    async for part in stream:
        parts.append(part.message.content or "")
    return "".join(parts)


class _FMessage(msgspec.Struct, gc=False):
    content: str = ""


class _FChunk(msgspec.Struct, gc=False):
    message: _FMessage | None = None
    done: bool = False
    done_reason: str | None = None
    eval_count: int | None = None


_F_DECODER = msgspec.json.Decoder(_FChunk)


async def floor_big(session: aiohttp.ClientSession, url: str) -> str:
    """The floor: aiohttp, batch line splits, one typed decoder, one list join."""
    body = msgspec.json.encode(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "big"}],
            "stream": True,
            "options": OPTIONS,
            "keep_alive": "30m",
        }
    )
    decode = _F_DECODER.decode
    parts: list[str] = []
    append = parts.append
    done = False
    async with session.post(url + "/api/chat", data=body) as resp:
        tail = b""
        async for chunk in resp.content.iter_any():
            lines = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
            tail = lines.pop()
            for line in lines:
                if line:
                    c = decode(line)
                    if c.message is not None:
                        append(c.message.content)
                    if c.done:
                        done = True
    assert done
    return "".join(parts)


class _FSmall(msgspec.Struct, gc=False):
    """A non-streamed answer with what a caller reads: the text, the stop and the counts."""

    model: str
    message: _FMessage
    done: bool
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None


_F_SMALL = msgspec.json.Decoder(_FSmall)
_F_SMALL_BODY = msgspec.json.encode(
    {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "options": OPTIONS,
        "keep_alive": "30m",
    }
)


async def floor_small(session: aiohttp.ClientSession, url: str) -> None:
    """The small-turn floor: a plain aiohttp POST of a pre-encoded body, the
    whole answer read and decoded by one typed msgspec decoder."""
    async with session.post(url + "/api/chat", data=_F_SMALL_BODY) as resp:
        answer = _F_SMALL.decode(await resp.read())
    assert answer.done


async def ours_small(p: ours.OllamaProvider) -> None:
    await p.complete(ask("hi"))


async def theirs_small(client: official.AsyncClient) -> None:
    await client.chat(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        stream=False,
        options=OPTIONS,
        keep_alive="30m",
    )


async def main(url: str) -> None:
    client = official.AsyncClient(host=url)
    async with (
        ours.provider(host=url, model=MODEL) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        try:
            text_ours, text_theirs = await ours_big(p), await theirs_big(client)
            assert text_ours == text_theirs, "the two clients disagree on the big turn"
            assert text_ours == await floor_big(session, url), "the floor disagrees"
            size = len(text_ours)
            big_ours: list[float] = []
            big_floor: list[float] = []
            big_theirs: list[float] = []
            for n in range(BIG_RUNS):  # ours and the floor in turn, order alternating
                for first in (True, False) if n % 2 else (False, True):
                    if first:
                        big_ours.append(await timed(lambda: ours_big(p)))
                    else:
                        big_floor.append(await timed(lambda: floor_big(session, url)))
                big_theirs.append(await timed(lambda: theirs_big(client)))
            await ours_small(p)
            await theirs_small(client)
            await floor_small(session, url)
            small_ours: list[float] = []
            small_floor: list[float] = []
            small_theirs: list[float] = []
            paired: list[float] = []
            for n in range(PAIRED_RUNS):
                ours_fig = floor_fig = 0.0
                for first in (True, False) if n % 2 else (False, True):
                    if first:
                        ours_fig = await small_turns_per_s(lambda: ours_small(p))
                    else:
                        floor_fig = await small_turns_per_s(lambda: floor_small(session, url))
                paired.append(ours_fig / floor_fig)
                small_ours.append(ours_fig)
                small_floor.append(floor_fig)
            for _ in range(SMALL_RUNS):
                small_theirs.append(await small_turns_per_s(lambda: theirs_small(client)))
        finally:
            await client.close()  # type: ignore[no-untyped-call]
    mo, mf, mt = (statistics.median(x) for x in (big_ours, big_floor, big_theirs))
    so, st = statistics.median(small_ours), statistics.median(small_theirs)
    sf = statistics.median(small_floor)
    wire = sum(len(json.dumps(obj)) + 1 for obj in BIG)
    print(
        f"big streamed turn ({wire / 1e6:.1f} MB of NDJSON, {BIG_TOKENS:,} chunks, "
        f"{size:,} characters of text), median of {BIG_RUNS}:"
    )
    print(f"  vaelii_llm {mo * 1e3:8.1f} ms   floor {mf * 1e3:8.1f} ms   ollama {mt * 1e3:8.1f} ms")
    ratio = statistics.median(o / f for o, f in zip(big_ours, big_floor, strict=True))
    print(
        f"  vaelii_llm/floor x{ratio:.2f} (median of the runs' ratios)   "
        f"ollama/floor x{mt / mf:.2f}   "
        f"speed-up over ollama x{mt / mo:.2f}"
    )
    print(
        f"small turns at concurrency {CONCURRENCY} ({SMALL_TURNS} turns), "
        f"medians ({PAIRED_RUNS} runs; ollama {SMALL_RUNS}):"
    )
    print(f"  vaelii_llm {so:8.0f} /s   floor {sf:8.0f} /s   ollama {st:8.0f} /s")
    print(
        f"  vaelii_llm/floor x{statistics.median(paired):.2f} of its turns/s "
        f"(median of {PAIRED_RUNS} paired runs)   "
        f"speed-up over ollama x{so / st:.2f}"
    )
    read_ns = switch_read_ns()
    print(
        f"switches read per turn (num_ctx, keep_alive): {read_ns:.0f} ns, "
        f"{read_ns * so / 1e9:.2%} of a small turn ({1e6 / so:.0f} us)"
    )


def run() -> None:
    beside_server([sys.executable, "-m", "tests.support.fake_ollama"], main)


if __name__ == "__main__":
    run()
