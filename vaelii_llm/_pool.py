"""The token pool: a fixed multiset of providers held as tokens in an
:class:`asyncio.Queue`, one token per call a host takes at once.

``async with pool.provider() as p:`` takes one for the length of a call and
puts it back on every exit: normally, by exception, and by cancellation while
waiting for a token or while holding one. Calls are served first come, first
served. A pool leaking tokens one at a time shows only as calls waiting
longer, so ``pool.outstanding`` counts checked-out providers on the pool's own
counter: a nonzero count on an idle pool is a leak.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Generic, TypeVar

from vaelii_llm._protocol import Provider
from vaelii_llm.errors import LLMBadHosts, LLMClosed, LLMPoolTimeout

__all__ = ["DEFAULT_ACQUIRE_TIMEOUT_MS", "POOL_LABEL", "Pool", "PoolStatistics"]

DEFAULT_ACQUIRE_TIMEOUT_MS: Final = 5 * 60 * 1000
"""How long a call waits for a provider: five minutes, a cold model load and the
queue of calls behind it."""

POOL_LABEL: Final = "the vote pool"
"""How the pool is named in the errors it raises."""

P = TypeVar("P", bound=Provider)


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    """A snapshot of a pool. ``idle + outstanding == size`` whenever no task runs."""

    size: int
    """Tokens the pool was built with."""
    idle: int
    """Tokens in the queue, ready to hand out."""
    outstanding: int
    """Tokens checked out by calls in progress."""
    waiters: int
    """Calls waiting for a token."""


class _Closed:
    """The marker :meth:`Pool.aclose` queues to wake every waiting call."""

    __slots__ = ()


_CLOSED: Final = _Closed()


class Pool(Generic[P]):
    """A fixed multiset of providers, one queued token per call a host takes at once.

    ``tokens`` may name one provider several times (``[gpu1, gpu1, gpu2]`` lets
    two calls at once reach gpu1); the pool closes each distinct provider once
    when it closes. It refuses an empty list with
    :class:`~vaelii_llm.errors.LLMBadHosts` rather than build a pool every call
    would wait out, an entry that is not a provider with TypeError, and a
    negative ``acquire_timeout_ms`` with ValueError (0 means: only an idle
    token, never wait).

    A pool is an async context manager: leaving it closes the pool (see
    :meth:`aclose`). It belongs to the event loop that first waits on it.
    """

    __slots__ = (
        "_acquire_timeout_ms",
        "_closed",
        "_line",
        "_outstanding",
        "_queue",
        "_tokens",
        "_waiting",
    )

    def __init__(
        self,
        tokens: Iterable[P],
        *,
        acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
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
        if isinstance(acquire_timeout_ms, bool) or not isinstance(acquire_timeout_ms, int):
            raise TypeError("acquire_timeout_ms is a whole number of milliseconds")
        if acquire_timeout_ms < 0:
            raise ValueError(f"acquire_timeout_ms cannot be negative, got {acquire_timeout_ms}")
        self._tokens: tuple[P, ...] = tuple(listed)
        self._acquire_timeout_ms = acquire_timeout_ms
        self._queue: asyncio.Queue[P | _Closed] = asyncio.Queue()
        for token in listed:
            self._queue.put_nowait(token)
        self._line = asyncio.Lock()
        self._outstanding = 0
        self._waiting = 0
        self._closed = False

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
        return tuple({id(token): token for token in self._tokens}.values())

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has run."""
        return self._closed

    def statistics(self) -> PoolStatistics:
        """Size, idle tokens, outstanding tokens and waiting calls, right now."""
        idle = self._queue.qsize() - (1 if self._closed else 0)
        return PoolStatistics(
            size=len(self._tokens),
            idle=idle,
            outstanding=self._outstanding,
            waiters=self._waiting,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        state = "closed" if self._closed else "open"
        return (
            f"<Pool {state} size={s.size} idle={s.idle} "
            f"outstanding={s.outstanding} waiters={s.waiters}>"
        )

    # -- checking a provider out -------------------------------------------

    def provider(self) -> _Checkout[P]:
        """``async with pool.provider() as p:`` holds one token for the block.

        Calls are served first come, first served: a token handed back goes to
        the call that has waited longest, never to one arriving in that instant.
        Waits up to ``acquire_timeout_ms`` for a token, then raises
        :class:`~vaelii_llm.errors.LLMPoolTimeout` (an ``LLMTimeout`` whose
        ``phase`` is ``acquire``). The token goes back on every exit from the
        block: normally, by exception, and by cancellation. A call cancelled
        while it waits takes no token, even when a token was handed to it in
        the same instant (the queue passes that one on to the next waiter).
        Entering a closed pool, or being woken because the pool closed, raises
        :class:`~vaelii_llm.errors.LLMClosed`.
        """
        return _Checkout(self)

    async def _acquire(self) -> P:
        if self._closed:
            raise LLMClosed(POOL_LABEL)
        if self._waiting == 0 and not self._line.locked():
            try:
                token: P | _Closed = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                token = await self._wait_for_token()
        else:  # others are waiting: join the line behind them
            token = await self._wait_for_token()
        if isinstance(token, _Closed):
            # Put the marker back at once so every other waiter wakes too.
            self._queue.put_nowait(token)
            raise LLMClosed(POOL_LABEL, waited=True)
        # No await between the queue handing the token over and this count.
        self._outstanding += 1
        return token

    async def _wait_for_token(self) -> P | _Closed:
        # First come, first served: the line (an asyncio.Lock, which wakes its
        # waiters in order and lets no newcomer past them) admits one call at a
        # time to the queue, so a token handed back goes to the call that has
        # waited longest, never to one that arrived in the meantime.
        # asyncio.timeout_at runs the waits in this task. asyncio.wait_for (3.11)
        # runs them in a task of its own and can drop an item that task took in
        # the same instant the wait was cancelled; Queue.get itself hands a
        # wake-up it cannot use to the next waiter, and leaves the item queued.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._acquire_timeout_ms / 1000
        self._waiting += 1
        try:
            async with asyncio.timeout_at(deadline), self._line:
                return await self._queue.get()
        except TimeoutError as exc:
            raise LLMPoolTimeout(POOL_LABEL, self._acquire_timeout_ms) from exc
        finally:
            self._waiting -= 1

    def _release(self, token: P) -> None:
        # put_nowait on an unbounded queue never blocks and never raises, so
        # the token is back before any cancellation can be delivered.
        self._outstanding -= 1
        self._queue.put_nowait(token)

    # -- closing -----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the pool and each distinct provider once. Closing twice is harmless.

        Calls waiting for a token wake with
        :class:`~vaelii_llm.errors.LLMClosed`; later calls are refused the same
        way. Calls holding a provider are not waited for: their
        provider closes under them, and their token still comes back (so
        ``outstanding`` still reaches zero). Close a pool after its calls end.
        A provider whose ``aclose`` raises does not stop the others closing; the
        first such exception is raised once all have been tried. Cancelled while
        closing, the providers not yet closed stay open.
        """
        if self._closed:
            return
        self._closed = True
        self._queue.put_nowait(_CLOSED)
        first: Exception | None = None
        for provider in self.providers:
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


class _Checkout(Generic[P]):
    """One ``async with pool.provider()``: holds a token from enter to exit."""

    __slots__ = ("_entered", "_pool", "_token")

    def __init__(self, pool: Pool[P]) -> None:
        self._pool = pool
        self._token: P | None = None
        self._entered = False

    async def __aenter__(self) -> P:
        if self._entered:
            raise RuntimeError("pool.provider() is entered once; call it again for another")
        self._entered = True
        token = await self._pool._acquire()
        self._token = token
        return token

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._pool._release(token)
