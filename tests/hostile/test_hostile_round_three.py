"""What a hostile far end, MCP server, Redis, plug-in, web client and
environment could do (issue 47, the third red-team round).

Each test asserts the type, bound or answer the red-team pass found wrong: a key
echoed in a response header, a header value holding a terminal's escape or a
megabyte, a count below zero, a line with no end, a process left running.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import unicodedata
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_http_fake
import pytest
from aiohttp import web
from conftest import Recorded
from far_end_answers import ANSWERS
from far_end_answers import MESSAGE
from far_end_answers import OLLAMA_DONE
from far_end_answers import built
from loopback import RawHandler
from loopback import refused_url
from loopback import serve
from loopback import serve_raw
from redis_pools import hosts
from redis_pools import shared_pool
from redis_server import RedisServer

from vaelii_llm import _backends
from vaelii_llm import agent
from vaelii_llm import cli
from vaelii_llm import config
from vaelii_llm import errors
from vaelii_llm import kb
from vaelii_llm import providers
from vaelii_llm import telemetry
from vaelii_llm import tools
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm.integrations.mcp_client import McpServerError
from vaelii_llm.integrations.mcp_client import McpToolset
from vaelii_llm.pool import vote
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import openai
from vaelii_llm.providers.stub import StubProvider

KEY = "sk-ant-api03-Q7m2Xv9LtR4pWsH3jN8cYbZ5"
QUESTION = Request(messages=[Message(role="user", content="Is a spider an insect?")])
HOSTED = {
    "anthropic": ("request-id", "anthropic-ratelimit-tokens-remaining"),
    "openai": ("x-request-id", "x-ratelimit-remaining-tokens"),
}


def hosted(kind: str, url: str) -> Any:
    # wrapped as selection hands it out while telemetry records (a no-op cost while off)
    if kind == "anthropic":
        return telemetry.instrument(anthropic.provider(credential=KEY, base_url=url), kind)
    return telemetry.instrument(openai.provider(base_url=url, api_key=KEY, model="m"), kind)


async def answered(kind: str, url: str, streamed: bool) -> Response | errors.LLMApiError:
    """What one turn ends in: its Response, or the LLMApiError it raised."""
    async with hosted(kind, url) as model:
        try:
            return await one_turn(model, streamed)
        except errors.LLMApiError as exc:
            return exc


async def one_turn(model: Any, streamed: bool) -> Response:
    if not streamed:
        return await model.complete(QUESTION)
    items = [item async for item in model.stream(QUESTION)]
    assert isinstance(items[-1], Response)
    return items[-1]


def shown(outcome: Response | errors.LLMApiError) -> str:
    """Everything a caller, a log line or a span may show of ``outcome``."""
    if isinstance(outcome, Response):
        return repr((outcome, outcome.request_id, outcome.headers))
    return repr((outcome, str(outcome), outcome.request_id, outcome.headers, outcome.__dict__))


# -- item 1: a key echoed in a response header is withheld -----------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [200, 429])
@pytest.mark.parametrize("kind", list(HOSTED))
async def test_a_key_echoed_in_a_shown_header_is_withheld(
    kind: str, status: int, streamed: bool
) -> None:
    request_id, limit = HOSTED[kind]
    echoed = {request_id: f"req_{KEY}", limit: KEY, "retry-after": f"in {KEY[:20]}"}
    content_type, text = ANSWERS[kind][streamed]

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        if status != 200:
            return web.Response(status=status, text='{"error": "no"}', headers=echoed)
        return web.Response(text=text, content_type=content_type, headers=echoed)

    async with serve(handler) as url:
        outcome = await answered(kind, url, streamed)
    assert isinstance(outcome, Response if status == 200 else errors.LLMApiError)
    assert outcome.request_id is not None
    assert outcome.request_id.startswith("req_<")
    assert outcome.headers
    assert KEY not in shown(outcome)
    assert KEY[:8] not in shown(outcome)  # not even the cut opening


@pytest.mark.parametrize("status", [200, 429])
async def test_a_key_echoed_in_a_header_stays_out_of_the_span(status: int, otel: Recorded) -> None:
    otel.enable()

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            status=status,
            text=json.dumps(MESSAGE) if status == 200 else '{"error": "no"}',
            content_type="application/json",
            headers={"request-id": KEY},
        )

    async with serve(handler) as url:
        await answered("anthropic", url, streamed=False)
    (span,) = otel.finished()
    assert KEY not in repr(dict(span.attributes or {})) + repr(span.events)


async def test_an_error_event_in_a_200_stream_withholds_its_request_id() -> None:
    started = {"type": "message_start", "message": {**MESSAGE, "content": []}}
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in (started, overloaded))

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            text=body, content_type="text/event-stream", headers={"request-id": KEY}
        )

    async with serve(handler) as url:
        outcome = await answered("anthropic", url, streamed=True)
    assert isinstance(outcome, errors.LLMApiError)
    assert outcome.request_id == "<x-api-key withheld>"
    assert KEY not in shown(outcome)


# -- item 2: shown header values are cleaned and bounded --------------------------------

HOSTILE_VALUES = {
    "escape": "req_1\x1b]0;owned\x07\x1b[2J",
    "bidi": "req_1\u202etxt.exe",
    "long": "r" * 7_000,
}


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [200, 529])
@pytest.mark.parametrize("kind", list(HOSTED))
async def test_shown_header_values_hold_no_control_and_are_bounded(
    kind: str, status: int, streamed: bool
) -> None:
    request_id, limit = HOSTED[kind]
    content_type, text = ANSWERS[kind][streamed]
    # 100 allow-listed headers of 7,000 characters: 0.7 MB on every answer.
    many = [(f"{limit}-{n}", "9" * 7_000) for n in range(100)]
    many += [(request_id, HOSTILE_VALUES["escape"]), (limit, HOSTILE_VALUES["bidi"])]

    if status != 200:
        content_type, text = "application/json", '{"error": "no"}'

    async with serve_raw(raw_answer(status, content_type, text, many)) as url:
        outcome = await answered(kind, url, streamed)
    assert outcome.request_id == "req_1]0;owned[2J"
    headers = outcome.headers or {}
    assert headers.get(limit) in (None, "req_1txt.exe")
    values = [outcome.request_id, *headers.values()]
    assert all(not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in v) for v in values)
    assert all(len(v) <= 300 for v in values)
    assert sum(len(k) + len(v) for k, v in headers.items()) <= 4096


def raw_answer(
    status: int, content_type: str, text: str, headers: list[tuple[str, str]]
) -> RawHandler:
    """A far end answering every request with ``headers`` written as they are
    (aiohttp's own server refuses to send a control character)."""
    body = text.encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        await reader.readexactly(int(length.group(1)) if length else 0)
        lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}"]
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers]
        writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    return handler


