"""``timers.timeout_at`` behaves as ``asyncio.timeout_at`` does, on one shared loop timer.

Each behaviour is checked against asyncio's own ``timeout_at`` where the two
can be run side by side; the rest (the heap kept short, nothing held while
idle) is what sharing adds. No test here asserts a wall-clock window: a
deadline that must pass is milliseconds away and the work it cuts would take
a minute, and a deadline that must not pass is a minute away.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from contextlib import asynccontextmanager
from typing import Any

import pytest

from vaelii_llm import _timers as timers

FAR = 60.0  # seconds: a deadline that never passes in a test, and work that never ends
NEAR = 0.01


def ours(when: float) -> AbstractAsyncContextManager[Any]:
    @asynccontextmanager
    async def block() -> Any:
        with timers.timeout_at(when) as timer:
            yield timer

    return block()


BOTH: list[Callable[[float], AbstractAsyncContextManager[Any]]] = [asyncio.timeout_at, ours]


def now() -> float:
    return asyncio.get_running_loop().time()


@pytest.mark.parametrize("timeout_at", BOTH, ids=["asyncio", "ours"])
async def test_the_deadline_cuts_the_block_with_a_timeout_error(
    timeout_at: Callable[[float], AbstractAsyncContextManager[Any]],
) -> None:
    with pytest.raises(TimeoutError) as caught:
        async with timeout_at(now() + NEAR) as timer:
            await asyncio.sleep(FAR)
    assert timer.expired()
    assert isinstance(caught.value.__cause__, asyncio.CancelledError)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # its cancellation taken back


@pytest.mark.parametrize("timeout_at", BOTH, ids=["asyncio", "ours"])
async def test_a_block_that_ends_in_time_is_untouched(
    timeout_at: Callable[[float], AbstractAsyncContextManager[Any]],
) -> None:
    async with timeout_at(now() + FAR) as timer:
        await asyncio.sleep(0)
    assert not timer.expired()
    await asyncio.sleep(NEAR * 2)  # nothing fires later either


@pytest.mark.parametrize("timeout_at", BOTH, ids=["asyncio", "ours"])
async def test_a_deadline_already_past_cuts_at_the_next_wait(
    timeout_at: Callable[[float], AbstractAsyncContextManager[Any]],
) -> None:
    with pytest.raises(TimeoutError):
        async with timeout_at(now() - 1):
            await asyncio.sleep(FAR)


@pytest.mark.parametrize("timeout_at", BOTH, ids=["asyncio", "ours"])
async def test_a_cancellation_from_outside_is_not_a_timeout(
    timeout_at: Callable[[float], AbstractAsyncContextManager[Any]],
) -> None:
    timers_seen: list[Any] = []

    async def body() -> None:
        async with timeout_at(now() + FAR) as timer:
            timers_seen.append(timer)
            await asyncio.sleep(FAR)

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not timers_seen[0].expired()


@pytest.mark.parametrize("timeout_at", BOTH, ids=["asyncio", "ours"])
async def test_a_cancellation_from_outside_at_the_deadline_still_propagates(
    timeout_at: Callable[[float], AbstractAsyncContextManager[Any]],
) -> None:
    """The deadline passes and the task is also cancelled from outside: the
    outer request wins, so the caller's cancellation is never swallowed."""
    expiring = asyncio.Event()

    async def body() -> None:
        async with timeout_at(now() - 1):
            expiring.set()
            await asyncio.sleep(FAR)

    task = asyncio.create_task(body())
    await expiring.wait()  # entered: the past deadline is cancelling it at the next step
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("timeout_at", BOTH, ids=["asyncio", "ours"])
async def test_nested_blocks_each_answer_for_their_own_deadline(
    timeout_at: Callable[[float], AbstractAsyncContextManager[Any]],
) -> None:
    async with timeout_at(now() + FAR) as outer:
        with pytest.raises(TimeoutError):
            async with timeout_at(now() + NEAR) as inner:
                await asyncio.sleep(FAR)
    assert inner.expired()
    assert not outer.expired()

    outer = timeout_at(now() + NEAR)
    with pytest.raises(TimeoutError):
        async with outer as outer_timer, timeout_at(now() + FAR) as inner_timer:
            await asyncio.sleep(FAR)
    assert outer_timer.expired()
    assert not inner_timer.expired()


