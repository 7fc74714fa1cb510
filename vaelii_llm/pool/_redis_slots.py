"""A pool's per-host slots kept in Redis, so every process naming the same Redis
and pool name shares one limit per host (the ``redis`` extra).

Each host is a lease semaphore: a sorted set of lease ids scored by the
server-clock millisecond at which each lease expires. What a process asks in
one instant (one turn of its event loop) goes to Redis in one call of one Lua
script, one call in flight at a time: the leases it gives back, then the leases
it takes, in the order they were asked (dropping expired ones first, then
choosing for each caller a host as :class:`~vaelii_llm.pool._slots.LocalSlots` would in
process: a free host not cooling, the one the caller's vote uses least, then
the least busy). So a caller that gives its slot back and asks again at once
finds it free, and a checkout costs one round trip shared by the instant's
callers. Another script renews every lease this process holds, every third of
its TTL while its call runs, so a process killed with SIGKILL frees its slots
within the TTL and nothing ever needs a flush; an idle pool's keys expire by
themselves.

A release pushes a word on the pool's ``freed`` list, on which one watcher per
process blocks (``BLPOP``, served in the order the processes blocked) while
calls wait there, with a short poll for leases that expired. Every Redis
failure is raised as :class:`~vaelii_llm.errors.LLMUnreachable` naming the
Redis (its URL without a password), never as a ``redis`` exception, whatever
the client raised (its cause chained); so is a reply of a shape no script
sends (:func:`read_reply` checks every one): the takes of that call fail at
once, and a lease it may have taken is never renewed, so it expires in its TTL.
No waiter's bound rests on the task that carries its take: every take has a
deadline of its own, and what a carrier that ends leaves unanswered is refused
at once. The connections speak RESP2 whatever the client's default (it changed
in redis-py 8), so every version the extra allows sends the same words.

A Redis restarted without persistence comes back empty while calls still hold
the slots it forgot: counting from zero would hand their slots out again (a
limit of 2 with 4 calls in flight). So the scripts fence each life of the
pool's keys. The pool's ``epoch`` key holds a run id drawn when the key is made
(by the first call after a restart, or after
:data:`~vaelii_llm.pool._redis_scripts.EPOCH_KEPT_MS` unused),
when it was made, and whether takes are fenced; every process tells the
scripts the run id it last saw. A process that saw another run is proof the
server forgot: from then until one lease TTL after the key was made, every
take answers "full" (releases still go through). Each holder re-asserts its
leases (adds them back) on its first renewal naming the earlier run, which it
runs at once when a take's answer shows the new run, and in any case within a
third of the TTL; a lease not renewed inside one TTL is one the old server
would have dropped too. So once the fence lifts, the sets count every call
still in flight, and the limit holds across the restart. A process whose first
word to the server comes after a restart cannot tell a restart from a fresh
server, so it raises no fence: a fresh Redis serves at once, and the fence
stands from the first word of any process that used the old one (a holder's
renewal, a waiter's poll), within a poll of the restart. Processes sharing a
pool use one lease TTL (the fence lasts the TTL of the process that raised it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import math
import os
import socket
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from functools import partial
from typing import Any
from typing import Final

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import NoScriptError
    from redis.exceptions import RedisError
except ImportError as exc:  # pragma: no cover - the extra is in the test extra
    raise ImportError(
        "a pool whose slots live in Redis needs the redis package: pip install 'vaelii-llm[redis]'"
    ) from exc

from vaelii_llm._transport.urls import hide_userinfo
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.errors import excerpt
from vaelii_llm.pool._rates import Seen
from vaelii_llm.pool._redis_limits import AGREE
from vaelii_llm.pool._redis_limits import Limits
from vaelii_llm.pool._redis_scripts import COUNT
from vaelii_llm.pool._redis_scripts import RENEW
from vaelii_llm.pool._redis_scripts import STEP
from vaelii_llm.pool._redis_scripts import read_reply
from vaelii_llm.pool._redis_scripts import read_step
from vaelii_llm.pool._slots import POLL_S
from vaelii_llm.pool._slots import POOL_LABEL
from vaelii_llm.pool._slots import Ask
from vaelii_llm.pool._slots import Ledger
from vaelii_llm.pool._slots import refused_waiting

__all__ = ["RedisSlots"]

log = logging.getLogger("vaelii_llm.pool")

OP_TIMEOUT_S: Final = 5.0
"""The most one Redis command may take (connect included) before it fails."""

MAX_CONNECTIONS: Final = 16
"""Connections one pool opens to Redis at most."""

STEP_BUDGET_S: Final = 2 * OP_TIMEOUT_S
"""The most one take may wait for its script when the pool has no acquire
timeout: the script's call and its one try more on a fresh connection."""

