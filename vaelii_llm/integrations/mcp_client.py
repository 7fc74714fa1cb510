"""Any MCP server's tools as a :class:`~vaelii_llm.tools.ToolSource` for the agent loop.

:class:`McpToolset` connects, on the official ``mcp`` package's client, to a
server launched as a child process over stdio (:meth:`McpToolset.stdio`: a
command and its arguments) or reached over streamable HTTP
(:meth:`McpToolset.http`: a URL with optional headers). Used as an async
context manager it starts the server (or session), lists its tools, and on exit
closes the session and the child process with it::

    async with McpToolset.stdio("uvx mcp-server-fetch") as fetch:
        result = await agent.run(model, "…", toolsets=[kb_tools, fetch])

Each call keeps the guarantees the KB's own tools give:

* never raises (cancellation aside): an ``isError`` result, a protocol error,
  a timeout and a dead server all come back as ``ToolResult(ok=False)``
  the model can read, whose text starts with the kind (``mcp-error: …``,
  ``mcp-timeout: …``, ``mcp-server-gone: …``; a tool's own ``isError`` text as
  the server wrote it);
* bounded: the text is cut at ``max_result_chars`` with the KB tools' marker
  (:func:`vaelii_llm._edn.cut`, the one bound both use);
* a per-call deadline (``call_timeout``): a hung tool is an error result after
  it and the session stays usable (the request is cancelled on the server);
* a server that dies is reported so (:attr:`McpToolset.gone`, with its exit
  status), and every later call answers the same error at once; an input the
  model sent nested too deep or not JSON is a ``bad-input`` result, never a
  server gone.

What reaches the model is bounded too: a tool name outside the providers' grammar
is renamed (:func:`_fitted_name`), and a tool list spelling over
:data:`_MAX_LISTING_CHARS` is refused when the toolset opens. A child's stderr is
kept, not passed through: the end of it goes in the error when the server fails
to start (not an MCP server, exited, or silent past ``start_timeout``).

Tool results here carry text: an image, audio or a binary resource is described
in a line (its type and size), never passed as bytes. The tool list is sorted
by name with every schema's keys sorted, so it is byte-stable for the prompt cache.

Install with ``pip install 'vaelii-llm[mcp]'``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing, asynccontextmanager, suppress
from types import TracebackType
from typing import Any, Final, Self

import anyio
import mcp.types as types
from anyio.abc import Process
from mcp import Client
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from vaelii_llm import _edn, telemetry
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.errors import EXCERPT_CHARS, excerpt
from vaelii_llm.tools import _MAX_RESULT_CHARS, _NAME_GRAMMAR, _NAME_MAX, ToolResult, _json

__all__ = ["McpServerError", "McpToolset"]

DEFAULT_CALL_TIMEOUT_S: Final = 30.0
"""How long one tool call may take before it is an ``mcp-timeout`` result."""

DEFAULT_START_TIMEOUT_S: Final = 30.0
"""How long the server may take to start and list its tools."""

_MAX_PAGES: Final = 100
"""Pages of ``tools/list`` read before a server's list is called endless."""

_MAX_LISTING_CHARS: Final = 256 * 1024
"""The most a server's tool list may spell (names, descriptions and input schemas
as JSON): some 64,000 tokens, sent with every turn. A longer list is refused when
the toolset opens, naming the tool that passed it."""

_MAX_ARGUMENT_DEPTH: Final = _edn.MAX_DEPTH
"""How deep a call's arguments may nest (the package's one nesting cap on what a
model sends): deeper ones are refused ``bad-input`` before anything is sent, well
under what the ``mcp`` client serializes and a server's JSON reader takes."""

_NAME_HASH_CHARS: Final = 8
"""Hex digits of a hash a tool name outside the providers' grammar is suffixed with."""

_MAX_SHOWN_COMMAND: Final = 80
"""The most of a server's command line its default name shows."""

