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
from vaelii_llm.pool._rates import MINUTE_MS
from vaelii_llm.pool._slots import AGING_MS

__all__ = ["CHUNK", "COUNT", "EPOCH_KEPT_MS", "RENEW", "STEP", "read_reply", "read_step"]

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
    + f"local MINUTE = {MINUTE_MS}\n"
    + f"local AGING = {AGING_MS}\n"
    + """
-- One instant of one process: the leases it gives back (with what each turn
-- told of its host's rates), the waiters that left, then the leases it takes,
-- the waiters ranked first first. KEYS: n lease sets, n cool-down flags, n
-- rate buckets, the freed list, the epoch, the waiters' ranks, the waiters'
-- expiries. ARGV: ttl ms, n slot counts, how many words freed keeps, the
-- lease ids' stem, the first take's number, how many take, the takes (one
-- 'tokens|priority|conversation|waiter|preferences;' each), the releases
-- ('host=lease '), the run id the process last saw, each host's rates
-- ('rpm:tpm ', 0 none; '' for a pool with none), the settlements
-- ('host:delta:rr:rt:lr:lt:wait ', -1 unknown), the waiters that left
-- ('id '), max_waiting (0 none), the conversations' key prefix and TTL ms.
-- Take j's lease id is stem:(first + j). Answers the run id, and each take's
-- host, or what held it: 0 (no free slot), r/t/w and a host (its requests,
-- its tokens, its 429), q (max_waiting reached), comma-separated.
local n = (#KEYS - 4) / 3
local ttl = tonumber(ARGV[1])
local freed, queue, alive = KEYS[3 * n + 1], KEYS[3 * n + 3], KEYS[3 * n + 4]
local at = 2 + n
local keep, stem, first = tonumber(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
local count, prefs, releases = tonumber(ARGV[at + 3]), ARGV[at + 4], ARGV[at + 5]
local run, fenced = epoch(KEYS[3 * n + 2], ARGV[at + 6], ttl)
local rates, settles, left = ARGV[at + 7], ARGV[at + 8], ARGV[at + 9]
local max_waiting, conversations = tonumber(ARGV[at + 10]), ARGV[at + 11]
local kept_ms = tonumber(ARGV[at + 12])

-- Each rated host's buckets (the rule of vaelii_llm.pool._rates), read once,
-- refilled to now, written back if changed.
local rated = rates ~= ''
local caps, buckets = {}, {}
if rated then
  local i = 0
  for r, t in string.gmatch(rates, '(%d+):(%d+)') do
    i = i + 1
    caps[i] = {tonumber(r), tonumber(t)}
  end
end
local function bucket(i)
  local b = buckets[i]
  if b then return b end
  local f = redis.call('HMGET', KEYS[2 * n + i], 'r', 't', 's', 'u', 'R', 'T')
  local R, T = caps[i][1], caps[i][2]
  if f[5] then R = math.min(R, tonumber(f[5])) end
  if f[6] then T = math.min(T, tonumber(f[6])) end
  local gone = math.max(now - (tonumber(f[3]) or now), 0)
  local r, tk = tonumber(f[1]) or R, tonumber(f[2]) or T
  if R > 0 then r = math.min(R, r + gone * R / MINUTE) end
  if T > 0 then tk = math.min(T, tk + gone * T / MINUTE) end
  b = {r = r, t = tk, u = tonumber(f[4]) or 0, R = R, T = T, low = f[5] or f[6], dirty = false}
  buckets[i] = b
  return b
end
local function why(i, e)
  if not rated then return nil end
  local b = bucket(i)
  if b.u > now then return 'w' end
  if b.R > 0 and b.r < 1 then return 'r' end
  if b.T > 0 and b.t < math.min(math.max(e, 1), b.T) then return 't' end
  return nil
end
if rated then
  local pattern = '(%d+):(-?%d+):(-?%d+):(-?%d+):(-?%d+):(-?%d+):(-?%d+)'
  for host, delta, rr, rt, lr, lt, w in string.gmatch(settles, pattern) do
    local b = bucket(tonumber(host))
    delta, rr, rt = tonumber(delta), tonumber(rr), tonumber(rt)
    lr, lt, w = tonumber(lr), tonumber(lt), tonumber(w)
    b.dirty = true
    if b.T > 0 then b.t = math.max(b.t - delta, -b.T) end
    if lr >= 0 and b.R > 0 then
      local lowered = math.min(b.R, math.max(lr, 1))
      b.r, b.R, b.low = b.r * lowered / b.R, lowered, true
    end
    if lt >= 0 and b.T > 0 then
      local lowered = math.min(b.T, math.max(lt, 1))
      b.t, b.T, b.low = b.t * lowered / b.T, lowered, true
    end
    if rr >= 0 and b.R > 0 then b.r = math.min(b.r, rr) end
    if rt >= 0 and b.T > 0 then b.t = math.min(b.t, rt) end
    if w >= 0 then
      b.u = math.max(b.u, now + w)
      b.r = math.min(b.r, 0)
    end
  end
end
local function save()
  for i, b in pairs(buckets) do
    if b.dirty then
      local key = KEYS[2 * n + i]
      redis.call('HSET', key, 'r', tostring(b.r), 't', tostring(b.t), 's', now, 'u', b.u)
      if b.low then
        redis.call('HSET', key, 'R', b.R, 'T', b.T)
      end
      redis.call('PEXPIRE', key, math.max(MINUTE, b.u - now) + ttl)
    end
  end
end

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
-- The waiters that left, and those whose process stopped renewing them.
for id in string.gmatch(left, '(%S+)') do
  redis.call('ZREM', queue, id)
  redis.call('ZREM', alive, id)
end
local waiting = 0
if redis.call('EXISTS', alive) == 1 then
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now, 'LIMIT', 0, CHUNK)
  if #dead > 0 then
    redis.call('ZREM', alive, unpack(dead))
    redis.call('ZREM', queue, unpack(dead))
  end
  waiting = redis.call('ZCARD', queue)
end
if count == 0 or fenced then
  save()
  local none = {}
  for j = 1, count do
    none[j] = 0
  end
  return {run, table.concat(none, ',')}
end
local held, slots, none, shared_cool, all_shared_cool = {}, {}, {}, {}, true
local free = 0
for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  held[i], slots[i], none[i] = redis.call('ZCARD', KEYS[i]), tonumber(ARGV[1 + i]), 0
  free = free + math.max(slots[i] - held[i], 0)
  shared_cool[i] = redis.call('EXISTS', KEYS[n + i]) == 1
  all_shared_cool = all_shared_cool and shared_cool[i]
end
-- The takes, ranked: a waiter's rank is when it began waiting, less AGING
-- ms for each step of priority (lower first); a take not yet waiting ranks
-- as one that begins now.
local order = {}
for spec in string.gmatch(prefs, '([^;]*);') do
  local e, p, c, w, pref = string.match(spec, '^(%d+)|(-?%d+)|(%x*)|([^|]*)|(.*)$')
  local take = {e = tonumber(e), c = c, w = w, pref = pref, j = #order + 1}
  take.rank = (w ~= '' and waiting > 0 and tonumber(redis.call('ZSCORE', queue, w)))
    or now - tonumber(p) * AGING
  order[#order + 1] = take
end
table.sort(order, function(a, b)
  if a.rank ~= b.rank then return a.rank < b.rank end
  return a.j < b.j
end)
local out, taken = {}, {}
for _, take in ipairs(order) do
  -- A take's preferences: '' (none), or its vote's turns on each host then
  -- whether this process sees each host cooling, comma-separated.
  local uses, cooling, all_cooling = none, shared_cool, all_shared_cool
  local pref = take.pref
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
  -- Waiters ranked before this take hold the free slots first.
  local ahead = 0
  if waiting > 0 then
    ahead = redis.call('ZCOUNT', queue, '-inf', '(' .. take.rank)
  end
  local best, best_uses, best_held, held_by = 0, 0, 0, '0'
  for i = 1, n do
    if held[i] < slots[i] and (all_cooling or not cooling[i]) then
      local w = why(i, take.e)
      if w then
        if held_by == '0' then held_by = w .. i end
      elseif ahead < free and (best == 0
        or uses[i] < best_uses or (uses[i] == best_uses and held[i] < best_held)) then
        best, best_uses, best_held = i, uses[i], held[i]
      end
    end
  end
  local key = nil
  if take.c ~= '' then
    key = conversations .. take.c
    if best > 0 then
      local last = tonumber(redis.call('GET', key))
      if last and last ~= best and last >= 1 and last <= n and held[last] < slots[last]
        and (all_cooling or not cooling[last]) and uses[last] <= best_uses
        and not why(last, take.e) then
        best = last
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
    adds[#adds + 1] = stem .. ':' .. (first + take.j - 1)
    held[best] = held[best] + 1
    free = free - 1
    if rated then
      local b = bucket(best)
      b.r, b.t, b.dirty = b.r - 1, b.t - math.min(take.e, b.T), true
    end
    if key then
      redis.call('SET', key, best, 'PX', kept_ms)
    end
    if take.w ~= '' and waiting > 0 and redis.call('ZREM', queue, take.w) == 1 then
      redis.call('ZREM', alive, take.w)
      waiting = waiting - 1
    end
    out[take.j] = best
  elseif take.w == '' then
    out[take.j] = held_by
  elseif max_waiting > 0 and waiting >= max_waiting and not redis.call('ZSCORE', queue, take.w) then
    out[take.j] = 'q'
  else
    -- The take waits: ranked from its first wait, alive while it asks again.
    if redis.call('ZADD', queue, 'NX', take.rank, take.w) == 1 then
      waiting = waiting + 1
    end
    redis.call('ZADD', alive, now + ttl, take.w)
    redis.call('PEXPIRE', queue, ttl)
    redis.call('PEXPIRE', alive, ttl)
    out[take.j] = held_by
  end
end
for i, adds in pairs(taken) do
  for at = 1, #adds, 2 * CHUNK do
    redis.call('ZADD', KEYS[i], unpack(adds, at, math.min(at + 2 * CHUNK - 1, #adds)))
  end
  redis.call('PEXPIRE', KEYS[i], ttl)
end
save()
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

    ``renew`` (of ``asked`` leases): the run id and the leases kept.
    ``count``: no run id, and held, cooling for each host. (``step``: see
    :func:`read_step`.)
    """
    if not isinstance(found, list):
        raise ValueError(f"{_shown(found)} where an array belongs")
    if script == "count":
        if len(found) != 2 * hosts or not all(type(v) is int for v in found):
            raise ValueError(f"{_shown(found)} where {2 * hosts} integers belong")
        if any(v < 0 for v in found[0::2]) or any(v not in (0, 1) for v in found[1::2]):
            raise ValueError("a count below 0 or a cooling flag other than 0 or 1")
        return "", found
    run, answer = _run_and(found)
    if type(answer) is not int or not 0 <= answer <= asked:
        raise ValueError(f"{_shown(answer)} where a count of 0 to {asked} leases belongs")
    return run, [answer]


