"""The tool loop (#62): a turn's calls at once, ``tool_choice`` on
the first turn, and a caller's ``approve`` before a call runs."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

from vaelii_llm import agent
from vaelii_llm import engine
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import Usage
from vaelii_llm.integrations.mcp_client import McpToolset
from vaelii_llm.providers import stub
from vaelii_llm.tools import ToolResult

OBJECT = {"type": "object", "properties": {"n": {"type": "integer"}}}


class Timed:
    """A tool source whose call ``n`` waits as its ``delays`` say (by call
    number), counting the calls running at once and the ones cancelled."""

    def __init__(
        self,
        name: str = "timed",
        delays: dict[int, float] | None = None,
        *,
        serial: bool = False,
        tool: str = "wait",
    ) -> None:
        self.name = name
        self.delays = delays or {}
        self.serial = serial
        self.tool = tool
        self.running = 0
        self.most = 0
        self.cancelled = 0
        self.order: list[int] = []  # the calls in the order they began
        self.barrier: asyncio.Event | None = None
        self.until = 0

    def schemas(self) -> list[ToolSchema]:
        return [ToolSchema(name=self.tool, description="Waits.", input_schema=OBJECT)]

    async def call(self, name: str, input: Any = None) -> ToolResult:
        n = int(input["n"])
        self.order.append(n)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if self.barrier is not None:  # every call must be running before any ends
                if self.running >= self.until:
                    self.barrier.set()
                await self.barrier.wait()
            await asyncio.sleep(self.delays.get(n, 0))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        return ToolResult(ok=True, result=f"done {n}")


def calls(n: int, tool: str = "wait", start: int = 0) -> dict[str, Any]:
    return {"tools": [{"tool": tool, "input": {"n": i}, "id": f"c{i}"} for i in range(start, n)]}


def results(request: Request) -> list[ToolResultBlock]:
    last = request.messages[-1].content
    assert isinstance(last, list)
    return [b for b in last if isinstance(b, ToolResultBlock)]


# -- item 1: a turn's calls at once ------------------------------------------------------


async def test_a_turns_calls_all_run_at_once() -> None:
    """Each call waits until all six are running: one after another, none would end."""
    source = Timed()
    source.barrier, source.until = asyncio.Event(), 6
    model = stub.provider(script=[calls(6), "done"])
    async with asyncio.timeout(10):
        result = await agent.run(model, source, "go")
    assert source.most == 6
    assert [c.result for c in result.tool_calls] == [f"done {i}" for i in range(6)]


async def test_results_and_events_keep_the_order_of_the_calls_whatever_ends_first() -> None:
    source = Timed(delays={0: 0.06, 1: 0.04, 2: 0.02, 3: 0.0})  # the last ends first
    model = stub.provider(script=[calls(4), "done"])
    seen: list[Any] = []
    await agent.run(model, source, "go", on_event=seen.append)
    kinds = [
        (type(e).__name__, e.id if isinstance(e, agent.ToolCallStarted) else e.call.id)
        for e in seen
        if isinstance(e, agent.ToolCallStarted | agent.ToolCallFinished)
    ]
    ids = [f"c{i}" for i in range(4)]
    assert kinds == [("ToolCallStarted", i) for i in ids] + [("ToolCallFinished", i) for i in ids]
    assert [b.tool_use_id for b in results(model.requests()[1])] == ids


async def test_a_set_that_must_run_alone_runs_its_calls_one_at_a_time_the_others_at_once() -> None:
    alone = Timed("alone", delays=dict.fromkeys(range(4), 0.01), serial=True, tool="one")
    free = Timed("free", tool="many")
    free.barrier, free.until = asyncio.Event(), 3
    both = {"tools": calls(4, "one")["tools"] + calls(7, "many", start=4)["tools"]}
    model = stub.provider(script=[both, "done"])
    async with asyncio.timeout(10):
        result = await agent.run(model, "go", toolsets=[alone, free])
    assert (alone.most, alone.order) == (1, [0, 1, 2, 3])
    assert free.most == 3
    assert [c.id for c in result.tool_calls] == [f"c{i}" for i in range(7)]


async def test_a_call_past_the_turns_deadline_is_an_error_result_and_the_others_stand() -> None:
    source = Timed(delays={0: 0.0, 1: 30.0})
    first = Request(
        messages=[Message(role="user", content="go")], tools=source.schemas(), timeout_ms=200
    )
    model = stub.provider(script=[calls(2), "done"])
    started = time.monotonic()
    result = await agent.run(model, source, first)
    assert time.monotonic() - started < 5
    ok, late = results(model.requests()[1])
    assert (ok.content, ok.is_error) == ("done 0", False)
    assert late.is_error
    assert "within the turn's 200 ms" in str(late.content)
    assert source.cancelled == 1
    assert source.running == 0
    assert result.stopped == "answered"


async def test_the_budgets_hold_with_calls_at_once() -> None:
    source = Timed()
    model = stub.provider(script=[calls(5), "done"])
    result = await agent.run(model, source, "go", max_tool_calls_per_turn=4)
    assert result.stopped == "max_tool_calls_per_turn"
    assert [c.id for c in result.tool_calls] == ["c0", "c1", "c2", "c3"]
    assert source.order == [0, 1, 2, 3]
    last = result.messages[-1].content
    assert isinstance(last, list)
    over = last[4]
    assert isinstance(over, ToolResultBlock)
    assert over.is_error
    assert over.content == "not run: over the max_tool_calls_per_turn limit"


async def test_closing_the_loop_mid_turn_cancels_every_call_and_leaves_none_running() -> None:
    source = Timed(delays=dict.fromkeys(range(5), 30.0))
    model = stub.provider(script=[calls(5), "done"])
    before = asyncio.all_tasks()
    async with aclosing(agent.events(model, source, "go")) as items:
        async for item in items:
            if isinstance(item, agent.ToolCallStarted) and item.id == "c4":
                await asyncio.sleep(0.05)  # every call is running now
                assert source.running == 5
                break
    assert (source.running, source.cancelled) == (0, 5)
    assert asyncio.all_tasks() == before


@pytest.mark.parametrize("seed", range(60))
async def test_random_interleavings_keep_the_order_and_leave_nothing_running(seed: int) -> None:
    """Calls of random lengths, some sets serial, a cancellation at a random
    moment or none: finished, every result is in the order of the calls;
    cancelled, no call is left running and no task is left behind."""
    rng = random.Random(seed)
    sets = [
        Timed(f"s{k}", tool=f"t{k}", serial=rng.random() < 0.4) for k in range(rng.randint(1, 3))
    ]
    uses = []
    for i in range(rng.randint(1, 9)):
        k = rng.randrange(len(sets))
        sets[k].delays[i] = rng.choice([0.0, 0.001, 0.003, 0.01])
        uses.append({"tool": f"t{k}", "input": {"n": i}, "id": f"c{i}"})
    model = stub.provider(script=[{"tools": uses}, "done"])
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(agent.run(model, "go", toolsets=sets))
    cancel_at = rng.choice([None, 0.0, 0.002, 0.005, 0.02])
    if cancel_at is not None:
        await asyncio.sleep(cancel_at)
        task.cancel()
    try:
        result = await task
    except asyncio.CancelledError:
        assert task.cancelled()
    else:
        assert [c.id for c in result.tool_calls] == [u["id"] for u in uses]
        assert [b.tool_use_id for b in results(model.requests()[1])] == [u["id"] for u in uses]
    assert all(s.running == 0 for s in sets)
    assert all(s.most <= 1 for s in sets if s.serial)
    assert asyncio.all_tasks() == before


@engine.op("slow_read")
def _slow_read(base: kb.KB, n: int) -> Iterator[int]:
    """A read that takes 50 ms, counting the reads running at once in the process."""
    with _COUNT_LOCK:
        _RUNNING[0] += 1
        _RUNNING[1] = max(_RUNNING[1], _RUNNING[0])
    time.sleep(0.05)
    with _COUNT_LOCK:
        _RUNNING[0] -= 1
    yield n


_COUNT_LOCK = threading.Lock()
_RUNNING = [0, 0]  # now, most


async def test_engine_reads_of_many_runs_share_one_process_bound() -> None:
    """Forty runs, each its own toolset of six reads at once: never more
    reads in threads than the process's one executor holds."""
    eng = engine.embedded().with_ops({"slow_read": _slow_read})
    _RUNNING[:] = [0, 0]

    async def one() -> agent.AgentResult:
        toolset = tools.Toolset(None, engine=eng, workers=6)
        model = stub.provider(script=[calls(6, "kb_slow_read"), "done"])
        return await agent.run(model, toolset, "go")

    done = await asyncio.gather(*(one() for _ in range(40)))
    assert all(len(r.tool_calls) == 6 and all(c.ok for c in r.tool_calls) for r in done)
    assert 1 < _RUNNING[1] <= tools._READ_THREADS


