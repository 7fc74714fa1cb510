"""The token pool: a fixed multiset of providers, one token per call a host
takes at once, its slots kept in this process or shared through Redis.

``async with pool.provider() as p:`` takes one for the length of a call and
puts it back on every exit: normally, by exception, and by cancellation while
waiting for a token or while holding one. Calls in one process are served
first come, first served. A pool leaking tokens one at a time shows only as
calls waiting longer, so ``pool.outstanding`` counts checked-out providers on
the pool's own counter: a nonzero count on an idle pool is a leak.

A pool chooses the host of each call: a free host not cooling down after an
unreachable call, the one the caller's vote has used least, then the least
busy. With ``redis_url`` the same choice is made in Redis, over the slots every
process holds (:mod:`vaelii_llm._redis_slots`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from vaelii_llm._protocol import Provider
from vaelii_llm.config import hide_userinfo
from vaelii_llm.errors import LLMBadHosts, LLMClosed, LLMPoolTimeout, LLMUnreachable

if TYPE_CHECKING:
    from vaelii_llm._redis_slots import RedisSlots

__all__ = [
    "DEFAULT_ACQUIRE_TIMEOUT_MS",
    "DEFAULT_COOLDOWN_MS",
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_POOL_NAME",
    "POOL_LABEL",
    "HostStatistics",
    "Pool",
    "PoolStatistics",
    "Spread",
]

DEFAULT_ACQUIRE_TIMEOUT_MS: Final = 5 * 60 * 1000
"""How long a call waits for a provider: five minutes, a cold model load and the
queue of calls behind it."""

DEFAULT_COOLDOWN_MS: Final = 5_000
"""How long a host whose call was unreachable is passed over."""

DEFAULT_LEASE_TTL_MS: Final = 30_000
"""How long a slot held in Redis outlives a process that stopped renewing it."""

DEFAULT_POOL_NAME: Final = "default"
"""The name a shared pool's Redis keys carry when none is given."""

POLL_S: Final = 0.2
"""How often callers waiting on a shared pool look again when no word came: a
lease that expired (a killed process) or a cool-down that ended pushes none."""

POOL_LABEL: Final = "the vote pool"
"""How the pool is named in the errors it raises."""

P = TypeVar("P", bound=Provider)


@dataclass(frozen=True, slots=True)
class HostStatistics:
    """One host of a pool, right now."""

    host: str
    """The host's name: its base URL, or the provider's type and place."""
    slots: int
    """Calls at once the host takes."""
    held: int
    """Slots this process holds."""
    held_everywhere: int | None
    """Slots every process holds: read from Redis by :meth:`Pool.read_statistics`,
    None in :meth:`Pool.statistics` of a shared pool, ``held`` in process."""
    cooling: bool
    """Passed over after an unreachable call, for the pool's ``cooldown_ms``."""


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    """A snapshot of a pool. ``idle + outstanding == size`` whenever no task runs
    (in a shared pool, as this process sees it; :meth:`Pool.read_statistics`
    counts every process)."""

    size: int
    """Tokens the pool was built with."""
    idle: int
    """Tokens free to hand out."""
    outstanding: int
    """Tokens checked out by calls in progress (in this process)."""
    waiters: int
    """Calls waiting for a token (in this process)."""
    hosts: tuple[HostStatistics, ...] = ()
    """Each distinct host, in the order the tokens first name it."""


class Spread:
    """The turns of one vote: how many each host has taken, so the next turn
    goes to a host the vote has used least."""

    __slots__ = ("uses",)

    def __init__(self, hosts: int) -> None:
        self.uses = [0] * hosts


def host_name(provider: Provider, index: int) -> str:
    """A host's name, the same in every process: the provider's ``base_url``, else
    its type and its place among the pool's distinct providers."""
    url = getattr(provider, "base_url", None)
    if isinstance(url, str) and url:
        return hide_userinfo(url)
    kind = type(provider)
    return f"{kind.__module__}.{kind.__qualname__}#{index}"


