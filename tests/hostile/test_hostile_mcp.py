"""The MCP faces against hostile peers (issue #36 items 3 and 7, issue #34 item 7).

The server over HTTP runs as ``vaelii-llm mcp --http`` in a child process with a
low descriptor limit; the client's servers are real child processes (the
misbehaving tests/support/mcp_tools_server.py, ``cat``, ``sleep``, a script that exits 3)
and real loopback HTTP servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client

from vaelii_llm import agent
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.integrations.mcp_client import McpServerError
from vaelii_llm.integrations.mcp_client import McpToolset
from vaelii_llm.providers import stub

START_TIMEOUT_S = 60.0  # a loaded 2-core machine starts the server slowly; a well one never waits
LIMIT = 256  # the child's descriptor limit (RLIMIT_NOFILE), soft and hard
ATTACKERS = LIMIT + 44  # half-sent heads: more than the child has descriptors
PIPE_BYTES = 65536  # what a Linux pipe holds before its writer blocks
RECOVERY_S = 10.0  # from the last attacker leaving to a good initialize (main: none in 150 s)
HALF_HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"

_CHILD = textwrap.dedent(
    """
    import resource, sys
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    from vaelii_llm.integrations import mcp as face
    if sys.argv[2]:
        face._READ_TIMEOUT_S = float(sys.argv[2])
    from vaelii_llm import cli
    sys.exit(cli.main(["mcp", "--http", "127.0.0.1:0"]))
    """
)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}


@dataclass
class Served:
    url: str
    pid: int
    log: bytearray  # what it wrote to stderr after its first line, so far


async def _collect(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(65536):
        into += chunk


@asynccontextmanager
async def limited_server(read_timeout: float | None = None) -> AsyncIterator[Served]:
    """``vaelii-llm mcp --http`` with :data:`LIMIT` descriptors (and, if given, the
    read deadline shortened), its stderr collected as it writes it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        str(LIMIT),
        "" if read_timeout is None else str(read_timeout),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), START_TIMEOUT_S)).decode()
        assert "serving streamable HTTP at http://" in line, line
        served = Served(line.rsplit(" ", 1)[-1].strip(), proc.pid, bytearray())
        collecting = asyncio.create_task(_collect(proc.stderr, served.log))
        yield served
    finally:
        proc.kill()
        await proc.wait()
        if "collecting" in locals():
            await collecting


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def initialized(url: str) -> str:
    async with Client(url, read_timeout_seconds=RECOVERY_S) as client:
        assert client.server_info is not None
        return client.server_info.name


linux_only = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="counts a process's descriptors in /proc"
)


# -- #36 item 3: half-sent heads past the descriptor limit ---------------------------------


@linux_only
async def test_half_sent_heads_past_the_descriptor_limit_leave_the_server_answering() -> None:
    async with limited_server() as served:
        url, port = served.url, _port(served.url)
        held: list[asyncio.StreamWriter] = []
        try:
            for _ in range(ATTACKERS):
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(HALF_HEAD)
                held.append(writer)
            for writer in held:
                await writer.drain()
            # the event to order on: the server has taken as many as it will
            deadline = time.monotonic() + START_TIMEOUT_S
            while _descriptors(served.pid) < LIMIT // 2:
                assert time.monotonic() < deadline, "the server never took the connections"
                await asyncio.sleep(0.05)
        finally:
            for writer in held:
                writer.close()
        left = time.monotonic()
        name = await asyncio.wait_for(initialized(url), RECOVERY_S)
        recovered = time.monotonic() - left
        logged = len(served.log)
    assert name == "vaelii-llm"
    assert recovered < RECOVERY_S
    # main logged a traceback per connection it could not accept, over and over
    # (megabytes): a server whose stderr is a pipe nobody reads stalls past PIPE_BYTES
    assert logged < PIPE_BYTES, served.log[:2000].decode(errors="replace")
    print(f"first good initialize {recovered:.2f} s after {ATTACKERS} left; {logged} B logged")


@linux_only
@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(HALF_HEAD, id="half-sent head"),
        pytest.param(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{",
            id="dripped body",
        ),
    ],
)
async def test_a_request_not_sent_whole_in_time_is_closed(sent: bytes) -> None:
    read_timeout = 0.5  # the child's deadline, shortened so the test waits little
    async with limited_server(read_timeout) as served:
        url = served.url
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        try:
            writer.write(sent)
            await writer.drain()
            # main: the server waits for the rest forever, so this read never ends
            answer = await asyncio.wait_for(reader.read(), START_TIMEOUT_S)
        finally:
            writer.close()
        assert answer == b""  # closed, no answer: the request never came whole
        assert await asyncio.wait_for(initialized(url), RECOVERY_S) == "vaelii-llm"