INVISIBLE = "\ufeff\u2060\u061c\ufff9\u00ad\u200d\U000e0041"
"""Format characters (Unicode category Cf) that passed before #58: the byte-order
mark, the word joiner, the Arabic letter mark, an interlinear annotation
anchor, the soft hyphen, the zero-width joiner and a tag character."""


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [200, 529])
@pytest.mark.parametrize("kind", list(HOSTED))
async def test_shown_header_values_hold_no_format_character_and_hide_no_key(
    kind: str, status: int, streamed: bool
) -> None:
    """(#58) U+FEFF, U+2060, U+061C and U+FFF9 reached ``request_id`` and
    ``headers``, and a key echoed with a U+FEFF inside was not withheld: every
    format character is dropped, then the key is withheld."""
    request_id, limit = HOSTED[kind]
    split_key = KEY[:10] + "\ufeff" + KEY[10:]
    echoed = [
        (request_id, "".join(f"{c}{INVISIBLE}" for c in "req_1")),
        (limit, f"9{INVISIBLE}9"),
        ("retry-after", split_key),
    ]
    content_type, text = ANSWERS[kind][streamed]
    if status != 200:
        content_type, text = "application/json", '{"error": "no"}'
    async with serve_raw(raw_answer(status, content_type, text, echoed)) as url:
        outcome = await answered(kind, url, streamed)
    assert outcome.request_id == "req_1"
    headers = outcome.headers or {}
    assert headers[limit] == "99"
    assert headers["retry-after"].startswith("<")
    assert KEY[:8] not in shown(outcome)
    values = [outcome.request_id, *headers.values()]
    assert not any(unicodedata.category(c) == "Cf" for value in values for c in value)


