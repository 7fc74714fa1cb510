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
  (:func:`vaelii_llm._edn.cut`, the one bound both use), and no message from
  the server is read past :data:`MAX_MESSAGE_BYTES` (a stdio line ends the
  session, an HTTP JSON answer fails the call);
* a per-call deadline (``call_timeout``): a hung tool is an error result after
  it and the session stays usable (the request is cancelled on the server);
* a server that dies is reported so (:attr:`McpToolset.gone`, with its exit
  status), and every later call answers the same error at once; an input the
  model sent nested too deep or not JSON is a ``bad-input`` result, never a
  server gone.

Closing the toolset stops a stdio server's whole process group, helpers it left
behind included. ``start_timeout`` bounds the whole start: the handshake and
every page of the tool list.

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

import asyncio
import hashlib
import json
import logging
import math
import os
import re
import shlex
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import AsyncExitStack
from contextlib import suppress
from typing import Any
from typing import Final
from typing import Self

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from vaelii_llm import _edn
from vaelii_llm import telemetry
from vaelii_llm._closing import ClosesOnExit
from vaelii_llm._edn import opening_of
from vaelii_llm._protocol import TOOL_NAME_GRAMMAR
from vaelii_llm._protocol import TOOL_NAME_MAX
from vaelii_llm._protocol import ToolSchema
from vaelii_llm.errors import excerpt
from vaelii_llm.integrations._mcp_stdio import EXIT_WAIT_S
from vaelii_llm.integrations._mcp_stdio import MAX_MESSAGE_BYTES
from vaelii_llm.integrations._mcp_stdio import Child
from vaelii_llm.integrations._mcp_stdio import reason
from vaelii_llm.integrations._mcp_stdio import stdio_session
from vaelii_llm.tools import ToolResult

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

_WITHHELD: Final = "<withheld>"
_MIN_SECRET: Final = 4
"""An environment value shorter than this is not searched for in the command line."""

_USER_INFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")
"""A URL's opening up to its user info, which may hold a password."""

_SECRET_WORD = re.compile(r"(?i)token|key|secret|passw|auth|credential|bearer")
"""An option whose name says its value is a credential (``--api-key``, ``--token``…)."""

_HTTP_LOGGERS: Final = ("httpx", "httpcore", "mcp")
"""The packages of the HTTP client ``mcp`` uses (under these names or a numbered
fork's, ``httpx2``), whose loggers write requests and response headers at
DEBUG, and ``mcp`` itself, whose streamable HTTP client logs an answer it could
not read with the parser's words (which quote the answer) in its traceback."""

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
    """``name`` if it fits the providers' tool-name grammar (``TOOL_NAME_GRAMMAR``,
    matched whole and ASCII only); else a name that does and that no name fitting
    as given spells: each character outside the grammar as ``_``, cut, then ``_``
    and :data:`_NAME_HASH_CHARS` hex digits of a hash of the whole (so ``kb_quеry``
    with a Cyrillic ``е`` never becomes ``kb_query``)."""
    if TOOL_NAME_GRAMMAR.fullmatch(name):
        return name
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=_NAME_HASH_CHARS // 2
    ).hexdigest()
    kept = re.sub(r"[^a-zA-Z0-9_-]", "_", name[: TOOL_NAME_MAX - _NAME_HASH_CHARS - 1])
    return f"{kept}_{digest}"


_RULES: list[Any] = []
"""The withholding rules of the HTTP toolsets open now, one each."""