def _run_and(found: list[object]) -> tuple[str, object]:
    if len(found) != 2:
        raise ValueError(f"{_shown(found)} where an array of 2 belongs")
    run, answer = found
    if not isinstance(run, bytes) or not _RUN_ID.fullmatch(run):
        raise ValueError(f"{_shown(run)} where a run id belongs")
    return run.decode(), answer


_HELD: Final = re.compile(rb"([rtw])([0-9]{1,9})|q")
"""What held a take: a host's requests, tokens or 429 (the host from 1), or max_waiting."""


def read_step(found: object, hosts: int, asked: int) -> tuple[str, list[tuple[int, str]]]:
    """The step script's reply for ``asked`` takes over ``hosts`` hosts,
    checked as :func:`read_reply` checks the others: the run id and each
    take's host index with ``""``, or -1 with what held it (``""``: no free
    slot; ``r2``: host 2's requests, from 0; ``q``: max_waiting)."""
    if not isinstance(found, list):
        raise ValueError(f"{_shown(found)} where an array belongs")
    run, answer = _run_and(found)
    if not isinstance(answer, bytes):
        raise ValueError(f"{_shown(answer)} where the takes' hosts belong")
    words = answer.split(b",") if answer else []
    if len(words) != asked:
        raise ValueError(f"{len(words)} host(s) for {asked} take(s)")
    out: list[tuple[int, str]] = []
    for word in words:
        if word.isdigit() and int(word) <= hosts:
            out.append((int(word) - 1, ""))
            continue
        held = _HELD.fullmatch(word)
        if held is None or (held.group(2) is not None and not 1 <= int(held.group(2)) <= hosts):
            raise ValueError(f"{_shown(answer)}: a host other than 0 to {hosts}")
        why = "q" if held.group(1) is None else f"{held.group(1).decode()}{int(held.group(2)) - 1}"
        out.append((-1, why))
    return run, out
