"""One worker process of tests/pool/test_pool_redis.py's multi-process test.

It builds its pool with ``pool_from_config`` from the environment
(``VAELII_OLLAMA_HOSTS``, ``VAELII_POOL_REDIS_URL``), as a web worker would, and
obeys one command per line on stdin, answering one JSON line on stdout:

``vote N``  runs N three-turn votes at once; answers the tallies.
``hold``    once no process holds a slot (the other workers' releases landed),
            starts a two-turn vote the hosts never answer; answers at once.
``settle``  waits until no process holds a slot (read from Redis), then answers
            this pool's statistics, closes the pool and exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

from vaelii_llm.pool import Pool
from vaelii_llm.pool import pool_from_config
from vaelii_llm.pool import vote
from vaelii_llm.pool._pool import PoolStatistics

TTL_MS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


async def idle(pool: Pool[Any]) -> PoolStatistics:
    """This pool's statistics once no process holds a slot (read from Redis)."""
    while True:
        stats = await pool.read_statistics()
        if all(h.held_everywhere == 0 for h in stats.hosts):
            return stats
        await asyncio.sleep(0.05)


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    held: set[asyncio.Task[object]] = set()
    async with await pool_from_config(lease_ttl_ms=TTL_MS, acquire_timeout_ms=60_000) as pool:
        print(json.dumps({"ready": True}), flush=True)
        while line := (await reader.readline()).decode().split():
            if line[0] == "vote":
                results = await asyncio.gather(
                    *(vote(pool, "Is a spider an insect?") for _ in range(int(line[1])))
                )
                print(json.dumps([r.tally for r in results]), flush=True)
            elif line[0] == "hold":
                await idle(pool)
                held.add(asyncio.ensure_future(vote(pool, "HOLD", votes=2)))
                print(json.dumps({"holding": True}), flush=True)
            elif line[0] == "settle":
                stats = await idle(pool)
                print(json.dumps(dataclasses.asdict(stats)), flush=True)
                return


if __name__ == "__main__":
    asyncio.run(main())