_STDERR_TAIL_BYTES: Final = 8192
"""The most of a child's stderr kept (its last bytes): an excerpt of it goes in
the error when the server fails; the rest is read and dropped, never shown."""

_EXIT_WAIT_S: Final = 1.0
"""How long a dead server's exit status is waited for, to name it in the error."""

_STOP_GRACE_S: Final = 2.0
"""How long a child has to exit once its stdin is closed, then once terminated,
before it is killed."""

_WITHHELD: Final = "<withheld>"
_MIN_SECRET: Final = 4
"""An environment value shorter than this is not searched for in the command line."""

_USER_INFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")
"""A URL's opening up to its user info, which may hold a password."""

_SECRET_WORD = re.compile(r"(?i)token|key|secret|passw|auth|credential|bearer")
"""An option whose name says its value is a credential (``--api-key``, ``--token``…)."""

_HTTP_LOGGERS: Final = ("httpx", "httpcore")
"""The packages of the HTTP client ``mcp`` uses (under these names or a numbered
fork's, ``httpx2``): their loggers write requests and response headers at DEBUG."""

_GRACE_S: Final = 1.0
"""How long past ``call_timeout`` the client's own timeout has to answer before
the call is abandoned (a backstop: ``mcp`` normally answers at the deadline)."""


class McpServerError(Exception):
    """The MCP server could not be started, reached or listed: one line saying why."""


