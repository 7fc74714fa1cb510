"""A small HTTP proxy on 127.0.0.1 for tests: forward (absolute-URI) and CONNECT.

``async with forward_proxy(user="u", password="p") as proxy:`` starts it on a
free port; ``proxy.url`` names it with its credentials, ``proxy.bare`` without.
A request whose ``Proxy-Authorization`` is not the expected Basic pair gets a
407. A forward request has its head passed on without ``Proxy-*`` headers,
then the bytes are piped both ways until either side closes; a CONNECT is
answered ``200`` and piped the same way. Every request's method and target is
recorded on ``proxy.seen``, and its ``Proxy-Authorization`` (None when it sent
none) on ``proxy.authorizations``; an upstream that cannot be reached is a 502.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextlib import suppress
from dataclasses import dataclass
from dataclasses import field
from urllib.parse import urlsplit

__all__ = ["Proxy", "forward_proxy"]


@dataclass
class Proxy:
    bare: str = ""
    url: str = ""
    expected: str | None = None
    seen: list[tuple[str, str]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with suppress(ConnectionError, OSError, RuntimeError):
        writer.close()


async def _refuse(writer: asyncio.StreamWriter, status: str) -> None:
    writer.write(f"HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
    with suppress(ConnectionError, OSError):
        await writer.drain()
    writer.close()


async def _handle(proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    proxy.seen.append((method, target))
    headers = [line for line in lines[1:] if line]
    auth = next(
        (
            h.split(":", 1)[1].strip()
            for h in headers
            if h.lower().startswith("proxy-authorization:")
        ),
        None,
    )
    proxy.authorizations.append(auth)
    if proxy.expected is not None and auth != proxy.expected:
        await _refuse(writer, "407 Proxy Authentication Required")
        return
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
    else:
        parts = urlsplit(target)
        host, port = parts.hostname or "", str(parts.port or 80)
    try:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
    except OSError:
        await _refuse(writer, "502 Bad Gateway")
        return
    proxy._writers.append(up_writer)
    if method == "CONNECT":
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    else:
        kept = [h for h in headers if not h.lower().startswith("proxy-")]
        up_writer.write(("\r\n".join([lines[0], *kept]) + "\r\n\r\n").encode("latin-1"))
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


@asynccontextmanager
async def forward_proxy(
    user: str | None = None, password: str | None = None
) -> AsyncIterator[Proxy]:
    """Run the proxy; see the module docstring."""
    proxy = Proxy()
    if user is not None:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        proxy.expected = f"Basic {pair}"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        proxy._tasks.add(task)
        proxy._writers.append(writer)
        try:
            await _handle(proxy, reader, writer)
        finally:
            proxy._tasks.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy.bare = f"http://127.0.0.1:{port}"
    proxy.url = proxy.bare if user is None else f"http://{user}:{password}@127.0.0.1:{port}"
    try:
        yield proxy
    finally:
        server.close()
        for task in list(proxy._tasks):
            task.cancel()
        await asyncio.gather(*proxy._tasks, return_exceptions=True)
        for writer in proxy._writers:
            writer.close()
        await server.wait_closed()
