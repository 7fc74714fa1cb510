"""The read surface as a Model Context Protocol server, on the official ``mcp`` package.

:func:`server` builds an ``mcp`` low-level :class:`~mcp.server.lowlevel.Server` from a
:class:`~vaelii_llm.tools.Toolset`, so an application serves its own KB;
:func:`serve_stdio` and :func:`serve_http` run it (``vaelii-llm mcp`` is the
command). The low-level server is used, not ``MCPServer``, because it publishes a
tool's JSON input schema exactly as given instead of deriving one from a Python
signature.

What a client sees:

* ``tools/list`` answers exactly the Toolset's schemas (names, descriptions, input
  schemas, in order), each annotated read-only, not destructive, idempotent and
  closed-world (:data:`ANNOTATIONS`);
* ``tools/call`` runs through :meth:`Toolset.call <vaelii_llm.tools.Toolset.call>`,
  so the answer is the same EDN a ``tool_result`` block carries, bounded the same
  way, and every refusal (a write's name is ``unknown-tool``, a bad shape, a bound
  over the ceiling) is a result with ``isError`` whose text starts with the
  refusal's type, never a protocol error;
* a request the protocol itself refuses (not JSON-RPC, an ``arguments`` that is not
  an object) gets the protocol's error from ``mcp``, and the server keeps serving;
* a client's ``notifications/cancelled`` cancels the call's task, which the
  Toolset turns into its worker stopping the print (the engine's clock bounds
  the rest of the read).

Install with ``pip install 'vaelii-llm[mcp]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import socket
import sys
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Final

import anyio
import mcp.types as types
import msgspec
import pydantic
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage

from vaelii_llm._version import __version__
from vaelii_llm.errors import excerpt
from vaelii_llm.tools import Toolset

__all__ = [
    "DEFAULT_PORT",
    "serve_http",
    "serve_stdio",
    "server",
]

ANNOTATIONS: Final = types.ToolAnnotations(
    read_only_hint=True,
    destructive_hint=False,
    idempotent_hint=True,
    open_world_hint=False,
)
"""Every tool's hints. Here they are also guarantees: a write has no tool at all."""

INSTRUCTIONS: Final = (
    "Read-only tools over a knowledge base. Sentence, context and term arguments are "
    'strings holding EDN, e.g. "(isa ?x Spider)". Answers are EDN, bounded in length; '
    "a refused call answers an error whose text starts with the refusal's type."
)

DEFAULT_PORT: Final = 8765
"""The port ``--http HOST`` serves on when none is named."""

_READ_TIMEOUT_S: Final = 10.0
"""How long a connection over HTTP has to send a whole request, head and body,
counted from when it is ready for one (opened, or its last answer sent). A
slower one is closed, so half-sent requests cannot hold the server's descriptors."""

_CANCEL_GRACE_S: Final = 2  # whole seconds: uvicorn takes an int
"""How long a cancelled :func:`serve_http` lets open requests finish before it
cancels them; the app's lifespan is then ended and the socket closed."""

_MAX_CONNECTIONS: Final = 4096
"""The most HTTP connections served at once, whatever the descriptor limit."""

_PASSES_AT_CAP: Final = 16
"""Turns of the event loop a listener at its cap keeps looking for a free slot
before it pauses (a connection that left is closed within a few turns)."""

_SPARE_DESCRIPTORS: Final = 64
"""Descriptors kept free of connections (the KB, logs, the loop's own): the
server stops accepting at the descriptor limit less these, so ``accept`` never
fails for want of one (asyncio would then retry each queued connection, logging
each, and serve nothing while they drain)."""