async def test_a_long_request_id_is_cut() -> None:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            text=json.dumps(MESSAGE),
            content_type="application/json",
            headers={"request-id": HOSTILE_VALUES["long"]},
        )

    async with serve(handler) as url:
        outcome = await answered("anthropic", url, streamed=False)
    assert outcome.request_id is not None
    assert 10 < len(outcome.request_id) <= 300
    assert outcome.request_id.endswith("…")


# -- item 6: counts from the wire are validated ----------------------------------------


def with_count(kind: str, streamed: bool, count: int) -> tuple[str, str]:
    """``ANSWERS[kind][streamed]`` reporting ``count`` as its input tokens."""
    content_type, text = ANSWERS[kind][streamed]
    if kind == "anthropic":
        return content_type, text.replace('"input_tokens": 3', f'"input_tokens": {count}')
    if kind == "ollama":
        done = {**OLLAMA_DONE, "prompt_eval_count": count, "eval_duration": 5}
        return content_type, json.dumps(done) + ("\n" if streamed else "")
    if not streamed:
        return content_type, text.replace('"prompt_tokens": 3', f'"prompt_tokens": {count}')
    usage = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": []}
    usage["usage"] = {"prompt_tokens": count, "completion_tokens": 2}
    last = "data: [DONE]\n\n"
    return content_type, text.replace(last, f"data: {json.dumps(usage)}\n\n{last}")


@pytest.mark.parametrize("count", [-1_000_000, 10**40])
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", ["anthropic", "openai", "ollama"])
async def test_a_count_below_zero_or_absurd_is_a_bad_response(
    kind: str, streamed: bool, count: int
) -> None:
    content_type, text = with_count(kind, streamed, count)

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=text, content_type=content_type)

    async with serve(handler) as url, built(kind, url) as model:
        with pytest.raises(errors.LLMBadResponse, match=r"input_tokens|prompt_eval_count"):
            await one_turn(model, streamed)
    content_type, text = with_count(kind, False, 7)  # an honest count still passes
    async with serve(handler) as url, built(kind, url) as model:
        assert (await model.complete(QUESTION)).usage.input_tokens == 7


async def test_negative_counts_do_not_defeat_an_agent_s_budget() -> None:
    """A far end reporting −10⁶ input tokens on every tool-calling turn ran an
    agent with ``max_input_tokens=100`` to its last turn; now its first turn is
    refused."""
    usage = {"input_tokens": -1_000_000, "output_tokens": -1_000_000}
    calling = [
        {"type": "message_start", "message": {**MESSAGE, "content": [], "usage": usage}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "nothing_here", "input": {}},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": usage},
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in calling)
    turns = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal turns
        await request.read()
        turns += 1
        return web.Response(text=body, content_type="text/event-stream")

    async with serve(handler) as url, hosted("anthropic", url) as model:
        with pytest.raises(errors.LLMBadResponse, match="input_tokens is -1000000"):
            await agent.run(
                model,
                tools.Toolset(kb.sample()),
                "Who is afraid of spiders?",
                max_turns=5,
                max_input_tokens=100,
                max_output_tokens=100,
            )
    assert turns == 1


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
    from loopback import serve
    from mcp_http_fake import app
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
            str(Path(__file__).resolve().parents[1] / "support"),
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


# -- item 13 and the userinfo conflict: switches refused before any I/O ---------------

FORGED = "http://127.0.0.1:{port}/v1\nwhy: all good"
SWITCH_NAMES = [switch.name for switch in config.SWITCHES if not switch.secret]
"""A credential's control character is refused as it becomes a header, naming
it (LLMBadCredential, tests/providers/test_openai.py and tests/providers/test_credentials.py)."""


@pytest.mark.parametrize("name", SWITCH_NAMES)
@pytest.mark.parametrize("control", ["\n", "\x1b[2J", "\x07", "\x85", "\u2028", "\u202e"])
def test_a_control_character_in_any_switch_is_refused_by_name(
    name: str, control: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, f"abcd{control}SECRET-PART")
    with pytest.raises(ValueError, match=name) as refused:
        config.read(name)
    assert "SECRET-PART" not in str(refused.value)
    assert "control character" in str(refused.value)


def test_a_trailing_newline_is_still_trimmed_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1\r\n")
    assert config.read("OPENAI_BASE_URL") == "http://127.0.0.1:8000/v1"


