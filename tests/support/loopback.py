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
nothing listens on. :class:`Taking`, a client's ``inflight`` set, says when the
client has read what a far end sent (so it may cut the connection then).
:class:`FakeServer` is the start and stop every fake server (Ollama's, the
OpenAI wires', the Messages API's) shares.
"""

from __future__ import annotations

import asyncio
import atexit
import socket
import struct
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Self

import aiohttp
from aiohttp import web

__all__ = [
    "FakeServer",
    "Handler",
    "RawHandler",
    "Taking",
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


class FakeServer:
    """A fake server's start and stop on 127.0.0.1, at a free port; its routes
    are :meth:`app`'s. ``await fake.start()`` (or ``async with fake:``) serves
    and sets :attr:`url`; ``await fake.stop()`` (leaving the block) stops it.
    In-flight handlers are cancelled when their client goes away."""

    url: str = ""
    """``http://127.0.0.1:<port>`` once started."""
    _runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        """The routes this server answers."""
        raise NotImplementedError

    async def start(self) -> Self:
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


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


_HELD: list[socket.socket] = []
"""The ports :func:`refused_url` hands out, held bound for the process's life."""


@atexit.register
def _let_go() -> None:
    for sock in _HELD:
        sock.close()


def refused_url() -> str:
    """A loopback URL whose port has no listener: connecting is refused. The
    port stays bound (never listening) for the rest of the process, so no
    other server, in this worker or another, can take it meanwhile and
    answer where a refusal was meant."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


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


class Taking(set[aiohttp.ClientResponse]):
    """An ``inflight`` set that says when the client has read ``want`` bytes of
    the body of the response that joined it (``taken``), on either path.

    A far end that cuts its connection after sending waits for it: on a cut,
    the client's next read raises at once, and what it had received but not
    yet read is lost with it. The response joins before its body is read
    (both paths), so the read is counted from its first byte: the reader's
    class is swapped for one that counts what ``readany`` and ``read_nowait``
    hand over (aiohttp's reader has slots, so no attribute can be patched)."""

    def __init__(self, want: int) -> None:
        super().__init__()
        self.want = want
        self.read = 0
        self.taken = asyncio.Event()

    def add(self, response: aiohttp.ClientResponse) -> None:
        super().add(response)
        count = self.count

        class Counted(aiohttp.StreamReader):
            __slots__ = ()

            def read_nowait(self, n: int = -1) -> bytes:
                return count(super().read_nowait(n))

            async def readany(self) -> bytes:
                return count(await super().readany())

        assert type(response.content) is aiohttp.StreamReader
        response.content.__class__ = Counted

    def count(self, chunk: bytes) -> bytes:
        self.read += len(chunk)
        if self.read >= self.want:
            self.taken.set()
        return chunk
