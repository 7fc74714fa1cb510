"""Where a pool's per-host slots live, behind one interface.

A :class:`~vaelii_llm.pool._pool.Pool` keeps its book of what this process holds
(:class:`Ledger`: the calls out and waiting, each host's held count and
cool-down) and asks its :class:`Slots` for a host to hand out: the
in-process :class:`LocalSlots` here, or
:class:`vaelii_llm.pool._redis_slots.RedisSlots`, shared through Redis by every
process naming the same pool. Both choose a host by one rule: a free host not
cooling after an unreachable call, the one the caller's vote has used least,
then the least busy.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final
from typing import Protocol

from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMPoolTimeout
from vaelii_llm.pool._rates import Buckets
from vaelii_llm.pool._rates import Seen
from vaelii_llm.pool._rates import held_by

__all__ = [
    "AFFINITY_KEPT",
    "AGING_MS",
    "POLL_S",
    "POOL_LABEL",
    "Ask",
    "Ledger",
    "LocalSlots",
    "Slots",
    "Spread",
]

AGING_MS: Final = 5_000
"""How long a waiting take waits to gain one step of priority: a ``"batch"``
take waiting this long ranks with an ``"interactive"`` one that just came."""

AFFINITY_KEPT: Final = 10_000
"""Conversations one process remembers the host of (the last used kept)."""

POLL_S: Final = 0.2
"""How often callers waiting on a shared pool look again when no word came: a
lease that expired (a killed process) or a cool-down that ended pushes none."""

POOL_LABEL: Final = "the vote pool"
"""How the pool is named in the errors it raises."""


def refused_waiting(max_waiting: int) -> LLMPoolTimeout:
    """The refusal of a take past the pool's ``max_waiting``: at once, typed."""
    return LLMPoolTimeout(
        POOL_LABEL, 0, held_by=f"its max_waiting: {max_waiting} calls waiting already"
    )


class Spread:
    """The turns of one vote: how many each host has taken, so the next turn
    goes to a host the vote has used least."""

    __slots__ = ("uses",)

    def __init__(self, hosts: int) -> None:
        self.uses = [0] * hosts


class Ask:
    """One take's wishes: its vote's :class:`Spread`, its estimate of the
    turn's input tokens, its priority, its conversation; and, while it waits,
    its rank (lower first) and what held it last."""

    __slots__ = ("affinity", "priority", "rank", "spread", "tokens", "why")

    def __init__(
        self,
        spread: Spread | None = None,
        tokens: int = 0,
        priority: int = 0,
        affinity: str | None = None,
    ) -> None:
        self.spread = spread
        self.tokens = tokens
        self.priority = priority
        self.affinity = affinity
        self.rank = (0.0, 0)
        self.why: str | None = None

    def queue(self, seq: int) -> None:
        """Rank this take among the waiters, from now."""
        self.rank = (time.monotonic() * 1000 - self.priority * AGING_MS, seq)