@contextlib.contextmanager
def listening() -> Iterator[socket.socket]:
    """A loopback port that listens and never accepts: whatever connects waits in its queue."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.setblocking(False)
        yield sock


def connected(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"OPENAI_BASE_URL": FORGED}, id="newline"),
        pytest.param(
            {
                "OPENAI_BASE_URL": "http://user:pw-SECRET@127.0.0.1:{port}/v1",
                "OPENAI_API_KEY": "sk-KEY-SECRET",
            },
            id="userinfo-and-key",
        ),
    ],
)
def test_status_refuses_a_bad_openai_switch_before_any_io(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with listening() as sock:
        port = sock.getsockname()[1]
        monkeypatch.setenv("VAELII_LLM_PROVIDER", "openai")
        for name, value in env.items():
            monkeypatch.setenv(name, value.format(port=port))
        code = cli.main(["status"])
        out, err = capsys.readouterr()
        reached = connected(sock)
    print(out, err)
    assert code == 2
    assert not reached  # main: probed the server first
    assert "why: all good" not in out.splitlines()
    assert "OPENAI_BASE_URL" in out + err
    assert "SECRET" not in out + err
    assert "unreachable" not in out + err


def test_a_base_url_with_userinfo_and_a_key_is_a_conflict() -> None:
    with pytest.raises(ValueError, match="base_url carries a user:password@ and api_key") as info:
        openai.provider(base_url="http://u:pw-SECRET@127.0.0.1:9/v1", api_key="sk-SECRET")
    assert "SECRET" not in str(info.value)
    headers = {"Authorization": "Bearer tok"}
    with pytest.raises(ValueError, match="the Authorization header in headers"):
        openai.provider(base_url="http://u:pw@127.0.0.1:9/v1", headers=headers)
    openai.provider(base_url="http://u:pw@127.0.0.1:9/v1")  # alone, each is fine


# -- items 7 and 12: the pool's Redis --------------------------------------------------


@pytest.fixture
async def redis_server() -> AsyncIterator[RedisServer]:
    async with RedisServer() as server:
        yield server


async def test_two_pools_with_different_limits_for_one_host_are_refused(
    redis_server: RedisServer,
) -> None:
    """``host*1`` in one pool and ``host*3`` in another on one Redis: main let
    the host see 3 calls at once; now the second limit is refused, typed."""
    async with hosts(1) as (a,):
        one = shared_pool([a.url], redis_server.url, slots=1)
        three = shared_pool([a.url], redis_server.url, slots=3)
        async with one, three:
            async with one.provider():
                pass  # the first to use the pool's keys records its limit
            with pytest.raises(errors.LLMBadHosts, match="1 calls at once, this one 3"):
                async with three.provider():
                    pass
            results = await asyncio.gather(
                *(vote(p, "Is a spider an insect?") for p in (one, three) for _ in range(4))
            )
    print(f"most calls in flight at the host: {a.most}")
    assert a.most == 1
    assert all(r.failed == 0 for r in results[:4])
    assert all(r.failed == 3 for r in results[4:])
    assert all(isinstance(e, errors.LLMBadHosts) for r in results[4:] for e in r.errors)


async def test_agreeing_pools_share_and_a_new_limit_takes_once_the_old_ones_stop(
    redis_server: RedisServer,
) -> None:
    async with hosts(1) as (a,):
        first = shared_pool([a.url], redis_server.url, slots=2, lease_ttl_ms=300)
        same = shared_pool([a.url], redis_server.url, slots=2, lease_ttl_ms=300)
        async with first, same:
            for p in (first, same):
                async with p.provider():
                    pass
        await asyncio.sleep(0.4)  # a lease TTL after the last use: the record expired
        changed = shared_pool([a.url], redis_server.url, slots=3, lease_ttl_ms=300)
        async with changed, changed.provider():
            pass


REDIS_PASSWORD = "pw-SECRET-0451"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:{port}/0?password=" + REDIS_PASSWORD,
        "redis://127.0.0.1:{port}/0?db=0&password=" + REDIS_PASSWORD + "&protocol=3",
        "unix:///tmp/vaelii-no-such-redis-{port}.sock?password=" + REDIS_PASSWORD,
    ],
    ids=["redis", "redis-second-param", "unix"],
)
async def test_a_redis_password_in_the_query_is_never_shown(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = url.format(port=refused_url().rsplit(":", 1)[1])
    async with hosts(1) as (a,):
        p = shared_pool([a.url], url)
        with pytest.raises(errors.LLMUnreachable) as raised:
            async with p.provider():
                pass
        await p.aclose()
    shown = f"{raised.value} {raised.value!r} {raised.value.__dict__} {p!r}"
    assert REDIS_PASSWORD not in shown
    monkeypatch.setenv("VAELII_POOL_REDIS_URL", url)
    assert cli.main(["config"]) == 0
    out, err = capsys.readouterr()
    assert "VAELII_POOL_REDIS_URL" in out
    assert REDIS_PASSWORD not in out + err


# -- item 11: providers.register --------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    ["", "   ", "a\nb", "x" * 10_000, "stub", " STUB ", "1st", "a b", "café", "k" * 33],
    ids=[
        "empty",
        "blank",
        "newline",
        "10000",
        "stub",
        "stub-spaced",
        "digit",
        "space",
        "accent",
        "33",
    ],
)
def test_a_kind_no_word_or_the_stub_is_refused(kind: str, registry: None) -> None:
    with pytest.raises(ValueError, match=r"provider kind is|'stub' is the fallback") as refused:
        providers.register(providers.Backend(kind, "nowhere_for_vaelii_tests"))
    assert len(str(refused.value)) < 300
    assert kind not in _backends.REGISTRY or kind == "stub"


@pytest.mark.parametrize("kind", ["anthropic", " Anthropic ", "OPENAI", "ollama"])
def test_a_built_in_kind_is_replaced_only_when_asked(kind: str, registry: None) -> None:
    built_in = _backends.REGISTRY[kind.strip().lower()]
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        providers.register(providers.Backend(kind, "shadow_for_vaelii_tests"))
    assert _backends.REGISTRY[kind.strip().lower()] is built_in  # main: the shadow's
    providers.register(providers.Backend(kind, "shadow_for_vaelii_tests"), replace=True)
    assert _backends.REGISTRY[kind.strip().lower()].module == "shadow_for_vaelii_tests"


NEVER_ANSWERS = """
import asyncio

