"""A stream closed and cancelled by racing tasks (#58): several closers, a
stream read by one task and then another, a close in the same instant as the
reader's own cancellation, and random interleavings of all of them.

Real parts: a loopback aiohttp server streaming Ollama's NDJSON (held
mid-stream by an event, or paced by the seed) and the Ollama provider. What
must hold every time: every ``aclose()`` returns (within a wide bound), every
cancellation the test requested reaches its task as ``CancelledError``, a
reader the test did not cancel ends normally holding no cancellation, no
item reaches a reader once a close has returned, and nothing is left checked
out of the provider's pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.loopback import serve
from tests.support.polling import until
from tests.support.pool_check import checked_in
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm.providers import ollama
from vaelii_llm.providers._http import HTTPProvider

BOUND = 10.0
"""How long any close may take here: wide, for a loaded machine (each ends in milliseconds)."""

PIECES = ["one", " two", " three", " four", " five", " six"]
LINES = [json.dumps(o).encode() + b"\n" for o in [*(chunk(p) for p in PIECES), final()]]

SEEDS = int(os.environ.get("VAELII_TEST_RACE_SEEDS", "200"))
"""Interleavings per run (``VAELII_TEST_RACE_SEEDS=5000`` for a long local run)."""


def ask() -> Request:
    return Request(messages=[Message(role="user", content="hi")], max_tokens=8, timeout_ms=30_000)


@asynccontextmanager
async def held_after_first(hold: asyncio.Event) -> AsyncIterator[HTTPProvider[Any, Any]]:
    """A provider whose far end sends the first line, then nothing until ``hold`` is set."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(LINES[0])
        await hold.wait()
        for line in LINES[1:]:
            await response.write(line)
        await response.write_eof()
        return response

    try:
        async with ollama_at(handle) as provider:
            yield provider
    finally:
        hold.set()


@asynccontextmanager
async def ollama_at(handle: Any) -> AsyncIterator[HTTPProvider[Any, Any]]:
    """The Ollama provider (two connections) on a loopback server running ``handle``."""
    async with serve(handle) as url:
        provider = ollama.provider(host=url, max_connections=2)
        try:
            yield provider
        finally:
            await provider.aclose()


async def waiting_inside(provider: HTTPProvider[Any, Any], items: Any) -> None:
    """Until the stream's reader is waiting inside it for the far end."""
    await until(lambda: bool(provider._inflight) and items._items.ag_running)
    for _ in range(5):  # let the read reach its wait on the socket
        await asyncio.sleep(0)


async def reading(
    provider: HTTPProvider[Any, Any], items: Any, left: list[int]
) -> asyncio.Task[None]:
    """A task reading ``items`` to their end, then noting in ``left`` the
    cancellations its task still holds; returned once it waits inside the stream."""

    async def reader() -> None:
        async for _ in items:
            pass
        left.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]

    task = asyncio.create_task(reader())
    await waiting_inside(provider, items)
    return task


async def test_two_tasks_closing_one_stream_both_return() -> None:
    """Two closers at once while the reader waits mid-stream: both return,
    the reader's loop ends with no error and no cancellation left on its
    task, nothing is checked out (on main the first close never returned)."""
    hold = asyncio.Event()
    async with held_after_first(hold) as provider:
        items = provider.stream(ask(), deltas=True)
        left: list[int] = []
        task = await reading(provider, items, left)
        closers = [asyncio.create_task(items.aclose()) for _ in range(2)]
        done, _pending = await asyncio.wait([*closers, task], timeout=BOUND)
        assert len(done) == 3, "a close or the reader did not return"
        assert [c.exception() for c in closers] == [None, None]
        assert task.exception() is None
        assert left == [0]
        checked_in(provider)


async def test_a_stream_read_by_two_tasks_is_closed_in_the_one_reading_now() -> None:
    """Task A reads the first item and goes on to other work; B reads the
    rest and waits mid-stream; C closes. The close ends B's wait (B's loop
    ends, no error), A is not touched, and C's close returns; the same with
    A ended before the close (on main C's close never returned)."""
    for a_ends in (False, True):
        await read_by_two_closed_by_a_third(a_ends=a_ends)


async def read_by_two_closed_by_a_third(*, a_ends: bool) -> None:
    hold = asyncio.Event()
    async with held_after_first(hold) as provider:
        items = provider.stream(ask(), deltas=True)
        handed = asyncio.Event()
        other_work = asyncio.Event()

        async def task_a() -> str:
            await anext(items)
            handed.set()
            if not a_ends:
                await other_work.wait()
            return "a did its work"

        async def task_b() -> int:
            await handed.wait()
            read = 0
            async for _ in items:
                read += 1
            return read

        a = asyncio.create_task(task_a())
        b = asyncio.create_task(task_b())
        await handed.wait()
        if a_ends:
            await a
        await waiting_inside(provider, items)
        await asyncio.wait_for(items.aclose(), BOUND)
        assert await asyncio.wait_for(b, BOUND) == 0  # its wait ended, no item after
        assert not a.done() or a.result() == "a did its work"
        other_work.set()
        assert await asyncio.wait_for(a, BOUND) == "a did its work"
        checked_in(provider)


