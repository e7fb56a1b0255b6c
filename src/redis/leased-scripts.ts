/**
 * The one Lua script of a leased shared gate (`mode: 'leased'`): a process's refresh. Doorman's
 * idea for concurrency permits: each process holds a *block* of the cap sized by its demand and
 * grants from it locally; Redis only apportions the cap, on Redis `TIME`, once per refresh.
 *
 * Keys of a leased gate, all under one `{...}` hash tag:
 * - `M` meta, a hash (the FIFO mode's meta key): `v` the layout (`'leased/1'`), `c` the cap,
 *   `r` the end of a recovery window (ms, Redis time), `x` when its 30-day TTL was last set,
 *   `lr` the Redis time of the last run (issue 32: a gap or a step is told by it), and what the
 *   last walk of `L` found (`t` when, `b` `e` `n` `k` `u`: see REFRESH; `rt` `rb` `re` a rate's).
 * - `L` blocks, a hash: process id -> `"<expiry ms> <block> <held> <wants> <share> <counted>
 *   <counted until ms> <rate wants> <need>"` (`need`: the heaviest head waiting; entries of an
 *   older writer end after `wants` or `rate wants`), `<id>~<k>` a closed process's sends of its
 *   last window by age (rate only), and `_s` the sum of max(block, held) over its entries, `_r`
 *   Σ counted rate shares. A TTL of three leases, renewed by every refresh (a gate nobody uses
 *   leaves no key; under a `volatile-*` policy it is evictable as under `allkeys-*`, and the
 *   store warns of both at start); an expired entry is deleted by the next walk (see REFRESH),
 *   a cleanly closed one at once.
 * - `H`, `Q`: the FIFO mode's holders and tickets, only read (when a process registers): a
 *   leased process refuses a gate that FIFO processes use (and they refuse `v = 'leased/1'`).
 *
 * **Redis-time timestamps** (what a step of Redis's clock moves, and what a test emulating a
 * step must move by the step; the script moves all of them by the gap when it detects one):
 * `M.r`, `M.t`, `M.lr`, `M.x` (only renewal bookkeeping: the script leaves it), and in every
 * entry of `L` (closed tails `<id>~<k>` included) field 1, its expiry, and field 7, its rate
 * hold's end (0: none).
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
 * The layout of a leased gate with a request rate: `leased/1` plus the rate in `M.rt` and each
 * entry's rate part. A process without a rate (or of a release before leased rates) is refused
 * on it, so no process sends past the rate unknowingly; a process with a rate adopts a
 * `leased/1` gate (same keys otherwise). As `fifo/1+rate` for the FIFO mode.
 */
export const LEASED_RATE_LAYOUT = 'leased/1+rate';