PROTOCOL: Final = 2
"""The RESP version every connection speaks: each script's reply is the same in
both, and RESP2 needs no handshake (a Redis before 6 has none)."""

CLOSE_GRACE_S: Final = 1.0
"""How long closing waits for releases still on their way; a Redis that does not
answer by then has them cancelled (those leases expire in their TTL)."""

CLOCK_RESOLUTION_S: Final = time.get_clock_info("monotonic").resolution

SCHEMES: Final = ("redis://", "rediss://", "unix://")

CONVERSATION_KEPT_MS: Final = 60 * 60 * 1000
"""How long a conversation's host is remembered after its last call."""


def _conversation(key: str | None) -> str:
    """A conversation's key as the step script names it: hex, of fixed length."""
    return "" if key is None else hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def check_url(url: str) -> str:
    """``url`` trimmed, or ValueError when it is no Redis URL (shown without a password)."""
    text = url.strip()
    if not text.startswith(SCHEMES):
        raise ValueError(
            f"{hide_userinfo(text)!r} is no Redis URL: it starts with one of {', '.join(SCHEMES)}"
        )
    return text


_Take = tuple[str, "asyncio.Future[tuple[int, str]]", float]
"""A take waiting for its script: its preferences, its answer (host, lease;
or -1 and what held it), its deadline (loop time)."""


