"""A pool's per-host slots kept in Redis, so every process naming the same Redis
and pool name shares one limit per host (the ``redis`` extra).

Each host is a lease semaphore: a sorted set of lease ids scored by the
server-clock millisecond at which each lease expires. One Lua script takes
leases (dropping expired ones first, then choosing for each caller a host as
:class:`~vaelii_llm._pool.Pool` would in process: a free host not cooling, the
one the caller's vote uses least, then the least busy), one releases them, one
renews every lease this process holds. The takes (and the releases) asked for
in one instant go in one script call, in the order they were asked. A lease is
renewed every third of its TTL while its call runs, so a process killed with
SIGKILL frees its slots within the TTL and nothing ever needs a flush; an idle
pool's keys expire by themselves.

A release pushes a word on the pool's ``freed`` list, on which one watcher per
process blocks (``BLPOP``, served in the order the processes blocked) while
calls wait there, with a short poll for leases that expired. Every Redis
failure is raised as :class:`~vaelii_llm.errors.LLMUnreachable` naming the
Redis (its URL without a password), never as a ``redis`` exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisError
except ImportError as exc:  # pragma: no cover - the extra is in the test extra
    raise ImportError(
        "a pool whose slots live in Redis needs the redis package: pip install 'vaelii-llm[redis]'"
    ) from exc

from vaelii_llm._pool import POLL_S
from vaelii_llm.config import hide_userinfo
from vaelii_llm.errors import LLMUnreachable

__all__ = ["RedisSlots"]

log = logging.getLogger("vaelii_llm.pool")

OP_TIMEOUT_S: Final = 5.0
"""The most one Redis command may take (connect included) before it fails."""

MAX_CONNECTIONS: Final = 16
"""Connections one pool opens to Redis at most."""

CLOSE_GRACE_S: Final = 1.0
"""How long closing waits for releases still on their way; a Redis that does not
answer by then has them cancelled (those leases expire in their TTL)."""

SCHEMES: Final = ("redis://", "rediss://", "unix://")

_COMMON = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

TAKE: Final = (
    _COMMON
    + """
-- Takes a lease for each caller of this process that asked in the same instant,
-- in the order they asked. KEYS: n lease sets, then n cool-down flags.
-- ARGV: ttl ms, n slot counts, then per caller: its lease id and its preferences.
local n = #KEYS / 2
local ttl = tonumber(ARGV[1])
local held, shared_cool = {}, {}
for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  held[i] = redis.call('ZCARD', KEYS[i])
  shared_cool[i] = redis.call('EXISTS', KEYS[n + i]) == 1