/**
 * REFRESH(cap, leaseMs, windowMs, processId, held, wants, valid, setCap, scanMs, rate, rateUsed,
 * rateWants, holdMs, setRate): records this process's held permits and demand (`wants`) and
 * returns its block: its max-min fair share of the cap by demand (Doorman's FAIR_SHARE), never
 * more than what the others leave (cap − Σ others' max(block, held)).
 *
 * A constant number of Redis calls and no walk over the fleet: `L._s` keeps Σ max(block, held)
 * over every entry in `L`, updated by each refresh's difference. At most every `scanMs` one
 * refresh walks `L`: it drops expired processes (until then their permits stay counted: never
 * too few), sums `L._s` again, and stores the fair-share level in `M` (`b` the level, or -1 when
 * every demand fits; `e` the highest process id that gets one unit over it; `n`, `k`, `u` the
 * processes, blocks and held at that walk). So a refresh costs the same at 10 processes or
 * 10,000, and the walk is paid a few times per interval per gate, not once per process.
 *
 * Recovery: a missing `M` means a first use or a loss (restart, flush, eviction). For a window
 * nobody gets a block beyond what it holds: `leaseMs` when the caller had an entry (`had`, or
 * `valid`: it knows state was lost), else `windowMs` (one refresh: a busy process that had an
 * entry refreshes within it and stretches the window to a whole lease). A caller with a valid
 * block whose entry is gone, or that had an entry and finds `L` gone, stretches it the same way.
 *
 * Time that passed unobserved (issue 32): see the comment at the detection below. Arguments
 * 15-22: `seen` (Redis ms of the caller's last answer, 0 none), `elapsed` (its monotonic ms
 * since), `down` (its last refresh failed), `had`, `need` (its heaviest waiting head), `tol`
 * (a command timeout), `gapMs` (refresh + command timeout), `closing` (a clean close: the
 * entry goes; argument 23 then holds its rate sends of the last window by age, in eighths),
 * 24 `selfcut` ('1': the caller cuts its own rate share to a lower target, see below).
 *
 * **A rate** (`rate`: `limit:per:burst`, '' for none; layout `leased/1+rate`) is leased the same
 * way, as Doorman leases capacity: each process gets a *rate share*, whole calls per `per` ms
 * (its burst share, `floor(burst × share / limit)`, follows from it on the process), a max-min
 * fair share of `limit` by its rate demand (`rateWants`), within what the others' counted shares
 * leave. `L._r` keeps Σ counted over the entries. Each process paces its share (GCRA), so the
 * fleet's calls in a window follow its shares' sum over the window and a share given back is
 * free at once (issue 32, item 6: a rolling deploy ran at 70-75% while a closed process's last
 * sends were counted until they left the window). What a process may send beyond its share is
 * counted (see countedOf): its old share while Redis's cut is on its way to it (`holdMs`, one
 * command timeout; a process that passes `selfcut` is never cut under what it reports sending
 * at: it is answered its target, cuts itself at once and says so); for a window after its share
 * went down, one call and the burst it lost; after a clean close, its burst share and one call
 * for a window; and a process whose lease lapsed, its last share until `per` after its lease.
 * Then, over counted shares, Σ ≤ limit, and the fleet's calls in any window of `per` ms stay
 * within `limit + burst`.
 * Entry: `"<expiry> <block> <held> <wants> <share> <counted> <counted until> <rate wants>"`.
 *
 * Returns `{block, leaseMs, cap, processes, Σ blocks, Σ held, free, target, recovering (ms left
 * of the recovery window, 0: none), share, rate target, Σ counted shares, rate, Redis now (ms)}`.
 */
