"""Small whole turns at concurrency 32 on every wire, one table: ours, the floor, official.

A vote is many small whole turns at once, and so is an agent's tool loop on
a fast local model: there the client's own work is what shows. For each wire
(Ollama, Chat Completions, the Messages API, the Responses API) the wire's own bench serves its
pre-encoded small answer from a process of its own (``--serve``), and this
process runs :data:`TURNS` turns shared by :data:`CONCURRENCY` workers with:

* the *floor*: the wire bench's ``floor_small``, a plain aiohttp POST of a
  pre-encoded body, the answer decoded by one typed msgspec decoder (the
  least work that reads the answer);
* ``vaelii_llm``: the wire's provider, ``complete`` with default options;
* the official client (``ollama``, ``openai``, ``anthropic``; ``openai`` for
  both OpenAI wires), default
  options but no retries.

Ours and the floor run in turn, order alternating, :data:`PAIRED_RUNS` times;
ours/floor is the median of the runs' ratios, each against the floor's run
beside it. The official client runs :data:`OFFICIAL_RUNS` times after them,
against the floor's median. The table prints turns per second (medians) and
the ratios; ``tests/bench/bench_turn_costs.py`` says where a turn's CPU goes.

Run: ``.venv/bin/python tests/bench/bench_small_turns.py`` (about a minute).
Quote it on a quiet machine, with the load it prints.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
from collections.abc import Awaitable
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parents[1]))  # the repository: tests.support

from timing import throughput  # noqa: E402

CONCURRENCY = 32
TURNS = 1024
PAIRED_RUNS = 7
OFFICIAL_RUNS = 3

Turn = Callable[[], Awaitable[object]]


@dataclass
class Row:
    wire: str
    ours: list[float]
    floor: list[float]
    official: list[float]
    official_name: str

    def cells(self) -> list[str]:
        mine, least = statistics.median(self.ours), statistics.median(self.floor)
        ratio = statistics.median(o / f for o, f in zip(self.ours, self.floor, strict=True))
        theirs = statistics.median(self.official) if self.official else float("nan")
        return [
            self.wire,
            f"{least:,.0f}",
            f"{mine:,.0f}",
            f"{ratio:.2f}",
            f"{self.official_name} {theirs:,.0f}",
            f"{theirs / least:.2f}",
            f"{mine / theirs:.1f}",
        ]


async def measure(wire: str, ours: Turn, floor: Turn, official: Turn | None, name: str) -> Row:
    for turn in (ours, floor, *((official,) if official else ())):
        await throughput(turn, TURNS, CONCURRENCY)  # warm: connections made, code loaded
    mine: list[float] = []
    least: list[float] = []
    for n in range(PAIRED_RUNS):
        for first in (True, False) if n % 2 else (False, True):
            (mine if first else least).append(
                await throughput(ours if first else floor, TURNS, CONCURRENCY)
            )
    theirs = [
        await throughput(official, TURNS, CONCURRENCY)
        for _ in range(OFFICIAL_RUNS if official else 0)
    ]
    return Row(wire, mine, least, theirs, name)


def _ask() -> Any:
    from vaelii_llm import Message
    from vaelii_llm import Request

    return Request(messages=[Message(role="user", content="hi")], timeout_ms=120_000)


async def ollama_row(url: str) -> Row:
    import bench_ollama as wire
    import ollama as official

    client = official.AsyncClient(host=url)
    async with (
        wire.ours.provider(host=url, model=wire.MODEL) as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        return await measure(
            "Ollama",
            lambda: wire.ours_small(p),
            lambda: wire.floor_small(session, url),
            lambda: wire.theirs_small(client),
            "ollama",
        )


async def _hosted_row(
    wire: str,
    provider: Any,
    floor: Callable[[aiohttp.ClientSession], Awaitable[object]],
    theirs: Turn,
    official: str,
    close_official: Callable[[], Awaitable[object]],
) -> Row:
    """A wire the official client reaches with a key: ours ``provider.complete``
    of the one small request, the floor given the floor's session."""
    request = _ask()
    async with (
        provider as p,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        try:
            return await measure(
                wire, lambda: p.complete(request), lambda: floor(session), theirs, official
            )
        finally:
            await close_official()


async def openai_row(url: str) -> Row:
    import bench_openai as wire
    import openai as official

    from vaelii_llm.providers import openai

    hi: Any = [{"role": "user", "content": "hi"}]
    body = msgspec.json.encode({"model": wire.MODEL, "messages": hi})
    client = official.AsyncOpenAI(api_key="sk-bench", base_url=url, max_retries=0)

    async def theirs() -> None:
        await client.chat.completions.create(model=wire.MODEL, messages=hi)

    return await _hosted_row(
        "Chat Completions",
        openai.provider(base_url=url, api_key="sk-bench", model=wire.MODEL),
        lambda session: wire.floor_small(session, url, body),
        theirs,
        "openai",
        client.close,
    )


async def anthropic_row(url: str) -> Row:
    import anthropic as official
    import bench_anthropic as wire

    from vaelii_llm.providers import anthropic

    hi: Any = [{"role": "user", "content": "hi"}]
    body = msgspec.json.encode({"model": wire.MODEL, "max_tokens": 1024, "messages": hi})
    client = official.AsyncAnthropic(api_key="sk-bench", base_url=url, max_retries=0)

    async def theirs() -> None:
        await client.messages.create(model=wire.MODEL, max_tokens=1024, messages=hi)

    return await _hosted_row(
        "Messages API",
        anthropic.provider(credential="sk-bench", base_url=url),
        lambda session: wire.floor_small(session, url, body),
        theirs,
        "anthropic",
        client.close,
    )


async def responses_row(url: str) -> Row:
    import bench_responses as wire
    import openai as official

    from vaelii_llm.providers import openai_responses

    body = msgspec.json.encode({"model": wire.MODEL, "input": "hi", "store": False})
    client = official.AsyncOpenAI(api_key="sk-bench", base_url=url, max_retries=0)

    async def theirs() -> None:
        await client.responses.create(model=wire.MODEL, input="hi", store=False)

    return await _hosted_row(
        "Responses API",
        openai_responses.provider(base_url=url, api_key="sk-bench", model=wire.MODEL),
        lambda session: wire.floor_small(session, url, body),
        theirs,
        "openai",
        client.close,
    )


WIRES: tuple[tuple[list[str], Callable[[str], Awaitable[Row]]], ...] = (
    ([sys.executable, "-m", "tests.support.fake_ollama"], ollama_row),
    ([sys.executable, str(BENCH / "bench_openai.py"), "--serve"], openai_row),
    ([sys.executable, str(BENCH / "bench_anthropic.py"), "--serve"], anthropic_row),
    ([sys.executable, str(BENCH / "bench_responses.py"), "--serve"], responses_row),
)

HEADER = [
    "wire",
    "floor turns/s",
    "ours turns/s",
    "ours/floor",
    "official turns/s",
    "official/floor",
    "ours/official",
]


def main() -> None:
    print(
        f"load average {os.getloadavg()[0]:.2f}; {TURNS} small whole turns, {CONCURRENCY} at once; "
        f"ours/floor: median of {PAIRED_RUNS} paired runs' ratios; official: median of "
        f"{OFFICIAL_RUNS} runs"
    )
    rows: list[list[str]] = []
    for argv, row in WIRES:
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            rows.append(asyncio.run(row(url)).cells())
        finally:
            server.terminate()
            server.wait(timeout=10)
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    for r in [HEADER, *rows]:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(r, widths, strict=True))
            )
        )


if __name__ == "__main__":
    main()
