"""The MCP face: the official ``mcp`` client against ``vaelii-llm mcp``.

Over stdio (the command in a subprocess, launched by the entry the agent frameworks guide shows a
desktop host, pointed at the sample KB's file) and over streamable HTTP (the same
command with ``--http :0``, which binds loopback), the same checks: the tool list
is the Toolset's, a read answers from the sample KB with the Toolset's own text,
every write name and every refusal is an error result, a non-object ``arguments``
is refused by the protocol, and the server answers again afterwards. Raw lines
over stdio: malformed requests, and cancelled reads freeing their workers. In
process: a client's cancellation reaches the Toolset's call.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import Literal

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.integrations import mcp as mcp_face

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "vaelii_llm.cli", "mcp"]
SAMPLE_EDN = str(resources.files("vaelii_llm.kb").joinpath("data/sample.edn"))
START_TIMEOUT_S = 60  # a loaded 2-core machine imports slowly; nothing waits this long when well
CALL_TIMEOUT_S = 60

READ = ("kb_query", {"goal": "(afraidOf MissMuffet ?who)"})
SHAPE_REFUSAL = ("kb_query", {"goal": "(afraidOf MissMuffet ?who)", "bogus": 1})
OVER_CEILING = (
    "kb_query",
    {"goal": "(afraidOf MissMuffet ?who)", "context": "CxWell", "opts": {"max-depth": 100000}},
)
BIG_READ = ("kb_sentexes_in_context", {"context": "CxWell"})


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}


class RawCall(types.Request[dict[str, Any], Literal["tools/call"]]):
    """A ``tools/call`` whose params are sent as given, so a test can send what
    the typed request would refuse to build (an ``arguments`` that is a list)."""

    method: Literal["tools/call"] = "tools/call"
    params: dict[str, Any]
    name_param: ClassVar[str | None] = "name"


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def check_surface(client: Client) -> None:
    toolset = tools.Toolset(kb.sample())
    listed = (await client.list_tools()).tools
    assert [(t.name, t.description, t.input_schema) for t in listed] == [
        (s.name, s.description, s.input_schema) for s in toolset.schemas()
    ]
    for tool in listed:
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.idempotent_hint is True
        assert tool.annotations.open_world_hint is False
        assert tool.annotations.destructive_hint is False

    async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await client.call_tool(name, arguments, read_timeout_seconds=CALL_TIMEOUT_S)

    read = await call(*READ)
    assert not read.is_error
    assert text_of(read) == (await toolset.call(*READ)).text
    assert "ItsyBitsy" in text_of(read)

    big = await call(*BIG_READ)
    direct = await toolset.call(*BIG_READ)
    assert direct.ok
    assert not big.is_error
    assert text_of(big) == direct.text
    whole = await tools.Toolset(kb.sample(), max_result_chars=10**7).call(*BIG_READ)
    assert len(whole.text) > len(direct.text)  # so the bound did cut this one

    for op in sorted(tools.WRITE_OPS):
        refused = await call(tools.tool_name(op), {"sentence": "(isa Me Spider)"})
        assert refused.is_error, op
        assert text_of(refused).startswith("unknown-tool: "), (op, text_of(refused))

    shape = await call(*SHAPE_REFUSAL)
    assert shape.is_error
    assert text_of(shape).startswith("unexpected-argument: ")

    ceiling = await call(*OVER_CEILING)
    assert ceiling.is_error
    assert text_of(ceiling).startswith("over-ceiling: ")

    with pytest.raises(MCPError) as refused_params:
        await client.session.send_request(
            RawCall(params={"name": "kb_query", "arguments": ["(afraidOf MissMuffet ?who)"]}),
            types.CallToolResult,
            request_read_timeout_seconds=CALL_TIMEOUT_S,
        )
    assert refused_params.value.code == types.INVALID_PARAMS

    again = await call(*READ)
    assert not again.is_error
    assert text_of(again) == text_of(read)


def readme_entry() -> tuple[str, list[str]]:
    """The MCP host entry the agent frameworks guide shows, with its KB path pointing at the sample
    KB's file and its command (``/path/to/.venv/bin/vaelii-llm``) at the console
    script this venv installed."""
    text = (ROOT / "docs" / "guides" / "agent-frameworks.md").read_text()
    section = text[text.index("## The KB as an MCP server") :]
    found = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert found is not None
    entry = json.loads(found.group(1))["mcpServers"]["vaelii-kb"]
    assert entry["command"] == "/path/to/.venv/bin/vaelii-llm"
    script = Path(sys.executable).parent / "vaelii-llm"
    assert script.exists(), "install the package (pip install -e .) to get the command"
    assert "/path/to/kb.edn" in entry["args"]
    return str(script), [SAMPLE_EDN if a == "/path/to/kb.edn" else a for a in entry["args"]]


async def test_the_readme_stdio_entry_serves_the_read_surface_and_refuses_the_rest() -> None:
    command, args = readme_entry()
    params = StdioServerParameters(command=command, args=args, env=_env())
    with anyio.fail_after(START_TIMEOUT_S + 4 * CALL_TIMEOUT_S):
        async with Client(params, read_timeout_seconds=START_TIMEOUT_S) as client:
            await check_surface(client)


@asynccontextmanager
async def http_server(*extra: str) -> AsyncIterator[str]:
    """``vaelii-llm mcp --http :0`` in a subprocess; yields the URL it printed."""
    proc = await asyncio.create_subprocess_exec(
        *COMMAND,
        "--http",
        ":0",
        *extra,  # no host named: loopback
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), START_TIMEOUT_S)
        text = line.decode()
        assert "serving streamable HTTP at http://127.0.0.1:" in text, text
        yield text.rsplit(" ", 1)[-1].strip()
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_http_server_serves_the_read_surface_and_refuses_the_rest() -> None:
    async with http_server() as url:
        assert url.endswith("/mcp")
        with anyio.fail_after(START_TIMEOUT_S + 4 * CALL_TIMEOUT_S):
            async with Client(url, read_timeout_seconds=START_TIMEOUT_S) as client:
                await check_surface(client)


class _Line:
    """Raw newline-delimited JSON-RPC with the stdio server, for what no client sends."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, message: dict[str, Any] | str) -> None:
        assert self.proc.stdin is not None
        text = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    async def answer(self, request_id: int) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), CALL_TIMEOUT_S)
            assert line, "the server closed its stdout"
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id:
                return message


