/**
 * The one Lua script of a leased shared gate (`mode: 'leased'`): a process's refresh. Doorman's
 * idea for concurrency permits: each process holds a *block* of the cap sized by its demand and
 * grants from it locally; Redis only apportions the cap, on Redis `TIME`, once per refresh.
 *
 * Keys of a leased gate, all under one `{...}` hash tag:
 * - `M` meta, a hash (the FIFO mode's meta key): `v` the layout (`'leased/1'`), `c` the cap,
 *   `r` the end of a recovery window (ms, Redis time), `x` when its 30-day TTL was last set.
 * - `L` blocks, a hash: process id -> `"<expiry ms> <block> <held> <wants>"`. No TTL (so a
 *   `volatile-*` eviction never drops a block); an expired entry is deleted by the next refresh
 *   of any process, and an empty hash by Redis itself.
 * - `H`, `Q`: the FIFO mode's holders and tickets, only read (when a process registers): a
 *   leased process refuses a gate that FIFO processes use (and they refuse `v = 'leased/1'`).
 *
 * The invariant, over live entries: Σ max(block, held) ≤ cap. A held permit cannot be taken
 * back, so a block that shrinks below what its process holds grants nothing new until enough
 * of those permits are released.
 */
import { createHash } from 'node:crypto';
import type { Script } from './scripts.js';

/** The layout a leased gate writes in `M.v`; any other found there is refused. */
export const LEASED_LAYOUT = 'leased/1';

/**
 * REFRESH(cap, leaseMs, windowMs, processId, held, wants, valid, setCap): records this process's
 * held permits and demand (`wants`), drops expired processes, and returns its block: its max-min
 * fair share of the cap by demand (Doorman's FAIR_SHARE), never more than what the others leave
 * (cap − Σ others' max(block, held)).
 *
 * Recovery: a missing `M` means a first use or a loss (restart, flush, eviction). For a window
 * nobody gets a block beyond what it holds: `leaseMs` when the caller still had a valid block
 * (`valid` 1: it knows state was lost), else `windowMs` (one refresh and one command timeout:
 * a process that held a block before the loss refreshes within it and stretches the window to
 * a whole lease). A caller with a valid block whose entry is gone stretches it the same way.
 *
 * Returns `{block, leaseMs, cap, processes, Σ blocks, Σ held, free, target, recovering}`.
 */
const REFRESH = `
local M, L, H, Q = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local proc, held, wants, valid = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local setcap = tonumber(ARGV[8])
local META_TTL = 2592000000
local meta = redis.call('HMGET', M, 'v', 'c', 'r', 'x')
if meta[1] and meta[1] ~= '${LEASED_LAYOUT}' then
  return redis.error_reply('HOSTGATE_LAYOUT ' .. meta[1])
end
if not meta[1] and meta[2] then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap, ends = tonumber(meta[2]), tonumber(meta[3] or 0)
if not cap then
  cap = tonumber(ARGV[1])
  ends = now + (valid and lease or window)
  redis.call('HSET', M, 'v', '${LEASED_LAYOUT}', 'c', cap, 'r', ends, 'x', now)
  redis.call('PEXPIRE', M, META_TTL)
elseif now - tonumber(meta[4] or 0) > 86400000 then
  -- The TTL only reaps an abandoned gate: renewed once a day, not at every refresh.
  redis.call('HSET', M, 'x', now)
  redis.call('PEXPIRE', M, META_TTL)
end
if setcap > 0 then
  cap = setcap
  redis.call('HSET', M, 'c', cap)
end
local all = redis.call('HGETALL', L)
local others, blocks, helds, mine = 0, 0, 0, false
local ids, want, dead = {}, {}, {}
for i = 1, #all, 2 do
  local id = all[i]
  local e, b, h, w = string.match(all[i + 1], '^(%d+) (%d+) (%d+) (%d+)$')
  if id == proc then
    mine = true
  elseif tonumber(e) <= now then
    dead[#dead + 1] = id
  else
    b, h = tonumber(b), tonumber(h)
    others = others + math.max(b, h)
    blocks, helds = blocks + b, helds + h
    ids[#ids + 1] = id
    want[id] = tonumber(w)
  end
end
-- FIFO keys beside ours: checked when a process registers (once per process and lease), not
-- at every refresh; FIFO processes of a versioned layout refuse ours themselves.
if not mine and redis.call('EXISTS', H, Q) > 0 then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
for i = 1, #dead, 1000 do
  redis.call('HDEL', L, unpack(dead, i, math.min(#dead, i + 999)))
end
if valid and not mine and ends < now + lease then
  -- Our block was valid and Redis has no trace of it: its state was lost under us.
  ends = now + lease
  redis.call('HSET', M, 'r', ends)
end
local recovering = ends > now
ids[#ids + 1] = proc
want[proc] = wants
local target
if recovering then
  target = held
else
  -- Max-min fair share by demand: the smallest demands are met in full, the rest share what
  -- is left equally; the units that do not divide go one each to the lowest ids, so the
  -- targets sum to the cap and stay put while demands do.
  table.sort(ids, function(a, b)
    if want[a] ~= want[b] then return want[a] < want[b] end
    return a < b
  end)
  local left, n = cap, #ids
  for i, id in ipairs(ids) do
    local share = math.floor(left / (n - i + 1))
    if want[id] <= share then
      if id == proc then target = want[id] end
      left = left - want[id]
    else
      local rest = {}
      for j = i, n do rest[#rest + 1] = ids[j] end
      table.sort(rest)
      local extra = left - share * #rest
      for j, other in ipairs(rest) do
        if other == proc then target = math.min(want[proc], share + (j <= extra and 1 or 0)) end
      end
      break
    end
  end
end
local block = math.max(0, math.min(target, cap - others))
redis.call('HSET', L, proc, (now + lease) .. ' ' .. block .. ' ' .. held .. ' ' .. wants)
local free = cap - others - math.max(block, held)
return {block, lease, cap, #ids, blocks + block, helds + held, free, target, recovering and 1 or 0}
`;

function script(name: string, source: string): Script {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

export const leasedScripts = { refresh: script('leasedRefresh', REFRESH) } as const;

/** Key suffixes of a leased gate, in the order the script declares them (`m`, `h`, `q` are the FIFO mode's). */
export const LEASED_KEY_SUFFIXES = ['m', 'l', 'h', 'q'] as const;
