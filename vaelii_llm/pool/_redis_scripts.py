"""The Lua scripts a pool's Redis slots run, and the check of every reply they send.

One script takes and gives back an instant's leases (:data:`STEP`), one renews
the leases a process holds (:data:`RENEW`), one counts each host's (:data:`COUNT`);
the epoch each begins with fences a Redis that restarted and forgot its leases
(:mod:`vaelii_llm.pool._redis_slots` says how). :func:`read_reply` refuses any reply
of a shape no script sends.
"""

from __future__ import annotations

import re
from typing import Final

from vaelii_llm.errors import excerpt

__all__ = ["CHUNK", "COUNT", "EPOCH_KEPT_MS", "RENEW", "STEP", "read_reply"]

CHUNK: Final = 1000
"""Leases one Redis call of a script adds or removes at most: Lua's stack
bounds a call's arguments."""

_COMMON = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

EPOCH_KEPT_MS: Final = 24 * 60 * 60 * 1000
"""How long a pool's epoch key outlives its last use. A process that used the
pool before and comes back after it expired waits one lease TTL: it cannot tell
the expiry from a restart."""

_EPOCH = f"""
-- This life of the pool's keys: its run id, and whether its takes are fenced
-- (see the module docstring). The epoch key holds 'run made fenced', the run
-- id drawn from the server's clock when the key is made.
local function epoch(key, known, ttl)
  local run, made, fenced
  local kept = redis.call('GET', key)
  if kept then
    run, made, fenced = string.match(kept, '^(%x+) (%d+) ([01])$')
  end
  if run == nil then
    run = string.format('%x%06x', tonumber(t[1]), tonumber(t[2]))
    made, fenced, kept = now, '0', nil
  else
    made = tonumber(made)
  end
  local ends = made + ttl
  if fenced == '0' and known ~= '' and known ~= run and now < ends then
    fenced, kept = '1', nil  -- the caller knew another run: the server forgot
  end
  if kept == nil then
    redis.call('SET', key, string.format('%s %d %s', run, made, fenced), 'PX', {EPOCH_KEPT_MS})
  else
    redis.call('PEXPIRE', key, {EPOCH_KEPT_MS})
  end
  return run, fenced == '1' and now < ends
end
"""

STEP: Final = (
    _COMMON
    + _EPOCH
    + f"local CHUNK = {CHUNK}\n"
    + """
-- One instant of one process: the leases it gives back, then the leases it
-- takes, for each caller in the order they asked. KEYS: n lease sets, n
-- cool-down flags, the freed list, the epoch. ARGV: ttl ms, n slot counts, how
-- many words freed keeps, the lease ids' stem, the first take's number, how
-- many take, their preferences (one per take, ';'-terminated), the releases
-- ('host=lease '), the run id the process last saw. Take j's lease id is
-- stem:(first + j). Answers the run id, and each take's host (0: none),
-- comma-separated.
local n = (#KEYS - 2) / 2
local ttl = tonumber(ARGV[1])
local freed = KEYS[2 * n + 1]
local at = 2 + n
local keep, stem, first = tonumber(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
local count, prefs, releases = tonumber(ARGV[at + 3]), ARGV[at + 4], ARGV[at + 5]
local run, fenced = epoch(KEYS[2 * n + 2], ARGV[at + 6], ttl)
-- One ZREM per host and one RPUSH (a word per lease: each wakes one waiter),
-- in chunks that stay inside Lua's stack.
local gone, words = {}, {}
for host, lease in string.gmatch(releases, '(%d+)=(%S+)') do
  local key = KEYS[tonumber(host)]
  local leases = gone[key]
  if leases == nil then
    leases = {}
    gone[key] = leases
  end
  leases[#leases + 1] = lease
  words[#words + 1] = '1'
end
for key, leases in pairs(gone) do
  for at = 1, #leases, CHUNK do
    redis.call('ZREM', key, unpack(leases, at, math.min(at + CHUNK - 1, #leases)))
  end
end
if #words > 0 then
  for at = 1, #words, CHUNK do
    redis.call('RPUSH', freed, unpack(words, at, math.min(at + CHUNK - 1, #words)))
  end
  redis.call('LTRIM', freed, -keep, -1)
  redis.call('PEXPIRE', freed, ttl)
end
if count == 0 then
  return {run, ''}
end
if fenced then
  local none = {}
  for j = 1, count do
    none[j] = 0
  end
  return {run, table.concat(none, ',')}
end
local held, slots, none, shared_cool, all_shared_cool = {}, {}, {}, {}, true
for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  held[i], slots[i], none[i] = redis.call('ZCARD', KEYS[i]), tonumber(ARGV[1 + i]), 0
  shared_cool[i] = redis.call('EXISTS', KEYS[n + i]) == 1
  all_shared_cool = all_shared_cool and shared_cool[i]
end
local out, taken, j = {}, {}, 0
for pref in string.gmatch(prefs, '([^;]*);') do
  -- A caller's preferences: '' (none), or its vote's turns on each host then
  -- whether this process sees each host cooling, comma-separated.
  local uses, cooling, all_cooling = none, shared_cool, all_shared_cool
  if pref ~= '' then
    uses, cooling, all_cooling = {}, {}, true
    for i = 1, n do
      uses[i], cooling[i] = 0, shared_cool[i]
    end
    local k = 0
    for word in string.gmatch(pref, '[^,]+') do
      k = k + 1
      if k <= n then
        uses[k] = tonumber(word)
      else
        cooling[k - n] = cooling[k - n] or word == '1'
      end
    end
    for i = 1, n do
      if not cooling[i] then all_cooling = false end
    end
  end
  local best, best_uses, best_held = 0, 0, 0
  for i = 1, n do
    if held[i] < slots[i] and (all_cooling or not cooling[i]) then
      if best == 0 or uses[i] < best_uses or (uses[i] == best_uses and held[i] < best_held) then
        best, best_uses, best_held = i, uses[i], held[i]
      end
    end
  end
  if best > 0 then
    -- ZADD's arguments for the host: score, member, score, member...
    local adds = taken[best]
    if adds == nil then
      adds = {}
      taken[best] = adds
    end
    adds[#adds + 1] = now + ttl
    adds[#adds + 1] = stem .. ':' .. (first + j)
    held[best] = held[best] + 1
  end
  j = j + 1
  out[j] = best
end
for i, adds in pairs(taken) do
  for at = 1, #adds, 2 * CHUNK do
    redis.call('ZADD', KEYS[i], unpack(adds, at, math.min(at + 2 * CHUNK - 1, #adds)))
  end
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {run, table.concat(out, ',')}
"""
)