def slow_kb(path: Path) -> str:
    """An EDN KB where proving ``(path N0 Nobody)`` searches a dense graph until the
    read's clock cuts it: a read that runs its whole ``max-ms``."""
    nodes = [f"N{i}" for i in range(30)]
    lines = ["(in-context CxG)", "(arity link 2)", "(arity path 2)"]
    lines += [f"(link {a} {b})" for a in nodes for b in nodes if a != b]
    lines += [
        "(implies (link ?a ?b) (path ?a ?b))",
        "(implies (and (link ?a ?b) (path ?b ?c)) (path ?a ?c))",
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _call(request_id: int, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_stdio_server_survives_malformed_requests_and_cancelled_reads(
    tmp_path: Path,
) -> None:
    """Raw JSON-RPC lines, for what no client sends: junk, an unknown method, a
    non-object ``arguments``, no tool name; each gets the protocol's answer (a line
    that is not JSON gets a parse error under no id) and the server answers the next request.

    Then every worker is given a read its clock would end only after 10 s, and the
    client cancels them all: a quick read answers first and the cancelled ones never
    answer. Without the cancellation the quick read would wait for a worker, so it
    would answer after the slow ones' cut records."""
    proc = await asyncio.create_subprocess_exec(
        *COMMAND,
        "--kb",
        slow_kb(tmp_path / "slow.edn"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=_env(),
    )
    wire = _Line(proc)
    slow_goal = {
        "goal": "(path N0 Nobody)",
        "context": "CxG",
        "opts": {"max-depth": 12, "max-ms": 10000},
    }
    try:
        await wire.send("this line is not JSON")
        await wire.send({"jsonrpc": "2.0", "id": 1, "method": "no/such/method"})
        assert (await wire.answer(1))["error"]["code"] == types.METHOD_NOT_FOUND
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert (await wire.answer(2))["result"]["serverInfo"]["name"] == "vaelii-llm"
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await wire.send(_call(3, {"name": "kb_query", "arguments": "(path N0 N1)"}))
        assert (await wire.answer(3))["error"]["code"] == types.INVALID_PARAMS
        await wire.send(_call(4, {}))
        assert (await wire.answer(4))["error"]["code"] == types.INVALID_PARAMS
        await wire.send(_call(5, {"name": "kb_types_of", "arguments": {"term": "N0"}}))
        answered = (await wire.answer(5))["result"]
        assert answered["isError"] is False

        slow_ids = list(range(100, 100 + tools.Toolset(None).workers))
        for request_id in slow_ids:
            await wire.send(_call(request_id, {"name": "kb_query", "arguments": slow_goal}))
        # A ping sent after them is answered once the server has read each (it
        # reads its input in order) and started it on its way to a worker; in
        # its worker or still on its way, the cancellation ends it.
        await wire.send({"jsonrpc": "2.0", "id": 99, "method": "ping"})
        await wire.answer(99)
        for request_id in slow_ids:
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": request_id, "reason": "test"},
                }
            )
        await wire.send(_call(6, {"name": "kb_sentex_count", "arguments": {}}))
        assert proc.stdout is not None
        first = json.loads(await asyncio.wait_for(proc.stdout.readline(), CALL_TIMEOUT_S))
        assert first["id"] == 6, first
        assert first["result"]["isError"] is False
        await wire.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        second = json.loads(await asyncio.wait_for(proc.stdout.readline(), CALL_TIMEOUT_S))
        assert second["id"] == 7, second
    finally:
        # The abandoned reads run on until their clock ends them; nothing waits for that.
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


class _HeldToolset(tools.Toolset):
    """A Toolset whose ``kb_query`` waits until it is cancelled, recording that it was."""

    def __init__(self) -> None:
        super().__init__(kb.sample())
        self.started = anyio.Event()
        self.cancelled = anyio.Event()

    async def call(self, name: str, input: Any = None) -> tools.ToolResult:
        if name != "kb_query":
            return await super().call(name, input)
        self.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_cancellation_cancels_the_call(mode: Literal["legacy", "auto"]) -> None:
    toolset = _HeldToolset()
    with anyio.fail_after(30):
        async with Client(mcp_face.server(toolset), mode=mode) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, *READ)
                await toolset.started.wait()
                group.cancel_scope.cancel()
            await toolset.cancelled.wait()
            answered = await client.call_tool("kb_types_of", {"term": "Muffet"})
    assert not answered.is_error
    assert "Spider" in text_of(answered)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:9000", ("127.0.0.1", 9000)),
        (":9000", ("127.0.0.1", 9000)),
        ("0.0.0.0", ("0.0.0.0", mcp_face.DEFAULT_PORT)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:8765", ("localhost", 8765)),
    ],
)
def test_parse_address(text: str, address: tuple[str, int]) -> None:
    assert mcp_face.parse_address(text) == address


@pytest.mark.parametrize("text", ["::1:80", "host:port", "host:70000", "[::1"])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        mcp_face.parse_address(text)


def test_the_command_refuses_a_bad_address_and_a_missing_kb(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from vaelii_llm import cli

    assert cli.main(["mcp", "--http", "localhost:port"]) == 2
    assert "the port must be a number" in capsys.readouterr().err
    assert cli.main(["mcp", "--kb", str(tmp_path / "missing.edn")]) == 1
    assert "bad-path" in capsys.readouterr().err