end
local out, taken = {}, {}
local at = 2 + n
while at <= #ARGV do
  -- A caller's preferences: '' (none), or its vote's turns on each host then
  -- whether this process sees each host cooling, comma-separated.
  local uses, cooling, all_cooling = {}, {}, true
  for i = 1, n do
    uses[i], cooling[i] = 0, shared_cool[i]
  end
  local k = 0
  for word in string.gmatch(ARGV[at + 1], '[^,]+') do
    k = k + 1
    if k <= n then uses[k] = tonumber(word) else cooling[k - n] = cooling[k - n] or word == '1' end
  end
  for i = 1, n do
    if not cooling[i] then all_cooling = false end
  end
  local best, best_uses, best_held = 0, 0, 0
  for i = 1, n do
    if held[i] < tonumber(ARGV[1 + i]) and (all_cooling or not cooling[i]) then
      if best == 0 or uses[i] < best_uses or (uses[i] == best_uses and held[i] < best_held) then
        best, best_uses, best_held = i, uses[i], held[i]
      end
    end
  end
  if best > 0 then
    redis.call('ZADD', KEYS[best], now + ttl, ARGV[at])
    held[best] = held[best] + 1
    taken[best] = true
  end
  out[#out + 1] = best
  at = at + 2
end
for i in pairs(taken) do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return out
"""
)

RELEASE: Final = """
-- KEYS: each lease's set, then the freed list. ARGV: how many words freed keeps,
-- ttl ms, then the lease ids in KEYS' order. One word is pushed per lease.
local m = #KEYS - 1
local freed = KEYS[#KEYS]
for i = 1, m do
  redis.call('ZREM', KEYS[i], ARGV[2 + i])
  redis.call('RPUSH', freed, '1')
end
redis.call('LTRIM', freed, -tonumber(ARGV[1]), -1)
redis.call('PEXPIRE', freed, ARGV[2])
return m
"""

RENEW: Final = (
    _COMMON
    + """
-- KEYS: each lease's set. ARGV: ttl ms, then the lease ids in KEYS' order.
local ttl = tonumber(ARGV[1])
local kept = 0
for i = 1, #KEYS do
  if redis.call('ZSCORE', KEYS[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[i], now + ttl, ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i], ttl)
    kept = kept + 1
  end
end
return kept
"""
)

COUNT: Final = (
    _COMMON
    + """
-- KEYS: n lease sets, then n cool-down flags. Answers held, cooling per host.
local n = #KEYS / 2
local out = {}
for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  out[2 * i - 1] = redis.call('ZCARD', KEYS[i])
  out[2 * i] = redis.call('EXISTS', KEYS[n + i])
end
return out
"""
)


def check_url(url: str) -> str:
    """``url`` trimmed, or ValueError when it is no Redis URL (shown without a password)."""
    text = url.strip()
    if not text.startswith(SCHEMES):
        raise ValueError(
            f"{hide_userinfo(text)!r} is no Redis URL: it starts with one of {', '.join(SCHEMES)}"
        )
    return text


class RedisSlots:
    """The slots of a pool's hosts, held in Redis under ``vaelii:pool:{name}:``.

    ``hosts`` names each host (the same in every process), ``slots`` how many
    calls at once it takes. The client is made on first use, in the loop that
    uses it. Methods raise :class:`~vaelii_llm.errors.LLMUnreachable` when
    Redis fails; releases and renewals run in the background and only log.
    """

    def __init__(
        self,
        url: str,
        name: str,
        hosts: Sequence[str],
        slots: Sequence[int],
        *,
        lease_ttl_ms: int,
        cooldown_ms: int,
    ) -> None:
        self._url = check_url(url)
        self.label = f"the vote pool's Redis at {hide_userinfo(self._url)}"
        prefix = f"vaelii:pool:{{{name}}}"  # a hash tag: one cluster slot for the pool
        self._lease_keys = tuple(f"{prefix}:lease:{host}" for host in hosts)
        self._cool_keys = tuple(f"{prefix}:cool:{host}" for host in hosts)
        self._freed_key = f"{prefix}:freed"
        self._slots = tuple(slots)
        self._ttl_ms = lease_ttl_ms
        self._cooldown_ms = cooldown_ms
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self._held: dict[str, int] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._takes: list[tuple[str, str, asyncio.Future[int]]] = []
        self._taking: asyncio.Future[Any] | None = None
        self._releases: list[tuple[int, str, Callable[[], None] | None]] = []
        self._releasing: asyncio.Future[Any] | None = None
        self._closed = False
        self._counter = itertools.count()
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
            )
            self._client = aioredis.Redis.from_pool(connections)
            for key, source in (("take", TAKE), ("release", RELEASE), ("renew", RENEW)):
                self._scripts[key] = self._client.register_script(source)
            self._scripts["count"] = self._client.register_script(COUNT)
        return self._client

    async def _call(self, op: Awaitable[Any]) -> Any:
        try:
            return await op
        except (RedisError, OSError) as exc:
            reason = hide_userinfo(f"{type(exc).__name__}: {exc}")
            raise LLMUnreachable(self.label, reason) from exc

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _lease(self) -> str:
        # Host and process first, so an operator reading the keys sees whose it is.
        pid = os.getpid()
        if pid != self._pid:  # a fork
            self._pid = pid
            self._owner = f"{socket.gethostname()}:{pid}:{os.urandom(4).hex()}"
        return f"{self._owner}:{next(self._counter)}"

    # -- taking, waiting, giving back -------------------------------------------

    async def take(self, uses: Sequence[int], cooling: Sequence[bool]) -> tuple[int, str] | None:
        """Take a lease on the best free host: (host index, lease id), or None when
        every host is full. The takes asked for in one instant go to Redis in one
        script, in the order they were asked. Cancelled before it is sent, a take
        is dropped; after, a lease it took is given back when the answer comes."""
        self._redis()
        lease = self._lease()
        asked: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        prefs = ""
        if any(uses) or any(cooling):
            prefs = ",".join([*map(str, uses), *("1" if cool else "0" for cool in cooling)])
        self._takes.append((lease, prefs, asked))
        if self._taking is None or self._taking.done():
            self._taking = self._spawn(self._send_takes())
        try:
            best = await asked
        except asyncio.CancelledError:
            # Cancelled in the instant its answer came: the lease it took goes back.
            taken = asked.done() and not asked.cancelled() and asked.exception() is None
            if taken and asked.result():
                self.give_back(asked.result() - 1, lease)
            raise
        return None if best == 0 else (best - 1, lease)

    async def _send_takes(self) -> None:
        script = self._scripts["take"]
        keys = [*self._lease_keys, *self._cool_keys]
        while self._takes:
            batch = [take for take in self._takes if not take[2].done()]
            self._takes = []
            if not batch:
                continue
            args: list[Any] = [self._ttl_ms, *self._slots]
            for lease, prefs, _ in batch:
                args += (lease, prefs)
            try:
                found = await self._call(script(keys=keys, args=args))
            except LLMUnreachable as exc:
                for _, _, asked in batch:
                    if not asked.done():
                        asked.set_exception(LLMUnreachable(exc.label, exc.reason))
                continue
            for (lease, _, asked), best in zip(batch, found, strict=True):
                best = int(best)
                if best:
                    self._hold(lease, best - 1)
                if not asked.done():
                    asked.set_result(best)
                elif best:  # its caller gave up while Redis answered
                    self.give_back(best - 1, lease)

    def _hold(self, lease: str, index: int) -> None:
        self._held[lease] = index
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.ensure_future(self._renew())

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

    def give_back(self, index: int, lease: str, then: Callable[[], None] | None = None) -> None:
        """Release ``lease`` in the background, then call ``then``; a Redis that
        fails leaves the lease to expire. Releases of one instant go in one script."""
        if self._held.pop(lease, None) is None or self._closed:
            return
        self._releases.append((index, lease, then))
        if self._releasing is None or self._releasing.done():
            self._releasing = self._spawn(self._send_releases())

    async def _send_releases(self) -> None:
        script = self._scripts["release"]
        while self._releases:
            batch, self._releases = self._releases, []
            keys = [*(self._lease_keys[index] for index, _, _ in batch), self._freed_key]
            args = [sum(self._slots), self._ttl_ms, *(lease for _, lease, _ in batch)]
            try:
                await self._call(script(keys=keys, args=args))
            except LLMUnreachable as exc:
                log.warning(
                    "%d lease(s) not released (they expire in their TTL): %s", len(batch), exc
                )
            finally:
                for _, _, then in batch:
                    if then is not None:
                        then()

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
            await asyncio.sleep(self._ttl_ms / 3000)
            held = list(self._held.items())
            if not held:
                return
            script = self._scripts["renew"]
            keys = [self._lease_keys[index] for _, index in held]
            args = [self._ttl_ms, *(lease for lease, _ in held)]
            try:
                kept = int(await self._call(script(keys=keys, args=args)))
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
        flat = await self._call(script(keys=keys, args=[]))
        return [int(v) for v in flat[0::2]], [bool(int(v)) for v in flat[1::2]]

    async def aclose(self) -> None:
        """Give back every lease still held, wait for the background work, close the client."""
        if self._closed:
            return
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
        if self._client is not None:
            await self._client.aclose()
