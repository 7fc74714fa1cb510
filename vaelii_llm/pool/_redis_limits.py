"""The one rule a pool shared through Redis keeps for its limits: every process
gives each host the same number of calls at once.

Two processes sharing a pool's keys with different limits for one host (one
says ``gpu1*1``, the other ``gpu1*3``) would each count against its own: the
host would see three calls at once where one was meant. So the first process to
use the pool's keys writes each host's limit in the pool's ``limits`` hash; a
process that finds another limit there for one of its hosts refuses to take a
slot (:class:`~vaelii_llm.errors.LLMBadHosts`, naming the host and both
limits) until the processes agree. The hash lives while the pool is in use
(each process renews it, at most every third of its lease TTL, when it takes
a slot) and expires a lease TTL after the last renewal, so a new limit takes
effect once every process holding the old one has stopped.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Final

from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.errors import LLMError

__all__ = ["AGREE", "Limits", "disagreement"]

log = logging.getLogger("vaelii_llm.pool")

AGREE: Final = """
-- KEYS: the pool's limits hash. ARGV: its TTL in ms, then each host and its
-- limit. A host with none recorded gets this one; answers each host's limit.
local out = {}
for i = 2, #ARGV, 2 do
  local found = redis.call('HGET', KEYS[1], ARGV[i])
  if not found then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    found = ARGV[i + 1]
  end
  out[#out + 1] = found
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return out
"""


class Limits:
    """One process's side of the rule: its hosts' limits, when it next renews
    them, and the refusal it found, if any.

    ``run(keys, args)`` runs :data:`AGREE` in the pool's Redis (None: that
    Redis will not run it, and the rule goes unchecked, logged). The first
    check is awaited by every take that comes before its answer (one call to
    Redis, however many wait), under the take's own deadline; a renewal runs
    in the background, and a refusal it finds holds for the takes after it.
    """

    def __init__(self, key: str, hosts: Sequence[str], slots: Sequence[int], ttl_ms: int) -> None:
        self._keys = [key]
        self._hosts, self._slots = tuple(hosts), tuple(slots)
        self._args: list[str | int] = [ttl_ms]
        for host, limit in zip(hosts, slots, strict=True):
            self._args += [host, limit]
        self._every_s = ttl_ms / 3000
        self._due = -math.inf
        self._agreed = False  # an answer has come: later checks are renewals
        self._refused: LLMBadHosts | None = None
        self._checking: asyncio.Future[None] | None = None

    async def check(
        self,
        run: Callable[[list[str], list[str | int]], Awaitable[Any]],
        spawn: Callable[[Awaitable[None]], asyncio.Future[None]],
        until: float,
    ) -> None:
        """Raise the refusal, or return once this process's limits agree with
        those recorded (the first time, waiting for Redis until ``until`` on
        the loop's clock: TimeoutError past it)."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self._due and (self._checking is None or self._checking.done()):
            self._due = loop.time() + self._every_s
            self._checking = spawn(self._check(run))
            self._checking.add_done_callback(_retrieved)
        if not self._agreed and self._checking is not None:
            async with asyncio.timeout_at(None if until == math.inf else until):
                await asyncio.shield(self._checking)
        if self._refused is not None:
            raise self._refused

    async def _check(self, run: Callable[[list[str], list[str | int]], Awaitable[Any]]) -> None:
        try:
            found = await run(self._keys, self._args)
        except LLMError as exc:
            if not self._agreed:
                raise  # the first takes wait for it: theirs to raise
            log.warning("renewing the pool's limits in Redis failed: %s", exc)
            return
        if found is None:  # a Redis that will not run the script: the rule goes unchecked
            if not self._agreed:
                log.info("the pool's Redis will not run the limits script: limits unchecked")
        else:
            self._refused = disagreement(self._hosts, self._slots, found)
        self._agreed = True


def _retrieved(done: asyncio.Future[None]) -> None:
    """Marks a check's failure as seen (its waiters raise it, if any wait)."""
    if not done.cancelled():
        done.exception()


def disagreement(hosts: Sequence[str], slots: Sequence[int], found: object) -> LLMBadHosts | None:
    """The refusal for a pool whose limits differ from those ``found`` in
    Redis (:data:`AGREE`'s answer), or None when they agree."""
    if not isinstance(found, list) or len(found) != len(hosts):
        return LLMBadHosts("the pool's Redis answered its hosts' limits in a shape no script sends")
    for host, limit, theirs in zip(hosts, slots, found, strict=True):
        recorded = theirs.decode() if isinstance(theirs, bytes) else str(theirs)
        if recorded != str(limit):
            return LLMBadHosts(
                f"another process sharing this pool gives host {host} "
                f"{recorded[:12]} calls at once, this one {limit}; every process "
                "sharing a pool's Redis must give each host the same limit",
                f"{host}*{limit}",
            )
    return None
