"""One worker process of the rate tests and the fleet bench: builds its pool
with ``pool_from_config(kind="openai")`` from the environment
(``VAELII_OPENAI_HOSTS`` with rates, ``VAELII_POOL_REDIS_URL``), as a web
worker would, and obeys one command per line on stdin, answering one JSON line:

``calls N``  makes N calls at once (one turn each); answers how many ran,
             how many timed out, what held them, and each take's wait in ms.
``run S N``  N callers each make calls one after another for S seconds;
             answers the same.
``quit``     closes the pool and exits.

argv: the lease TTL in ms, the acquire timeout in ms.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm.errors import LLMPoolTimeout
from vaelii_llm.pool import pool_from_config

TTL_MS = int(sys.argv[1])
ACQUIRE_MS = int(sys.argv[2])
REQUEST = Request(messages=[Message(role="user", content="Is a spider an insect?")])


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with await pool_from_config(
        kind="openai", model="m", lease_ttl_ms=TTL_MS, acquire_timeout_ms=ACQUIRE_MS
    ) as pool:
        print(json.dumps({"ready": True}), flush=True)
        while line := (await reader.readline()).decode().split():
            if line[0] == "quit":
                return
            held: list[str | None] = []
            waits: list[float] = []

            async def one(held: list[str | None], waits: list[float]) -> bool:
                began = time.perf_counter()
                try:
                    async with pool.provider(tokens=5) as p:
                        waits.append((time.perf_counter() - began) * 1000)
                        await p.complete(REQUEST)
                except LLMPoolTimeout as exc:
                    held.append(exc.held_by)
                    return False
                return True

            if line[0] == "run":
                until = time.monotonic() + float(line[1])

                async def caller(held: list[str | None], waits: list[float], until: float) -> int:
                    ran = 0
                    while time.monotonic() < until:
                        ran += await one(held, waits)
                    return ran

                callers = int(line[2])
                counts = await asyncio.gather(*(caller(held, waits, until) for _ in range(callers)))
                done = [True] * sum(counts)
            else:
                done = await asyncio.gather(*(one(held, waits) for _ in range(int(line[1]))))
            print(
                json.dumps(
                    {"ok": sum(done), "timeouts": len(held), "held_by": held, "waits": waits}
                ),
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