class Pool(Generic[P]):
    """A fixed multiset of providers, one token per call a host takes at once.

    ``tokens`` may name one provider several times (``[gpu1, gpu1, gpu2]`` lets
    two calls at once reach gpu1); each distinct provider is a host, and the
    pool closes each once when it closes. It refuses an empty list with
    :class:`~vaelii_llm.errors.LLMBadHosts` rather than build a pool every call
    would wait out, an entry that is not a provider with TypeError, and a
    negative ``acquire_timeout_ms`` with ValueError (0 means: only a free
    token, never wait).

    ``redis_url`` keeps the slots in that Redis instead of in this process, so
    every process building the same pool (same ``name``, same hosts) shares
    one limit per host; it needs the ``redis`` extra. A slot held there
    expires ``lease_ttl_ms`` after its process stops renewing it (killed, say).
    Hosts must then have distinct names (:class:`HostStatistics`), or
    :class:`~vaelii_llm.errors.LLMBadHosts` is raised.

    A call that leaves its block with :class:`~vaelii_llm.errors.LLMUnreachable`
    sends its host to a cool-down: for ``cooldown_ms`` (0: never) other hosts
    are chosen while any host is not cooling, in every process sharing it.

    A pool is an async context manager: leaving it closes the pool (see
    :meth:`aclose`). It belongs to the event loop that first waits on it.
    """

    __slots__ = (
        "_acquire_timeout_ms",
        "_changed",
        "_closed",
        "_cool_timers",
        "_cool_until",
        "_cooldown_ms",
        "_held",
        "_hosts",
        "_line",
        "_names",
        "_outstanding",
        "_shared",
        "_slots",
        "_tokens",
        "_waiting",
        "_watcher",
    )

    def __init__(
        self,
        tokens: Iterable[P],
        *,
        acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
        redis_url: str | None = None,
        name: str = DEFAULT_POOL_NAME,
        lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        cooldown_ms: int = DEFAULT_COOLDOWN_MS,
    ) -> None:
        listed = list(tokens)
        if not listed:
            raise LLMBadHosts(
                "a pool needs at least one provider; with none, every call would "
                "wait out its acquire timeout"
            )
        for token in listed:
            if not isinstance(token, Provider):
                raise TypeError(f"a pool holds providers, not {type(token).__name__}")
        _milliseconds("acquire_timeout_ms", acquire_timeout_ms, 0)
        _milliseconds("cooldown_ms", cooldown_ms, 0)
        _milliseconds("lease_ttl_ms", lease_ttl_ms, 3)
        self._tokens: tuple[P, ...] = tuple(listed)
        distinct = {id(token): token for token in listed}
        self._hosts: tuple[P, ...] = tuple(distinct.values())
        counts = dict.fromkeys(distinct, 0)
        for token in listed:
            counts[id(token)] += 1
        self._slots: tuple[int, ...] = tuple(counts.values())
        self._names = tuple(host_name(host, n) for n, host in enumerate(self._hosts))
        self._held = [0] * len(self._hosts)
        self._cool_until = [0.0] * len(self._hosts)
        self._cool_timers: dict[int, asyncio.Handle] = {}
        self._cooldown_ms = cooldown_ms
        self._acquire_timeout_ms = acquire_timeout_ms
        self._line = asyncio.Lock()
        self._changed: asyncio.Future[None] | None = None
        self._outstanding = 0
        self._waiting = 0
        self._closed = False
        self._shared: RedisSlots | None = None
        self._watcher: asyncio.Future[None] | None = None
        if redis_url is not None:
            if not isinstance(name, str) or not name.strip():
                raise ValueError("a shared pool's name is a non-blank string")
            repeated = sorted({n for n in self._names if self._names.count(n) > 1})
            if repeated:
                raise LLMBadHosts(
                    "a pool sharing its slots through Redis names each host once; "
                    "these hosts come twice",
                    ", ".join(repeated),
                )
            slots = importlib.import_module("vaelii_llm._redis_slots")
            self._shared = slots.RedisSlots(
                redis_url,
                name.strip(),
                self._names,
                self._slots,
                lease_ttl_ms=lease_ttl_ms,
                cooldown_ms=cooldown_ms,
            )

    # -- what it holds -----------------------------------------------------

    @property
    def size(self) -> int:
        """How many tokens the pool holds in all: the most calls at once."""
        return len(self._tokens)

    @property
    def outstanding(self) -> int:
        """Tokens checked out right now. Nonzero on an idle pool means a leak."""
        return self._outstanding

    @property
    def acquire_timeout_ms(self) -> int:
        """How long a call waits for a token before it gives up."""
        return self._acquire_timeout_ms

    @property
    def providers(self) -> tuple[P, ...]:
        """The distinct providers, in the order the tokens first name them."""
        return self._hosts

    @property
    def shared(self) -> bool:
        """Whether the slots live in Redis, shared with other processes."""
        return self._shared is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has run."""
        return self._closed

    def statistics(self) -> PoolStatistics:
        """Size, free tokens, outstanding tokens, waiting calls and each host, as
        this process holds them (no I/O; see :meth:`read_statistics`)."""
        return self._snapshot(None, self._cooling())

    async def read_statistics(self) -> PoolStatistics:
        """:meth:`statistics`, with each host's ``held_everywhere`` (and ``idle``)
        counted over every process sharing the slots, read from Redis; the same
        as :meth:`statistics` for a pool in process. Raises
        :class:`~vaelii_llm.errors.LLMUnreachable` when Redis fails."""
        if self._shared is None:
            return self.statistics()
        everywhere, cooling = await self._shared.counts()
        local = self._cooling()
        return self._snapshot(everywhere, [a or b for a, b in zip(cooling, local, strict=True)])

    def _snapshot(
        self, everywhere: Sequence[int] | None, cooling: Sequence[bool]
    ) -> PoolStatistics:
        if everywhere is None and self._shared is None:
            everywhere = self._held
        hosts = tuple(
            HostStatistics(
                host=self._names[n],
                slots=self._slots[n],
                held=self._held[n],
                held_everywhere=None if everywhere is None else everywhere[n],
                cooling=cooling[n],
            )
            for n in range(len(self._hosts))
        )
        busy = self._outstanding if everywhere is None else sum(everywhere)
        return PoolStatistics(
            size=len(self._tokens),
            idle=max(len(self._tokens) - busy, 0),
            outstanding=self._outstanding,
            waiters=self._waiting,
            hosts=hosts,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        state = "closed" if self._closed else "open"
        where = " shared" if self._shared is not None else ""
        return (
            f"<Pool {state}{where} size={s.size} idle={s.idle} "
            f"outstanding={s.outstanding} waiters={s.waiters}>"
        )

    # -- checking a provider out -------------------------------------------

    def provider(self) -> _Checkout[P]:
        """``async with pool.provider() as p:`` holds one token for the block.

        Calls are served first come, first served: a token handed back goes to
        the call that has waited longest, never to one arriving in that instant
        (in a shared pool: among the calls of this process that had to wait).
        Waits up to ``acquire_timeout_ms`` for a token, then raises
        :class:`~vaelii_llm.errors.LLMPoolTimeout` (an ``LLMTimeout`` whose
        ``phase`` is ``acquire``). The token goes back on every exit from the
        block: normally, by exception, and by cancellation. A call cancelled
        while it waits takes no token, even when a token was freed for it in
        the same instant (the next waiter takes it). Entering a closed pool,
        or being woken because the pool closed, raises
        :class:`~vaelii_llm.errors.LLMClosed`. A shared pool whose Redis fails
        or does not answer inside the acquire timeout raises
        :class:`~vaelii_llm.errors.LLMUnreachable` naming the Redis.
        """
        return _Checkout(self, None)

    def _spread(self) -> Spread:
        """A vote's record of the hosts its turns took (see :meth:`_checkout`)."""
        return Spread(len(self._hosts))

    def _checkout(self, spread: Spread | None) -> _Checkout[P]:
        """:meth:`provider`, choosing among free hosts the one ``spread`` has used least."""
        return _Checkout(self, spread)

    def _cooling(self) -> list[bool]:
        if not self._cool_timers:
            return [False] * len(self._hosts)
        now = time.monotonic()
        return [until > now for until in self._cool_until]

    def _choose(self, spread: Spread | None) -> int | None:
        """The host to hand out in process, or None when none is free.

        The same rule as the take script of :mod:`vaelii_llm._redis_slots`.
        """
        held, slots = self._held, self._slots
        if len(slots) == 1:
            return 0 if held[0] < slots[0] else None
        cooling = self._cooling()
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

    async def _acquire(self, spread: Spread | None) -> tuple[int, str | None]:
        if self._closed:
            raise LLMClosed(POOL_LABEL)
        if self._shared is not None:
            return await self._acquire_shared(spread)
        if self._waiting == 0 and not self._line.locked():
            index = self._choose(spread)
            if index is not None:
                return self._hand_out(index, None, spread)
        return await self._wait_in_line(spread)

    async def _wait_in_line(self, spread: Spread | None) -> tuple[int, str | None]:
        # First come, first served: the line (an asyncio.Lock, which wakes its
        # waiters in order and lets no newcomer past them) lets one call at a
        # time look for a free host, so a token handed back goes to the call
        # that has waited longest, never to one that arrived in the meantime.
        # asyncio.timeout_at runs the waits in this task; a token is counted
        # out with no await between the choice and the count.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._acquire_timeout_ms / 1000
        self._waiting += 1
        try:
            async with asyncio.timeout_at(deadline), self._line:
                while True:
                    if self._closed:
                        raise LLMClosed(POOL_LABEL, waited=True)
                    index = self._choose(spread)
                    if index is not None:
                        return self._hand_out(index, None, spread)
                    await self._changed_future()
        except TimeoutError as exc:
            raise LLMPoolTimeout(POOL_LABEL, self._acquire_timeout_ms) from exc
        finally:
            self._waiting -= 1

    async def _acquire_shared(self, spread: Spread | None) -> tuple[int, str | None]:
        # First come, first served in this process: a call that finds others
        # waiting waits behind them. Every wake-up (a release here or anywhere,
        # a poll, a close) wakes the waiters in the order they queued, and
        # their takes reach Redis in one script, in that order.
        shared = self._shared
        assert shared is not None
        uses = spread.uses if spread is not None else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._acquire_timeout_ms / 1000
        # The budget ran out on a Redis that never answered: unreachable. Once it
        # has answered "every host is full", the pool is busy.
        answered = False
        try:
            if self._waiting == 0:
                # With no timeout, one try, bounded by Redis's own.
                until = deadline if self._acquire_timeout_ms else math.inf
                cooling = self._cooling() if self._cool_timers else None
                index, lease = await self._take(shared, shared.preferences(uses, cooling), until)
                answered = True
                if index >= 0:
                    return self._hand_out(index, lease, spread)
                if self._acquire_timeout_ms == 0:
                    raise LLMPoolTimeout(POOL_LABEL, 0)
            self._waiting += 1
            try:
                self._watch()
                async with asyncio.timeout_at(deadline):
                    while True:
                        # Shielded: one waiter cancelled must not wake the rest.
                        await asyncio.shield(self._changed_future())
                        if self._closed:
                            raise LLMClosed(POOL_LABEL, waited=True)
                        prefs = shared.preferences(uses, self._cooling())
                        index, lease = await self._take(shared, prefs)
                        answered = True
                        if index >= 0:
                            return self._hand_out(index, lease, spread)
            finally:
                self._waiting -= 1
        except TimeoutError as exc:
            if not answered:
                raise LLMUnreachable(
                    shared.label, f"no answer inside the pool's {self._acquire_timeout_ms} ms"
                ) from exc
            raise LLMPoolTimeout(POOL_LABEL, self._acquire_timeout_ms) from exc

    @staticmethod
    async def _take(shared: RedisSlots, prefs: str, until: float = math.inf) -> tuple[int, str]:
        asked = shared.take(prefs, until)
        try:
            return await asked
        except asyncio.CancelledError:
            shared.forget(asked)  # cancelled in the instant its answer came
            raise

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch_redis())

    async def _watch_redis(self) -> None:
        # While calls wait here, block on Redis's word that a slot came free
        # anywhere (or a short poll), and wake them.
        assert self._shared is not None
        while self._waiting > 0 and not self._closed:
            try:
                await self._shared.wait(self._changed_future())
            except LLMUnreachable:
                self._wake()  # each waiter meets the failure in its own take
                await asyncio.sleep(POLL_S)
            else:
                self._wake()

    def _changed_future(self) -> asyncio.Future[None]:
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def _hand_out(
        self, index: int, lease: str | None, spread: Spread | None
    ) -> tuple[int, str | None]:
        self._held[index] += 1
        self._outstanding += 1
        if spread is not None:
            spread.uses[index] += 1
        return index, lease

    def _wake(self) -> None:
        changed = self._changed
        if changed is not None and not changed.done():
            changed.set_result(None)

    def _release(self, index: int, lease: str | None) -> None:
        # No await: the slot is counted back before any cancellation can land.
        self._held[index] -= 1
        self._outstanding -= 1
        if lease is not None and self._shared is not None:
            # The first waiter here looks again once Redis has the slot back.
            self._shared.give_back(index, lease, self._wake)
        else:
            self._wake()

    def _cool(self, index: int) -> None:
        if self._cooldown_ms == 0 or self._closed:
            return
        self._cool_until[index] = time.monotonic() + self._cooldown_ms / 1000
        self._cool_ended(index)
        if self._shared is not None:
            self._shared.cool(index)

    def _cool_ended(self, index: int) -> None:
        # When a cool-down ends, the caller waiting first may take that host
        # again. A loop's clock may run a little ahead of time.monotonic (uvloop
        # rounds to milliseconds), so a timer that fires early is set again.
        earlier = self._cool_timers.pop(index, None)
        if earlier is not None:
            earlier.cancel()
        left = self._cool_until[index] - time.monotonic()
        if left > 0:
            loop = asyncio.get_running_loop()
            self._cool_timers[index] = loop.call_later(left + 0.001, self._cool_ended, index)
        else:
            self._cool_timers[index] = asyncio.get_running_loop().call_soon(self._wake)

    # -- closing -----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the pool and each distinct provider once. Closing twice is harmless.

        Calls waiting for a token wake with
        :class:`~vaelii_llm.errors.LLMClosed`; later calls are refused the same
        way. Calls holding a provider are not waited for: their
        provider closes under them, and their token still comes back (so
        ``outstanding`` still reaches zero); a shared pool gives their slots
        back in Redis now, waits for its releases and closes its connection.
        A provider whose ``aclose`` raises does not stop the others closing; the
        first such exception is raised once all have been tried. Cancelled while
        closing, the providers not yet closed stay open.
        """
        if self._closed:
            return
        self._closed = True
        self._wake()
        for timer in self._cool_timers.values():
            timer.cancel()
        first: Exception | None = None
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self._shared is not None:
            await self._shared.aclose()
        for provider in self._hosts:
            try:
                await provider.aclose()
            except Exception as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first

    async def __aenter__(self) -> Pool[P]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _milliseconds(what: str, value: int, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is a whole number of milliseconds")
    if value < least:
        shown = "cannot be negative" if least == 0 else f"is at least {least}"
        raise ValueError(f"{what} {shown}, got {value}")


class _Checkout(Generic[P]):
    """One ``async with pool.provider()``: holds a token from enter to exit."""

    __slots__ = ("_entered", "_held", "_pool", "_spread")

    def __init__(self, pool: Pool[P], spread: Spread | None) -> None:
        self._pool = pool
        self._spread = spread
        self._held: tuple[int, str | None] | None = None
        self._entered = False

    async def __aenter__(self) -> P:
        if self._entered:
            raise RuntimeError("pool.provider() is entered once; call it again for another")
        self._entered = True
        held = await self._pool._acquire(self._spread)
        self._held = held
        return self._pool._hosts[held[0]]

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._pool._release(*held)
            if isinstance(exc, LLMUnreachable):
                self._pool._cool(held[0])