def server(toolset: Toolset, *, name: str = "vaelii-llm") -> Server[Any]:
    """An MCP server offering ``toolset``'s reads, one tool per schema."""
    listed = [
        types.Tool(
            name=schema.name,
            description=schema.description,
            input_schema=dict(schema.input_schema),
            annotations=ANNOTATIONS,
        )
        for schema in toolset.schemas()
    ]

    async def list_tools(
        _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await toolset.call(params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(text=result.text)], is_error=not result.ok
        )

    return Server(
        name,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(toolset: Toolset) -> None:
    """Serve ``toolset`` over stdin/stdout until the client closes stdin.

    A line ``mcp`` cannot read (not JSON, nested deeper than its JSON reader
    takes, not JSON-RPC) is answered with the JSON-RPC error for it, under the
    request's id where one can be read: ``mcp`` itself drops such a line
    silently over stdio, so a client would wait on it forever."""
    mcp_server = server(toolset)
    async with stdio_server() as (read_stream, write_stream):
        relay_send, relayed = anyio.create_memory_object_stream[SessionMessage | Exception]()
        async with relayed, anyio.create_task_group() as tasks:
            tasks.start_soon(_answer_unreadable, read_stream, relay_send, write_stream)
            await mcp_server.run(relayed, write_stream, mcp_server.create_initialization_options())
            tasks.cancel_scope.cancel()  # the server is done: stop reading for it


class _Head(msgspec.Struct):
    """The two top-level keys of a JSON-RPC message that say whether and how to answer it."""

    id: int | str | None = None
    method: str | None = None


async def _answer_unreadable(
    incoming: Any, relay: MemoryObjectSendStream[SessionMessage | Exception], outgoing: Any
) -> None:
    """Pass each message on to the server; answer each line it could not read."""
    async with relay:
        async for item in incoming:
            reply = _unreadable_reply(item) if isinstance(item, Exception) else None
            if reply is not None:
                await outgoing.send(SessionMessage(reply))
            else:
                await relay.send(item)


def _unreadable_reply(exc: Exception) -> types.JSONRPCError | None:
    """The JSON-RPC error for a line that failed to parse or validate (a parse
    error, an invalid request), with the request's id if it can be read; None
    for an exception that is no such failure, or a line that was no request."""
    if not isinstance(exc, pydantic.ValidationError) or not exc.errors():
        return None
    first = exc.errors(include_url=False)[0]
    given = first.get("input")
    head = _Head()
    if isinstance(given, str | bytes):
        try:
            head = msgspec.json.decode(given, type=_Head)
        except (msgspec.DecodeError, RecursionError):
            pass  # too deep or no object: answered under no id, as JSON-RPC says
        else:
            if head.method is None:
                return None  # a response, or no message at all: nothing to answer
    elif isinstance(given, Mapping):
        if "method" not in given:
            return None
        ident = given.get("id")
        head = _Head(id=ident if isinstance(ident, int | str) else None)
    if first.get("type") == "json_invalid":
        code, why = types.PARSE_ERROR, str(first.get("msg", ""))
        if "recursion limit" in why:
            why = "the message nests deeper than the server's JSON reader takes; send it flatter"
    else:
        code, why = types.INVALID_REQUEST, "the message is not a JSON-RPC request this server reads"
    error = types.ErrorData(code=code, message=excerpt(why))
    return types.JSONRPCError(jsonrpc="2.0", id=head.id, error=error)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST``, ``:PORT``, ``PORT`` or ``[::1]:PORT`` -> ``(host, port)``.

    The host defaults to 127.0.0.1 and the port to :data:`DEFAULT_PORT`; a bare
    number is a port (no host is written as one).
    """
    text = text.strip()
    host, port_text = text, ""
    if text.isdigit():
        host, port_text = "", text
    elif text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"an address opening with [ must close it: {text!r}")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"an IPv6 host is written in brackets, e.g. [::1]:8765, not {text!r}")
    if port_text and not port_text.isdigit():
        raise ValueError(f"the port must be a number, not {port_text!r}")
    port = int(port_text) if port_text else DEFAULT_PORT
    if not 0 <= port <= 65535:
        raise ValueError(f"the port must be 0..65535, not {port}")
    return host or "127.0.0.1", port


async def serve_http(
    toolset: Toolset,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``toolset`` over the streamable-HTTP transport at ``http://host:port/mcp``.

    The socket is bound before this returns control to the loop, so port 0 picks a
    free one; ``ready`` is called with the URL (by default it is printed to stderr).
    A socket bound to a loopback address gets ``mcp``'s DNS-rebinding protection
    (:func:`_rebinding_protection`), however the host was spelled (``127.1``,
    ``localhost``, ``::1``, ``2130706433``…).

    Cancelling the task that awaits this stops the server as Ctrl-C does: no
    new connection is taken, open requests get :data:`_CANCEL_GRACE_S` to
    finish, and the app's lifespan ends, so nothing it started is left running.
    """
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = _CappedListener(socket.create_server((host, port), family=family), _connection_cap())
    try:
        bound_address, bound_port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound_port}/mcp"
        security = _rebinding_protection(bound_address, host)
        app = server(toolset).streamable_http_app(host=host, transport_security=security)
        (ready or _announce)(url)
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            access_log=False,
            http=_bounded_protocol(),
        )
        served = uvicorn.Server(config)
        serving = asyncio.ensure_future(served.serve(sockets=[sock]))
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            served.should_exit = True
            config.timeout_graceful_shutdown = _CANCEL_GRACE_S
            while not serving.done():  # bounded by the grace; a second cancel waits too
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(serving)
            raise
    finally:
        sock.close()


