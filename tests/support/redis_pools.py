"""The Redis pool tests' shared pieces: loopback hosts that count the chat
calls they hold at once, and a pool of Ollama providers whose slots live in
Redis (tests/pool/test_pool_redis.py, tests/hostile/)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import merged
from tests.support.fake_openai import Turn
from tests.support.fake_openai import transcript
from tests.support.loopback import serve
from vaelii_llm.pool._pool import Pool
from vaelii_llm.providers import ollama

TTL_MS = 1000


class LoopbackHost:
    """An Ollama (or, on ``/v1/chat/completions``, an OpenAI-compatible server)
    on loopback that counts the chat calls it holds at once.

    A question that says HOLD is held until its client goes away.
    """

    def __init__(self, delay: float = 0.03) -> None:
        self.delay = delay
        self.active = 0
        self.most = 0
        self.calls = 0
        self.holding = 0
        self.changed = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if request.path.endswith("/chat/completions"):  # an OpenAI-compatible server
            answer = transcript(Turn(text=["Yes."]))
            reply: web.StreamResponse = web.Response(
                body=answer.sse(), content_type="text/event-stream"
            )
            if not body.get("stream"):
                reply = web.json_response(answer.completion)
            return await self.hold(body["messages"][-1]["content"], reply)
        reply = web.json_response(merged([chunk("Yes."), final()]))
        return await self.hold(body["messages"][-1]["content"], reply)

    async def hold(self, question: str, reply: web.StreamResponse) -> web.StreamResponse:
        self.calls += 1
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            if question == "HOLD":
                self.holding += 1
                self.changed.set()
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay)
            return reply
        finally:
            self.active -= 1

    async def wait_holding(self, count: int) -> None:
        while self.holding < count:
            self.changed.clear()
            await self.changed.wait()


@asynccontextmanager
async def hosts(count: int, delay: float = 0.03) -> AsyncIterator[list[LoopbackHost]]:
    async with AsyncExitStack() as stack:
        found = []
        for _ in range(count):
            host = LoopbackHost(delay)
            host.url = await stack.enter_async_context(serve(host.handle))
            found.append(host)
        yield found


def shared_pool(
    urls: list[str], redis_url: str, slots: int = 2, **options: Any
) -> Pool[ollama.OllamaProvider]:
    tokens = []
    for url in urls:
        tokens += [ollama.provider(host=url)] * slots
    options.setdefault("lease_ttl_ms", TTL_MS)
    return Pool(tokens, redis_url=redis_url, **options)
