"""Benchmark: what each face adds over the call it wraps.

* MCP: one ``tools/call`` of ``kb_types_of`` through the official ``mcp`` client
  against ``vaelii-llm mcp`` over stdio (a subprocess, JSON-RPC lines), and
  in process (the client's direct dispatch), against the same
  :meth:`Toolset.call <vaelii_llm.tools.Toolset.call>` awaited directly.
* pydantic-ai: one ``Agent.run`` over :class:`VaeliiModel` on the stub (a
  ``kb_query`` call, then prose: two model turns and one tool call), against the
  same two turns and tool call written by hand on the stub, and against the same
  run over pydantic-ai's own ``FunctionModel`` (the framework's floor).

Run: ``.venv/bin/python tests/bench/bench_faces.py`` (about 20 s). Prints the
median milliseconds of each and the ratio face / direct.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable
from collections.abc import Callable

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.models.function import FunctionModel

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import ToolUseBlock
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.integrations import mcp as mcp_face
from vaelii_llm.integrations.pydantic_ai import KBToolset
from vaelii_llm.integrations.pydantic_ai import VaeliiModel
from vaelii_llm.providers import stub

CALLS = 300
WARMUP = 30
RUNS = 200
READ = ("kb_types_of", {"term": "Muffet"})
QUERY = {"tool": "kb_query", "input": {"goal": "(afraidOf MissMuffet ?who)"}}


async def median_ms(call: Callable[[], Awaitable[object]], n: int) -> float:
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


async def bench_mcp() -> None:
    toolset = tools.Toolset(kb.sample())
    direct = await median_ms(lambda: toolset.call(*READ), CALLS)
    async with Client(mcp_face.server(toolset)) as client:
        inproc = await median_ms(lambda: client.call_tool(*READ), CALLS)
    params = StdioServerParameters(command=sys.executable, args=["-m", "vaelii_llm.cli", "mcp"])
    async with Client(params) as client:
        stdio = await median_ms(lambda: client.call_tool(*READ), CALLS)
    print(f"Toolset.call kb_types_of        {direct:8.3f} ms")
    print(f"MCP in process                  {inproc:8.3f} ms  {inproc / direct:6.2f}x")
    print(f"MCP over stdio (subprocess)     {stdio:8.3f} ms  {stdio / direct:6.2f}x")


async def bench_agent() -> None:
    toolset = tools.Toolset(kb.sample())
    schemas = toolset.schemas()

    async def by_hand() -> None:
        provider = stub.provider(script=[QUERY, "done"])
        messages = [Message(role="user", content="Who?")]
        first = await provider.complete(Request(messages=messages, tools=schemas))
        use = next(b for b in first.content if isinstance(b, ToolUseBlock))
        result = await toolset.call(use.name, use.input)
        messages += [
            Message(role="assistant", content=first.content),
            Message(role="user", content=[result.block(use.id)]),
        ]
        await provider.complete(Request(messages=messages, tools=schemas))

    kb_tools = KBToolset(toolset)

    async def by_agent() -> None:
        agent = Agent(VaeliiModel(stub.provider(script=[QUERY, "done"])), toolsets=[kb_tools])
        await agent.run("Who?")

    def scripted(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        if len(messages) == 1:
            call = pai.ToolCallPart(tool_name="kb_query", args=dict(QUERY["input"]))
            return pai.ModelResponse(parts=[call])
        return pai.ModelResponse(parts=[pai.TextPart(content="done")])

    async def by_function_model() -> None:
        await Agent(FunctionModel(scripted), toolsets=[kb_tools]).run("Who?")

    hand = await median_ms(by_hand, RUNS)
    agent = await median_ms(by_agent, RUNS)
    floor = await median_ms(by_function_model, RUNS)
    print(f"tool loop by hand on the stub   {hand:8.3f} ms")
    print(f"Agent.run over FunctionModel    {floor:8.3f} ms  {floor / hand:6.2f}x")
    print(
        f"Agent.run over VaeliiModel      {agent:8.3f} ms  {agent / hand:6.2f}x"
        f"  ({agent / floor:.2f}x pydantic-ai's FunctionModel)"
    )


async def main() -> None:
    await bench_mcp()
    await bench_agent()


if __name__ == "__main__":
    asyncio.run(main())
