"""A fleet: 16 worker processes x 4 hosts on one real redis-server (issue #63).

Run: ``.venv/bin/python tests/bench/bench_pool_fleet.py [--workers 16] [--seconds 20]``

Each worker builds its pool with ``pool_from_config(kind="openai")`` from
``VAELII_OPENAI_HOSTS`` (four loopback OpenAI-compatible far ends served here,
each ``*4/{rpm}rpm``) and ``VAELII_POOL_REDIS_URL``, as a web worker would
(tests/support/rate_worker.py), and runs ``--callers`` callers that make calls
one after another.

Part 1, limits: for ``--seconds`` every worker's callers press on the hosts,
whose rate binds. The far ends count the calls they hold at once (never above
``n``) and when each came: over every window of ``w`` seconds a token bucket
of ``N`` a minute lets at most ``N + N * w / 60`` through (its one-minute
burst and its refill), printed against that bound for windows of 1 s, 10 s
and the whole run, with a tolerance of one call (the far end's clock and
Redis's differ by the loopback's latency). One worker is killed (SIGKILL)
halfway while its callers hold leases and wait in line; its leases and its
places in line are read from Redis until they are gone: within the lease TTL.

Part 2, cost: the rate set so high it never binds, one caller per worker;
each take's latency (entering ``pool.provider()`` to holding the provider),
p50 and p99, against the same callers on the in-process pool (one process,
the same hosts); and the Redis commands per turn, from ``INFO commandstats``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from tests.support.rate_far_end import RatedHost  # noqa: E402
from tests.support.rate_far_end import most_in_window  # noqa: E402
from tests.support.rate_far_end import rated_hosts  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from vaelii_llm import Message  # noqa: E402
from vaelii_llm import Request  # noqa: E402
from vaelii_llm.pool import pool_from_config  # noqa: E402

SLOTS = 4
TTL_MS = 3000


async def start(env: dict[str, str], count: int, acquire_ms: int) -> list[Any]:
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(ROOT / "tests" / "support" / "rate_worker.py"),
            str(TTL_MS),
            str(acquire_ms),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(count)
    ]
    for w in workers:
        assert json.loads(await w.stdout.readline()) == {"ready": True}
    return workers


async def send(w: Any, command: str) -> None:
    w.stdin.write(command.encode() + b"\n")
    await w.stdin.drain()


async def stop(workers: list[Any]) -> None:
    for w in workers:
        if w.returncode is None:
            await send(w, "quit")
    for w in workers:
        await w.wait()


def environment(found: list[RatedHost], redis_url: str, rpm: int) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("VAELII_")},
        "VAELII_OPENAI_HOSTS": ",".join(f"{h.url}*{SLOTS}/{rpm}rpm" for h in found),
        "VAELII_POOL_REDIS_URL": redis_url,
        "OPENAI_API_KEY": "k",
        "PYTHONPATH": str(ROOT),
    }


async def held_in_redis(
    client: aioredis.Redis, found: list[RatedHost], pid: int
) -> tuple[int, int]:
    """The leases and places in line process ``pid`` holds in Redis (ids name it)."""
    mark = f":{pid}:".encode()
    leases = 0
    for h in found:
        key = f"vaelii:pool:{{default}}:lease:{h.url}"
        await client.zremrangebyscore(key, "-inf", int(time.time() * 1000))
        leases += sum(mark in m for m in await client.zrange(key, 0, -1))
    await client.zremrangebyscore(
        "vaelii:pool:{default}:waiting:alive", "-inf", int(time.time() * 1000)
    )
    alive = set(await client.zrange("vaelii:pool:{default}:waiting:alive", 0, -1))
    waiting = sum(
        mark in m and m in alive
        for m in await client.zrange("vaelii:pool:{default}:waiting", 0, -1)
    )
    return leases, waiting


async def limits(args: argparse.Namespace, server: RedisServer) -> None:
    async with rated_hosts(4, delay=args.call_ms / 1000) as found:
        env = environment(found, server.url, args.rpm)
        workers = await start(env, args.workers, 5_000)
        client = aioredis.from_url(server.url)
        began = time.monotonic()
        for w in workers:
            await send(w, f"run {args.seconds} {args.callers}")
        await asyncio.sleep(args.seconds / 2)
        victim = workers[-1]
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        before = await held_in_redis(client, found, victim.pid)
        # Its leases and places in line: gone within the TTL of the kill.
        while await held_in_redis(client, found, victim.pid) != (0, 0):
            if time.monotonic() - killed_at > 3 * TTL_MS / 1000:
                break
            await asyncio.sleep(0.02)
        freed_after = time.monotonic() - killed_at
        answers = [json.loads(await w.stdout.readline()) for w in workers[:-1]]
        await victim.wait()
        ran = time.monotonic() - began
        await stop(workers[:-1])
        await client.aclose()
    print(
        f"\nPart 1: {args.workers} workers x {args.callers} callers, "
        f"4 hosts *{SLOTS}/{args.rpm}rpm, {args.seconds} s, calls of {args.call_ms} ms"
    )
    print(
        f"  calls made: {sum(len(h.times) for h in found)}; workers' timeouts: "
        f"{sum(a['timeouts'] for a in answers)}"
    )
    print(
        "  host  most at once (n)  "
        + "  ".join(f"most in {w:>4} s (bound)" for w in ("1", "10", "run"))
    )
    ok = True
    for n, h in enumerate(found):
        cells = []
        for w in (1.0, 10.0, ran):
            bound = args.rpm + args.rpm * w / 60 + 1
            most = most_in_window(h.times, w)
            ok = ok and most <= bound
            cells.append(f"{most:>10} ({bound:>6.1f})")
        ok = ok and h.most <= SLOTS
        print(f"  {n:>4}  {h.most:>11} ({SLOTS})  " + "  ".join(cells))
    print(
        f"  killed worker: {before[0]} leases held and {before[1]} places in line at the kill; "
        f"its leases and places gone {freed_after:.2f} s after it (TTL {TTL_MS / 1000:g} s)"
    )
    print(f"  every bound held: {ok}")


async def cost(args: argparse.Namespace, server: RedisServer) -> None:
    rpm = 10_000_000
    async with rated_hosts(4, delay=args.call_ms / 1000) as found:
        env = environment(found, server.url, rpm)
        workers = await start(env, args.workers, 60_000)
        client = aioredis.from_url(server.url)
        await client.config_resetstat()
        for w in workers:
            await send(w, f"run {args.seconds} 1")
        answers = [json.loads(await w.stdout.readline()) for w in workers]
        stats = await client.info("commandstats")
        await stop(workers)
        await client.aclose()
        turns = sum(a["ok"] for a in answers)
        shared = [ms for a in answers for ms in a["waits"]]
        # commandstats counts what scripts call too: the round trips are the
        # commands a client sends itself (a script's EVALSHA/EVAL, BLPOP).
        steps = stats.get("cmdstat_evalsha", {}).get("calls", 0)
        sent = {
            k[8:]: v["calls"] for k, v in stats.items() if k[8:] in ("evalsha", "eval", "blpop")
        }
        # The same callers on the in-process pool: one process, one caller each.
        local: list[float] = []
        listed = ",".join(f"{h.url}*{SLOTS}/{rpm}rpm" for h in found)
        request = Request(messages=[Message(role="user", content="Is a spider an insect?")])
        async with await pool_from_config(listed, kind="openai", model="m") as pool:
            until = time.monotonic() + args.seconds

            async def caller() -> None:
                while time.monotonic() < until:
                    began = time.perf_counter()
                    async with pool.provider(tokens=5) as p:
                        local.append((time.perf_counter() - began) * 1000)
                        await p.complete(request)

            os.environ["OPENAI_API_KEY"] = "k"
            await asyncio.gather(*(caller() for _ in range(args.workers)))

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100)[p - 1] if len(values) > 1 else values[0]

    print(f"\nPart 2: {args.workers} callers, rates that never bind, calls of {args.call_ms} ms")
    print("  pool                       takes    p50 ms    p99 ms")
    print(
        f"  Redis, {args.workers} processes      {len(shared):>6}  "
        f"{q(shared, 50):>8.3f}  {q(shared, 99):>8.3f}"
    )
    print(
        f"  in process, 1 process      {len(local):>6}  {q(local, 50):>8.3f}  {q(local, 99):>8.3f}"
    )
    per_turn = ", ".join(f"{k} {v / max(turns, 1):.3f}" for k, v in sorted(sent.items()))
    print(f"  Redis round trips per turn: {per_turn} (step scripts {steps}); turns {turns}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rpm", type=int, default=120)
    parser.add_argument("--call-ms", type=float, default=20.0)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "k")
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} "
        "(a loaded machine's figures when it is high)"
    )
    async with RedisServer() as server:
        await limits(args, server)
    async with RedisServer() as server:
        await cost(args, server)


if __name__ == "__main__":
    asyncio.run(main())
