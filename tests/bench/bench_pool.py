"""The vote pool's overhead per vote, against calling the provider directly.

Run: ``.venv/bin/python tests/bench/bench_pool.py [--rounds 31] [--batch 500]``

The provider answers at once (no I/O), so what is timed is the machinery: a
vote's checkouts, its task group and its counting, against the same three
``complete`` calls made directly (one after another, and at once with
``asyncio.gather``). Each figure is the median, over ``--rounds`` rounds, of a
round's time divided by its ``--batch`` votes. A second provider that yields to
the loop once per call (as any real I/O does) shows the same with a suspension.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from vaelii_llm.pool import Pool, read_response, vote
from vaelii_llm.protocol import (
    Message,
    ProviderBase,
    Request,
    Response,
    StreamItem,
    TextBlock,
)

VOTES = 3
REQUEST = Request(messages=[Message(role="user", content="Is a spider an insect?")])
ANSWER = Response(content=[TextBlock(text="Yes.")], stop_reason="end_turn")


class Instant(ProviderBase):
    """Answers without suspending."""

    async def complete(self, request: Request) -> Response:
        return ANSWER

    async def stream(self, request: Request) -> AsyncIterator[StreamItem]:
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


async def main(rounds: int, batch: int) -> None:
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.batch))