const REFRESH = `
local M, L, H, Q = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local proc, held, wants, valid = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local setcap, scan = tonumber(ARGV[8]), tonumber(ARGV[9])
local rateArg, rused, rwants = ARGV[10] or '', tonumber(ARGV[11] or 0), tonumber(ARGV[12] or 0)
local holdMs, setRate = tonumber(ARGV[13] or 0), ARGV[14] or ''
local seen, elapsed = tonumber(ARGV[15] or 0), tonumber(ARGV[16] or 0)
local down, had, need = ARGV[17] == '1', ARGV[18] == '1', tonumber(ARGV[19] or 0)
local tol, gapMs, closing = tonumber(ARGV[20] or 0), tonumber(ARGV[21] or 0), ARGV[22] == '1'
local selfcut = ARGV[24] == '1'
local RATED = rateArg ~= ''
local LAYOUT = RATED and '${LEASED_RATE_LAYOUT}' or '${LEASED_LAYOUT}'
local META_TTL = 2592000000
local meta = redis.call('HMGET', M, 'v', 'c', 'r', 'x', 't', 'b', 'e', 'n', 'k', 'u', 'rt', 'rb', 're', 'lr')
if meta[1] and meta[1] ~= LAYOUT and not (RATED and meta[1] == '${LEASED_LAYOUT}') then
  return redis.error_reply('HOSTGATE_LAYOUT ' .. meta[1])
end
if not meta[1] and meta[2] then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap, ends, walked = tonumber(meta[2]), tonumber(meta[3] or 0), tonumber(meta[5] or 0)
local lastRun = tonumber(meta[14] or 0)
-- An entry: expiry, block, held, wants, share, counted, until, rate wants, need (the heaviest
-- head waiting: a unit that cannot be split). Entries written before 'need' end at 'rate wants'.
local function parse(entry)
  local e, b, h, w, rest = string.match(entry, '^(%d+) (%d+) (%d+) (%d+)(.*)$')
  local rs, rk, ru, rw, tail = string.match(rest, '^ (%d+) (%d+) (%d+) (%d+)(.*)$')
  local nd = tail and string.match(tail, '^ (%d+)$')
  return tonumber(e), tonumber(b), tonumber(h), tonumber(w),
    tonumber(rs or 0), tonumber(rk or 0), tonumber(ru or 0), tonumber(rw or 0), tonumber(nd or 0)
end
local function format(e, b, h, w, rs, rk, ru, rw, nd)
  return e .. ' ' .. b .. ' ' .. h .. ' ' .. w .. ' ' .. rs .. ' ' .. rk .. ' ' .. ru .. ' ' .. rw .. ' ' .. nd
end
-- Time that passed unobserved (issue 32): Redis away (stopped, unreachable, refusing writes on
-- OOM, restarted with its data), or its clock stepped. Every stored Redis-time timestamp of the
-- gate (entry expiries and rate hold ends, M.r, M.t; M.lr is set below) moves by the gap since
-- the last run, as if time had stood still: no entry expires on it, a dead process is reaped a
-- lease later. Seen: (1) a caller whose refreshes failed meanwhile, and a gap since the last run
-- longer than a healthy fleet leaves while it refreshes (gapMs); (2) a caller whose monotonic
-- clock saw less time pass since its last answer than Redis's did (a forward step, or a command
-- Redis ran long after it was sent); (3) a caller that saw a Redis time later than the last run
-- (the stored state was moved back: the campaign's emulated step); (4) Redis time before the last
-- run: the clock went back, and every stored time moves back with it (a dead process's lease is
-- not stretched by the step).
local shift, learn = 0, false
if cap and lastRun > 0 then
  local gap = now - lastRun
  if gap < 0 then
    shift = gap
  elseif gap > tol then
    local stepped = seen > 0 and (now - seen - elapsed > tol or seen - lastRun > tol)
    local away = down and gap > gapMs
    if stepped or away then shift = gap end
    -- Back from an outage: a restart may have brought back older data than the processes hold.
    learn = away
  end
end
if shift ~= 0 then
  local all = redis.call('HGETALL', L)
  local moved = {}
  for i = 1, #all, 2 do
    local id = all[i]
    if id ~= '_s' and id ~= '_r' then
      local e, b, h, w, rs, rk, ru, rw, nd = parse(all[i + 1])
      moved[#moved + 1] = id
      moved[#moved + 1] = format(e + shift, b, h, w, rs, rk, ru > 0 and ru + shift or 0, rw, nd)
    end
  end
  for i = 1, #moved, 1000 do
    redis.call('HSET', L, unpack(moved, i, math.min(#moved, i + 999)))
  end
  if ends > 0 then ends = ends + shift end
  if walked > 0 then walked = walked + shift end
  redis.call('HSET', M, 'r', ends, 't', walked)
end
if not cap then
  cap = tonumber(ARGV[1])
  -- A first use or a loss: a process that had an entry knows it was a loss (a lease), else one
  -- refresh of the processes that had one (window: they stretch it to a lease).
  ends = now + ((valid or had) and lease or window)
  walked = 0
  meta[11] = nil -- a lost meta hash lost the rate with it: this process's is stored
  redis.call('HSET', M, 'v', LAYOUT, 'c', cap, 'r', ends, 'x', now)
  redis.call('PEXPIRE', M, META_TTL)
elseif now - tonumber(meta[4] or 0) > 86400000 then
  -- The TTL only reaps an abandoned gate: renewed once a day, not at every refresh.
  redis.call('HSET', M, 'x', now)
  redis.call('PEXPIRE', M, META_TTL)
end
redis.call('HSET', M, 'lr', now)
if RATED and meta[1] == '${LEASED_LAYOUT}' then
  -- A rated process adopts a gate kept without a rate; from now on the others are refused.
  redis.call('HSET', M, 'v', LAYOUT)
end
if setcap > 0 then
  cap = setcap
  redis.call('HSET', M, 'c', cap)
end
local rateStr, rlimit, rper, rburst = '', 0, 0, 0
if RATED then
  rateStr = setRate ~= '' and setRate or (meta[11] or rateArg)
  if rateStr ~= meta[11] then redis.call('HSET', M, 'rt', rateStr) end
  local rl, rp, rb = string.match(rateStr, '^([^:]+):([^:]+):([^:]+)$')
  rlimit, rper, rburst = tonumber(rl), tonumber(rp), tonumber(rb)
end
-- A rate share as counted (issue 32, item 6). Every process paces its share (GCRA, the TAT
-- carried across shares), so the fleet's calls in a window of per follow its shares' sum over
-- time: a share given back can be taken at once, save for two things a hold (rk until ru) keeps
-- counted. While an answer that cut a share is on its way (until ru - per), the process still
-- sends at the old share (rk). For a window after a share went down, one call more (its TAT
-- was set at the faster pace: a window that straddles the cut may hold one call beyond the two
-- paces' sum) and the burst the old share allowed beyond the new one's (sent early).
local function burstOf(units)
  if rlimit <= 0 then return 0 end
  return math.floor(rburst * units / rlimit)
end
local function countedOf(rs, rk, ru)
  if ru <= now then return rs end
  if ru - rper > now then return math.max(rs, rk) end
  return rs + 1 + math.max(0, burstOf(rk) - burstOf(rs))
end
local cur = redis.call('HMGET', L, proc, '_s', '_r')
local mine = cur[1] ~= false
if had and not mine and cur[2] == false and ends < now + lease then
  -- This process had an entry and the blocks hash is gone (evicted, or lost with a restart
  -- while the meta hash came back): nobody's permits are counted. Learn for a lease.
  learn = true
end
if learn and ends < now + lease then
  ends = now + lease
  redis.call('HSET', M, 'r', ends)
end
local sum, rsum = tonumber(cur[2] or 0), tonumber(cur[3] or 0)
local before, ownBlock, ownHeld, ownWants = 0, 0, 0, 0
local ownShare, ownCounted, ownUntil, rbefore, ownRateWants = 0, 0, 0, 0, 0
if mine then
  local _, b, h, w, rs, rk, ru, rw = parse(cur[1])
  ownBlock, ownHeld, ownWants, ownRateWants = b, h, w, rw
  before = math.max(ownBlock, ownHeld)
  ownShare, ownCounted, ownUntil = rs, rk, ru
  rbefore = countedOf(rs, rk, ru)
end
-- FIFO keys beside ours: checked when a process registers (once per process and lease), not
-- at every refresh; FIFO processes of a versioned layout refuse ours themselves.
if not mine and redis.call('EXISTS', H, Q) > 0 then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
-- Max-min fair share by demand, with floors: each process's heaviest waiting head (need, at
-- most its demand) is a unit that cannot be split, so it is met first (smallest first, while
-- they fit) and nothing below it is a share that can serve it; the rest is filled to a level
-- L: target = min(want, max(floor, L)), L the highest with Σ ≤ total; the units left over go
-- one each to the lowest ids at the level. Returns L (-1: every demand fits) and the highest
-- id that gets one unit over it ('').
local function fair(ids, want, needs, total)
  local n, all = #ids, 0
  for _, id in ipairs(ids) do all = all + want[id] end
  if all <= total then return -1, '' end
  local floor, order = {}, {}
  for i, id in ipairs(ids) do
    order[i] = id
    floor[id] = math.min(needs[id] or 0, want[id])
  end
  table.sort(order, function(a, b)
    if floor[a] ~= floor[b] then return floor[a] < floor[b] end
    return a < b
  end)
  local used = 0
  for _, id in ipairs(order) do
    if used + floor[id] <= total then used = used + floor[id] else floor[id] = 0 end
  end
  local function filled(level)
    local s = 0
    for _, id in ipairs(ids) do s = s + math.min(want[id], math.max(floor[id], level)) end
    return s
  end
  local lo, hi = 0, total
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if filled(mid) <= total then lo = mid else hi = mid - 1 end
  end
  local extra = total - filled(lo)
  if extra <= 0 then return lo, '' end
  local at = {}
  for _, id in ipairs(ids) do
    if floor[id] <= lo and want[id] > lo then at[#at + 1] = id end
  end
  table.sort(at)
  return lo, at[math.min(extra, #at)] or ''
end
local level, top = tonumber(meta[6] or -1), meta[7] or ''
local rlevel, rtop = tonumber(meta[12] or -1), meta[13] or ''
local n, blocks, helds = tonumber(meta[8] or 1), tonumber(meta[9] or 0), tonumber(meta[10] or 0)
local others_live = nil
-- The last walk found every demand fitting, and ours has grown since (a fresh fleet registers
-- before its callers queue): that level would hand the first asker everything. Walk now. The
-- same for the rate: a first asker handed most of the rate cuts it again a refresh later, and
-- each cut keeps its lost burst counted for a window (a fresh fleet ran at 60-85% of its rate).
local grown = (level < 0 and wants > ownWants) or (RATED and rlevel < 0 and rwants > ownRateWants)
if now - walked >= scan or closing or grown then
  local all = redis.call('HGETALL', L)
  local ids, want, rwant, needs, dead, tails = {}, {}, {}, {}, {}, {}
  -- Sums over every entry, ours as it stood before this refresh (what stats report).
  sum, blocks, helds, rsum = before, ownBlock, ownHeld, rbefore
  others_live = 0
  for i = 1, #all, 2 do
    local id = all[i]
    if id ~= '_s' and id ~= '_r' and id ~= proc then
      local e, b, h, w, rs, rk, ru, rw, nd = parse(all[i + 1])
      -- A share with a hold counts as countedOf says until the hold ends, then the share alone.
      -- The owner reads its entry the same way, so Σ never counts it less than its owner does.
      local rc = countedOf(rs, rk, ru)
      if e <= now then
        if RATED and e + rper > now and rc > 0 then
          -- Lapsed (or closed), but its last sends still land in windows until per after its
          -- lease (or its close): its rate stays counted until then, its permits no longer.
          rsum = rsum + rc
          if b > 0 or h > 0 then
            tails[#tails + 1] = id
            tails[#tails + 1] = format(e, 0, 0, 0, rs, rk, ru, 0, 0)
          end
        else
          dead[#dead + 1] = id
        end
      else
        others_live = others_live + 1
        sum = sum + math.max(b, h)
        rsum = rsum + rc
        blocks, helds = blocks + b, helds + h
        ids[#ids + 1] = id
        want[id], rwant[id], needs[id] = w, rw, nd
      end
    end
  end
  for i = 1, #dead, 1000 do
    redis.call('HDEL', L, unpack(dead, i, math.min(#dead, i + 999)))
  end
  for i = 1, #tails, 1000 do
    redis.call('HSET', L, unpack(tails, i, math.min(#tails, i + 999)))
  end
  if not closing then
    ids[#ids + 1] = proc
    want[proc], rwant[proc], needs[proc] = wants, rwants, need
  end
  n = #ids
  local rids = {}
  for i = 1, n do rids[i] = ids[i] end
  level, top = fair(ids, want, needs, cap)
  rlevel, rtop = -1, ''
  if RATED then rlevel, rtop = fair(rids, rwant, {}, rlimit) end
  redis.call('HSET', M, 't', now, 'b', level, 'e', top, 'n', n, 'k', blocks, 'u', helds,
    'rb', rlevel, 're', rtop)
end
if valid and not mine and ends < now + lease then
  -- Our block was valid and Redis has no trace of it: its state was lost under us.
  ends = now + lease
  redis.call('HSET', M, 'r', ends)
end
local recovering = ends > now
local target
if recovering then
  -- Learning: nobody grows; a process keeps what it holds, and the block Redis still counts.
  target = math.max(held, math.min(wants, ownBlock))
elseif level < 0 then
  target = wants
else
  target = math.min(wants, math.max(math.min(need, wants), level + ((top ~= '' and proc <= top) and 1 or 0)))
end
if closing then target = 0 end
local others = sum - before
local block = math.max(0, math.min(target, cap - others))
local after = math.max(block, held)
sum = others + after
local rate = ' 0 0 0 0'
local share, rtarget = 0, 0
if RATED then
  if recovering then
    rtarget = math.min(rused, rwants)
  elseif rlevel < 0 then
    rtarget = rwants
  else
    rtarget = math.min(rwants, rlevel + ((rtop ~= '' and proc <= rtop) and 1 or 0))
  end
  -- Slow start: a share grows to the equal split at once, past it at most twofold a refresh.
  -- The level is as of the last walk, and processes that just turned busy are not in it yet:
  -- the first of them would take the whole rate and the others wait for its hold to end.
  -- (The target answered is the fair one: a process below it asks again soon.)
  local grow = rtarget
  if not recovering then
    grow = math.min(rtarget, math.max(1, 2 * ownShare, math.floor(rlimit / math.max(1, n))))
  end
  local rothers = rsum - rbefore
  local avail = rlimit - rothers
  share = math.max(0, math.min(grow, avail))
  if selfcut and not closing and not recovering and rused > share and rused <= math.min(avail, ownShare) then
    -- Not cut here: the process sends at rused until this answer reaches it, so a cut made here
    -- would count rused a command timeout longer. It is answered its target below its share,
    -- cuts itself at once and says so in a refresh right away, and is counted at the cut then.
    share = rused
  end
  -- The hold (countedOf): hk in full until hu - per, then the edge until hu. Sent at until
  -- this answer reaches the process (one command timeout): a share it reports above the new
  -- one. For a window: a share that went down (its TAT was set at the faster pace: one call
  -- ahead of the slower one, and the burst the faster one allowed). A share that goes up needs
  -- none: its first call after the change still waits out the slower pace. An earlier hold
  -- keeps its own end.
  local hk, hu = 0, 0
  if not closing then
    if ownUntil > now then hk, hu = ownCounted, ownUntil end
    if rused > share then hk, hu = math.max(hk, rused), math.max(hu, now + holdMs + rper) end
    if math.max(ownShare, rused) > share then
      hk, hu = math.max(hk, ownShare, rused), math.max(hu, now + rper)
    end
    if hu > 0 then
      -- Room for the edge: a share that changes takes one call less, and a cut burst's less.
      for _ = 1, 2 do
        local edge = 1 + math.max(0, burstOf(hk) - burstOf(share))
        if share + edge > avail then share = math.max(0, avail - edge) end
      end
    end
  else
    share = 0
  end
  local counted, untl = hk, hu
  rsum = rothers + countedOf(share, hk, hu)
  rate = ' ' .. share .. ' ' .. counted .. ' ' .. untl .. ' ' .. rwants
end
if closing then
  -- A clean close: the entry goes at once, and the hash with the last one.
  if RATED and rused > 0 then
    -- It paced its share: its sends still in windows are those of its pace, which the fleet's
    -- shares go on from, except what it sent ahead of its pace: its TAT runs at most burst + 1
    -- intervals ahead of now. So much stays counted for a window (never more than it sent in
    -- the last one, ARGV[23]: its sends by age), in a lapsed entry '<id>~0' that walks reap.
    local sent, any = 0, false
    for c in string.gmatch(ARGV[23] or '', '%d+') do
      sent, any = sent + tonumber(c), true
    end
    if not any then sent = rused end
    local units = math.min(sent, burstOf(rused) + 1)
    rsum = rsum + units
    redis.call('HDEL', L, proc)
    redis.call('HSET', L, '_s', sum, '_r', rsum)
    if units > 0 then
      redis.call('HSET', L, proc .. '~0', format(now, 0, 0, 0, 0, units, now + 2 * rper, 0, 0))
    end
    if others_live == 0 then redis.call('PEXPIRE', L, rper + 1) end
  else
    redis.call('HDEL', L, proc)
    local left = redis.call('HLEN', L) - redis.call('HEXISTS', L, '_s') - redis.call('HEXISTS', L, '_r')
    if left == 0 then
      redis.call('DEL', L)
    else
      redis.call('HSET', L, '_s', sum)
      if RATED then redis.call('HSET', L, '_r', rsum) end
    end
  end
  return {0, lease, cap, n, blocks, helds, cap - sum, 0, 0, 0, 0, rsum, rateStr, now}
end
local entry = (now + lease) .. ' ' .. block .. ' ' .. held .. ' ' .. wants .. rate .. ' ' .. need
if RATED then
  redis.call('HSET', L, proc, entry, '_s', sum, '_r', rsum)
else
  redis.call('HSET', L, proc, entry, '_s', sum)
end
-- The hash lives while some process refreshes it (idle ones every half lease): a gate nobody
-- uses any more leaves no key behind (issue 32, item 8).
redis.call('PEXPIRE', L, 3 * lease)
return {block, lease, cap, n, blocks, helds, cap - sum, target, recovering and math.max(1, ends - now) or 0, share, rtarget, rsum, rateStr, now}
`;

function script(name: string, source: string): Script {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

export const leasedScripts = { refresh: script('leasedRefresh', REFRESH) } as const;

/** Key suffixes of a leased gate, in the order the script declares them (`m`, `h`, `q` are the FIFO mode's). */
export const LEASED_KEY_SUFFIXES = ['m', 'l', 'h', 'q'] as const;
