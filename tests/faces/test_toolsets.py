"""Toolsets compose: the agent loop over the KB's tools and real MCP servers' tools.

The MCP servers are real processes: ``vaelii-llm mcp`` (our own KB face) and
tests/support/mcp_tools_server.py, written with the ``mcp`` package, whose tools answer
text, an image, an ``isError`` result, a protocol error, nothing at all (a
hang), a megabyte, or kill the server mid-call.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import msgspec
import pytest

from tests.support.cli_runs import MCP_TOOLS_SERVER
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import tool_call
from tests.support.kb_model import echoer
from tests.support.kb_model import keeps_asking
from vaelii_llm import _edn
from vaelii_llm import agent
from vaelii_llm import cli
from vaelii_llm import kb
from vaelii_llm import telemetry
from vaelii_llm import tools
from vaelii_llm.integrations import _mcp_stdio
from vaelii_llm.integrations import mcp_client
from vaelii_llm.integrations.mcp_client import McpServerError
from vaelii_llm.integrations.mcp_client import McpToolset
from vaelii_llm.providers import stub

if TYPE_CHECKING:
    from tests.conftest import Recorded

SERVER = MCP_TOOLS_SERVER
OUR_MCP = [sys.executable, "-m", "vaelii_llm.cli", "mcp"]
CALL_TIMEOUT_S = 1.5  # the hang tool's deadline: what a hung call costs (each other call,
# the megabyte answer among them, must fit inside it on a loaded machine)
START_TIMEOUT_S = 60.0  # a loaded 2-core machine imports slowly; a well one never waits this
MARKED = 4000  # the longest answer the default bound lets through, its cut marker included


def use(name: str, **given: Any) -> dict[str, Any]:
    return {"tool": name, "input": given}


@pytest.fixture(scope="module")
def kb_tools() -> tools.Toolset:
    return tools.Toolset(kb.sample())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        *SERVER, "--http", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        yield line.decode().split()[1]
    finally:
        proc.kill()
        await proc.wait()


def misbehaving(how: str, where: str | None = None) -> McpToolset:
    options: dict[str, Any] = {"call_timeout": CALL_TIMEOUT_S, "start_timeout": START_TIMEOUT_S}
    if how == "stdio":
        return McpToolset.stdio(SERVER, **options)
    assert where is not None
    return McpToolset.http(where, headers={"X-Test": "yes"}, **options)


# -- composing ----------------------------------------------------------------------


async def test_several_toolsets_answer_as_one_and_the_single_call_still_works(
    kb_tools: tools.Toolset,
) -> None:
    script = [use("kb_types_of", term="Muffet"), "done"]
    alone = await agent.run(stub.provider(script=script), kb_tools, "q")
    model = stub.provider(script=script)
    async with McpToolset.stdio(SERVER, start_timeout=START_TIMEOUT_S) as server:
        both = await agent.run(model, "q", toolsets=[kb_tools, server])
    assert both.tool_calls == alone.tool_calls
    sent = [t.name for t in model.requests()[0].tools]
    assert sent == [t.name for t in kb_tools.schemas()] + [t.name for t in server.schemas()]


async def test_a_name_two_toolsets_offer_is_refused_naming_both() -> None:
    left = tools.Toolset(kb.sample(), name="left")
    right = tools.Toolset(kb.sample(), name="right")
    model = stub.provider(script=["never asked"])
    with pytest.raises(ValueError, match=r"'kb_\w+' is offered by both 'left' and 'right'"):
        await agent.run(model, "q", toolsets=[left, right])
    assert model.requests() == []  # refused before the first turn


async def test_a_prefix_resolves_a_clash_and_routes_the_call() -> None:
    left = tools.Toolset(kb.sample(), name="left")
    right = tools.prefixed(tools.Toolset(kb.sample(), name="right"), "r_")
    script = [use("r_kb_types_of", term="Muffet"), use("kb_types_of", term="Muffet"), "done"]
    model = stub.provider(script=script)
    result = await agent.run(model, "q", toolsets=[left, right])
    first, second = result.tool_calls
    assert (first.ok, first.result) == (second.ok, second.result)
    assert "Spider" in first.result
    names = [t.name for t in model.requests()[0].tools]
    assert "r_kb_query" in names
    assert "kb_query" in names
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="not 1-64 letters"):
        tools.prefixed(left, "bad prefix ")


async def test_an_unknown_name_across_toolsets_is_an_error_result(kb_tools: tools.Toolset) -> None:
    other = tools.prefixed(tools.Toolset(kb.sample()), "o_")
    model = stub.provider(script=[use("no_such_tool"), "done"])
    result = await agent.run(model, "q", toolsets=[kb_tools, other])
    [call] = result.tool_calls
    assert not call.ok
    assert call.result.startswith("unknown-tool: ")


async def test_the_tools_sent_are_byte_stable(kb_tools: tools.Toolset) -> None:
    async with McpToolset.stdio(SERVER, start_timeout=START_TIMEOUT_S) as one:
        first = agent.request("q", [kb_tools, one]).tools
    async with McpToolset.stdio(SERVER, start_timeout=START_TIMEOUT_S) as two:
        again = agent.request("q", [kb_tools, two]).tools
    assert msgspec.json.encode(first) == msgspec.json.encode(again)
    listed = next(s for s in first if s.name == "echo").input_schema
    assert list(listed) == sorted(listed)  # the server sent type, required, properties
    server_names = [s.name for s in first[len(kb_tools.schemas()) :]]
    assert server_names == sorted(server_names)


# -- our own KB face as an MCP server ---------------------------------------------------

FIVE_TURNS = [
    use("kb_query", goal="(afraidOf MissMuffet ?who)"),
    use("kb_types_of", term="Muffet"),
    use("kb_query", goal="(isa ?x Spider)", context="CxWell"),
    use("kb_query", goal="(afraidOf", extra=1),  # refused: an argument no shape takes
    use("kb_write_anything", sentence="(isa A B)"),  # refused: no such tool
    "Muffet and friends.",
]


async def test_kb_tools_through_mcp_answer_as_the_in_process_toolset(
    kb_tools: tools.Toolset,
) -> None:
    here = await agent.run(stub.provider(script=FIVE_TURNS), kb_tools, "q")
    async with McpToolset.stdio(OUR_MCP, start_timeout=START_TIMEOUT_S) as served:
        there = await agent.run(stub.provider(script=FIVE_TURNS), served, "q")
        assert {s.name for s in served.schemas()} == {s.name for s in kb_tools.schemas()}
    assert there.stopped == here.stopped == "answered"
    assert [(c.name, c.ok, c.result) for c in there.tool_calls] == [
        (c.name, c.ok, c.result) for c in here.tool_calls
    ]
    assert [c.ok for c in here.tool_calls] == [True, True, True, False, False]


# -- a misbehaving server, over stdio and streamable HTTP ----------------------------------

MISBEHAVING = [
    use("echo", text="hello"),
    use("picture"),
    use("fail"),
    use("boom"),
    use("hang"),
    use("huge"),
    use("echo", text="still here"),
    "Done.",
]


async def test_over_stdio_every_answer_is_bounded_or_an_error_and_the_loop_finishes(
    kb_tools: tools.Toolset,
) -> None:
    await every_answer_bounded(misbehaving("stdio"), kb_tools)


async def test_over_http_every_answer_is_bounded_or_an_error_and_the_loop_finishes(
    kb_tools: tools.Toolset, http_url: str
) -> None:
    await every_answer_bounded(misbehaving("http", http_url), kb_tools)


async def every_answer_bounded(toolset: McpToolset, kb_tools: tools.Toolset) -> None:
    model = stub.provider(script=MISBEHAVING)
    async with toolset as server:
        result = await agent.run(model, "q", toolsets=[kb_tools, server], max_turns=10)
    assert result.stopped == "answered"
    assert result.answer == "Done."
    echo, picture, fail, boom, hang, huge, after = result.tool_calls
    assert (echo.ok, echo.result) == (True, "hello")
    assert picture.ok
    assert "[image: image/png, 72 bytes" in picture.result
    assert (fail.ok, fail.result) == (False, "no-such-file: /nowhere")
    assert not boom.ok
    assert boom.result.startswith("mcp-error: ")
    assert "boom refuses" in boom.result
    assert not hang.ok
    assert hang.result.startswith("mcp-timeout: ")
    cut_at = 4000 - len(_edn.CUT_MARKER)
    assert (huge.ok, huge.result) == (True, "x" * cut_at + _edn.CUT_MARKER)  # as the KB cuts
    assert (after.ok, after.result) == (True, "still here")  # the session outlived the hang
    for call in result.tool_calls:
        assert len(call.result) <= MARKED


async def test_a_server_that_dies_mid_loop_answers_errors_and_leaves_no_process(
    kb_tools: tools.Toolset,
) -> None:
    script = [use("pid"), use("die"), use("echo", text="anyone?"), "Without it."]
    async with misbehaving("stdio") as server:
        result = await agent.run(stub.provider(script=script), "q", toolsets=[kb_tools, server])
        assert server.gone is not None
        assert "misbehaving" in server.gone
    pid_call, died, after = result.tool_calls
    assert result.stopped == "answered"
    assert not died.ok
    assert died.result.startswith("mcp-server-gone: ")
    assert (after.ok, after.result) == (False, died.result)
    assert gone(int(pid_call.result))


async def test_closing_the_toolset_stops_its_child_process() -> None:
    async with misbehaving("stdio") as server:
        pid = int((await server.call("pid")).text)
        assert not gone(pid)
    assert gone(pid)
    closed = await server.call("echo", {"text": "x"})
    assert not closed.ok
    assert closed.error is not None
    assert closed.error.startswith("mcp-closed: ")


async def test_a_server_that_will_not_start_is_one_typed_line() -> None:
    with pytest.raises(McpServerError, match="could not be started") as caught:
        async with McpToolset.stdio("/nonexistent/mcp-server --flag"):
            pass
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="http:// or https://"):
        McpToolset.http("ftp://example.org/mcp")
    secret = McpToolset.http("http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer SECRET"})
    assert "SECRET" not in repr(secret)


async def test_bad_input_to_an_mcp_tool_is_an_error_result() -> None:
    async with misbehaving("stdio") as server:
        unknown = await server.call("nope")
        shaped = await server.call("echo", ["not", "an", "object"])
    assert not unknown.ok
    assert (unknown.error or "") == "mcp-error: misbehaving nope: MCPError: no tool nope"
    assert not shaped.ok
    assert (shaped.error or "").startswith("bad-input: ")


async def test_an_mcp_calls_span_names_the_server(otel: Recorded) -> None:
    otel.enable()
    async with misbehaving("stdio") as server:
        await server.call("echo", {"text": "hi"})
        await server.call("fail")
    ok = otel.one("execute_tool echo")
    failed = otel.one("execute_tool fail")
    assert dict(ok.attributes or {})[telemetry.TOOL_SERVER] == "misbehaving"
    assert dict(failed.attributes or {})[telemetry.TOOL_SERVER] == "misbehaving"
    kb_span = tools.Toolset(kb.sample())
    await kb_span.call("kb_types_of", {"term": "Muffet"})
    assert telemetry.TOOL_SERVER not in dict(otel.one("execute_tool kb_types_of").attributes or {})


# -- the command ------------------------------------------------------------------------

SERVER_FLAG = " ".join(SERVER)


def ollama_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAELII_LLM_PROVIDER", "ollama")
    monkeypatch.setenv("VAELII_OLLAMA_HOST", url)
    monkeypatch.setenv("VAELII_OLLAMA_MODEL", "llama3.2")


async def ask(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
async def echo_model() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama(script=echoer).start()
    try:
        yield server
    finally:
        await server.stop()


async def test_ask_mcp_answers_from_the_servers_tool(
    echo_model: FakeOllama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama_env(monkeypatch, echo_model.url)
    code, out, err = await ask(capsys, "ask", "say it", "--mcp", SERVER_FLAG)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        '-> echo {"text": "from the server"}',
        "   ok: from the server",
        "The server said: from the server",
    ]


async def test_ask_when_the_server_dies_mid_loop_exits_6_with_one_line(
    echo_model: FakeOllama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama_env(monkeypatch, echo_model.url)
    code, out, err = await ask(capsys, "ask", "die then say it", "--no-kb", "--mcp", SERVER_FLAG)
    assert code == cli.ASK_SERVER_GONE == 6
    [line] = err.splitlines()
    assert line.startswith("mcp-server-gone: the MCP server 'misbehaving'")
    assert "   refused: mcp-server-gone" in out


async def test_ask_mcp_turn_limit_exits_5(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await FakeOllama(script=keeps_asking).start()
    try:
        ollama_env(monkeypatch, fake.url)
        code, _, err = await ask(capsys, "ask", "q", "--mcp", SERVER_FLAG, "--max-turns", "2")
    finally:
        await fake.stop()
    assert code == 5
    assert err.startswith("turn limit")


def echo_then_cut(body: dict[str, Any]) -> list[dict[str, Any]]:
    if not [m for m in body["messages"] if m["role"] == "tool"]:
        return [chunk(tool_calls=[tool_call("echo", {"text": "part"})]), final()]
    return [chunk("The server said part of"), final(done_reason="length")]


async def test_ask_mcp_truncated_exits_4(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await FakeOllama(script=echo_then_cut).start()
    try:
        ollama_env(monkeypatch, fake.url)
        code, out, err = await ask(capsys, "ask", "q", "--no-kb", "--mcp", SERVER_FLAG)
    finally:
        await fake.stop()
    assert code == 4
    assert out.splitlines()[:2] == ['-> echo {"text": "part"}', "   ok: part"]
    assert err.startswith("truncated")


async def test_ask_mcp_refused_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import random

    from tests.support.anthropic_fake import FakeMessagesAPI
    from tests.support.anthropic_fake import generate
    from tests.support.loopback import serve

    fake = FakeMessagesAPI(
        transcript=generate(random.Random(7), kinds=["text"], stop_reason="refusal", unknown=False)
    )
    async with serve(fake.app()) as url:
        for name in list(os.environ):
            if name.startswith(("VAELII_", "ANTHROPIC_")):
                monkeypatch.delenv(name)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        code, _, err = await ask(
            capsys, "ask", "q", "--provider", "anthropic", "--json", "--mcp", SERVER_FLAG
        )
    assert code == 3
    assert err.splitlines()[-1] == "refused: the model declined to answer"


async def test_ask_mcp_on_the_stub_exits_2_without_launching_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.startswith(("VAELII_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(name)
    marker = tmp_path / "launched"
    launcher = f"{sys.executable} -c \"open('{marker}', 'w')\""
    code, _out, err = await ask(capsys, "ask", "q", "--mcp", launcher)
    assert code == 2
    assert err.startswith("stub-only: ")
    assert len(err.splitlines()) == 1
    assert not marker.exists()


async def test_ask_mcp_that_will_not_start_exits_1(
    echo_model: FakeOllama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama_env(monkeypatch, echo_model.url)
    code, _, err = await ask(capsys, "ask", "q", "--mcp", "/nonexistent/server")
    assert code == 1
    assert err.startswith("mcp-server: ")
    assert len(err.splitlines()) == 1


async def test_ask_refuses_a_clash_and_no_tools_with_2(
    echo_model: FakeOllama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama_env(monkeypatch, echo_model.url)
    code, _, err = await ask(capsys, "ask", "q", "--mcp", " ".join(OUR_MCP))
    assert code == 2
    assert "is offered by both 'kb' and 'vaelii-llm'" in err
    code, _, err = await ask(capsys, "ask", "q", "--no-kb")
    assert code == 2
    assert "--no-kb leaves no tools" in err


async def test_tools_mcp_lists_what_the_model_would_see(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = await ask(capsys, "tools", "--no-kb", "--mcp", SERVER_FLAG)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [
        "boom",
        "die",
        "echo",
        "fail",
        "hang",
        "huge",
        "picture",
        "pid",
    ]
    code, out, _ = await ask(capsys, "tools", "--mcp", SERVER_FLAG)
    names = [line.split()[0] for line in out.splitlines()]
    assert names[0].startswith("kb_")
    assert names[-1] == "pid"


async def test_ask_mcp_http_answers_from_the_servers_tool(
    echo_model: FakeOllama,
    http_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ollama_env(monkeypatch, echo_model.url)
    code, out, err = await ask(capsys, "ask", "say it", "--no-kb", "--mcp-http", http_url)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "The server said: from the server"


# -- whatever the client raises (issue 46) --------------------------------------------


class Surprise(Exception):
    """An exception of no library's: what a client version might raise."""