async def test_many_blocks_at_once_each_expire_exactly_when_theirs_passes() -> None:
    """Four hundred blocks on one loop, deadlines near and far in random order:
    every one with a near deadline is cut, none with a far one is, and each
    was cut no earlier than its own deadline (less the loop's clock
    resolution, by which asyncio runs a timer early)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(7)
    early = getattr(loop, "_clock_resolution", 1e-3)
    outcomes: dict[int, tuple[str, float, float]] = {}

    async def block(n: int, delay: float, work: float) -> None:
        when = now() + delay
        try:
            with timers.timeout_at(when):
                await asyncio.sleep(work)
            outcomes[n] = ("done", when, now())
        except TimeoutError:
            outcomes[n] = ("cut", when, now())

    plans = []
    for n in range(400):
        if rng.random() < 0.5:
            plans.append((n, rng.uniform(0, 0.05), FAR))  # near deadline, endless work
        else:
            plans.append((n, FAR, rng.uniform(0, 0.05)))  # far deadline, short work
    # A deadline that failed to fire shows as "done": its work ends by itself.
    await asyncio.gather(*(block(*plan) for plan in plans))
    for n, delay, _ in plans:
        kind, when, at = outcomes[n]
        assert kind == ("cut" if delay < FAR else "done"), n
        if kind == "cut":
            assert at >= when - early, (n, at, when)


async def test_the_heap_stays_short_while_blocks_come_and_go() -> None:
    """Ten thousand blocks enter and leave under one that stays: the heap is
    rebuilt before it is mostly leftovers, so it never holds more than about
    twice the live blocks (plus the floor under which it is not swept)."""
    loop = asyncio.get_running_loop()
    with timers.timeout_at(now() + FAR):
        watch = timers._watch(loop)
        longest = 0
        for _ in range(10_000):
            with timers.timeout_at(now() + FAR):
                longest = max(longest, len(watch._heap))
        assert longest <= timers._COMPACT_AT + 2


async def test_a_block_left_on_top_of_the_heap_goes_at_once() -> None:
    """A block with the earliest deadline that ends in time takes its entry
    with it (and the exited ones under it), so nothing it held lingers."""
    loop = asyncio.get_running_loop()
    with timers.timeout_at(now() + FAR):
        watch = timers._watch(loop)
        for _ in range(3):
            with timers.timeout_at(now() + FAR / 2):  # nearer: on top
                assert len(watch._heap) == 2
            assert len(watch._heap) == 1
        with timers.timeout_at(now() + FAR * 2):  # farther: under the first
            with timers.timeout_at(now() + FAR / 2):
                pass
            assert len(watch._heap) == 2
        assert len(watch._heap) == 2  # the far one is swept later, not now


async def test_an_idle_loop_holds_no_timer_and_no_watch() -> None:
    """After blocks that ended in time and one that was cut, nothing of ours
    is left on the loop: the watch is gone, so no timer of it is armed."""
    loop = asyncio.get_running_loop()
    with timers.timeout_at(now() + FAR):  # held across the others: one watch throughout
        held = timers._watches[loop]
        assert held() is not None
        with timers.timeout_at(now() + FAR):
            pass
        with pytest.raises(TimeoutError), timers.timeout_at(now() + NEAR):
            await asyncio.sleep(FAR)
        with timers.timeout_at(now() + FAR):
            pass
    gc.collect()
    assert held() is None  # no armed timer (nor anything else) keeps it


async def test_a_block_is_entered_once_and_only_inside_a_task() -> None:
    block = timers.timeout_at(now() + FAR)
    with block, pytest.raises(RuntimeError, match="once"), block:
        pass

    def outside() -> None:
        with timers.timeout_at(0):
            pass

    refused: list[BaseException] = []

    def call() -> None:  # a loop callback: a running loop, but no task
        try:
            outside()
        except RuntimeError as exc:
            refused.append(exc)

    asyncio.get_running_loop().call_soon(call)
    await asyncio.sleep(0)
    assert len(refused) == 1
    assert "inside a task" in str(refused[0])


async def test_a_block_rescheduled_later_outlives_its_first_deadline_and_ends_at_its_new() -> None:
    """The stall bound's move (#51): the old entry is skipped when the loop
    timer reaches it; the new one cuts the block. An earlier deadline, or a
    block no longer running, is left as it was."""

    async def rescheduled() -> None:
        with timers.timeout_at(now() + NEAR) as timer:
            timer.reschedule(now() + 3 * NEAR)
            timer.reschedule(now())  # earlier: ignored
            await asyncio.sleep(2 * NEAR)  # past the first deadline: still running
            assert not timer.expired()
            seen.append(timer)
            await asyncio.sleep(FAR)

    seen: list[timers.Timeout] = []
    with pytest.raises(TimeoutError):
        await rescheduled()
    assert seen[0].expired()
    with timers.timeout_at(now() + FAR) as kept:
        await asyncio.sleep(0)
    kept.reschedule(now() + 2 * FAR)
    assert kept.when < now() + 2 * FAR
    watch = timers._watch(asyncio.get_running_loop())
    assert watch._handle is None  # nothing of either is left
    assert not watch._heap


async def test_moving_a_block_a_thousand_times_keeps_one_entry_and_the_loop_timer() -> None:
    """A stream moves its stall bound at each content chunk: each move is a
    store, the block keeps its one heap entry and the loop timer its one
    handle; when that entry comes due the block is still running (it goes
    back on the heap once), and it ends at its last deadline."""
    watch: timers._Watch | None = None
    checked: list[bool] = []

    async def moved() -> None:
        nonlocal watch
        with timers.timeout_at(now() + 0.1) as timer:
            watch = timers._watch(asyncio.get_running_loop())
            handle = watch._handle
            for _ in range(1000):
                timer.reschedule(now() + 2.0)
            assert len(watch._heap) == 1
            assert watch._handle is handle  # not re-armed per move
            await asyncio.sleep(0.3)  # past the first deadline, well before the last
            assert not timer.expired()
            assert len(watch._heap) == 1  # moved once, to the last deadline
            checked.append(True)
            await asyncio.sleep(FAR)

    with pytest.raises(TimeoutError):
        await moved()
    assert checked == [True]
    assert watch is not None
    assert not watch._heap


async def test_no_deadline_one_block_carries_stops_another_blocks() -> None:
    """(#58) A NaN deadline on top of the shared heap ordered against nothing,
    and every other block on the loop was never cut; a 400-digit one armed a
    loop timer the loop could not compute a wait for. NaN is refused
    (``ValueError``); an infinite or 400-digit deadline, given or moved to, is
    held far away; blocks beside them are cut at their own deadlines."""
    with pytest.raises(ValueError, match="not NaN"):
        timers.timeout_at(float("nan"))
    held = asyncio.Event()
    all_in = asyncio.Event()
    entered = 0

    async def far(when: float, moved_to: float | None = None) -> None:
        nonlocal entered
        with timers.timeout_at(when) as timer:
            if moved_to is not None:
                timer.reschedule(moved_to)
            entered += 1
            if entered == 6:
                all_in.set()
            await held.wait()
        assert not timer.expired()

    hold = [asyncio.create_task(far(when)) for when in (math.inf, 10**400, 1e300)]
    hold.append(asyncio.create_task(far(now() + FAR, moved_to=10**400)))
    hold.append(asyncio.create_task(far(now() + FAR, moved_to=math.inf)))
    hold.append(asyncio.create_task(far(now() + FAR, moved_to=math.nan)))
    await all_in.wait()
    for _ in range(3):  # each cut at its own near deadline, again and again
        with pytest.raises(TimeoutError):
            async with ours(now() + NEAR):
                await asyncio.sleep(FAR)
    with pytest.raises(TimeoutError):  # a deadline already past, beside them
        async with ours(-(10**400)):
            await asyncio.sleep(FAR)
    held.set()
    await asyncio.gather(*hold)


@pytest.mark.parametrize("seed", range(12))
async def test_bad_deadlines_mixed_in_at_random_delay_no_near_one(seed: int) -> None:
    """(#58) Blocks entering in random order, some with a near deadline, some
    with an infinite, 400-digit or far one, some moved to such a value (or to
    NaN, which a move ignores), and NaN refused as it comes: every near block
    is cut no earlier than its deadline, and no far one is cut."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    early = getattr(loop, "_clock_resolution", 1e-3)
    bad: list[float] = [math.inf, 10**400, 1e300, 10**19]
    release = asyncio.Event()
    outcomes: dict[int, tuple[str, float, float]] = {}

    async def block(n: int, when: float, moved_to: float | None) -> None:
        try:
            with timers.timeout_at(when) as timer:
                if moved_to is not None:
                    timer.reschedule(moved_to)
                if when > now() + FAR / 2:
                    await release.wait()
                else:
                    await asyncio.sleep(FAR)
            outcomes[n] = ("done", when, now())
        except TimeoutError:
            outcomes[n] = ("cut", when, now())

    tasks = []
    for n in range(60):
        roll = rng.random()
        if roll < 0.1:
            with pytest.raises(ValueError, match="not NaN"):
                timers.timeout_at(math.nan)
            continue
        if roll < 0.5:
            when, moved = now() + rng.uniform(0, 0.05), None
        elif roll < 0.75:
            when, moved = rng.choice(bad), None
        else:
            when, moved = now() + FAR, rng.choice([*bad, math.nan])
        tasks.append((n, when, asyncio.create_task(block(n, when, moved))))
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    near = [(n, task) for n, when, task in tasks if when < now() + FAR / 2]
    await asyncio.wait_for(asyncio.gather(*(task for _, task in near)), FAR / 2)
    release.set()
    await asyncio.gather(*(task for _, _, task in tasks))
    for n, when, _ in tasks:
        kind, _, at = outcomes[n]
        assert kind == ("cut" if when < FAR / 2 + now() else "done"), n
        if kind == "cut":
            assert at >= when - early, (n, at, when)
