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
busy. The pool keeps its book and asks its :class:`~vaelii_llm.pool._slots.Slots`
for a host: in this process, or with ``redis_url`` in Redis, over the slots
every process holds (:mod:`vaelii_llm.pool._slots`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import Generic
from typing import Literal
from typing import TypeVar
from typing import cast

from vaelii_llm._closing import ClosesOnExit
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.pool._rates import Buckets
from vaelii_llm.pool._rates import Rate
from vaelii_llm.pool._rates import seen
from vaelii_llm.pool._slots import POOL_LABEL
from vaelii_llm.pool._slots import Ask
from vaelii_llm.pool._slots import Ledger
from vaelii_llm.pool._slots import LocalSlots
from vaelii_llm.pool._slots import Slots
from vaelii_llm.pool._slots import Spread

__all__ = [
    "DEFAULT_ACQUIRE_TIMEOUT_MS",
    "DEFAULT_COOLDOWN_MS",
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_POOL_NAME",
    "HostStatistics",
    "Pool",
    "PoolStatistics",
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

PRIORITIES: Final = {"interactive": 1, "batch": -1}
"""The named priorities of a take: ``"interactive"`` before the default (0),
``"batch"`` after it."""

Priority = Literal["interactive", "batch"] | int

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


def host_name(provider: Provider, index: int) -> str:
    """A host's name, the same in every process: the provider's ``base_url``, else
    its type and its place among the pool's distinct providers."""
    url = getattr(provider, "base_url", None)
    if isinstance(url, str) and url:
        return hide_userinfo(url)
    kind = type(provider)
    return f"{kind.__module__}.{kind.__qualname__}#{index}"


class Pool(ClosesOnExit, Generic[P]):
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

    ``rates`` maps a provider to its requests and tokens a minute (``(600,
    2_000_000)``; None for either: unlimited), kept as token buckets in this
    process or, with ``redis_url``, in Redis for every process, taken in the
    same step as the slot; the far end's rate-limit headers and a 429's
    ``retry-after`` re-seed them (see :meth:`provider`). ``max_waiting``
    caps the calls waiting for a token (with Redis: in every process): past
    it a take is refused at once with
    :class:`~vaelii_llm.errors.LLMPoolTimeout` (``timeout_ms`` 0).

    A pool is an async context manager: leaving it closes the pool (see
    :meth:`aclose`). It belongs to the event loop that first waits on it.
    """

    __slots__ = ("_book", "_hosts", "_slots", "_tokens")

    def __init__(
        self,
        tokens: Iterable[P],
        *,
        acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
        redis_url: str | None = None,
        name: str = DEFAULT_POOL_NAME,
        lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        cooldown_ms: int = DEFAULT_COOLDOWN_MS,
        rates: Mapping[P, tuple[int | None, int | None]] | None = None,
        max_waiting: int | None = None,
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
        names = tuple(host_name(host, n) for n, host in enumerate(self._hosts))
        if max_waiting is not None:
            _milliseconds("max_waiting", max_waiting, 0, "calls")
        book = self._book = Ledger(
            names,
            tuple(counts.values()),
            acquire_timeout_ms=acquire_timeout_ms,
            cooldown_ms=cooldown_ms,
            buckets=_buckets(self._hosts, rates),
            max_waiting=max_waiting,
        )
        self._slots: Slots = LocalSlots(book)
        if redis_url is not None:
            if not isinstance(name, str) or not name.strip():
                raise ValueError("a shared pool's name is a non-blank string")
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise LLMBadHosts(
                    "a pool sharing its slots through Redis names each host once; "
                    "these hosts come twice",
                    ", ".join(repeated),
                )
            from vaelii_llm.pool._redis_slots import RedisSlots  # the redis extra, on first use

            self._slots = RedisSlots(redis_url, name.strip(), book, lease_ttl_ms=lease_ttl_ms)

    # -- what it holds -----------------------------------------------------

    @property
    def size(self) -> int:
        """How many tokens the pool holds in all: the most calls at once."""
        return len(self._tokens)

    @property
    def outstanding(self) -> int:
        """Tokens checked out right now. Nonzero on an idle pool means a leak."""
        return self._book.outstanding

    @property
    def acquire_timeout_ms(self) -> int:
        """How long a call waits for a token before it gives up."""
        return self._book.acquire_timeout_ms

    @property
    def providers(self) -> tuple[P, ...]:
        """The distinct providers, in the order the tokens first name them."""
        return self._hosts

    @property
    def shared(self) -> bool:
        """Whether the slots live in Redis, shared with other processes."""
        return self._slots.shared

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has run."""
        return self._book.closed

    def statistics(self) -> PoolStatistics:
        """Size, free tokens, outstanding tokens, waiting calls and each host, as
        this process holds them (no I/O; see :meth:`read_statistics`)."""
        return self._snapshot(self._slots.held_everywhere(), self._book.cooling())

    async def read_statistics(self) -> PoolStatistics:
        """:meth:`statistics`, with each host's ``held_everywhere`` (and ``idle``)
        counted over every process sharing the slots, read from Redis; the same
        as :meth:`statistics` for a pool in process. Raises
        :class:`~vaelii_llm.errors.LLMUnreachable` when Redis fails."""
        everywhere, cooling = await self._slots.counts()
        local = self._book.cooling()
        return self._snapshot(everywhere, [a or b for a, b in zip(cooling, local, strict=True)])

    def _snapshot(
        self, everywhere: Sequence[int] | None, cooling: Sequence[bool]
    ) -> PoolStatistics:
        book = self._book
        hosts = tuple(
            HostStatistics(
                host=book.names[n],
                slots=book.slots[n],
                held=book.held[n],
                held_everywhere=None if everywhere is None else everywhere[n],
                cooling=cooling[n],
            )
            for n in range(len(self._hosts))
        )
        busy = book.outstanding if everywhere is None else sum(everywhere)
        return PoolStatistics(
            size=len(self._tokens),
            idle=max(len(self._tokens) - busy, 0),
            outstanding=book.outstanding,
            waiters=book.waiting,
            hosts=hosts,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        state = "closed" if self._book.closed else "open"
        where = " shared" if self._slots.shared else ""
        return (
            f"<Pool {state}{where} size={s.size} idle={s.idle} "
            f"outstanding={s.outstanding} waiters={s.waiters}>"
        )

    # -- checking a provider out -------------------------------------------

    def provider(
        self,
        *,
        priority: Priority = 0,
        affinity: str | None = None,
        tokens: int = 0,
    ) -> _Checkout[P]:
        """``async with pool.provider() as p:`` holds one token for the block.

        Calls of one priority are served first come, first served: a token
        handed back goes to the call that has waited longest, never to one
        arriving in that instant (in a shared pool: among the calls of this
        process that had to wait). ``priority`` (``"interactive"``,
        ``"batch"``, or a number, higher first; default 0) ranks the calls
        waiting, in every process sharing the pool; a waiting call gains one
        step each five seconds it waits, so a low one is never starved.
        ``affinity`` names a conversation: the call goes to the host that
        served its last call when that host has a free slot and its rates
        allow, else anywhere, as without it (a host's prompt cache is kept).
        ``tokens`` is the caller's estimate of the turn's input tokens, taken
        from a rated host's token bucket before the turn starts; when the
        pool has rates ``p`` is a thin stand-in for the host's provider that
        reads each turn's :class:`~vaelii_llm.Usage` and rate-limit headers,
        settling the bucket to them when the block ends.
        Waits up to ``acquire_timeout_ms`` for a token, then raises
        :class:`~vaelii_llm.errors.LLMPoolTimeout` (an ``LLMTimeout`` whose
        ``phase`` is ``acquire``). The token goes back on every exit from the
        block: normally, by exception, and by cancellation. A call cancelled
        while it waits takes no token, even when a token was freed for it in
        the same instant (the next waiter takes it). Entering a closed pool,
        or being woken because the pool closed, raises
        :class:`~vaelii_llm.errors.LLMClosed`. A shared pool whose Redis fails
        or does not answer inside the acquire timeout raises
        :class:`~vaelii_llm.errors.LLMUnreachable` naming the Redis. Waiting
        cannot start past ``max_waiting``: :class:`~vaelii_llm.errors.LLMPoolTimeout`
        at once. A timeout a host's rate caused names it (``held_by``).
        """
        return _Checkout(self, _ask(None, priority, affinity, tokens))

    def _spread(self) -> Spread:
        """A vote's record of the hosts its turns took (see :meth:`_checkout`)."""
        return Spread(len(self._hosts))

    def _checkout(self, spread: Spread | None, tokens: int = 0) -> _Checkout[P]:
        """:meth:`provider`, choosing among free hosts the one ``spread`` has used least."""
        return _Checkout(self, _ask(spread, 0, None, tokens))

    def _release(self, index: int, lease: str | None, turn: _Metered | None, ask: Ask) -> None:
        # No await: the slot is counted back before any cancellation can land.
        self._book.count_back(index)
        found = None if turn is None else seen(turn.response, turn.error)
        self._slots.release(index, lease, found, ask.tokens)

    def _cool(self, index: int) -> None:
        book = self._book
        if book.cooldown_ms == 0 or book.closed:
            return
        book.cool(index)
        self._slots.cool(index)

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
        if self._book.closed:
            return
        self._book.close()
        first: Exception | None = None
        await self._slots.aclose()
        for provider in self._hosts:
            try:
                await provider.aclose()
            except Exception as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first


def _ask(spread: Spread | None, priority: Priority, affinity: str | None, tokens: int) -> Ask:
    if isinstance(priority, str):
        if priority not in PRIORITIES:
            raise ValueError(f"priority is 'interactive', 'batch' or a number, not {priority!r}")
        rank = PRIORITIES[priority]
    elif isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError("priority is 'interactive', 'batch' or a whole number")
    else:
        rank = priority
    if affinity is not None and not isinstance(affinity, str):
        raise TypeError("affinity is a conversation's key, a string")
    _milliseconds("tokens", tokens, 0, "tokens")
    return Ask(spread, tokens, rank, affinity)


def _buckets(
    hosts: Sequence[P], rates: Mapping[P, tuple[int | None, int | None]] | None
) -> Buckets | None:
    """Each host's rates as buckets, or None for a pool with none."""
    if not rates:
        return None
    found = {id(host): rate for host, rate in rates.items()}
    if len(found) != len(rates) or not found.keys() <= {id(host) for host in hosts}:
        raise ValueError("rates names providers of the pool, each once")
    listed = []
    for host in hosts:
        rpm, tpm = found.get(id(host), (None, None))
        for what, value in (("rpm", rpm), ("tpm", tpm)):
            if value is not None:
                _milliseconds(what, value, 1, what)
        listed.append(Rate(rpm, tpm))
    return Buckets(listed)


def _milliseconds(what: str, value: int, least: int, unit: str = "milliseconds") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is a whole number of {unit}")
    if value < least:
        shown = "cannot be negative" if least == 0 else f"is at least {least}"
        raise ValueError(f"{what} {shown}, got {value}")


class _Metered:
    """The provider a call of a rated pool holds: its host's, keeping the
    last response or API error of its turns, for the pool to settle the
    host's buckets with when the call ends."""

    __slots__ = ("_provider", "error", "response")

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self.response: Response | None = None
        self.error: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    async def complete(self, request: Request) -> Response:
        try:
            self.response = await self._provider.complete(request)
        except Exception as exc:
            self.error = exc
            raise
        return self.response

    async def stream(
        self, request: Request, *, deltas: bool = False
    ) -> AsyncGenerator[StreamItem, None]:
        try:
            async with contextlib.aclosing(self._provider.stream(request, deltas=deltas)) as items:
                async for item in items:
                    if isinstance(item, Response):
                        self.response = item
                    yield item
        except Exception as exc:
            self.error = exc
            raise

    async def aclose(self) -> None:
        await self._provider.aclose()

    async def __aenter__(self) -> _Metered:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        await self.aclose()


class _Checkout(Generic[P]):
    """One ``async with pool.provider()``: holds a token from enter to exit."""

    __slots__ = ("_ask", "_entered", "_held", "_pool", "_turn")

    def __init__(self, pool: Pool[P], ask: Ask) -> None:
        self._pool = pool
        self._ask = ask
        self._held: tuple[int, str | None] | None = None
        self._turn: _Metered | None = None
        self._entered = False

    async def __aenter__(self) -> P:
        if self._entered:
            raise RuntimeError("pool.provider() is entered once; call it again for another")
        self._entered = True
        pool = self._pool
        if pool._book.closed:
            raise LLMClosed(POOL_LABEL)
        held = self._held = await pool._slots.acquire(self._ask)  # one await on the hot path
        provider = pool._hosts[held[0]]
        if pool._book.buckets is None:
            return provider
        self._turn = _Metered(provider)
        return cast(P, self._turn)

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        held, self._held = self._held, None
        if held is not None:
            turn = self._turn
            if turn is not None and exc is not None and turn.error is None:
                turn.error = exc
            self._pool._release(*held, turn, self._ask)
            if isinstance(exc, LLMUnreachable):
                self._pool._cool(held[0])