def _withheld_records(make: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """A log record factory over ``make`` that rewrites a record of the HTTP
    client (:data:`_HTTP_LOGGERS`) whose text holds a credential an open
    toolset sends, by the transport's one rule. A factory, not a filter: the
    client makes some of its loggers on its first request, after the toolset
    opened, and a filter reaches only the loggers that exist."""

    def made(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if _RULES and record.name.split(".", 1)[0].rstrip("0123456789") in _HTTP_LOGGERS:
            rules = _RULES.copy()  # another thread may log while one closes
            shown = _withheld_text(record.getMessage(), rules)
            if shown is not None:
                record.msg, record.args = shown, None
            if record.exc_info and record.exc_info[1] is not None:
                # The traceback's text, withheld, in place of the exception: a
                # handler formats exc_text as it would have the exception.
                text = _TRACEBACK.formatException(record.exc_info)
                shown = _withheld_text(text, rules)
                if shown is not None:
                    record.exc_info, record.exc_text = None, shown
        return record

    made.withholds = True  # type: ignore[attr-defined]
    return made


_TRACEBACK: Final = logging.Formatter()
"""What formats a record's exception to be searched for a credential."""


def _withheld_text(text: str, rules: list[Any]) -> str | None:
    """``text`` with what ``rules`` withhold withheld; None when it holds none."""
    shown = text
    for rule in rules:
        shown = rule.text(shown)
    return None if shown == text else shown


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


class McpToolset(ClosesOnExit):
    """An MCP server's tools, for :func:`vaelii_llm.agent.run`'s ``toolsets``.

    ``server`` is :class:`~mcp.client.stdio.StdioServerParameters` (a child
    process), a URL (streamable HTTP) or an in-process ``mcp`` server; the
    constructors :meth:`stdio` and :meth:`http` are the usual way in. ``name``
    names it in messages and spans (by default the command's program or the
    URL's host). Enter it with ``async with`` before the loop runs.
    ``serial=True`` says the server must take its calls one at a time: the agent
    loop then never runs two of its calls at once (other sets' calls still do).
    """

    def __init__(
        self,
        server: StdioServerParameters | str | Any,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT_S,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        max_result_chars: int = _edn.DEFAULT_MAX_CHARS,
        serial: bool = False,
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
        self.serial = serial is True
        self.gone: str | None = None
        """Why the server is gone (it died or hung up), once it is; else None."""
        self._client: Client | None = None
        self._runner: asyncio.Future[None] | None = None  # the session's own task
        self._stop = asyncio.Event()
        self._broke: str | None = None  # why the session's own tasks ended it
        self._listed: list[ToolSchema] = []
        self._names: dict[str, str] = {}  # a name as listed -> the server's own
        self._hints: dict[str, dict[str, Any]] = {}  # a name as listed -> its annotations
        self._log_rule: Any = None  # this toolset's entry in _RULES
        self._child: Child | None = None

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
        if self._runner is not None:
            raise RuntimeError(f"the MCP toolset {self.name!r} is already open")
        self._child = Child() if isinstance(self.server, StdioServerParameters) else None
        self._withhold_from_logs(True)
        opened: asyncio.Future[
            tuple[Client, list[tuple[ToolSchema, str, dict[str, Any]]]] | BaseException
        ]
        opened = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        runner = self._runner = asyncio.ensure_future(self._run(opened, self._stop))
        try:
            found = await asyncio.shield(opened)
        except asyncio.CancelledError:
            runner.cancel()
            await asyncio.wait({runner})
            self._runner = None
            self._withhold_from_logs(False)
            raise
        if isinstance(found, BaseException):
            await asyncio.wait({runner})
            self._runner = None
            refused = self._not_started(found)
            self._withhold_from_logs(False)
            raise refused from None
        client, listed = found
        if self._child is not None:
            self._child.listed()
        self._client, self.gone = client, None
        self._listed = [schema for schema, _, _ in listed]
        self._names = {schema.name: own for schema, own, _ in listed}
        self._hints = {schema.name: hints for schema, _, hints in listed}
        info = client.server_info
        if not self._named and info is not None and info.name:
            self.name = info.name  # what the server calls itself
        return self

    async def _run(
        self,
        opened: asyncio.Future[
            tuple[Client, list[tuple[ToolSchema, str, dict[str, Any]]]] | BaseException
        ],
        stop: asyncio.Event,
    ) -> None:
        """The session, from start to close, in a task of its own: the ``mcp``
        client's task group lives here, so what its tasks raise ends this task
        and the session (each call then says why), never a caller's task, and
        any task may close it."""
        stack = AsyncExitStack()
        began = anyio.current_time()
        try:
            # the client's own read timeout bounds the handshake: a cancel scope
            # around it would wrap the client's task group
            client = await stack.enter_async_context(
                Client(await self._transport(stack), read_timeout_seconds=self.start_timeout)
            )
            # the listing, every page, in what is left of the start's budget
            with anyio.fail_after(max(0.0, began + self.start_timeout - anyio.current_time())):
                listed = await self._list(client)
        except BaseException as exc:
            await _quietly(stack)
            opened.set_result(exc)
            if _cancelled(exc) and _running_cancelled():
                raise
            return
        opened.set_result((client, listed))
        try:
            await stop.wait()
        except asyncio.CancelledError:
            # The client's task group cancels this task when one of its tasks
            # fails: the session is over, and the calls say why.
            broke = await _quietly(stack)
            if _running_cancelled():
                raise
            if broke is not None:
                said = reason(broke)
                self._broke = excerpt(said if self._log_rule is None else self._log_rule.text(said))
            return
        await _quietly(stack)

    def _not_started(self, exc: BaseException) -> BaseException:
        """Why the server did not start, as the :class:`McpServerError` to
        raise, what the headers send withheld from it (a server may answer
        with them, and a parser's words quote the answer)."""
        refused = self._why_not_started(exc)
        if self._log_rule is not None and isinstance(refused, McpServerError):
            self._log_rule.error(refused)
        return refused

    def _why_not_started(self, exc: BaseException) -> BaseException:
        if isinstance(exc, McpServerError):
            return exc
        child = self._child or Child()
        why = child.why()
        if child.junk is not None:
            return McpServerError(
                f"the MCP server {self.name!r} is no MCP server: it {child.junk}{why}"
            )
        if child.exited is not None:
            return McpServerError(
                f"the MCP server {self.name!r} ended before it listed its tools{why}"
            )
        # a server over HTTP runs elsewhere: it is reached, not started
        remote = self._child is None
        if child.late or _timed_out(exc):
            return McpServerError(
                f"the MCP server {self.name!r} did not "
                f"{'answer' if remote else 'start'} and list its tools "
                f"in {self.start_timeout:g} s{why}"
            )
        if isinstance(exc, Exception | BaseExceptionGroup) and not _cancelled(exc):
            failed = (
                f"could not be reached: {reason(exc)}; is it running at that URL?"
                if remote
                else f"could not be started: {reason(exc)}"
            )
            return McpServerError(f"the MCP server {self.name!r} {failed}{why}")
        return exc

    async def aclose(self) -> None:
        """Close the session and stop the child process, from any task; never
        raises (but a cancellation of the caller, after which it closes on)."""
        runner, self._runner, self._client = self._runner, None, None
        if runner is not None:
            self._stop.set()
            await asyncio.shield(runner)
        self._withhold_from_logs(False)

    def _withhold_from_logs(self, on: bool) -> None:
        """Keep the headers' credentials out of the HTTP client's log lines (a
        server echoing one in a response header would put it in httpcore's
        DEBUG line), from the session's opening to its close."""
        held, self._log_rule = self._log_rule, None
        if held is not None:
            with suppress(ValueError):
                _RULES.remove(held)
        if not on or not isinstance(self.server, str):
            return
        from vaelii_llm._transport.withheld import _withheld  # the transport's one rule

        rule = _withheld([self.headers], [self.server])
        if rule:
            current = logging.getLogRecordFactory()
            if not getattr(current, "withholds", False):  # installed once, a pass-through when idle
                logging.setLogRecordFactory(_withheld_records(current))
            self._log_rule = rule
            _RULES.append(rule)

    async def _transport(self, stack: AsyncExitStack) -> Any:
        server = self.server
        if isinstance(server, StdioServerParameters):
            assert self._child is not None
            return stdio_session(server, self._child, self.start_timeout)
        if isinstance(server, str):  # the HTTP client is ours to close, after the session
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=self.headers or None)
            )
            http.event_hooks["response"].append(_bounded_json)
            return streamable_http_client(server, http_client=http)
        return server  # an in-process mcp server: Client connects to it directly

    async def _list(self, client: Client) -> list[tuple[ToolSchema, str, dict[str, Any]]]:
        """Each tool as the model sees it (its name fitted to the providers'
        grammar, :func:`_fitted_name`), with the name the server knows it by
        and its annotations (``readOnlyHint``, ``destructiveHint``…);
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
        listed: dict[str, tuple[ToolSchema, str, dict[str, Any]]] = {}
        spelled = 0
        for tool in tools:
            name = _fitted_name(tool.name)
            if name in listed:
                first = listed[name][1]
                same = (
                    "twice" if first == tool.name else f"and {opening_of(first)}, both as {name!r}"
                )
                raise McpServerError(
                    f"the MCP server {self.name!r} lists {opening_of(tool.name)} {same}"
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
            hints = (
                tool.annotations.model_dump(by_alias=True, exclude_none=True)
                if tool.annotations
                else {}
            )
            listed[name] = (shown, tool.name, hints)
        return [listed[name] for name in sorted(listed)]

    # -- the ToolSource ----------------------------------------------------------------

    def schemas(self) -> list[ToolSchema]:
        """The server's tools, sorted by name, each schema's keys sorted."""
        return list(self._listed)

    def hints(self, name: str) -> dict[str, Any]:
        """What the server says of the tool ``name`` (its MCP annotations:
        ``readOnlyHint``, ``destructiveHint``…), for the agent loop's ``approve``
        to show; the server's word, never trusted to skip an approval."""
        return dict(self._hints.get(name, {}))

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
            return self._refused(f"unknown-tool: a tool name is a string, not {opening_of(name)}")
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
            return self._refused(f"bad-input: the input of {name} is not JSON ({reason(exc)})")
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
                self.gone = await self._closed(server)
                return self._refused(f"mcp-server-gone: {self.gone}")
            return self._refused(f"mcp-error: {server} {name}: {reason(exc)}")
        except TimeoutError:
            return self._timed_out(server, name)
        except BaseException as exc:
            if _cancelled(exc) or not isinstance(exc, Exception | BaseExceptionGroup):
                raise
            self.gone = f"the MCP server {server!r} is gone ({reason(exc)})"
            return self._refused(f"mcp-server-gone: {self.gone}")
        text = _edn.cut(_text(result), self.max_result_chars).text
        if result.is_error:
            return ToolResult(ok=False, error=text or f"{name} failed and said nothing")
        return ToolResult(ok=True, result=text)

    async def _closed(self, server: str) -> str:
        """Why the session with ``server`` closed, as :attr:`gone` says it."""
        runner = self._runner
        if runner is not None and not runner.done():  # it may be ending the session now
            await asyncio.wait({runner}, timeout=EXIT_WAIT_S)
        child = self._child
        if child is not None and child.overlong:
            return f"the MCP server {server!r} was cut off{child.why()}"
        broke = child.broke if child is not None and child.broke else self._broke
        if broke is not None:
            return f"the session with the MCP server {server!r} broke in this client: {broke}"
        if child is not None and await child.status() is not None:
            return f"the MCP server {server!r} closed the connection{child.why()}"
        return f"the MCP server {server!r} closed the connection (did it exit?)"

    def _timed_out(self, server: str, name: str) -> ToolResult:
        return self._refused(
            f"mcp-timeout: {server} {name} did not answer in {self.call_timeout:g} s; "
            "the call was abandoned"
        )

    def _refused(self, message: str) -> ToolResult:
        return ToolResult(ok=False, error=_edn.cut(message, self.max_result_chars).text)


async def _bounded_json(response: Any) -> None:
    """An HTTP answer's JSON body, read by ``mcp`` whole, bounded at
    :data:`MAX_MESSAGE_BYTES` as it is read (an SSE body is bounded per event
    by ``mcp`` itself): past it, the read fails as a broken stream, which
    ``mcp`` answers the call with as a parse error, the rest unread."""
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        response.stream = _BoundedBody(response.stream, response.headers.get("content-length"))


class _BoundedBody(httpx2.AsyncByteStream):
    """A response body that raises ``httpx2.StreamError`` once it is announced
    or read past :data:`MAX_MESSAGE_BYTES`."""

    def __init__(self, stream: Any, announced: str | None) -> None:
        self._stream = stream
        self._announced = int(announced) if announced and announced.isdecimal() else 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        if self._announced <= MAX_MESSAGE_BYTES:
            async for chunk in self._stream:
                read += len(chunk)
                if read > MAX_MESSAGE_BYTES:
                    break
                yield chunk
            else:
                return
        raise httpx2.StreamError(f"the server's answer passed {MAX_MESSAGE_BYTES} bytes")

    async def aclose(self) -> None:
        await self._stream.aclose()


def _default_name(server: Any) -> str:
    if isinstance(server, StdioServerParameters):
        return _shown_command(server)
    if isinstance(server, str):
        from urllib.parse import urlsplit

        parts = urlsplit(server)
        return (parts.hostname or server) + (f":{parts.port}" if parts.port else "")
    return str(getattr(server, "name", None) or type(server).__name__)


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


async def _quietly(stack: AsyncExitStack) -> BaseException | None:
    """Close ``stack``; what it raised on the way out (a dead server's errors,
    already reported), or None."""
    try:
        await stack.aclose()
    except Exception as exc:
        return exc
    except BaseExceptionGroup as group:
        if _cancelled(group) and _running_cancelled():
            raise
        return group
    return None


def _running_cancelled() -> bool:
    """Whether the running task is being cancelled from outside (not only by a
    cancel scope of its own that already ended)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
