"""A loopback OpenAI-compatible server that keeps a rate of its own, for the
pool's rate tests (tests/pool/test_pool_rates.py, tests/bench/bench_pool_fleet.py).

It counts the chat calls it holds at once and when each came, answers each
with the usage it is told to, and sends the rate-limit headers and 429s it is
told to: ``headers`` ride on every 200, and while ``refuse`` is set every call
is answered 429 with those headers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.support.fake_openai import Turn
from tests.support.fake_openai import transcript
from tests.support.loopback import serve


class RatedHost:
    """One far end; ``url`` is its base URL (with ``/v1``)."""

    def __init__(self, delay: float = 0.01, spent: int = 10) -> None:
        self.delay = delay
        self.spent = spent
        self.headers: dict[str, str] = {}
        self.refuse: dict[str, str] | None = None
        self.active = 0
        self.most = 0
        self.times: list[float] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.times.append(time.monotonic())
        if self.refuse is not None:
            return web.json_response(
                {"error": {"message": "rate limited", "type": "rate_limit"}},
                status=429,
                headers=self.refuse,
            )
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            await asyncio.sleep(self.delay)
            turn = Turn(text=["Yes."])
            turn.usage = {
                "prompt_tokens": self.spent - 1,
                "completion_tokens": 1,
                "total_tokens": self.spent,
            }
            answer = transcript(turn)
            if body.get("stream"):
                return web.Response(
                    body=answer.sse(), content_type="text/event-stream", headers=self.headers
                )
            return web.json_response(answer.completion, headers=self.headers)
        finally:
            self.active -= 1


@asynccontextmanager
async def rated_hosts(count: int, **options: Any) -> AsyncIterator[list[RatedHost]]:
    async with AsyncExitStack() as stack:
        found = []
        for _ in range(count):
            host = RatedHost(**options)
            host.url = await stack.enter_async_context(serve(host.handle)) + "/v1"
            found.append(host)
        yield found


def most_in_window(times: list[float], window: float) -> int:
    """The most calls that came inside any ``window`` seconds."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, at in enumerate(ordered):
        while at - ordered[start] > window:
            start += 1
        most = max(most, end - start + 1)
    return most