RENEW: Final = (
    _COMMON
    + _EPOCH
    + """
-- KEYS: the epoch, then each lease's set. ARGV: ttl ms, the run id the process
-- last saw, then the lease ids in KEYS' order. A lease taken in an earlier life
-- of the server is added back (re-asserted); one of this life that is gone
-- expired, and stays gone. Answers the run id and the leases kept.
local ttl = tonumber(ARGV[1])
local run = epoch(KEYS[1], ARGV[2], ttl)
local lost = ARGV[2] ~= '' and ARGV[2] ~= run
local kept = 0
for i = 2, #KEYS do
  if lost or redis.call('ZSCORE', KEYS[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[i], now + ttl, ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i], ttl)
    kept = kept + 1
  end
end
return {run, kept}
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


_RUN_ID: Final = re.compile(rb"[0-9a-f]{1,40}")
"""A run id (see :data:`_EPOCH`): hex digits."""


def _shown(found: object) -> str:
    """A reply, described in a few words (never the whole of a long one)."""
    if isinstance(found, bytes):
        return repr(excerpt(found, 40))
    if isinstance(found, list):
        return f"an array of {len(found)}"
    return repr(found) if isinstance(found, int) or found is None else type(found).__name__


def read_reply(script: str, found: object, hosts: int, asked: int) -> tuple[str, list[int]]:
    """A slot script's reply, checked against the one shape it sends; ValueError
    (naming what is wrong, never the whole reply) for any other.

    ``step`` (``asked`` takes over ``hosts`` hosts): the run id and each take's
    host index, or -1 for none. ``renew`` (of ``asked`` leases): the run id and
    the leases kept. ``count``: no run id, and held, cooling for each host.
    """
    if not isinstance(found, list):
        raise ValueError(f"{_shown(found)} where an array belongs")
    if script == "count":
        if len(found) != 2 * hosts or not all(type(v) is int for v in found):
            raise ValueError(f"{_shown(found)} where {2 * hosts} integers belong")
        if any(v < 0 for v in found[0::2]) or any(v not in (0, 1) for v in found[1::2]):
            raise ValueError("a count below 0 or a cooling flag other than 0 or 1")
        return "", found
    if len(found) != 2:
        raise ValueError(f"{_shown(found)} where an array of 2 belongs")
    run, answer = found
    if not isinstance(run, bytes) or not _RUN_ID.fullmatch(run):
        raise ValueError(f"{_shown(run)} where a run id belongs")
    if script == "renew":
        if type(answer) is not int or not 0 <= answer <= asked:
            raise ValueError(f"{_shown(answer)} where a count of 0 to {asked} leases belongs")
        return run.decode(), [answer]
    if not isinstance(answer, bytes):
        raise ValueError(f"{_shown(answer)} where the takes' hosts belong")
    words = answer.split(b",") if answer else []
    if len(words) != asked:
        raise ValueError(f"{len(words)} host(s) for {asked} take(s)")
    if not all(word.isdigit() and int(word) <= hosts for word in words):
        raise ValueError(f"{_shown(answer)}: a host other than 0 to {hosts}")
    return run.decode(), [int(word) - 1 for word in words]
