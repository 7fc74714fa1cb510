"""Real HTTP servers on 127.0.0.1 for tests: honest ones and hostile ones.

``async with serve(handler) as base_url:`` starts an aiohttp.web server on a
free loopback port and yields ``"http://127.0.0.1:<port>"``; ``handler`` is an
``aiohttp.web.Application`` or one request handler answering every method and
path. Leaving the block stops the server within a fraction of a second, even
when a handler stalls forever (handlers are cancelled when their client goes
away, and shutdown waits at most 0.2 s for the rest).

:func:`serve_raw` does the same for a raw TCP handler (bytes no HTTP server
would send). :func:`reset_connection` and :func:`cut_connection` misbehave on
the socket of the request being handled, and :func:`refused_url` names a port
nothing listens on.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

__all__ = [
    "Handler",
    "RawHandler",
    "cut_connection",
    "refused_url",
    "reset_connection",
    "serve",
    "serve_raw",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serve(handler: web.Application | Handler) -> AsyncIterator[str]:
    """Run ``handler`` on 127.0.0.1 at a free port; yield the base URL (no trailing slash)."""
    if isinstance(handler, web.Application):
        app = handler
    else:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, handler_cancellation=True, shutdown_timeout=0.2
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]  # any loop's server (asyncio's, uvloop's)
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serve_raw(handler: RawHandler) -> AsyncIterator[str]:
    """Run a raw TCP ``handler(reader, writer)`` on 127.0.0.1; yield ``http://127.0.0.1:<port>``.

    For bytes no HTTP server would send: a malformed status line, broken framing.
    """
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def refused_url() -> str:
    """A loopback URL whose port was just free and has no listener: connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def reset_connection(request: web.Request) -> None:
    """Abort the request's connection with a TCP RST (SO_LINGER 0), discarding unsent bytes."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def cut_connection(request: web.Request) -> None:
    """Close the request's connection cleanly (FIN) in the middle of whatever it was sending."""
    transport = request.transport
    assert transport is not None
    transport.close()
