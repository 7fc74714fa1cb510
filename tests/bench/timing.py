"""Timing helpers the benchmark scripts share."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable
from collections.abc import Callable


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one awaited call takes."""
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def throughput(turn: Callable[[], Awaitable[object]], turns: int, concurrency: int) -> float:
    """Turns per second when ``concurrency`` workers share ``turns`` turns."""
    per_worker = turns // concurrency

    async def worker() -> None:
        for _ in range(per_worker):
            await turn()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return per_worker * concurrency / (time.perf_counter() - started)


def beside_server(argv: list[str], main: Callable[[str], Awaitable[None]]) -> None:
    """Start the loopback server ``argv`` runs (it prints its URL as its first
    line), run ``main(url)`` in this process, and stop the server whatever
    happens: a benchmark's client and far end never share a CPU's event loop."""
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        asyncio.run(main(url))
    finally:
        server.terminate()
        server.wait(timeout=10)
