"""Benchmark: a streamed turn of many tool calls on the OpenAI-compatible wire (#36 item 5).

A fake vLLM-style server on loopback (in this process: the figure is the
whole turn, server included, as the red team measured it) streams one turn
of ``--calls`` tool calls (default 40,000), each opened by a delta with its
``id`` and ``name`` and continued by one argument piece. Our provider reads it
with ``deltas=True`` (the agent's default) and without, three runs each:
median seconds, and the longest stretch the event loop went without running
a ticker task (what a stuck loop costs every other task).

A turn that large is over :data:`vaelii_llm.providers._turn.MAX_TOOL_CALLS`,
so the bench lifts the bound for its own process (``--keep-bound`` leaves it:
the turn then ends with the typed refusal, timed too).

Run: ``.venv/bin/python tests/bench/bench_tool_calls.py [--calls N] [--keep-bound]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support

from tests.support.fake_openai import Call
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import Turn
from tests.support.fake_openai import transcript
from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm.providers import openai

RUNS = 3


def _turn(calls: int) -> Turn:
    return Turn(
        calls=[
            Call(id=f"call_{n}", name="kb_query", pieces=[f'{{"n": {n}}}']) for n in range(calls)
        ],
        finish_reason="tool_calls",
    )


async def _ticker(longest: list[float], stop: asyncio.Event) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        longest[0] = max(longest[0], now - last)
        last = now


async def _one(p: openai.OpenAIProvider, deltas: bool) -> tuple[float, float, str]:
    request = Request(messages=[Message(role="user", content="q")], timeout_ms=600_000)
    longest = [0.0]
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(longest, stop))
    await asyncio.sleep(0)
    started = time.perf_counter()
    outcome = "answered"
    try:
        async for _ in p.stream(request, deltas=deltas):
            pass
    except errors.LLMBadResponse as exc:
        outcome = f"refused: {exc.reason}"
    took = time.perf_counter() - started
    stop.set()
    await ticker
    return took, longest[0], outcome


async def main(calls: int) -> None:
    script = transcript(_turn(calls))
    server = await FakeOpenAI(script=lambda _body: script, cache=True).start()
    try:
        async with openai.provider(base_url=server.base_url) as p:
            for deltas in (False, True):
                runs = [await _one(p, deltas) for _ in range(RUNS)]
                median = statistics.median(r[0] for r in runs)
                stall = statistics.median(r[1] for r in runs)
                print(
                    f"{calls:,} tool calls, deltas={deltas}: median {median:.3f} s, "
                    f"longest loop stall {stall * 1000:.0f} ms ({runs[0][2]})"
                )
    finally:
        await server.stop()


def run() -> None:
    calls = 40_000
    if "--calls" in sys.argv:
        calls = int(sys.argv[sys.argv.index("--calls") + 1])
    if "--keep-bound" not in sys.argv:
        try:
            from vaelii_llm.providers import _turn
        except ImportError:  # before the bound existed
            pass
        else:
            _turn.MAX_TOOL_CALLS = calls  # type: ignore[misc]
    asyncio.run(main(calls))


if __name__ == "__main__":
    run()
