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
* a server that dies is reported so (:attr:`McpToolset.gone`), and every later
  call answers the same error at once.

Tool results here carry text: an image, audio or a binary resource is described
in a line (its type and size), never passed as bytes. The tool list is sorted
by name with every schema's keys sorted, so it is byte-stable for the prompt cache.

Install with ``pip install 'vaelii-llm[mcp]'``.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Final, Self

import anyio
import mcp.types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from vaelii_llm import _edn, telemetry
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.tools import _MAX_RESULT_CHARS, ToolResult, _json

__all__ = ["McpServerError", "McpToolset"]

DEFAULT_CALL_TIMEOUT_S: Final = 30.0
"""How long one tool call may take before it is an ``mcp-timeout`` result."""

DEFAULT_START_TIMEOUT_S: Final = 30.0
"""How long the server may take to start and list its tools."""

_MAX_PAGES: Final = 100
"""Pages of ``tools/list`` read before a server's list is called endless."""

_GRACE_S: Final = 1.0
"""How long past ``call_timeout`` the client's own timeout has to answer before
the call is abandoned (a backstop: ``mcp`` normally answers at the deadline)."""


class McpServerError(Exception):
    """The MCP server could not be started, reached or listed: one line saying why."""


def _canonical(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with every object's keys sorted, so it prints byte-stable."""
    canon: dict[str, Any] = json.loads(json.dumps(schema, sort_keys=True))
    return canon


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
        try:
            # the client's own read timeout bounds the handshake and the listing: a
            # cancel scope around them would wrap the client's task group
            client = await stack.enter_async_context(
                Client(await self._transport(stack), read_timeout_seconds=self.start_timeout)
            )
            listed = await self._list(client)
        except BaseException as exc:
            await _quietly(stack)
            if isinstance(exc, McpServerError):
                raise
            if _timed_out(exc):
                raise McpServerError(
                    f"the MCP server {self.name!r} did not start and list its tools "
                    f"in {self.start_timeout:g} s"
                ) from None
            if isinstance(exc, Exception | BaseExceptionGroup) and not _cancelled(exc):
                raise McpServerError(
                    f"the MCP server {self.name!r} could not be started: {_reason(exc)}"
                ) from None
            raise
        self._stack, self._client, self._listed, self.gone = stack, client, listed, None
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

    async def _transport(self, stack: AsyncExitStack) -> Any:
        server = self.server
        if isinstance(server, StdioServerParameters):
            return stdio_client(server)
        if isinstance(server, str):  # the HTTP client is ours to close, after the session
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=self.headers or None)
            )
            return streamable_http_client(server, http_client=http)
        return server  # an in-process mcp server: Client connects to it directly

    async def _list(self, client: Client) -> list[ToolSchema]:
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
        seen: set[str] = set()
        for tool in tools:
            if tool.name in seen:
                raise McpServerError(f"the MCP server {self.name!r} lists {tool.name!r} twice")
            seen.add(tool.name)
        return sorted(
            (
                ToolSchema(
                    name=tool.name,
                    description=tool.description or tool.title or tool.name,
                    input_schema=_canonical(tool.input_schema),
                )
                for tool in tools
            ),
            key=lambda schema: schema.name,
        )

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
        try:
            with anyio.fail_after(self.call_timeout + _GRACE_S):
                result = await client.call_tool(
                    name, dict(given), read_timeout_seconds=self.call_timeout
                )
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                return self._timed_out(server, name)
            if exc.error.code == types.CONNECTION_CLOSED:
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
        return os.path.basename(server.command)
    if isinstance(server, str):
        from urllib.parse import urlsplit

        parts = urlsplit(server)
        return (parts.hostname or server) + (f":{parts.port}" if parts.port else "")
    return str(getattr(server, "name", None) or type(server).__name__)


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
