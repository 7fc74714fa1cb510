"""What a hostile MCP server does to our clients (issue 47): an endless line, a
page of a million tools, a helper left in its process group, a 200 MB result, a
start that never ends: each bounded; a toolset closes from another task; the
HTTP token stays out of httpcore's log.
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import mcp_http_fake
from tests.support.loopback import serve
from vaelii_llm.integrations.mcp_client import McpServerError
from vaelii_llm.integrations.mcp_client import McpToolset

# -- items 3 and 8, and aclose from another task: the MCP stdio client ------------------

RAW_SERVER = [
    sys.executable,
    str(Path(__file__).resolve().parents[1] / "support" / "mcp_raw_server.py"),
]
MEASURED = textwrap.dedent(
    """
    import asyncio, json, resource, sys, time
    from vaelii_llm.integrations.mcp_client import McpServerError, McpToolset

    def vm_bytes():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024

    def peak_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

    # a runaway reader meets MemoryError a GiB on, not the machine's end
    room = vm_bytes() + 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (room, room))

    async def main(command, target):
        out = {}
        began, at = peak_mib(), time.monotonic()
        try:
            async with McpToolset.stdio(command, start_timeout=30, call_timeout=3) as server:
                out["listed"] = len(server.schemas())
                began, at = peak_mib(), time.monotonic()
                answer = await server.call(target)
                out["answer"] = answer.error or answer.result
        except McpServerError as exc:
            out["error"] = str(exc)
        out["seconds"] = time.monotonic() - at
        out["grew_mib"] = peak_mib() - began
        print(json.dumps(out))

    asyncio.run(main(json.loads(sys.argv[1]), sys.argv[2]))
    """
)


def measured(mode: str, target: str = "echo") -> dict[str, Any]:
    """What a client in its own process (its address space a GiB over what it
    starts with) made of the raw server in ``mode``: the call's answer or the
    start's error, the seconds it took and the MiB its peak memory grew."""
    command = json.dumps([*RAW_SERVER, mode])
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, command, target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    print(mode, out)
    return out


def test_an_endless_line_ends_the_session_bounded() -> None:
    """A call answered by a line with no end: main read it until the memory ran
    out (+3,000 MiB in 7 s); it is now cut at the message bound and the server
    reported gone, within the call's deadline."""
    out = measured("endless_line")
    assert out["answer"].startswith("mcp-server-gone: ")
    assert "a line over" in out["answer"]
    assert out["seconds"] < 3 + 1
    assert out["grew_mib"] < 64


def test_a_page_of_a_million_tools_is_refused_bounded() -> None:
    out = measured("page_1m")
    assert "a line over" in out["error"]
    assert out["grew_mib"] < 64


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="reads /proc")
async def test_a_helper_in_the_server_s_group_is_stopped_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "helper.pid"
    async with McpToolset.stdio([*RAW_SERVER, "helper", str(pidfile)], start_timeout=30) as s:
        assert (await s.call("echo")).ok
        helper = int(pidfile.read_text())
        assert _alive(helper)
    try:
        assert not _alive(helper)  # main: the helper ran on, its parent gone
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(helper, signal.SIGKILL)


async def test_a_toolset_closes_from_another_task() -> None:
    """Opened in one task, closed in another (a web app's startup and shutdown
    hooks): main cancelled the opening task once the other closed it."""
    server = McpToolset.stdio([*RAW_SERVER, "plain"], start_timeout=30)
    await server.__aenter__()
    assert (await server.call("echo")).ok
    await asyncio.wait_for(asyncio.create_task(server.aclose()), 30)
    await asyncio.sleep(0.2)  # main: CancelledError here, in the task that opened it
    assert not (await server.call("echo")).ok  # closed: refused, not hung
    async with server:  # and it opens again
        assert (await server.call("echo")).ok


# -- items 4, 9 and 10: the MCP HTTP client ----------------------------------------------

HTTP_MEASURED = textwrap.dedent(
    """
    import asyncio, json, logging, resource, sys, time
    sys.path.insert(0, sys.argv[1])
    from tests.support.loopback import serve
    from tests.support.mcp_http_fake import app
    from vaelii_llm.integrations.mcp_client import McpToolset

    def peak_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

    class Kept(logging.Handler):
        lines = []
        def emit(self, record):
            self.lines.append(record.getMessage())

    logging.basicConfig(level=logging.DEBUG, handlers=[Kept()])

    async def main(result_bytes, announced):
        out = {}
        headers = {"Authorization": "Bearer tok-FIRST-USE-0123456789"}
        async with serve(app(result_bytes=result_bytes, announced=announced)) as url:
            async with McpToolset.http(url + "/mcp", headers=headers, start_timeout=30) as server:
                began, at = peak_mib(), time.monotonic()
                answer = await server.call("t0")
                out["answer"] = answer.error or answer.result
                out["seconds"] = time.monotonic() - at
                out["grew_mib"] = peak_mib() - began
        out["echoed"] = [line for line in Kept.lines if "FIRST-USE" in line]
        out["logged"] = sum("x-echo" in line.lower() for line in Kept.lines)
        print(json.dumps(out))

    asyncio.run(main(int(sys.argv[2]), sys.argv[3] == "announced"))
    """
)


def http_measured(result_bytes: int, announced: bool = True) -> dict[str, Any]:
    """A fresh client process against :mod:`mcp_http_fake` answering a call
    with ``result_bytes`` of JSON: the answer, its time, the peak's growth, and
    the log lines holding the token (DEBUG on from the start)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            HTTP_MEASURED,
            str(Path(__file__).resolve().parents[2]),
            str(result_bytes),
            "announced" if announced else "chunked",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    print({k: v for k, v in out.items() if k != "echoed"}, len(out["echoed"]))
    return out


@pytest.mark.parametrize("announced", [True, False], ids=["announced", "chunked"])
def test_a_200_mb_json_tool_result_is_refused_as_it_arrives(announced: bool) -> None:
    """Main parsed it whole (+1.22 GiB) though the result is cut anyway."""
    out = http_measured(200 * 1024 * 1024, announced)
    assert out["answer"].startswith("mcp-error: ")
    assert "passed 4194304 bytes" in out["answer"]
    assert out["grew_mib"] < 64


def test_the_token_stays_out_of_httpcore_s_log_from_the_first_use() -> None:
    """The logger that writes the response headers is made on the first
    request; main's filter went only on loggers that existed already."""
    out = http_measured(0)
    assert out["answer"] == "ok"
    assert out["logged"]  # the echoing header was logged…
    assert out["echoed"] == []  # …with the token withheld


async def test_the_http_start_timeout_bounds_the_whole_start() -> None:
    """Ten slow ``tools/list`` pages under ``start_timeout=2``: main took
    15.1 s (each request bounded, not the start)."""
    began = time.monotonic()
    async with serve(mcp_http_fake.app(pages=10, page_delay=1.0)) as url:
        with pytest.raises(McpServerError, match="did not answer and list its tools in 2 s"):
            async with McpToolset.http(f"{url}/mcp", start_timeout=2):
                pass
    took = time.monotonic() - began
    print(f"10 slow pages: {took:.2f} s")
    assert took < 2 + 1