# -- item 2: tool_choice -------------------------------------------------------------------


async def test_tool_choice_goes_on_the_first_turn_only() -> None:
    source = Timed()
    model = stub.provider(script=[calls(1), calls(2, start=1), "done"])
    await agent.run(model, source, "go", tool_choice="wait")
    assert [r.tool_choice for r in model.requests()] == ["wait", "auto", "auto"]


async def test_a_forced_first_turn_that_called_no_tool_is_said_once() -> None:
    source = Timed()
    model = stub.provider(script=["no tool for you"])
    seen: list[Any] = []
    result = await agent.run(model, source, "go", tool_choice="required", on_event=seen.append)
    [notice] = [e for e in seen if isinstance(e, agent.ToolsIgnored)]
    assert (notice.what, notice.turn, result.stopped) == ("tool_choice", 1, "answered")
    assert "tool_choice='required'" in notice.message
    assert "Ollama" in notice.message


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_a_choice_that_forces_nothing_says_nothing(choice: str) -> None:
    model = stub.provider(script=["an answer"])
    seen: list[Any] = []
    await agent.run(model, Timed(), "go", tool_choice=choice, on_event=seen.append)
    assert [e for e in seen if isinstance(e, agent.ToolsIgnored)] == []


def test_the_notice_for_a_forced_choice_reads_the_first_requests_choice() -> None:
    first = Request(messages=[], tools=Timed().schemas(), tool_choice="required")
    notice = agent.choice_ignored(first, Usage(input_tokens=9))
    assert notice is not None
    assert (notice.input_tokens, notice.tools_floor) == (9, 0)
    assert agent.choice_ignored(Request(messages=[]), Usage()) is None


