"""Benchmark: a turn's tool calls at once (#62 item 1).

One agent turn asks for six calls of a KB read that takes 200 ms (an engine
op that waits, as an engine reading a remote store does, and releases the
GIL); the figure is the turn's tool time against one call's: at once it is
about one call's (the bar: at most 1.3x), one after another six. The same for
a source whose calls wait on the event loop (as an MCP server's do). Then
100 agent runs at once, each such a turn, with the most reads running at once
in the whole process against the one executor's bound.

Run: ``.venv/bin/python tests/bench/bench_agent_calls.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

from vaelii_llm import agent
from vaelii_llm import engine
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.providers import stub
from vaelii_llm.tools import ToolResult

READ_S = 0.2
RUNS = 5
_lock = threading.Lock()
_running = [0, 0]  # now, most


@engine.op("wait_read")
def _wait_read(base: kb.KB, n: int) -> Iterator[int]:
    """A read that takes :data:`READ_S`, counting the reads running at once."""
    with _lock:
        _running[0] += 1
        _running[1] = max(_running[1], _running[0])
    time.sleep(READ_S)
    with _lock:
        _running[0] -= 1
    yield n


class OnTheLoop:
    """A source whose calls wait on the loop, as an MCP server's do."""

    name = "loop"

    def schemas(self) -> list[ToolSchema]:
        return [ToolSchema(name="wait", description="Waits.", input_schema={"type": "object"})]

    async def call(self, name: str, input: Any = None) -> ToolResult:
        await asyncio.sleep(READ_S)
        return ToolResult(ok=True, result="done")


def _turn(tool: str, calls: int) -> dict[str, Any]:
    return {"tools": [{"tool": tool, "input": {"n": n}} for n in range(calls)]}


async def _timed(source: tools.ToolSource, tool: str, calls: int) -> float:
    model = stub.provider(script=[_turn(tool, calls), "done"])
    start = time.perf_counter()
    await agent.run(model, source, "go")
    return time.perf_counter() - start


async def main() -> None:
    eng = engine.embedded().with_ops({"wait_read": _wait_read})
    kb_tools = tools.Toolset(None, engine=eng, workers=6)
    for label, source, tool in (
        ("KB reads in the executor", kb_tools, "kb_wait_read"),
        ("calls on the loop", OnTheLoop(), "wait"),
    ):
        one = statistics.median([await _timed(source, tool, 1) for _ in range(RUNS)])
        six = statistics.median([await _timed(source, tool, 6) for _ in range(RUNS)])
        print(
            f"{label:26} one call {one * 1000:6.0f} ms, six {six * 1000:6.0f} ms: {six / one:.2f}x"
        )
    _running[:] = [0, 0]
    start = time.perf_counter()

    async def run_one() -> None:
        toolset = tools.Toolset(None, engine=eng, workers=6)
        model = stub.provider(script=[_turn("kb_wait_read", 6), "done"])
        result = await agent.run(model, toolset, "go")
        assert all(call.ok for call in result.tool_calls)

    await asyncio.gather(*(run_one() for _ in range(100)))
    took = time.perf_counter() - start
    print(
        f"100 runs of six reads at once: {took:.2f} s, most reads in threads at once "
        f"{_running[1]} (the process bound: {tools._READ_THREADS}), threads now "
        f"{threading.active_count()}"
    )


if __name__ == "__main__":
    asyncio.run(main())
