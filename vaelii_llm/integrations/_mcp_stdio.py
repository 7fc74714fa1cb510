"""An MCP server launched as a child process and spoken to over its stdin and stdout.

One JSON-RPC message a line, as ``mcp``'s own stdio client speaks, with what that
client leaves open closed: a line is read bounded (:data:`MAX_MESSAGE_BYTES`),
the child's stderr is kept (its tail, for the error when it fails) instead of
passed through, a child that exits or writes what no MCP server writes ends the
session at once, and stopping it stops its whole process group.
:class:`~vaelii_llm.integrations.mcp_client.McpToolset` opens one per stdio server.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import aclosing
from contextlib import asynccontextmanager
from contextlib import suppress
from typing import Any
from typing import Final

import anyio
import mcp.types as types
from anyio.abc import Process
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from vaelii_llm.errors import EXCERPT_CHARS
from vaelii_llm.errors import excerpt

__all__ = ["EXIT_WAIT_S", "MAX_MESSAGE_BYTES", "Child", "reason", "stdio_session"]

_STDERR_TAIL_BYTES: Final = 8192
"""The most of a child's stderr kept (its last bytes): an excerpt of it goes in
the error when the server fails; the rest is read and dropped, never shown."""

MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""The most one message from a server may take: a stdio line, an HTTP JSON
body, an SSE event. What reaches the model is cut to ``max_result_chars`` and
an image is described, not shown, so a bigger message carries nothing the model
would see; and a message is parsed into objects several times its size, so an
endless line or a page of a million tools must stop here, not at the memory's end."""

EXIT_WAIT_S: Final = 1.0
"""How long a dead server's exit status is waited for, to name it in the error."""

_STOP_GRACE_S: Final = 2.0
"""How long a child has to exit once its stdin is closed, then once terminated,
before it is killed."""


def reason(exc: BaseException) -> str:
    """One line for an exception (a group reads as its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Child:
    """What the toolset knows of its server's child process: why its stdout is no
    MCP server's, the tail of its stderr, and how it exited."""

    def __init__(self) -> None:
        self.process: Process | None = None
        self.ready = False  # the handshake and the listing are done
        self.junk: str | None = None  # what it wrote that no MCP server writes
        self.ended = False  # its stdout reached its end
        self.exited: int | None = None  # its exit status, once it exited on its own
        self.late = False  # it had not listed its tools by the start deadline
        self.broke: str | None = None  # what a task carrying the session raised
        self.overlong = False  # it wrote a line past MAX_MESSAGE_BYTES
        self._listed = anyio.Event()
        self._tail = bytearray()

    def listed(self) -> None:
        """The handshake and the listing are done: the session is under way."""
        self.ready = True
        self._listed.set()

    async def watch_start(self, deadline_s: float, session: Any) -> None:
        """End the session (``session``, the stream it reads) if the child has not
        listed its tools in ``deadline_s``: the whole start, ``mcp``'s own fixed
        ``server/discover`` wait included, is bounded by it."""
        with anyio.move_on_after(deadline_s):
            await self._listed.wait()
            return
        self.late = True
        await session.aclose()

    def heard(self, chunk: bytes) -> None:
        self._tail += chunk
        del self._tail[:-_STDERR_TAIL_BYTES]

    def read(self, line: bytes) -> SessionMessage | Exception | None:
        """One line of its stdout for the session; None once it shows it is no
        MCP server (before the handshake is done: a line not JSON-RPC, or a
        request of its own, as ``cat`` echoes the client's ``initialize``)."""
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as exc:
            if self.ready:
                return exc  # the session logs it and goes on, as over mcp's own stdio
            self.junk = f"wrote {excerpt(line)!r} to stdout, which is not JSON-RPC"
            return None
        if (
            not self.ready
            and isinstance(message, types.JSONRPCRequest)
            and message.method != "ping"
        ):
            self.junk = f"sent a {message.method!r} request before it was initialized"
            return None
        return SessionMessage(message)

    def why(self) -> str:
        """Its exit status and stderr excerpt, as the end of a message (or nothing)."""
        said = " ".join(bytes(self._tail).decode("utf-8", "replace").split())
        if len(said) > EXCERPT_CHARS:  # its end: where a traceback says what failed
            said = "…" + said[-EXCERPT_CHARS:]
        parts = [] if self.exited is None else [f"it exited with status {self.exited}"]
        if self.overlong:
            parts.insert(0, f"it wrote a line over {MAX_MESSAGE_BYTES} bytes")
        if said:
            parts.append(f"its stderr: {said}")
        return "".join(f"; {part}" for part in parts)

    async def status(self) -> int | None:
        """Its exit status, waited for a moment (:data:`EXIT_WAIT_S`) if it is exiting."""
        process = self.process
        if process is None:
            return None
        if process.returncode is None:
            with anyio.move_on_after(EXIT_WAIT_S):
                await process.wait()
        if process.returncode is not None and self.exited is None:
            self.exited = process.returncode
        return self.exited


