"""Timing helpers the benchmark scripts share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


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