# -- #36 item 7: the client against hostile arguments, names, schemas and headers -----------

SERVER = [
    sys.executable,
    str(Path(__file__).resolve().parents[1] / "support" / "mcp_tools_server.py"),
]
HOSTILE = [
    sys.executable,
    str(Path(__file__).resolve().parents[1] / "support" / "mcp_hostile_server.py"),
]
GRAMMAR = re.compile(r"[a-zA-Z0-9_-]{1,64}", re.ASCII)  # the providers' tool-name grammar
FAST_S = 15.0  # a typed error from a child that is no MCP server (main: the whole start_timeout)


def deep(depth: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    return nested


async def test_a_deep_argument_is_refused_and_the_server_is_not_declared_gone() -> None:
    async with McpToolset.stdio(SERVER, start_timeout=START_TIMEOUT_S) as server:
        answers = [
            await server.call("echo", {"text": deep(depth)}) for depth in (100, 1000, 100_000)
        ]
        nan = await server.call("echo", {"text": float("nan")})
        after = await server.call("echo", {"text": "still here"})
        assert server.gone is None  # main: gone after the 1,000-deep one, for the session
    for answer in answers:
        assert not answer.ok
        assert (answer.error or "").startswith("bad-input: the input of echo nests deeper than")
    assert not nan.ok
    assert (nan.error or "").startswith("bad-input: the input of echo is not JSON")
    assert (after.ok, after.result) == (True, "still here")


async def test_hostile_tool_names_are_fitted_to_the_grammar_and_routed_back() -> None:
    from tests.support.mcp_hostile_server import HOSTILE_NAMES

    kb_names = {schema.name for schema in tools.Toolset(kb.sample()).schemas()}
    async with McpToolset.stdio([*HOSTILE, "names"], start_timeout=START_TIMEOUT_S) as server:
        names = [schema.name for schema in server.schemas()]
        called = {name: (await server.call(name)).text for name in names}
        # the loop composes them with the KB's own tools without a clash
        model = stub.provider(script=["done"])
        result = await agent.run(model, "q", toolsets=[tools.Toolset(kb.sample()), server])
        assert result.stopped == "answered"
    async with McpToolset.stdio([*HOSTILE, "names"], start_timeout=START_TIMEOUT_S) as again:
        assert [schema.name for schema in again.schemas()] == names  # deterministic
    assert len(names) == len(set(names)) == len(HOSTILE_NAMES)
    assert all(GRAMMAR.fullmatch(name) for name in names), names
    assert "echo" in names  # a name that fits is kept as it is
    assert not kb_names & set(names)  # the look-alikes of kb_query are not kb_query
    # each fitted name reaches the server as the name it listed
    assert sorted(called.values()) == sorted(f"called #{n}" for n in range(len(HOSTILE_NAMES)))


async def test_two_names_fitted_to_one_are_refused_naming_both() -> None:
    from vaelii_llm.integrations.mcp_client import _fitted_name

    clash = _fitted_name("a b")
    with pytest.raises(McpServerError) as caught:
        async with McpToolset.stdio([*HOSTILE, "collide", clash], start_timeout=START_TIMEOUT_S):
            pass
    assert '"a b"' in str(caught.value)
    assert clash in str(caught.value)


@pytest.mark.parametrize(
    ("chars", "said"),
    [
        # past the listing's bound: refused naming the tool
        pytest.param(3 * 1024 * 1024, ("'vast'", "characters"), id="3MB"),
        # past the bound of one message (#47): refused before it is parsed
        pytest.param(10 * 1024 * 1024, ("a line over",), id="10MB"),
    ],
)
async def test_a_vast_tool_schema_is_refused(chars: int, said: tuple[str, ...]) -> None:
    with pytest.raises(McpServerError) as caught:
        async with McpToolset.stdio(
            [*HOSTILE, "schema", str(chars)], start_timeout=START_TIMEOUT_S
        ):
            pass
    message = str(caught.value)
    assert all(part in message for part in said), message
    assert len(message) < 400


async def test_a_token_echoed_in_a_response_header_stays_out_of_the_http_clients_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = "tok-0123456789abcdef"
    proc = await asyncio.create_subprocess_exec(
        *HOSTILE, "http", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)).decode().split()[1]
        headers = {"Authorization": f"Bearer {token}"}
        with caplog.at_level(logging.DEBUG):
            async with McpToolset.http(
                url, headers=headers, start_timeout=START_TIMEOUT_S
            ) as server:
                answer = await server.call("echo")
    finally:
        proc.kill()
        await proc.wait()
    assert answer.ok
    assert "x-echo" in caplog.text.lower()  # httpcore did log the echoing header
    assert token not in caplog.text
    assert all(token not in str(record.args) for record in caplog.records)
    logged_by = {
        record.name for record in caplog.records if "x-echo" in record.getMessage().lower()
    }
    assert logged_by
    for name in logged_by:
        assert not logging.getLogger(name).filters  # taken off when the toolset closed