class Ledger:
    """One pool's book in this process: each host's name, slots and held
    count, its cool-down, the calls out and waiting, and the word that
    something changed (a slot back, a cool-down over, the pool closed)."""

    __slots__ = (
        "acquire_timeout_ms",
        "affinity",
        "buckets",
        "changed",
        "closed",
        "cool_timers",
        "cool_until",
        "cooldown_ms",
        "held",
        "max_waiting",
        "names",
        "outstanding",
        "slots",
        "waiting",
    )

    def __init__(
        self,
        names: tuple[str, ...],
        slots: tuple[int, ...],
        *,
        acquire_timeout_ms: int,
        cooldown_ms: int,
        buckets: Buckets | None = None,
        max_waiting: int | None = None,
    ) -> None:
        self.names = names
        self.buckets = buckets
        self.max_waiting = max_waiting
        self.affinity: OrderedDict[str, int] = OrderedDict()
        self.slots = slots
        self.held = [0] * len(slots)
        self.cool_until = [0.0] * len(slots)
        self.cool_timers: dict[int, asyncio.Handle] = {}
        self.cooldown_ms = cooldown_ms
        self.acquire_timeout_ms = acquire_timeout_ms
        self.changed: asyncio.Future[None] | None = None
        self.outstanding = 0
        self.waiting = 0
        self.closed = False

    def cooling(self) -> list[bool]:
        """Whether this process sees each host cooling now."""
        if not self.cool_timers:
            return [False] * len(self.slots)
        now = time.monotonic()
        return [until > now for until in self.cool_until]

    def changed_future(self) -> asyncio.Future[None]:
        """The future :meth:`wake` sets next."""
        if self.changed is None or self.changed.done():
            self.changed = asyncio.get_running_loop().create_future()
        return self.changed

    def wake(self) -> None:
        """Tell the calls waiting that something changed."""
        changed = self.changed
        if changed is not None and not changed.done():
            changed.set_result(None)

    def hand_out(self, index: int, lease: str | None, ask: Ask) -> tuple[int, str | None]:
        """Count host ``index`` out to a call (no await between choice and count)."""
        self.held[index] += 1
        self.outstanding += 1
        if ask.spread is not None:
            ask.spread.uses[index] += 1
        if ask.affinity is not None:
            self.affinity[ask.affinity] = index
            self.affinity.move_to_end(ask.affinity)
            if len(self.affinity) > AFFINITY_KEPT:
                self.affinity.popitem(last=False)
        return index, lease

    def refuse_waiting(self) -> None:
        """Raise :class:`~vaelii_llm.errors.LLMPoolTimeout` at once when a take may not wait."""
        if self.max_waiting is not None and self.waiting >= self.max_waiting:
            raise refused_waiting(self.max_waiting)

    def timeout(self, why: str | None) -> LLMPoolTimeout:
        """The timeout of a take ``why`` held last (``r3``: host 3's requests...)."""
        named = None
        if why and self.buckets is not None:
            index = int(why[1:])
            named = held_by(self.names[index], why[0], self.buckets.rates[index])
        return LLMPoolTimeout(POOL_LABEL, self.acquire_timeout_ms, held_by=named)

    def count_back(self, index: int) -> None:
        """Count host ``index`` back in (no await: before any cancellation can land)."""
        self.held[index] -= 1
        self.outstanding -= 1

    def cool(self, index: int) -> None:
        """Pass host ``index`` over for :attr:`cooldown_ms` in this process."""
        self.cool_until[index] = time.monotonic() + self.cooldown_ms / 1000
        self._cool_ended(index)

    def _cool_ended(self, index: int) -> None:
        # When a cool-down ends, the caller waiting first may take that host
        # again. A loop's clock may run a little ahead of time.monotonic (uvloop
        # rounds to milliseconds), so a timer that fires early is set again.
        earlier = self.cool_timers.pop(index, None)
        if earlier is not None:
            earlier.cancel()
        left = self.cool_until[index] - time.monotonic()
        if left > 0:
            loop = asyncio.get_running_loop()
            self.cool_timers[index] = loop.call_later(left + 0.001, self._cool_ended, index)
        else:
            self.cool_timers[index] = asyncio.get_running_loop().call_soon(self.wake)

    def close(self) -> None:
        """Mark the pool closed and wake every waiting call."""
        self.closed = True
        self.wake()
        for timer in self.cool_timers.values():
            timer.cancel()


class Slots(Protocol):
    """What a pool needs of where its slots live."""

    @property
    def shared(self) -> bool:
        """Whether other processes hold slots of the same hosts."""
        ...

    async def acquire(self, ask: Ask) -> tuple[int, str | None]:
        """A host counted out to the caller (in the ledger), and its lease (None
        in process), waiting up to the acquire timeout. Raises
        :class:`~vaelii_llm.errors.LLMPoolTimeout`,
        at once when ``max_waiting`` calls wait already, or
        :class:`~vaelii_llm.errors.LLMClosed` when the pool closes."""
        ...

    def release(self, index: int, lease: str | None, seen: Seen | None, charged: int) -> None:
        """Give back a slot the ledger has counted back, waking a waiting call;
        ``seen`` is what the turn told of the host's rates, ``charged`` the
        tokens its take was charged."""
        ...

    def cool(self, index: int) -> None:
        """Share host ``index``'s cool-down (the ledger has it already)."""
        ...

    def held_everywhere(self) -> Sequence[int] | None:
        """Each host's slots held by every process, if known without I/O."""
        ...

    async def counts(self) -> tuple[list[int], list[bool]]:
        """Per host: the slots every process holds, and whether it is cooling for all."""
        ...

    async def aclose(self) -> None:
        """Give back what is still held and close what the slots opened."""
        ...


