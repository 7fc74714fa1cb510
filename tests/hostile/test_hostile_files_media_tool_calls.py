"""What a hostile file, media URL, tool call, MCP server or client and web client
could do (issue 36, group A: items 4, 7, 8, 9, 11, 12b, 3, 6).

Each test asserts the type, bound or answer the red-team pass found wrong: a
file read until a bare ``MemoryError``, a FIFO that blocks the loop, a
``file:`` URL forwarded, a ``RecursionError``, a healthy server declared gone,
a tool name no provider takes, a token in a log line.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Transcript
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAI
from vaelii_llm import DocumentBlock
from vaelii_llm import ImageBlock
from vaelii_llm import Message
from vaelii_llm import Provider
from vaelii_llm import Request
from vaelii_llm import agent
from vaelii_llm import cli
from vaelii_llm import errors
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._files import FileRefused
from vaelii_llm._media import MAX_BASE64
from vaelii_llm._media import MediaLimits
from vaelii_llm._media import check_document
from vaelii_llm.kb._io import MAX_EDN_FILE_BYTES
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers.anthropic._encode import MEDIA as ANTHROPIC_MEDIA
from vaelii_llm.providers.anthropic._encode import build_body as anthropic_body
from vaelii_llm.providers.ollama._chat import MEDIA as OLLAMA_MEDIA
from vaelii_llm.providers.openai._shared import MEDIA as OPENAI_MEDIA

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JOIN_S = 30  # a refusal takes microseconds; a reader stuck in open() is freed after this


# -- item 4: only regular files, size checked before reading -----------------------------

READERS: dict[str, Callable[[Path], object]] = {
    "image": ImageBlock.from_path,
    "document": DocumentBlock.from_path,
    "kb": kb.load_edn,
}


def _refused(read: Callable[[Path], object], path: Path) -> str:
    """The refusal ``read`` gives for ``path``: a FileRefused (a ValueError) from
    the media readers, a ``bad-path`` EngineRefusal from ``load_edn``."""
    with pytest.raises((FileRefused, EngineRefusal)) as refused:
        read(path)
    if isinstance(refused.value, EngineRefusal):
        assert refused.value.type == "bad-path"
    else:
        assert isinstance(refused.value, ValueError)
    return str(refused.value)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_symlink_to_a_device_is_refused_unread(reader: str, tmp_path: Path) -> None:
    link = tmp_path / "zero.png"
    link.symlink_to("/dev/zero")
    assert "is a character device; only a regular file is read" in _refused(READERS[reader], link)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_directory_is_refused(reader: str, tmp_path: Path) -> None:
    assert "is a directory" in _refused(READERS[reader], tmp_path)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_is_refused_without_waiting_for_a_writer(reader: str, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.edn"
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []

    def attempt() -> None:
        try:
            outcome.append(READERS[reader](fifo))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=attempt)
    worker.start()
    worker.join(JOIN_S)
    if worker.is_alive():  # blocked in open(): a writer frees it, and the test fails
        with open(fifo, "wb"):
            pass
        worker.join()
        pytest.fail(f"reading a FIFO blocked for {JOIN_S} s")
    (result,) = outcome
    assert isinstance(result, FileRefused | EngineRefusal), result
    assert "is a FIFO" in str(result)


@pytest.mark.parametrize(
    ("reader", "bound"),
    [("image", MAX_BASE64), ("document", MAX_BASE64), ("kb", MAX_EDN_FILE_BYTES)],
)
def test_a_file_over_its_bound_is_refused_before_it_is_read(
    reader: str, bound: int, tmp_path: Path
) -> None:
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(bound + 1)  # sparse: no byte of it is written, so none is read here either
    text = _refused(READERS[reader], big)
    assert f"is {bound + 1} bytes, over the {bound} bytes" in text


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    gone = tmp_path / "gone.png"
    assert f"cannot read {gone}: No such file or directory" in _refused(ImageBlock.from_path, gone)


def test_a_file_at_its_bound_is_read(tmp_path: Path) -> None:
    from vaelii_llm._files import read_regular

    path = tmp_path / "exact"
    path.write_bytes(b"x" * 1000)
    assert read_regular(path, 1000, "a test file") == b"x" * 1000
    with pytest.raises(FileRefused, match="over the 999 bytes a test file may hold"):
        read_regular(path, 999, "a test file")


def _limit_memory() -> None:  # a reader with no bound dies of MemoryError here, quickly
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_the_command_refuses_a_device_as_its_kb_without_a_traceback(tmp_path: Path) -> None:
    link = tmp_path / "kb.edn"
    link.symlink_to("/dev/zero")
    done = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "call", "--kb", str(link), "kb_contexts"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert f"bad-path: {link} is a character device" in output


async def test_the_command_reads_its_kb_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    on_a_loop: list[bool] = []
    real = kb.load_edn

    def watched(path: Any, into: Any = None) -> Any:
        try:
            asyncio.get_running_loop()
            on_a_loop.append(True)
        except RuntimeError:
            on_a_loop.append(False)
        return real(path, into)

    monkeypatch.setattr(kb, "load_edn", watched)
    path = Path(__file__).parents[2] / "vaelii_llm" / "kb" / "data" / "sample.edn"
    assert await cli._call("kb_contexts", "", str(path), None) == 0
    assert on_a_loop == [False]
    assert "CxNursery" in capsys.readouterr().out


# -- item 9: media URLs are http(s); every backend bounds a block's size -----------------


@asynccontextmanager
async def far_end(kind: str) -> AsyncIterator[tuple[Provider, list[Any]]]:
    """A provider of ``kind`` on a loopback fake, and the list of bodies it received."""
    if kind == "anthropic":
        api = FakeMessagesAPI(transcript=Transcript(events=[], message={}))
        server = TestServer(api.app(), host="127.0.0.1", port=0)
        await server.start_server()
        url = str(server.make_url("")).rstrip("/")
        try:
            async with anthropic.provider(credential="sk-test", base_url=url) as p:
                yield p, api.seen
        finally:
            await server.close()
        return
    fake = await (FakeOllama() if kind == "ollama" else FakeOpenAI()).start()
    try:
        if kind == "ollama":
            async with ollama.provider(host=fake.url) as p:
                yield p, fake.bodies
        else:
            async with openai.provider(base_url=fake.url + "/v1") as p:
                yield p, fake.bodies
    finally:
        await fake.stop()


async def _refused_before_sending(kind: str, block: ImageBlock | DocumentBlock) -> str:
    async with far_end(kind) as (p, seen):
        with pytest.raises(errors.LLMEncode) as info:
            await p.complete(Request(messages=[Message(role="user", content=[block])]))
    assert seen == []  # no byte reached the far end
    assert info.value.block_type == block.type
    return str(info.value)


HOSTILE_URLS = [
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_FLUSHALL",
    "javascript:alert(1)",
    "ftp://example.com/cat.png",
    "FILE:///etc/shadow",
    "/etc/passwd",
    "example.com/cat.png",
]


@pytest.mark.parametrize("url", HOSTILE_URLS)
@pytest.mark.parametrize(
    ("kind", "make"),
    [("anthropic", ImageBlock), ("anthropic", DocumentBlock), ("openai", ImageBlock)],
)
async def test_a_media_url_that_is_not_http_is_refused_before_sending(
    kind: str, make: type[ImageBlock | DocumentBlock], url: str
) -> None:
    text = await _refused_before_sending(kind, make(url=url))
    assert "its URL is not http(s)" in text


def test_an_http_url_is_still_sent() -> None:
    image = ImageBlock(url="HTTPS://example.com/cat.png")
    body = anthropic_body(Request(messages=[Message(role="user", content=[image])]))
    assert body["messages"][0]["content"][0]["source"]["url"] == image.url


def test_every_backend_bounds_a_block_by_the_one_largest() -> None:
    for media in (ANTHROPIC_MEDIA, OLLAMA_MEDIA, OPENAI_MEDIA):
        assert media.image_base64 is not None
        assert media.image_base64 <= MAX_BASE64
        assert media.document_base64 is None or media.document_base64 <= MAX_BASE64


async def test_ollama_refuses_an_image_over_the_bound_before_sending() -> None:
    over = ImageBlock.from_bytes(PNG_MAGIC + bytes(MAX_BASE64 // 4 * 3))  # just past it
    text = await _refused_before_sending("ollama", over)
    assert "it is 50.0 MB base64-encoded, over the 50 MB per image sent to Ollama" in text


@pytest.mark.parametrize(
    ("kind", "media", "words"),
    [
        ("anthropic", ANTHROPIC_MEDIA, "the Messages API's 32 MB request size"),
        ("openai", OPENAI_MEDIA, "the 50 MB request payload OpenAI documents"),
    ],
)
async def test_a_text_document_over_the_request_limit_is_refused_before_sending(
    kind: str, media: MediaLimits, words: str
) -> None:
    assert media.document_base64 is not None
    at_limit = "é" * (media.document_base64 // 2)  # two bytes each in UTF-8: the limit exactly
    check_document(DocumentBlock(text=at_limit), media, "at the limit")  # taken
    text = await _refused_before_sending(kind, DocumentBlock(text=at_limit + "x"))
    assert f"of text, over {words}" in text


# -- item 11: a deep name is refused, shown bounded --------------------------------------


def deep_list(depth: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    return nested


@pytest.mark.parametrize("compose", ["together", "prefixed"])
async def test_a_deep_tool_name_is_an_unknown_tool_not_a_recursion_error(compose: str) -> None:
    base = tools.Toolset(kb.sample())
    source = (
        agent.together(toolsets=[base, tools.prefixed(base, "x_")])
        if compose == "together"
        else tools.prefixed(base, "x_")
    )
    result = await source.call(deep_list(10**5), {})  # type: ignore[arg-type]
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("unknown-tool: no tool is named list; the tools are ")
    assert len(result.error.split(";")[0]) < 100  # the name shown bounded


# -- item 12b: a null that no shape takes is refused like any other value ----------------


@pytest.mark.parametrize("value", [None, 1])
async def test_an_argument_no_shape_takes_is_refused_even_as_null(value: object) -> None:
    result = await tools.call(kb.sample(), "kb_describe", {"term": "Muffet", "bogus": value})
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("unexpected-argument: kb_describe was given 'bogus', which")
    assert "also needs" not in result.error  # no shape takes it, so none is hinted


async def test_a_null_for_an_argument_a_shape_takes_is_still_absent() -> None:
    given = {"goal": "(afraidOf MissMuffet ?who)", "context": None}
    result = await tools.call(kb.sample(), "kb_query", given)
    assert result.ok, result.error


# -- item 8: the stdio server answers a line its JSON reader cannot read -----------------

MCP_COMMAND = [sys.executable, "-m", "vaelii_llm.cli", "mcp"]
MCP_TIMEOUT_S = 60  # a loaded 2-core machine starts the server slowly; an answer is instant


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("VAELII_", "ANTHROPIC_"))}


async def test_the_stdio_server_answers_a_call_nested_too_deep_for_its_reader() -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError
    from mcp_types import PARSE_ERROR

    params = StdioServerParameters(command=MCP_COMMAND[0], args=MCP_COMMAND[1:], env=_env())
    async with Client(stdio_client(params), read_timeout_seconds=MCP_TIMEOUT_S) as client:
        for depth in (200, 250):  # the client itself serializes no deeper than ~250
            with pytest.raises(MCPError) as refused:
                await client.call_tool("kb_query", {"goal": deep_list(depth)})
            assert refused.value.error.code == PARSE_ERROR
            assert "nests deeper than the server's JSON reader takes" in refused.value.error.message
        shallow = await client.call_tool("kb_query", {"goal": deep_list(100)})
        after = await client.call_tool("kb_query", {"goal": "(afraidOf MissMuffet ?who)"})
    assert shallow.is_error  # the Toolset's own refusal: a goal is a string
    assert not after.is_error  # and the server answers the next call


async def test_the_stdio_server_answers_junk_under_no_id_and_keeps_serving() -> None:
    proc = await asyncio.create_subprocess_exec(
        *MCP_COMMAND,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=_env(),
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        deep = "[" * 100_000 + "]" * 100_000
        for line in ("this line is not JSON", '{"jsonrpc": "2.0", "id": 3, "params": ' + deep):
            proc.stdin.write(line.encode() + b"\n")
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}\n')
        await proc.stdin.drain()
        answers = [
            json.loads(await asyncio.wait_for(proc.stdout.readline(), MCP_TIMEOUT_S))
            for _ in range(3)
        ]
    finally:
        proc.kill()
        await proc.wait()
    assert [a["id"] for a in answers] == [None, None, 4]
    assert [a["error"]["code"] for a in answers[:2]] == [-32700, -32700]
    assert answers[2]["result"] == {}