async def available(**options):
    await asyncio.Event().wait()  # a probe that never returns

async def unavailable_reason(**options):
    await asyncio.Event().wait()

def provider(**options):
    raise AssertionError("never built: its probe never said yes")
"""


async def test_a_plug_in_probe_that_never_returns_is_bounded(
    registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "never_answers_for_vaelii.py").write_text(NEVER_ANSWERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    providers.register(providers.Backend("hangs", "never_answers_for_vaelii"))
    monkeypatch.setattr(providers, "PROBE_TIMEOUT_S", 0.5)  # the bound, shortened to test it
    began = time.monotonic()
    async with asyncio.timeout(3 * providers.PROBE_TIMEOUT_S):  # main: forever
        model = await providers.provider("hangs")
        reason = await providers.unavailable_reason("hangs")
    took = time.monotonic() - began
    print(f"two probes that never return: {took:.2f} s")
    assert isinstance(model, StubProvider)
    assert reason == f"hangs's probe did not answer in {providers.PROBE_TIMEOUT_S:g} s"
    assert took < 2 * providers.PROBE_TIMEOUT_S + 2


# -- also found: a KB file opening with a UTF-8 byte-order mark --------------------------

BOM_KB = "(isa Muffet Dog)\n(in-context CxPets)\n(genls Dog Animal)\n"


def test_a_kb_file_with_a_utf8_byte_order_mark_loads(tmp_path: Path) -> None:
    """Main refused it as "line 1, column 1: the reader stopped here"."""
    marked, plain = tmp_path / "marked.edn", tmp_path / "plain.edn"
    marked.write_bytes(codecs.BOM_UTF8 + BOM_KB.encode())
    plain.write_bytes(BOM_KB.encode())

    def read(base: kb.KB) -> tuple[int, list[str]]:
        return base.counter, sorted(str(term) for term in base.terms)

    written = read(kb.load_edn(plain))
    assert written[0] == 2
    assert read(kb.load_edn(marked)) == written
    assert read(kb.load_edn("\ufeff" + BOM_KB)) == written


def test_a_bad_byte_after_the_mark_is_placed_in_the_file_as_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.edn"
    bad.write_bytes(codecs.BOM_UTF8 + b"(isa Muffet \xff)\n")
    with pytest.raises(kb.EngineRefusal, match="byte 0xff at line 1"):
        kb.load_edn(bad)