def _connection_cap() -> int:
    """How many connections may be open at once: :data:`_MAX_CONNECTIONS`, or
    fewer when the descriptor limit less :data:`_SPARE_DESCRIPTORS` is lower."""
    try:
        import resource  # not on Windows, which has no such limit per process
    except ImportError:
        return _MAX_CONNECTIONS
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_CONNECTIONS
    return max(1, min(_MAX_CONNECTIONS, soft - _SPARE_DESCRIPTORS))


class _CappedListener(socket.socket):
    """A listening socket that stops accepting while ``cap`` connections it
    accepted are open: the rest wait in the kernel's queue, holding no descriptor.

    At the cap a pass of asyncio's accept loop is told the queue is empty, so the
    loop looks again on its next turn: connections closing (a queue of clients
    that left drains at once) make room. After :data:`_PASSES_AT_CAP` passes
    with none closed, ``accept`` fails the way a full descriptor table does
    (``EMFILE``), and asyncio pauses accepting for its ``ACCEPT_RETRY_DELAY``
    (logging one line) instead of spinning. On another event loop (uvloop) the
    socket is used through its descriptor and the cap does not apply; the read
    deadline of :func:`_bounded_protocol` still does."""

    def __init__(self, listening: socket.socket, cap: int) -> None:
        super().__init__(listening.family, listening.type, listening.proto, listening.detach())
        self.cap = cap
        self.open = 0
        self.passes = 0  # passes refused at the cap since a connection last closed
        self._in_pass = False  # already refused in this pass of the accept loop

    def accept(self) -> tuple[socket.socket, Any]:
        if self.open < self.cap:
            plain, address = super().accept()
            conn = _Accepted(self, plain.detach())
            self.open += 1
            return conn, address
        if self._in_pass:
            raise BlockingIOError
        self._in_pass = True
        asyncio.get_running_loop().call_soon(self._pass_over)
        self.passes += 1
        if self.passes <= _PASSES_AT_CAP:
            raise BlockingIOError
        self.passes = 0
        raise OSError(
            errno.EMFILE,
            f"{self.cap} connections open, the most this server takes; accepting again in a moment",
        )

    def _pass_over(self) -> None:
        self._in_pass = False


class _Accepted(socket.socket):
    """A connection of a :class:`_CappedListener`, counted until it is closed."""

    def __init__(self, listener: _CappedListener, fd: int) -> None:
        super().__init__(listener.family, listener.type, listener.proto, fd)
        self._listener: _CappedListener | None = listener

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.open -= 1
            listener.passes = 0
        super().close()


def _bounded_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol with the bound it lacks: a request not read
    whole within :data:`_READ_TIMEOUT_S` (a half-sent head, a dripped body, a
    stalled second request on a kept-alive connection) closes its connection."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Bounded(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
                self._disarm()  # the request is read whole (or the connection is done)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()  # ready for the next request on this connection

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(_READ_TIMEOUT_S, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE or self.conn.their_state is h11.SEND_BODY:
                self.transport.close()

    return Bounded


def _rebinding_protection(bound: str, host: str) -> TransportSecuritySettings | None:
    """The DNS-rebinding protection for a socket bound to ``bound`` (an address, as
    ``getsockname`` answers it) and named ``host``: when the address is loopback, only
    a request whose ``Host`` and ``Origin`` name a loopback spelling (``127.0.0.1``,
    ``localhost``, ``[::1]``, or ``host`` as given) is served, so a page on another
    site cannot reach it through a name that resolves here. Decided by the bound
    address, never by the spelling. None (no check) for any other address, which the
    network reaches anyway."""
    try:
        loopback = ipaddress.ip_address(bound.split("%", 1)[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return None
    names = ["127.0.0.1", "localhost", "[::1]"]
    given = f"[{host}]" if ":" in host else host
    if given and given not in names:
        names.append(given)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


def _announce(url: str) -> None:
    print(f"vaelii-llm mcp: serving streamable HTTP at {url}", file=sys.stderr, flush=True)