async def test_a_cancellation_in_the_same_instant_as_a_close_is_delivered() -> None:
    """The reader is cancelled and, before it runs again, another task closes
    its stream: the reader ends with CancelledError (on main it ended
    normally and ran on after it was cancelled), the close returns, nothing
    is checked out."""
    hold = asyncio.Event()
    async with held_after_first(hold) as provider:
        items = provider.stream(ask(), deltas=True)
        ran_on: list[int] = []
        task = await reading(provider, items, ran_on)
        assert task.cancel()
        async with asyncio.timeout(BOUND):
            await items.aclose()  # in this task, before the reader wakes
        done, _ = await asyncio.wait([task], timeout=BOUND)
        assert done
        assert task.cancelled()
        assert ran_on == []
        checked_in(provider)


# --- random interleavings -----------------------------------------------------------------


@asynccontextmanager
async def paced(pacing: list[random.Random]) -> AsyncIterator[HTTPProvider[Any, Any]]:
    """A provider whose far end writes each line after a pause drawn from
    ``pacing[0]`` (none, a few loop steps, or a millisecond)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        rng = pacing[0]
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        try:
            for line in LINES:
                pause = rng.random()
                if pause < 0.3:
                    await asyncio.sleep(0.001)
                else:
                    for _ in range(int(pause * 6)):
                        await asyncio.sleep(0)
                await response.write(line)
            await response.write_eof()
        except ConnectionError:  # the client closed a stream it no longer reads
            pass
        return response

    async with ollama_at(handle) as provider:
        yield provider


async def steps(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def one_interleaving(provider: HTTPProvider[Any, Any], rng: random.Random) -> str:
    """One stream, read by one to three tasks in turn (each a few items, the
    last to the end), closed by zero to three tasks and with zero to two
    reader tasks cancelled, each at a step the seed draws; checks what the
    module docstring says must hold. Returns what happened, for the counts."""
    items = provider.stream(ask(), deltas=True)
    received: list[object] = []
    seen_at_close: list[int] = []
    readers_n = rng.randint(1, 3)
    turns = [asyncio.Event() for _ in range(readers_n + 1)]
    turns[0].set()
    left_holding: dict[int, int] = {}

    async def reader(i: int, take: int | None) -> None:
        await turns[i].wait()
        read = 0
        while take is None or read < take:
            try:
                item = await anext(items)
            except StopAsyncIteration:
                break
            received.append(item)
            read += 1
        left_holding[i] = asyncio.current_task().cancelling()  # type: ignore[union-attr]

    async def pass_turns() -> None:
        """Reader i+1's turn comes once reader i has ended, however it ended
        (cancelled before it ran, even)."""
        for i, task in enumerate(readers):
            await asyncio.wait([task])
            turns[i + 1].set()

    async def closer(at: int) -> None:
        await steps(at)
        async with asyncio.timeout(BOUND):
            await items.aclose()  # in this task: it may run in the same instant as a cancel
        seen_at_close.append(len(received))

    readers = [
        asyncio.create_task(reader(i, rng.randint(0, 3) if i < readers_n - 1 else None))
        for i in range(readers_n)
    ]
    passing = asyncio.create_task(pass_turns())
    closers = [asyncio.create_task(closer(rng.randint(0, 40))) for _ in range(rng.randint(0, 3))]
    cancelled: set[int] = set()
    for _ in range(rng.randint(0, 2)):
        await steps(rng.randint(0, 40))
        i = rng.randrange(readers_n)
        if readers[i].cancel():
            cancelled.add(i)
    _done, pending = await asyncio.wait([*readers, *closers], timeout=BOUND)
    assert not pending, "a reader or a close did not end"
    await passing
    for c in closers:
        assert c.exception() is None, c.exception()
    delivered(readers, cancelled, left_holding)
    if seen_at_close:
        assert len(received) == min(seen_at_close), "an item reached a reader after a close"
    if not closers and not cancelled:
        assert isinstance(received[-1], Response)
    # once every task has ended, a read or a close ends at once
    await asyncio.wait_for(items.aclose(), BOUND)
    checked_in(provider)
    if closers and cancelled:
        return "closed and cancelled"
    if closers:
        return "closed"
    return "cancelled" if cancelled else "read whole"


def delivered(
    readers: list[asyncio.Task[None]], cancelled: set[int], left_holding: dict[int, int]
) -> None:
    """Each reader the test cancelled ended cancelled; each other one ended
    normally, holding no cancellation."""
    for i, task in enumerate(readers):
        if i in cancelled:
            assert task.cancelled(), f"reader {i}'s cancellation was not delivered"
        else:
            assert task.exception() is None, task.exception()
            assert left_holding[i] == 0, "a close left a cancellation on its reader"


async def test_random_interleavings_of_readers_closers_and_cancellations() -> None:
    counts: dict[str, int] = {}
    pacing = [random.Random(0)]
    async with paced(pacing) as provider:
        for seed in range(SEEDS):
            pacing[0] = random.Random(-seed)
            try:
                outcome = await one_interleaving(provider, random.Random(seed))
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}: {exc}") from exc
            counts[outcome] = counts.get(outcome, 0) + 1
    print(f"{SEEDS} seeds: {counts}")
    assert len(counts) == 4  # every kind of interleaving was drawn
