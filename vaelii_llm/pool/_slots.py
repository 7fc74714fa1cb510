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
import time
from collections.abc import Sequence
from typing import Final
from typing import Protocol

from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMPoolTimeout

__all__ = ["POLL_S", "POOL_LABEL", "Ledger", "LocalSlots", "Slots", "Spread"]

POLL_S: Final = 0.2
"""How often callers waiting on a shared pool look again when no word came: a
lease that expired (a killed process) or a cool-down that ended pushes none."""

POOL_LABEL: Final = "the vote pool"
"""How the pool is named in the errors it raises."""


class Spread:
    """The turns of one vote: how many each host has taken, so the next turn
    goes to a host the vote has used least."""

    __slots__ = ("uses",)

    def __init__(self, hosts: int) -> None:
        self.uses = [0] * hosts


class Ledger:
    """One pool's book in this process: each host's name, slots and held
    count, its cool-down, the calls out and waiting, and the word that
    something changed (a slot back, a cool-down over, the pool closed)."""

    __slots__ = (
        "acquire_timeout_ms",
        "changed",
        "closed",
        "cool_timers",
        "cool_until",
        "cooldown_ms",
        "held",
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
    ) -> None:
        self.names = names
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

    def hand_out(
        self, index: int, lease: str | None, spread: Spread | None
    ) -> tuple[int, str | None]:
        """Count host ``index`` out to a call (no await between choice and count)."""
        self.held[index] += 1
        self.outstanding += 1
        if spread is not None:
            spread.uses[index] += 1
        return index, lease

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

    async def acquire(self, spread: Spread | None) -> tuple[int, str | None]:
        """A host counted out to the caller (in the ledger), and its lease (None
        in process), waiting up to the acquire timeout. Raises
        :class:`~vaelii_llm.errors.LLMPoolTimeout`, or
        :class:`~vaelii_llm.errors.LLMClosed` when the pool closes."""
        ...

    def release(self, index: int, lease: str | None) -> None:
        """Give back a slot the ledger has counted back, waking a waiting call."""
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

    __slots__ = ("_book", "_line")

    shared: Final = False

    def __init__(self, book: Ledger) -> None:
        self._book = book
        self._line = asyncio.Lock()

    def _choose(self, spread: Spread | None) -> int | None:
        """The host to hand out, or None when none is free.

        The same rule as the take script of :mod:`vaelii_llm.pool._redis_slots`.
        """
        book = self._book
        held, slots = book.held, book.slots
        if len(slots) == 1:
            return 0 if held[0] < slots[0] else None
        cooling = book.cooling()
        pass_over = not all(cooling)
        best: int | None = None
        best_key = (0, 0)
        for n, free in enumerate(slots):
            if held[n] >= free or (pass_over and cooling[n]):
                continue
            key = (spread.uses[n] if spread is not None else 0, held[n])
            if best is None or key < best_key:
                best, best_key = n, key
        return best

    async def acquire(self, spread: Spread | None) -> tuple[int, str | None]:
        book = self._book
        if book.waiting == 0 and not self._line.locked():
            index = self._choose(spread)
            if index is not None:
                return book.hand_out(index, None, spread)
        return await self._wait_in_line(spread)

    async def _wait_in_line(self, spread: Spread | None) -> tuple[int, str | None]:
        # First come, first served: the line (an asyncio.Lock, which wakes its
        # waiters in order and lets no newcomer past them) lets one call at a
        # time look for a free host, so a token handed back goes to the call
        # that has waited longest, never to one that arrived in the meantime.
        # asyncio.timeout_at runs the waits in this task; a token is counted
        # out with no await between the choice and the count.
        book = self._book
        loop = asyncio.get_running_loop()
        deadline = loop.time() + book.acquire_timeout_ms / 1000
        book.waiting += 1
        try:
            async with asyncio.timeout_at(deadline), self._line:
                while True:
                    if book.closed:
                        raise LLMClosed(POOL_LABEL, waited=True)
                    index = self._choose(spread)
                    if index is not None:
                        return book.hand_out(index, None, spread)
                    await book.changed_future()
        except TimeoutError as exc:
            raise LLMPoolTimeout(POOL_LABEL, book.acquire_timeout_ms) from exc
        finally:
            book.waiting -= 1

    def release(self, index: int, lease: str | None) -> None:
        self._book.wake()

    def cool(self, index: int) -> None:
        pass  # the ledger's cool-down is every process's

    def held_everywhere(self) -> Sequence[int]:
        return self._book.held

    async def counts(self) -> tuple[list[int], list[bool]]:
        return list(self._book.held), [False] * len(self._book.slots)

    async def aclose(self) -> None:
        pass  # nothing opened