# -- #34 item 7: a server that is not one, fails, or exits, is named and said so -----------


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


async def failed(
    command: list[str], *, start_timeout: float = START_TIMEOUT_S
) -> tuple[str, float]:
    """The one line opening ``command`` as an MCP server ends in, and how long it took."""

    async def opened() -> None:
        async with McpToolset.stdio(command, start_timeout=start_timeout):
            pass

    began = time.monotonic()
    with pytest.raises(McpServerError) as caught:
        await asyncio.wait_for(opened(), FAST_S)
    return str(caught.value), time.monotonic() - began


@pytest.mark.parametrize(
    ("command", "said"),
    [
        pytest.param(["cat"], "request before it was initialized", id="cat"),  # its echo
        pytest.param(_script("print(1)"), "wrote '1' to stdout, which is not JSON-RPC", id="print"),
    ],
)
async def test_a_program_that_is_no_mcp_server_fails_fast(command: list[str], said: str) -> None:
    message, took = await failed(command)
    assert said in message
    assert "is no MCP server" in message
    print(f"{command[-1]!r}: {took:.2f} s: {message}")


async def test_a_server_exiting_at_start_says_its_status_and_stderr_not_on_ours(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = """
        import sys
        print("Traceback (most recent call last):", file=sys.stderr)
        print("ConfigError: no GITHUB_TOKEN in the environment", file=sys.stderr)
        sys.exit(3)
    """
    message, took = await failed(_script(code))
    assert "exited with status 3" in message
    assert "its stderr: " in message
    assert message.endswith("ConfigError: no GITHUB_TOKEN in the environment")
    assert "Connection closed" not in message
    assert "ConfigError" not in capfd.readouterr().err  # kept, not passed through
    print(f"exit 3: {took:.2f} s: {message}")


async def test_a_server_writing_stderr_without_end_is_kept_to_an_excerpt(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = """
        import sys
        sys.stderr.write("noise " * 500_000 + "the last words")
        sys.stderr.flush()
        sys.exit(2)
    """
    message, _took = await failed(_script(code))
    assert "exited with status 2" in message
    assert message.endswith("the last words")
    assert len(message) < 600  # an excerpt of 3 MB, not the 3 MB
    assert "noise" not in capfd.readouterr().err


async def test_a_silent_program_ends_at_the_start_deadline_and_is_stopped() -> None:
    from mcp.client.session import DISCOVER_TIMEOUT_SECONDS

    message, took = await failed(["sleep", "100"], start_timeout=1.0)
    assert message.startswith("the MCP server 'sleep 100' did not start and list its tools in 1 s")
    # the start deadline bounds the whole start, mcp's own fixed wait on its probe included
    assert took < DISCOVER_TIMEOUT_SECONDS
    print(f"sleep 100: {took:.2f} s: {message}")


async def test_a_server_is_named_by_its_command_line_with_secrets_withheld() -> None:
    message, _took = await failed(
        [*_script("import sys; sys.exit(4)"), "--api-key", "sk-live-SECRET", "--token=TOKEN2"]
    )
    assert message.startswith(f"the MCP server \"{Path(sys.executable).name} -c 'import sys;")
    assert "--api-key <withheld> --token=<withheld>" in message
    assert "SECRET" not in message
    assert "TOKEN2" not in message
    assert McpToolset.stdio(SERVER).name == f"{Path(sys.executable).name} mcp_tools_server.py"
    given = McpToolset.stdio(["node", "srv.js", "envsecret"], env={"API_TOKEN": "envsecret"})
    assert given.name == "node srv.js <withheld>"  # a value its environment also holds


async def test_a_server_that_dies_mid_call_says_its_exit_status() -> None:
    async with McpToolset.stdio(SERVER, start_timeout=START_TIMEOUT_S) as server:
        died = await server.call("die")
    assert not died.ok
    assert (died.error or "").startswith("mcp-server-gone: ")
    assert "exited with status 3" in (died.error or "")