def _canonical(schema: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """``schema`` with every object's keys sorted, so it prints byte-stable,
    and the length of that JSON."""
    text = json.dumps(schema, sort_keys=True)
    canon: dict[str, Any] = json.loads(text)
    return canon, len(text)


def _deeper_than(value: Any, cap: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``cap`` deep (an
    iterative walk: a list 10⁵ deep is measured, not recursed into)."""
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, Mapping):
            members: Any = item.values()
        elif isinstance(item, list | tuple):
            members = item
        else:
            continue
        if depth >= cap:
            return True
        todo.extend((member, depth + 1) for member in members)
    return False


def _fitted_name(name: str) -> str:
    """``name`` if it fits the providers' tool-name grammar (``_NAME_GRAMMAR``,
    matched whole and ASCII only); else a name that does and that no name fitting
    as given spells: each character outside the grammar as ``_``, cut, then ``_``
    and :data:`_NAME_HASH_CHARS` hex digits of a hash of the whole (so ``kb_quеry``
    with a Cyrillic ``е`` never becomes ``kb_query``)."""
    if _NAME_GRAMMAR.fullmatch(name):
        return name
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=_NAME_HASH_CHARS // 2
    ).hexdigest()
    kept = re.sub(r"[^a-zA-Z0-9_-]", "_", name[: _NAME_MAX - _NAME_HASH_CHARS - 1])
    return f"{kept}_{digest}"


class _Withholding(logging.Filter):
    """Rewrites a log record of the HTTP client whose text holds a credential
    the toolset sends (a header a server echoed), by the transport's one rule."""

    def __init__(self, rule: Any) -> None:
        super().__init__()
        self.rule = rule

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        shown = self.rule.text(text)
        if shown != text:
            record.msg, record.args = shown, None
        return True


def _size(data: str) -> int:
    """Bytes a base64 string holds (roughly, without decoding it)."""
    return math.floor(len(data) * 3 / 4) - data[-2:].count("=")


def _described(block: Any) -> str:
    """One content block as text: text as it is, anything else a line saying what it was."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return (
            f"[{kind}: {block.mime_type}, {_size(block.data)} bytes; "
            "tool results here carry text, so it is not shown]"
        )
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return (
            f"[resource {resource.uri}: {resource.mime_type or 'binary'}, "
            f"{_size(resource.blob)} bytes, not shown]"
        )
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]"
    return f"[{getattr(block, 'type', type(block).__name__)} content, not shown]"


def _text(result: types.CallToolResult) -> str:
    parts = [_described(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, sort_keys=True))
    return "\n".join(parts)


def _reason(exc: BaseException) -> str:
    """One line for an exception (a group reads as its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Child:
    """What the toolset knows of its server's child process: why its stdout is no
    MCP server's, the tail of its stderr, and how it exited."""

    def __init__(self) -> None:
        self.process: Process | None = None
        self.ready = False  # the handshake and the listing are done
        self.junk: str | None = None  # what it wrote that no MCP server writes
        self.ended = False  # its stdout reached its end
        self.exited: int | None = None  # its exit status, once it exited on its own
        self.late = False  # it had not listed its tools by the start deadline
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
        if said:
            parts.append(f"its stderr: {said}")
        return "".join(f"; {part}" for part in parts)

    async def status(self) -> int | None:
        """Its exit status, waited for a moment (:data:`_EXIT_WAIT_S`) if it is exiting."""
        process = self.process
        if process is None:
            return None
        if process.returncode is None:
            with anyio.move_on_after(_EXIT_WAIT_S):
                await process.wait()
        if process.returncode is not None and self.exited is None:
            self.exited = process.returncode
        return self.exited


@asynccontextmanager
async def _stdio(
    params: StdioServerParameters, child: _Child, start_timeout: float
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
            async with to_session, aclosing(_lines(process.stdout)) as lines:
                async for line in lines:
                    item = child.read(line)
                    if item is None:
                        break  # no MCP server: the session sees the end now
                    await to_session.send(item)
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
            tasks.start_soon(job)
        tasks.start_soon(child.watch_start, start_timeout, to_session)
        try:
            yield read, write
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, child, posix)
                for stream in (read, write, to_session, from_session):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _lines(stream: Any) -> AsyncGenerator[bytes, None]:
    """The lines of a byte stream that hold more than whitespace, without their
    newline (a long one is joined once, not rebuilt per chunk)."""
    parts: list[bytes] = []
    async for chunk in stream:
        *lines, rest = chunk.split(b"\n")
        if lines:
            lines[0], parts = b"".join([*parts, lines[0]]), []
        for line in lines:
            if line.strip():
                yield line
        if rest:
            parts.append(rest)


async def _stop(process: Process, child: _Child, posix: bool) -> None:
    """Stop the child: a moment to exit if it is already ending, its stdin closed,
    then terminated and killed (its whole group on POSIX), each after
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
            return
        grace = _STOP_GRACE_S
        try:
            if posix:
                os.killpg(process.pid, how)
            elif how is signal.SIGTERM:
                process.terminate()
        except (ProcessLookupError, PermissionError):
            pass


class McpToolset:
    """An MCP server's tools, for :func:`vaelii_llm.agent.run`'s ``toolsets``.

    ``server`` is :class:`~mcp.client.stdio.StdioServerParameters` (a child
    process), a URL (streamable HTTP) or an in-process ``mcp`` server; the
    constructors :meth:`stdio` and :meth:`http` are the usual way in. ``name``
    names it in messages and spans (by default the command's program or the
    URL's host). Enter it with ``async with`` before the loop runs.
    """

    def __init__(
        self,
        server: StdioServerParameters | str | Any,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT_S,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        max_result_chars: int = _MAX_RESULT_CHARS,
    ) -> None:
        for what, value in (("call_timeout", call_timeout), ("start_timeout", start_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{what} is a number of seconds above 0, got {value!r}")
        if type(max_result_chars) is not int or max_result_chars < 1:
            raise ValueError(f"max_result_chars is a whole number >= 1, got {max_result_chars!r}")
        self.server = server
        self._named = name is not None
        self.name = name or _default_name(server)
        self.headers = dict(headers or {})
        self.call_timeout = float(call_timeout)
        self.start_timeout = float(start_timeout)
        self.max_result_chars = max_result_chars
        self.gone: str | None = None
        """Why the server is gone (it died or hung up), once it is; else None."""
        self._client: Client | None = None
        self._stack: AsyncExitStack | None = None
        self._listed: list[ToolSchema] = []
        self._names: dict[str, str] = {}  # a name as listed -> the server's own
        self._log_filter: _Withholding | None = None
        self._child: _Child | None = None

    @classmethod
    def stdio(
        cls,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **options: Any,
    ) -> McpToolset:
        """A server launched as ``command`` (a string split as a shell would, or
        its words) and spoken to over its stdin/stdout."""
        words = shlex.split(command) if isinstance(command, str) else list(command)
        if not words or not all(isinstance(w, str) and w for w in words):
            raise ValueError(f"an MCP server command needs a program, got {command!r}")
        params = StdioServerParameters(
            command=words[0], args=words[1:], env=dict(env) if env else None, cwd=cwd
        )
        return cls(params, **options)

    @classmethod
    def http(
        cls, url: str, *, headers: Mapping[str, str] | None = None, **options: Any
    ) -> McpToolset:
        """A server at ``url`` over streamable HTTP, every request carrying ``headers``."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"an MCP server URL starts http:// or https://, got {url!r}")
        return cls(url, headers=headers, **options)

    def __repr__(self) -> str:  # never the headers: they may hold a credential
        return f"McpToolset(name={self.name!r}, tools={len(self._listed)})"

    # -- the session ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError(f"the MCP toolset {self.name!r} is already open")
        stack = AsyncExitStack()
        self._child = _Child() if isinstance(self.server, StdioServerParameters) else None
        self._withhold_from_logs(True)
        try:
            # the client's own read timeout bounds the handshake and the listing: a
            # cancel scope around them would wrap the client's task group
            client = await stack.enter_async_context(
                Client(await self._transport(stack), read_timeout_seconds=self.start_timeout)
            )
            listed = await self._list(client)
        except BaseException as exc:
            await _quietly(stack)
            self._withhold_from_logs(False)
            if isinstance(exc, McpServerError):
                raise
            child = self._child or _Child()
            why = child.why()
            if child.junk is not None:
                raise McpServerError(
                    f"the MCP server {self.name!r} is no MCP server: it {child.junk}{why}"
                ) from None
            if child.exited is not None:
                raise McpServerError(
                    f"the MCP server {self.name!r} ended before it listed its tools{why}"
                ) from None
            # a server over HTTP runs elsewhere: it is reached, not started
            remote = self._child is None
            if child.late or _timed_out(exc):
                raise McpServerError(
                    f"the MCP server {self.name!r} did not "
                    f"{'answer' if remote else 'start'} and list its tools "
                    f"in {self.start_timeout:g} s{why}"
                ) from None
            if isinstance(exc, Exception | BaseExceptionGroup) and not _cancelled(exc):
                failed = (
                    f"could not be reached: {_reason(exc)}; is it running at that URL?"
                    if remote
                    else f"could not be started: {_reason(exc)}"
                )
                raise McpServerError(f"the MCP server {self.name!r} {failed}{why}") from None
            raise
        if self._child is not None:
            self._child.listed()
        self._stack, self._client, self.gone = stack, client, None
        self._listed = [schema for schema, _ in listed]
        self._names = {schema.name: own for schema, own in listed}
        info = client.server_info
        if not self._named and info is not None and info.name:
            self.name = info.name  # what the server calls itself
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session and stop the child process; never raises (but a cancellation)."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await _quietly(stack)
        self._withhold_from_logs(False)

    def _withhold_from_logs(self, on: bool) -> None:
        """Keep the headers' credentials out of the HTTP client's log lines (a
        server echoing one in a response header would put it in httpcore's
        DEBUG line), from the session's opening to its close."""
        held, self._log_filter = self._log_filter, None
        if held is not None:
            for logger in _http_loggers():
                logger.removeFilter(held)
        if not on or not isinstance(self.server, str):
            return
        from vaelii_llm._transport.withheld import _withheld  # the transport's one rule

        rule = _withheld([self.headers], [self.server])
        if rule:
            self._log_filter = _Withholding(rule)
            for logger in _http_loggers():
                logger.addFilter(self._log_filter)

    async def _transport(self, stack: AsyncExitStack) -> Any:
        server = self.server
        if isinstance(server, StdioServerParameters):
            assert self._child is not None
            return _stdio(server, self._child, self.start_timeout)
        if isinstance(server, str):  # the HTTP client is ours to close, after the session
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=self.headers or None)
            )
            return streamable_http_client(server, http_client=http)
        return server  # an in-process mcp server: Client connects to it directly

    async def _list(self, client: Client) -> list[tuple[ToolSchema, str]]:
        """Each tool as the model sees it (its name fitted to the providers'
        grammar, :func:`_fitted_name`), with the name the server knows it by;
        sorted by name, all of them spelling at most :data:`_MAX_LISTING_CHARS`."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        else:
            raise McpServerError(f"the MCP server {self.name!r} lists tools without end")
        listed: dict[str, tuple[ToolSchema, str]] = {}
        spelled = 0
        for tool in tools:
            name = _fitted_name(tool.name)
            if name in listed:
                first = listed[name][1]
                same = "twice" if first == tool.name else f"and {_json(first)}, both as {name!r}"
                raise McpServerError(
                    f"the MCP server {self.name!r} lists {_json(tool.name)} {same}"
                )
            description = tool.description or tool.title or name
            try:
                schema, chars = _canonical(tool.input_schema)
            except (ValueError, TypeError, RecursionError):
                raise McpServerError(
                    f"the MCP server {self.name!r} lists {name!r} with an input schema "
                    "that is not plain JSON"
                ) from None
            spelled += len(name) + len(description) + chars
            if spelled > _MAX_LISTING_CHARS:
                raise McpServerError(
                    f"the MCP server {self.name!r} lists tools that spell over "
                    f"{_MAX_LISTING_CHARS} characters (passed at {name!r}); the model "
                    "would be sent them with every turn"
                )
            shown = ToolSchema(name=name, description=description, input_schema=schema)
            listed[name] = (shown, tool.name)
        return [listed[name] for name in sorted(listed)]

    # -- the ToolSource ----------------------------------------------------------------

    def schemas(self) -> list[ToolSchema]:
        """The server's tools, sorted by name, each schema's keys sorted."""
        return list(self._listed)

    async def call(self, name: str, input: Any = None) -> ToolResult:
        """Call one of the server's tools; never raises (cancellation propagates)."""
        return await self._call(self.name, name, input)

    @telemetry.traced_tool
    async def _call(self, server: str, name: str, input: Any) -> ToolResult:
        client = self._client
        if self.gone is not None:
            return self._refused(f"mcp-server-gone: {self.gone}")
        if client is None:
            return self._refused(
                f"mcp-closed: the MCP toolset {server!r} is not open (use it in async with)"
            )
        if not isinstance(name, str):
            return self._refused(f"unknown-tool: a tool name is a string, not {_json(name)}")
        # a name the server did not list still goes to it: its own answer is the truest
        given: Any = {} if input is None else input
        if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
            return self._refused(f"bad-input: the input of {name} must be a JSON object")
        if _deeper_than(given, _MAX_ARGUMENT_DEPTH):
            return self._refused(
                f"bad-input: the input of {name} nests deeper than {_MAX_ARGUMENT_DEPTH}; "
                "send it flatter"
            )
        try:  # what will not serialize is the model's input, never the server's fault
            json.dumps(given, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as exc:
            return self._refused(f"bad-input: the input of {name} is not JSON ({_reason(exc)})")
        try:
            with anyio.fail_after(self.call_timeout + _GRACE_S):
                result = await client.call_tool(
                    self._names.get(name, name),
                    dict(given),
                    read_timeout_seconds=self.call_timeout,
                )
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                return self._timed_out(server, name)
            if exc.error.code == types.CONNECTION_CLOSED:
                child = self._child
                if child is not None and await child.status() is not None:
                    self.gone = f"the MCP server {server!r} closed the connection{child.why()}"
                else:
                    self.gone = f"the MCP server {server!r} closed the connection (did it exit?)"
                return self._refused(f"mcp-server-gone: {self.gone}")
            return self._refused(f"mcp-error: {server} {name}: {_reason(exc)}")
        except TimeoutError:
            return self._timed_out(server, name)
        except BaseException as exc:
            if _cancelled(exc) or not isinstance(exc, Exception | BaseExceptionGroup):
                raise
            self.gone = f"the MCP server {server!r} is gone ({_reason(exc)})"
            return self._refused(f"mcp-server-gone: {self.gone}")
        text = _edn.cut(_text(result), self.max_result_chars).text
        if result.is_error:
            return ToolResult(ok=False, error=text or f"{name} failed and said nothing")
        return ToolResult(ok=True, result=text)

    def _timed_out(self, server: str, name: str) -> ToolResult:
        return self._refused(
            f"mcp-timeout: {server} {name} did not answer in {self.call_timeout:g} s; "
            "the call was abandoned"
        )

    def _refused(self, message: str) -> ToolResult:
        return ToolResult(ok=False, error=_edn.cut(message, self.max_result_chars).text)


def _default_name(server: Any) -> str:
    if isinstance(server, StdioServerParameters):
        return _shown_command(server)
    if isinstance(server, str):
        from urllib.parse import urlsplit

        parts = urlsplit(server)
        return (parts.hostname or server) + (f":{parts.port}" if parts.port else "")
    return str(getattr(server, "name", None) or type(server).__name__)


def _http_loggers() -> list[logging.Logger]:
    """The HTTP client's loggers (:data:`_HTTP_LOGGERS`), as its modules made them."""
    return [
        logger
        for name, logger in list(logging.root.manager.loggerDict.items())
        if isinstance(logger, logging.Logger)
        and name.split(".", 1)[0].rstrip("0123456789") in _HTTP_LOGGERS
    ]


def _shown_command(params: StdioServerParameters) -> str:
    """The command line, shortened: paths as their last part (the program, a
    script), the value of an option whose name says it is a credential and any
    value of the child's environment withheld, cut at :data:`_MAX_SHOWN_COMMAND`."""
    secrets = [value for value in (params.env or {}).values() if len(value) >= _MIN_SECRET]
    words: list[str] = []
    hide_next = False
    for word in [params.command, *params.args]:
        option, eq, _value = word.partition("=")
        if hide_next:
            shown, hide_next = _WITHHELD, False
        elif word.startswith("-") and _SECRET_WORD.search(option):
            hide_next = not eq
            shown = f"{shlex.quote(option)}={_WITHHELD}" if eq else shlex.quote(word)
        elif any(secret in word for secret in secrets):
            shown = _WITHHELD  # a value the child is also given as a variable
        elif (user := _USER_INFO.match(word)) is not None:
            shown = f"{user[1]}{_WITHHELD}@{shlex.quote(word[user.end() :])}"
        elif os.path.isabs(word) or word.startswith(("./", "../", "~")) or os.path.exists(word):
            shown = shlex.quote(os.path.basename(word.rstrip("/")) or word)
        else:
            shown = shlex.quote(word)
        words.append(shown)
    text = " ".join(" ".join(words).split())  # a script given inline, on one line
    return text if len(text) <= _MAX_SHOWN_COMMAND else text[: _MAX_SHOWN_COMMAND - 1] + "…"


def _timed_out(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_timed_out(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.error.code == types.REQUEST_TIMEOUT
    return isinstance(exc, TimeoutError)


def _cancelled(exc: BaseException) -> bool:
    """A cancellation (asyncio's or anyio's), alone or inside a group."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, anyio.get_cancelled_exc_class())


async def _quietly(stack: AsyncExitStack) -> None:
    """Close ``stack``; a dead server's errors on the way out are already reported."""
    try:
        await stack.aclose()
    except Exception:
        pass
    except BaseExceptionGroup as group:
        if _cancelled(group):
            raise