@asynccontextmanager
async def stdio_session(
    params: StdioServerParameters, child: Child, start_timeout: float
) -> AsyncIterator[Any]:
    """The server ``params`` names as a child process, spoken to over its stdin and
    stdout (one JSON-RPC message a line, as ``mcp``'s own stdio client), its stderr
    kept in ``child`` instead of passed through, and its end watched: a child
    that exits, or writes what no MCP server writes, ends the session at once; one
    that has not listed its tools in ``start_timeout`` ends it then."""
    posix = sys.platform != "win32"
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        start_new_session=posix,  # its group is stopped with it
    )
    child.process = process
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def reading() -> None:
        assert process.stdout is not None
        try:
            try:
                async with to_session, aclosing(_lines(process.stdout)) as lines:
                    async for line in lines:
                        item = child.read(line)
                        if item is None:
                            break  # no MCP server: the session sees the end now
                        await to_session.send(item)
            except _Overlong:  # the session sees the end now, and is told why
                child.overlong = True
            async for _ in process.stdout:  # what is left, dropped: it must not block
                pass
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        child.ended = True

    async def listening() -> None:
        assert process.stderr is not None
        try:
            async for chunk in process.stderr:
                child.heard(chunk)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    async def writing() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for sent in from_session:
                    data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # it stopped reading: the session sees the end

    async with anyio.create_task_group() as tasks:
        for job in (reading, listening, writing):
            tasks.start_soon(_carried, job, child, to_session)
        tasks.start_soon(child.watch_start, start_timeout, to_session)
        try:
            yield read, write
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, child, posix)
                for stream in (read, write, to_session, from_session):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _carried(job: Callable[[], Awaitable[None]], child: Child, session: Any) -> None:
    """Run one task carrying the session. What it meets and did not expect ends
    the session (``session``, the stream it reads), never its opener's task,
    which the task group would cancel: each call then says why."""
    try:
        await job()
    except Exception as exc:
        child.broke = excerpt(reason(exc))
        await session.aclose()


class _Overlong(Exception):
    """A server's line passed :data:`MAX_MESSAGE_BYTES` before its newline."""


async def _lines(stream: Any, most: int = MAX_MESSAGE_BYTES) -> AsyncGenerator[bytes, None]:
    """The lines of a byte stream that hold more than whitespace, without their
    newline (a long one is joined once, not rebuilt per chunk); :class:`_Overlong`
    once a line passes ``most`` bytes, with what it held so far let go."""
    parts: list[bytes] = []
    held = 0
    async for chunk in stream:
        *lines, rest = chunk.split(b"\n")
        if lines:
            lines[0], parts, held = b"".join([*parts, lines[0]]), [], 0
        for line in lines:
            if len(line) > most:
                raise _Overlong
            if line.strip():
                yield line
        if rest:
            held += len(rest)
            if held > most:
                parts.clear()
                raise _Overlong
            parts.append(rest)


async def _stop(process: Process, child: Child, posix: bool) -> None:
    """Stop the child: a moment to exit if it is already ending, its stdin closed,
    then terminated and killed (its whole group on POSIX, what the child left
    of it too), each after
    :data:`_STOP_GRACE_S` (terminated at once if it proved no MCP server or never
    started: it is owed no graceful end)."""
    if child.ended:
        await child.status()  # it exited on its own, or is about to: say how
    if process.stdin is not None:
        with (
            anyio.CancelScope(shield=True),
            suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError),
        ):
            await process.stdin.aclose()
    grace = 0.0 if child.junk is not None or child.late else _STOP_GRACE_S
    for how in (signal.SIGTERM, signal.SIGKILL if posix else signal.SIGTERM, None):
        with anyio.move_on_after(grace):
            await process.wait()
        if process.returncode is not None or how is None:
            break
        grace = _STOP_GRACE_S
        try:
            if posix:
                os.killpg(process.pid, how)
            elif how is signal.SIGTERM:
                process.terminate()
        except (ProcessLookupError, PermissionError):
            pass
    if posix:
        await _stop_group(process.pid)


async def _stop_group(group: int) -> None:
    """Stop what is left of the child's process group once the child is gone
    (a helper it started outlives it otherwise): terminated, then killed after
    :data:`_STOP_GRACE_S`. The group's id is not reused while one member lives."""
    for how in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, how)
        except (ProcessLookupError, PermissionError):
            return
        with anyio.move_on_after(_STOP_GRACE_S):
            while True:
                await anyio.sleep(0.02)
                try:
                    os.killpg(group, 0)
                except (ProcessLookupError, PermissionError):
                    return