class RedisSlots:
    """The slots of a pool's hosts, held in Redis under ``vaelii:pool:{name}:``:
    the :class:`~vaelii_llm.pool._slots.Slots` of a shared pool.

    ``book`` names each host (the same in every process) and how many calls at
    once it takes, and counts this process's calls. The client is made on first
    use, in the loop that uses it. Methods raise
    :class:`~vaelii_llm.errors.LLMUnreachable` when Redis fails; releases and
    renewals run in the background and only log.
    """

    shared: Final = True

    def __init__(self, url: str, name: str, book: Ledger, *, lease_ttl_ms: int) -> None:
        hosts, slots, cooldown_ms = book.names, book.slots, book.cooldown_ms
        self._book = book
        self._watcher: asyncio.Future[None] | None = None
        self._url = check_url(url)
        self.label = f"the vote pool's Redis at {hide_userinfo(self._url)}"
        prefix = f"vaelii:pool:{{{name}}}"  # a hash tag: one cluster slot for the pool
        self._lease_keys = tuple(f"{prefix}:lease:{host}" for host in hosts)
        self._cool_keys = tuple(f"{prefix}:cool:{host}" for host in hosts)
        self._rate_keys = tuple(f"{prefix}:rate:{host}" for host in hosts)
        self._freed_key = f"{prefix}:freed"
        self._epoch_key = f"{prefix}:epoch"
        self._conversations = f"{prefix}:conversation:"
        rates = () if book.buckets is None else book.buckets.rates
        self._rates = "".join(f"{rate.rpm or 0}:{rate.tpm or 0} " for rate in rates)
        self._left: list[str] = []  # waiters that left, for the next step
        self._waiters = itertools.count()
        self._limits = Limits(f"{prefix}:limits", hosts, slots, lease_ttl_ms)
        self._slots = tuple(slots)
        self._ttl_ms = lease_ttl_ms
        self._cooldown_ms = cooldown_ms
        self._client: aioredis.Redis | None = None
        self._steps: aioredis.ConnectionPool | None = None
        self._step_conn: Any = None
        self._step_sha = ""
        self._scripts: dict[str, Any] = {}
        self._held: dict[str, int] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._step_keys = [
            *self._lease_keys,
            *self._cool_keys,
            *self._rate_keys,
            self._freed_key,
            self._epoch_key,
            f"{prefix}:waiting",
            f"{prefix}:waiting:alive",
        ]
        self._run = ""  # the server's run id as this process last saw it
        self._reassert = asyncio.Event()  # renew now: a take's answer showed a new run
        self._takes: list[_Take] = []
        self._releases: list[tuple[int, str, Callable[[], None] | None, str]] = []
        self._sending: asyncio.Future[Any] | None = None
        self._in_flight: list[_Take] = []
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_when = math.inf
        self._closed = False
        self._closing = False  # aclose has begun: what is cancelled now is closed
        self._numbered = 0
        self._pid = 0
        self._owner = ""

    # -- Redis ---------------------------------------------------------------

    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            connections = aioredis.BlockingConnectionPool.from_url(
                self._url,
                # Commands beyond these wait for a connection (up to the op
                # timeout) rather than fail: one process needs few.
                max_connections=MAX_CONNECTIONS,
                timeout=OP_TIMEOUT_S,
                socket_timeout=OP_TIMEOUT_S,
                socket_connect_timeout=OP_TIMEOUT_S,
                # One retry on a fresh connection (a pooled one may predate a
                # Redis restart); a Redis that is gone fails at once, typed.
                retry=Retry(NoBackoff(), 1),
                protocol=PROTOCOL,
            )
            self._client = aioredis.Redis.from_pool(connections)
            for key, source in (("renew", RENEW), ("count", COUNT)):
                self._scripts[key] = self._client.register_script(source)
            # The steps (the hot path) go on one connection of their own, one in
            # flight at a time, through redis-py's connection API: no pool,
            # retry or timeout wrapper per call, one deadline round the call.
            # The pool here only makes that connection from the URL.
            self._steps = aioredis.ConnectionPool.from_url(
                self._url, socket_connect_timeout=OP_TIMEOUT_S, protocol=PROTOCOL
            )
            self._step_sha = self._client.register_script(STEP).sha
        return self._client

    async def _call(self, op: Awaitable[Any]) -> Any:
        # Any exception, not only the client's own: which one a client version
        # raises for a far end it cannot read is not ours to rely on.
        try:
            return await op
        except Exception as exc:
            if not isinstance(exc, RedisError | OSError):
                # What the client did not expect may leave its connection pool
                # unsound (a connection never given back): the next call makes
                # a fresh client. The bound above never rests on this.
                self._discard_client()
            raise self._unreachable(exc) from exc

    def _discard_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            self._spawn(self._close_client(client))

    async def _close_client(self, client: aioredis.Redis) -> None:
        try:
            await client.aclose()
        except Exception as exc:
            log.warning("closing %s: %s", self.label, self._unreachable(exc).reason)

    def _unreachable(self, exc: BaseException) -> LLMUnreachable:
        """``exc`` as the typed failure of this Redis (an excerpt, no password)."""
        if isinstance(exc, LLMUnreachable):
            return exc
        reason = excerpt(hide_userinfo(f"{type(exc).__name__}: {exc}"))
        failed = LLMUnreachable(self.label, reason)
        failed.__cause__ = exc
        return failed

    async def _script(
        self, script: str, op: Awaitable[Any], asked: int = 0
    ) -> tuple[str, list[int]]:
        """:meth:`_call` of a slot script, its reply read by :func:`read_reply`;
        a reply of the wrong shape is :class:`~vaelii_llm.errors.LLMUnreachable`."""
        found = await self._call(op)
        try:
            return read_reply(script, found, len(self._slots), asked)
        except ValueError as exc:
            raise LLMUnreachable(self.label, f"answered the {script} script with {exc}") from None

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Future[Any]) -> None:
        # Background work ends by itself: what it raised past its own handling
        # is logged here (never "Task exception was never retrieved"), and the
        # waiters look again rather than wait on work that is gone.
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not isinstance(exc, LLMUnreachable):
            log.warning("the pool's background work on %s failed: %r", self.label, exc)
            self._book.wake()

    def _stem(self) -> str:
        # Host and process first, so an operator reading the keys sees whose it is.
        pid = os.getpid()
        if pid != self._pid:  # a fork: the parent's connection is not ours
            self._pid = pid
            self._step_conn = None
            self._owner = f"{socket.gethostname()}:{pid}:{os.urandom(4).hex()}"
        return self._owner

    # -- the pool's slots ----------------------------------------------------------

    async def acquire(self, ask: Ask) -> tuple[int, str | None]:
        """A host for the caller, chosen in Redis (see the module docstring).

        First come, first served in this process: a call that finds others
        waiting waits behind them. Every wake-up (a release here or anywhere, a
        poll, a close) wakes the waiters in the order they queued, and their
        takes reach Redis in one script, ranked. A take that must wait is
        ranked among every process's waiters in Redis (by priority, then how
        long it has waited), and those ranked before it hold the free slots
        first. The budget run out on a Redis that never answered is
        :class:`~vaelii_llm.errors.LLMUnreachable`; once it has answered
        "every host is full", the pool is busy.
        """
        book = self._book
        spread = ask.spread
        uses = spread.uses if spread is not None else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + book.acquire_timeout_ms / 1000
        answered = False
        waiter = f"{self._stem()}:w{next(self._waiters)}" if book.acquire_timeout_ms else ""
        head = f"{ask.tokens}|{ask.priority}|{_conversation(ask.affinity)}|{waiter}|"
        registered = False
        try:
            await self._agree_limits(
                deadline if book.acquire_timeout_ms else loop.time() + STEP_BUDGET_S
            )
            if book.waiting == 0:
                # With no timeout, one try, bounded by the script's own budget.
                until = deadline if book.acquire_timeout_ms else loop.time() + STEP_BUDGET_S
                cooling = book.cooling() if book.cool_timers else None
                index, lease = await self._take_one(head + self.preferences(uses, cooling), until)
                answered = True
                if index >= 0:
                    return book.hand_out(index, lease, ask)
                registered = self._held_by(ask, lease)
                if book.acquire_timeout_ms == 0:
                    raise book.timeout(ask.why)
            book.waiting += 1
            try:
                self._watch()
                async with asyncio.timeout_at(deadline):
                    while True:
                        # Shielded: one waiter cancelled must not wake the rest.
                        await asyncio.shield(book.changed_future())
                        if book.closed:
                            raise LLMClosed(POOL_LABEL, waited=True)
                        prefs = head + self.preferences(uses, book.cooling())
                        index, lease = await self._take_one(prefs)
                        answered = True
                        if index >= 0:
                            registered = False  # the script took it off the line
                            return book.hand_out(index, lease, ask)
                        registered = self._held_by(ask, lease) or registered
            finally:
                book.waiting -= 1
        except TimeoutError as exc:
            if not answered:
                waited = book.acquire_timeout_ms
                bound = f"the pool's {waited} ms" if waited else f"{STEP_BUDGET_S:g} s"
                raise LLMUnreachable(self.label, f"no answer inside {bound}") from exc
            raise book.timeout(ask.why) from exc
        finally:
            if registered and waiter and not self._closed:
                self._left.append(waiter)
                self._send()

    def _held_by(self, ask: Ask, why: str) -> bool:
        """Note what held a take (raising at once past max_waiting); whether
        the take now waits in Redis's line."""
        if why == "q":
            assert self._book.max_waiting is not None
            raise refused_waiting(self._book.max_waiting)
        if why:
            ask.why = why
        return True

    async def _agree_limits(self, until: float) -> None:
        """This pool's limits checked against those every process sharing it
        recorded (:mod:`vaelii_llm.pool._redis_limits`); LLMClosed when the pool
        closed while the check waited."""

        async def run(keys: list[str], args: list[str | int]) -> Any:
            try:
                return await self._call(self._once(("EVAL", AGREE, len(keys), *keys, *args)))
            except LLMUnreachable as exc:
                if isinstance(exc.__cause__, NoScriptError):
                    return None  # a Redis that will not run it
                raise

        try:
            await self._limits.check(run, self._spawn, until)
        except (LLMUnreachable, asyncio.CancelledError):
            # the close cut the check (its task cancelled, or its client closed)
            task = asyncio.current_task()
            if self._book.closed and (task is None or not task.cancelling()):
                raise LLMClosed(POOL_LABEL, waited=True) from None
            raise

    async def _once(self, command: tuple[Any, ...]) -> Any:
        """``command``'s reply on a connection of its own, made and closed here
        under one op timeout: as the steps' connection, no client pool between
        (whose connection a failed handshake may never give back)."""
        self._redis()
        assert self._steps is not None
        conn = self._steps.make_connection()  # type: ignore[no-untyped-call]
        try:
            async with asyncio.timeout(OP_TIMEOUT_S):
                await conn.connect()
                await conn.send_packed_command(conn.pack_command(*command), False)
                return await conn.read_response()
        except TimeoutError as exc:
            raise RedisConnectionError(f"no answer in {OP_TIMEOUT_S:g} s") from exc
        finally:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)

    async def _take_one(self, prefs: str, until: float = math.inf) -> tuple[int, str]:
        asked = self.take(prefs, until)
        try:
            return await asked
        except asyncio.CancelledError:
            self.forget(asked)  # cancelled in the instant its answer came
            raise

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch_redis())
            self._watcher.add_done_callback(self._ended)

    async def _watch_redis(self) -> None:
        # While calls wait here, block on Redis's word that a slot came free
        # anywhere (or a short poll), and wake them.
        book = self._book
        while book.waiting > 0 and not book.closed:
            try:
                await self.wait(book.changed_future())
            except LLMUnreachable:
                book.wake()  # each waiter meets the failure in its own take
                await asyncio.sleep(POLL_S)
            else:
                book.wake()

    def release(self, index: int, lease: str | None, seen: Seen | None, charged: int) -> None:
        """Give ``lease`` back, with what its turn told of the host's rates; the
        first waiter here looks again once Redis has it."""
        settle = "" if seen is None or not self._rates else f"{index + 1}:{seen.word(charged)}"
        if lease is not None:
            self.give_back(index, lease, self._book.wake, settle)
        else:
            self._book.wake()

    def held_everywhere(self) -> Sequence[int] | None:
        """Unknown without asking Redis (see :meth:`counts`)."""
        return None

    # -- taking, waiting, giving back -------------------------------------------

    @staticmethod
    def preferences(uses: Sequence[int] | None, cooling: Sequence[bool] | None) -> str:
        """What a take tells the script of its caller: its vote's turns on each
        host, then whether this process sees each host cooling ("" for nothing)."""
        used = uses is not None and any(uses)
        cools = cooling is not None and any(cooling)
        if not used and not cools:
            return ""
        n = len(uses if uses is not None else cooling or ())
        words = [*map(str, uses or [0] * n), *("1" if c else "0" for c in cooling or [False] * n)]
        return ",".join(words)

    def take(self, prefs: str, deadline: float = math.inf) -> asyncio.Future[tuple[int, str]]:
        """Ask for a lease on the best free host (``prefs``: the take's
        head, then :meth:`preferences`): the future answers (host index, lease
        id), or -1 and what held it when no host would serve it. What one
        instant asks (its releases, then its takes) goes to Redis in one
        script. A take cancelled before it is sent is dropped; a lease it was
        answered late is given back, and a caller cancelled once it was
        answered calls :meth:`forget`. Unanswered at
        ``deadline`` (loop time), TimeoutError: the deadlines of a pool's takes
        come in order (one acquire timeout), so one timer serves them all."""
        if self._client is None:
            self._redis()
        loop = asyncio.get_running_loop()
        asked: asyncio.Future[tuple[int, str]] = loop.create_future()
        self._takes.append((prefs, asked, deadline))
        if deadline < self._alarm_when:
            if self._alarm is not None:
                self._alarm.cancel()
            self._alarm_when = deadline
            self._alarm = loop.call_at(deadline, self._ring)
        self._send()
        return asked

    def forget(self, asked: asyncio.Future[tuple[int, str]]) -> None:
        """The caller of a take was cancelled: a lease it was answered goes back."""
        if asked.done() and not asked.cancelled() and asked.exception() is None:
            index, lease = asked.result()
            if index >= 0:
                self.give_back(index, lease)

    def _ring(self) -> None:
        # A loop runs a timer up to its clock's resolution early. Takes answered
        # since the timer was set cost nothing; the next pending one re-arms it.
        self._alarm, self._alarm_when = None, math.inf
        loop = asyncio.get_running_loop()
        now, first = loop.time() + CLOCK_RESOLUTION_S, math.inf
        for _, asked, deadline in (*self._in_flight, *self._takes):
            if asked.done():
                continue
            if deadline <= now:
                asked.set_exception(TimeoutError())
            elif deadline < first:
                first = deadline
        if first < math.inf:
            self._alarm_when = first
            self._alarm = loop.call_at(first, self._ring)

    def _send(self) -> None:
        if self._sending is None or self._sending.done():
            self._sending = self._spawn(self._send_steps())
            self._sending.add_done_callback(self._carried)

    def _carried(self, carrier: asyncio.Future[Any]) -> None:
        # The carrier of the takes ended. Normally it left nothing unanswered;
        # ended any other way (cancelled before it ran, or by what it did not
        # expect), every take it held or would have sent fails now, typed. A
        # newer carrier (started before this ran) owns what is asked since.
        if carrier is not self._sending or not (carrier.cancelled() or carrier.exception()):
            return
        left = [take for take in (*self._in_flight, *self._takes) if not take[1].done()]
        self._in_flight, self._takes = [], []
        if not left:
            return
        if self._closing:
            self._refuse(left, partial(LLMClosed, POOL_LABEL, waited=True))
            return
        if carrier.cancelled():
            failed = LLMUnreachable(self.label, "the take was cancelled before it was sent")
        else:
            failed = self._unreachable(carrier.exception() or RuntimeError())
        self._refuse(left, partial(LLMUnreachable, failed.label, failed.reason), failed.__cause__)

    async def _send_steps(self) -> None:
        # One script in flight at a time: what is asked meanwhile goes in the next.
        while self._takes or self._releases or self._left:
            takes = [take for take in self._takes if not take[1].done()]
            releases, self._takes, self._releases = self._releases, [], []
            left, self._left = self._left, []
            self._in_flight = takes  # until answered: see _carried
            if not takes and not releases and not left:
                continue
            stem, first = self._stem(), self._numbered
            self._numbered += len(takes)
            args = [
                self._ttl_ms,
                *self._slots,
                sum(self._slots),
                stem,
                first,
                len(takes),
                "".join([f"{take[0]};" for take in takes]),
                "".join([f"{index + 1}={lease} " for index, lease, _, _ in releases]),
                self._run,
                self._rates,
                "".join([f"{settle} " for _, _, _, settle in releases if settle]),
                "".join([f"{waiter} " for waiter in left]),
                self._book.max_waiting or 0,
                self._conversations,
                CONVERSATION_KEPT_MS,
            ]
            try:
                run, found = await self._step_reply(self._step(args), len(takes))
            except Exception as exc:
                failed = self._unreachable(exc)
                refusal = partial(LLMUnreachable, failed.label, failed.reason)
                self._refuse(takes, refusal, failed.__cause__)
                self._in_flight = []
                if releases:
                    log.warning(
                        "%d lease(s) not released (they expire in their TTL): %s",
                        len(releases),
                        failed,
                    )
                continue
            except asyncio.CancelledError:  # closing, and Redis did not answer in time
                self._refuse([*takes, *self._takes], partial(LLMClosed, POOL_LABEL, waited=True))
                raise
            finally:
                for _, _, then, _ in releases:
                    if then is not None:
                        then()
            if run != self._run:
                # Leases held from an earlier run are re-asserted by a renewal
                # naming that run, now; until then this process names it still.
                if self._held:
                    self._reassert.set()
                else:
                    self._run = run
            if takes:
                self._answer(takes, f"{stem}:", first, found)
            self._in_flight = []

    async def _step_reply(
        self, op: Awaitable[Any], asked: int
    ) -> tuple[str, list[tuple[int, str]]]:
        """:meth:`_script` for the step script, its reply read by :func:`read_step`."""
        found = await self._call(op)
        try:
            return read_step(found, len(self._slots), asked)
        except ValueError as exc:
            raise LLMUnreachable(self.label, f"answered the step script with {exc}") from None

    def _answer(
        self, takes: list[_Take], stem: str, first: int, found: list[tuple[int, str]]
    ) -> None:
        held = self._held
        for j, ((_, asked, _), (index, why)) in enumerate(zip(takes, found, strict=True)):
            if index < 0:
                if not asked.done():
                    asked.set_result((-1, why))
                continue
            lease = stem + str(first + j)
            held[lease] = index
            if not asked.done():
                asked.set_result((index, lease))
            else:  # its caller gave up while Redis answered
                self.give_back(index, lease)
        if held and (self._renewer is None or self._renewer.done()):
            self._renewer = asyncio.ensure_future(self._renew())
            self._renewer.add_done_callback(self._ended)

    @staticmethod
    def _refuse(
        takes: list[_Take], error: Callable[[], Exception], cause: BaseException | None = None
    ) -> None:
        # One exception each: a raised exception gathers its raiser's traceback.
        for _, asked, _ in takes:
            if not asked.done():
                refused = error()
                refused.__cause__ = cause
                asked.set_exception(refused)

    async def _step(self, args: list[Any]) -> Any:
        # One try more on a fresh connection: the kept one may predate a Redis
        # restart. A script the server lost (a restart) is loaded again. A
        # connection that failed in any way is dropped, never used again.
        assert self._steps is not None
        command = ("EVALSHA", self._step_sha, len(self._step_keys), *self._step_keys, *args)
        for attempt in (1, 2):
            conn = self._step_conn
            try:
                async with asyncio.timeout(OP_TIMEOUT_S):
                    if conn is None:
                        conn = self._step_conn = self._steps.make_connection()  # type: ignore[no-untyped-call]
                        await conn.connect()
                    try:
                        await conn.send_packed_command(conn.pack_command(*command), False)
                        found = await conn.read_response()
                    except NoScriptError:
                        await conn.send_command("SCRIPT", "LOAD", STEP, check_health=False)
                        await conn.read_response()
                        await conn.send_packed_command(conn.pack_command(*command), False)
                        found = await conn.read_response()
                return found
            except Exception as exc:
                await self._drop_step_conn()
                if isinstance(exc, TimeoutError):  # the connection was closed with the call
                    raise RedisConnectionError(f"no answer in {OP_TIMEOUT_S:g} s") from exc
                if attempt == 2 or not isinstance(exc, RedisConnectionError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _drop_step_conn(self) -> None:
        conn, self._step_conn = self._step_conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)

    async def wait(self, changed: asyncio.Future[None]) -> None:
        """Until a lease is released anywhere, ``changed`` is set (a release or a
        close in this process), or :data:`POLL_S` has passed."""
        client = self._redis()
        popped = self._spawn(self._call(client.blpop([self._freed_key], timeout=POLL_S)))
        try:
            await asyncio.wait((popped, changed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not popped.done():
                popped.cancel()
        if popped.done() and not popped.cancelled():
            popped.result()  # raises LLMUnreachable when Redis failed

    def give_back(
        self, index: int, lease: str, then: Callable[[], None] | None = None, settle: str = ""
    ) -> None:
        """Release ``lease`` in the background (with the takes of its instant) and
        ``settle`` its host's buckets, then call ``then``; a Redis that fails
        leaves the lease to expire."""
        if self._held.pop(lease, None) is None or self._closed:
            return
        self._releases.append((index, lease, then, settle))
        self._send()

    def cool(self, index: int) -> None:
        """Mark the host cooling for every process, in the background."""
        client = self._redis()
        key = self._cool_keys[index]
        self._spawn(self._cool(client.set(key, 1, px=self._cooldown_ms)))

    async def _cool(self, op: Awaitable[Any]) -> None:
        try:
            await self._call(op)
        except LLMUnreachable as exc:
            log.warning("a host's cool-down was not shared: %s", exc)

    async def _renew(self) -> None:
        while self._held:
            if not self._reassert.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._ttl_ms / 3000):
                        await self._reassert.wait()
            self._reassert.clear()
            held = list(self._held.items())
            if not held:
                return
            self._redis()  # a client discarded since is made again
            script = self._scripts["renew"]
            keys = [self._epoch_key, *(self._lease_keys[index] for _, index in held)]
            args = [self._ttl_ms, self._run, *(lease for lease, _ in held)]
            try:
                self._run, (kept,) = await self._script(
                    "renew", script(keys=keys, args=args), len(held)
                )
            except LLMUnreachable as exc:
                log.warning("leases were not renewed: %s", exc)
                continue
            if kept < len(held):
                log.warning(
                    "%d lease(s) expired before renewal (a pause longer than the TTL); "
                    "their calls run on beyond the shared limit",
                    len(held) - kept,
                )

    # -- reading and closing ---------------------------------------------------

    async def counts(self) -> tuple[list[int], list[bool]]:
        """Per host: the leases every process holds, and whether it is cooling."""
        self._redis()
        script = self._scripts["count"]
        keys = [*self._lease_keys, *self._cool_keys]
        _, flat = await self._script("count", script(keys=keys, args=[]))
        return flat[0::2], [bool(v) for v in flat[1::2]]

    async def aclose(self) -> None:
        """Give back every lease still held, wait for the background work, close the client."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self._closed:
            return
        self._closing = True
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        for lease, index in list(self._held.items()):
            self.give_back(index, lease)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_GRACE_S
        while self._tasks:  # a take given up on may still add a release
            left = deadline - loop.time()
            if left <= 0:
                for task in self._tasks:
                    task.cancel()
            await asyncio.wait(set(self._tasks), timeout=max(left, 0))
            await asyncio.sleep(0)
        self._closed = True
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        # Closing is best effort: what a client raises while closing is logged.
        try:
            await self._drop_step_conn()
            if self._steps is not None:
                await self._steps.aclose()
            if self._client is not None:
                await self._client.aclose()
        except Exception as exc:
            log.warning("closing %s: %s", self.label, self._unreachable(exc).reason)