async def test_whatever_the_reader_raises_a_call_ends_typed_within_its_deadline(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def read(self: Any, line: bytes) -> Any:
        raise Surprise("the reader met something new")

    loop = asyncio.get_running_loop()
    handed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handed.append(context))
    try:
        async with misbehaving("stdio") as server:
            pid = int((await server.call("pid")).text)
            monkeypatch.setattr(_mcp_stdio.Child, "read", read)
            started = loop.time()
            failed = await server.call("echo", {"text": "x"})
            took = loop.time() - started
            after = await server.call("echo", {"text": "y"})
        closed = await server.call("echo", {"text": "z"})
    finally:
        gc.collect()
        loop.set_exception_handler(None)
    assert not failed.ok
    assert failed.error is not None
    assert failed.error.startswith("mcp-server-gone: "), failed.error
    assert "Surprise" in failed.error
    assert took < CALL_TIMEOUT_S, took  # the failure itself ends the call, not its deadline
    assert (after.ok, after.error) == (False, failed.error)
    assert not closed.ok
    assert gone(pid)
    assert handed == []
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_whatever_the_http_client_raises_a_call_ends_typed_and_any_task_closes(
    http_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    made: list[Any] = []
    create = mcp_client.create_mcp_http_client

    def creating(*args: Any, **kwargs: Any) -> Any:
        made.append(create(*args, **kwargs))
        return made[-1]

    async def send(*args: Any, **kwargs: Any) -> Any:
        raise Surprise("the HTTP client met something new")

    monkeypatch.setattr(mcp_client, "create_mcp_http_client", creating)
    loop = asyncio.get_running_loop()
    handed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handed.append(context))
    try:
        server = misbehaving("http", http_url)
        await server.__aenter__()
        assert (await server.call("echo", {"text": "x"})).ok
        monkeypatch.setattr(made[0], "send", send)
        started = loop.time()
        failed = await server.call("echo", {"text": "x"})
        took = loop.time() - started
        await asyncio.create_task(server.aclose())  # from a task other than the opener
    finally:
        gc.collect()
        loop.set_exception_handler(None)
    assert not failed.ok
    assert failed.error is not None
    assert failed.error.startswith("mcp-server-gone: "), failed.error
    assert "Surprise" in failed.error
    assert took < CALL_TIMEOUT_S, took
    assert handed == []
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