# -- item 4: approve -----------------------------------------------------------------------


async def test_approve_sees_each_call_with_its_hints_and_decides() -> None:
    server = MCPServer("fs")

    @server.tool(annotations=ToolAnnotations(destructiveHint=True, readOnlyHint=False))
    def delete(path: str) -> str:
        """Deletes a file."""
        return f"deleted {path}"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def look(path: str) -> str:
        """Reads a file."""
        return f"read {path}"

    shown: list[agent.ToolCallStarted] = []

    async def approve(call: agent.ToolCallStarted) -> bool:
        shown.append(call)
        return call.name != "delete"

    script = {
        "tools": [
            {"tool": "delete", "input": {"path": "/etc"}, "id": "d"},
            {"tool": "look", "input": {"path": "/etc"}, "id": "l"},
            {"tool": "kb_types_of", "input": {"term": "Muffet"}, "id": "k"},
        ]
    }
    model = stub.provider(script=[script, "done"])
    async with McpToolset(server, name="fs") as fs:
        result = await agent.run(
            model, "go", toolsets=[fs, tools.Toolset(kb.sample())], approve=approve
        )
    assert [(c.name, c.hints) for c in shown] == [
        ("delete", {"destructiveHint": True, "readOnlyHint": False}),
        ("look", {"readOnlyHint": True}),  # the server's word is shown, not trusted
    ]  # the KB read is asked nothing
    refused, read, kb_read = results(model.requests()[1])
    assert (refused.content, refused.is_error) == ("not run: the caller refused it", True)
    assert (read.content, kb_read.is_error) == ("read /etc", False)
    assert [c.name for c in result.tool_calls] == ["look", "kb_types_of"]


async def test_approve_answering_stop_runs_nothing_and_ends_the_run() -> None:
    source = Timed()
    asked: list[str] = []

    async def approve(call: agent.ToolCallStarted) -> agent.Approval:
        asked.append(call.id)
        return True if call.id == "c0" else "stop"

    model = stub.provider(script=[calls(3), "never asked"])
    result = await agent.run(model, source, "go", approve=approve)
    assert (result.stopped, result.tool_calls, asked) == ("declined", [], ["c0", "c1"])
    assert source.order == []  # approvals come before any call runs
    last = result.messages[-1].content
    assert isinstance(last, list)
    assert [b.content for b in last] == ["not run: the caller stopped the run"] * 3  # type: ignore[union-attr]
    assert len(model.requests()) == 1