class LocalSlots:
    """A pool's slots in this process: its ledger is all there is."""

    __slots__ = ("_book", "_line", "_numbered", "_timer")

    shared: Final = False

    def __init__(self, book: Ledger) -> None:
        self._book = book
        self._line: list[Ask] = []
        self._numbered = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def _choose(self, ask: Ask) -> int | None:
        """The host to hand out, or None when none is free (``ask.why`` then
        names the rate that held a free host, if one did).

        The same rule as the take script of :mod:`vaelii_llm.pool._redis_slots`.
        """
        book = self._book
        held, slots, buckets = book.held, book.slots, book.buckets
        if len(slots) == 1 and buckets is None:
            return 0 if held[0] < slots[0] else None
        cooling = book.cooling()
        pass_over = not all(cooling)
        now = time.monotonic() * 1000
        spread = ask.spread
        best: int | None = None
        best_key = (0, 0)
        ask.why = None
        for n, free in enumerate(slots):
            if held[n] >= free or (pass_over and cooling[n]):
                continue
            if buckets is not None:
                why = buckets.why(n, ask.tokens, now)
                if why is not None:
                    ask.why = ask.why or f"{why}{n}"
                    continue
            key = (spread.uses[n] if spread is not None else 0, held[n])
            if best is None or key < best_key:
                best, best_key = n, key
        if best is not None and ask.affinity is not None:
            last = book.affinity.get(ask.affinity)
            if last is not None and last != best and held[last] < slots[last]:
                usable = not (pass_over and cooling[last])
                if buckets is not None:
                    usable = usable and buckets.why(last, ask.tokens, now) is None
                if usable and (spread is None or spread.uses[last] <= best_key[0]):
                    best = last
        if best is not None and buckets is not None:
            buckets.charge(best, ask.tokens)
        return best

    async def acquire(self, ask: Ask) -> tuple[int, str | None]:
        book = self._book
        if not self._line:
            index = self._choose(ask)
            if index is not None:
                return book.hand_out(index, None, ask)
        return await self._wait_in_line(ask)

    def _first(self) -> Ask:
        return min(self._line, key=lambda ask: ask.rank)

    async def _wait_in_line(self, ask: Ask) -> tuple[int, str | None]:
        # By rank: the waiter ranked first (the highest priority, aged, then
        # the longest waiting) looks for a free host at each change, the
        # others wait behind it, and no newcomer of the same priority gets
        # past it. asyncio.timeout_at runs the waits in this task; a token is
        # counted out with no await between the choice and the count.
        book = self._book
        book.refuse_waiting()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + book.acquire_timeout_ms / 1000
        book.waiting += 1
        ask.queue(next(self._numbered))
        self._line.append(ask)
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    if book.closed:
                        raise LLMClosed(POOL_LABEL, waited=True)
                    changed = book.changed_future()
                    first = self._first()
                    if first is ask:
                        index = self._choose(ask)
                        if index is not None:
                            return book.hand_out(index, None, ask)
                        if ask.why is not None and book.buckets is not None:
                            self._wake_when_ready(ask)
                    else:
                        ask.why = first.why  # what holds the line holds this one
                    # shielded: a waiter's own timeout or cancellation must not
                    # cancel the one future every waiter awaits
                    await asyncio.shield(changed)
        except TimeoutError as exc:
            raise book.timeout(ask.why) from exc
        finally:
            book.waiting -= 1
            self._line.remove(ask)
            book.wake()  # the next one ranked first looks now

    def _wake_when_ready(self, ask: Ask) -> None:
        # A free host held by its rate: look again when its bucket allows.
        book, buckets = self._book, self._book.buckets
        assert buckets is not None
        now = time.monotonic() * 1000
        free = [n for n, slots in enumerate(book.slots) if book.held[n] < slots]
        wait = min((buckets.ready_in(n, ask.tokens, now) for n in free), default=None)
        if wait is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(wait / 1000 + 0.001, book.wake)

    def release(self, index: int, lease: str | None, seen: Seen | None, charged: int) -> None:
        buckets = self._book.buckets
        if seen is not None and buckets is not None:
            buckets.settle(index, seen, charged, time.monotonic() * 1000)
        self._book.wake()

    def cool(self, index: int) -> None:
        pass  # the ledger's cool-down is every process's

    def held_everywhere(self) -> Sequence[int]:
        return self._book.held

    async def counts(self) -> tuple[list[int], list[bool]]:
        return list(self._book.held), [False] * len(self._book.slots)

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
