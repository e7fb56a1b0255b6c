--[[
  REFRESH: the one script of a leased shared gate (`mode: 'leased'`). It records this process's
  held permits and demand (`wants`) and returns its block: its max-min fair share of the cap by
  demand (Doorman's FAIR_SHARE), never more than what the others leave (cap − Σ others'
  max(block, held)). The keys and what each holds: src/redis/leased-scripts.ts.

  A constant number of Redis calls and no walk over the fleet: `L._s` keeps Σ max(block, held)
  over every entry in `L`, updated by each refresh's difference. At most every `scanMs` one
  refresh walks `L` (includes/leasedWalk.lua): it drops expired processes (until then their
  permits stay counted: never too few), sums `L._s` again, and stores the fair-share level in
  `M` (`b` the level, or -1 when every demand fits; `e` the highest process id that gets one
  unit over it; `n`, `k`, `u` the processes, blocks and held at that walk). So a refresh costs
  the same at 10 processes or 10,000, and the walk is paid a few times per interval per gate,
  not once per process.

  Recovery: a missing `M` means a first use or a loss (restart, flush, eviction). For a window
  nobody gets a block beyond what it holds (nor, back from an outage with its entry kept, beyond
  the block and rate share Redis counts for it: includes/leasedGap.lua): `leaseMs` when the caller had an entry (`had`, or
  `valid`: it knows state was lost), else `windowMs` (one refresh: a busy process that had an
  entry refreshes within it and stretches the window to a whole lease). A caller with a valid
  block whose entry is gone, or that had an entry and finds `L` gone, stretches it the same way.

  Time that passed unobserved (issue 32): includes/leasedGap.lua.

  Lost writes (stop 52): Redis back from a dump older than its state (its last `save` point, a
  replica that lagged) counts each process as its last write before the dump left it: one that
  gave units back since is counted with them, one that took them is not (fault campaign, leased
  seed 130015: 4 at cap 3). Each entry carries the number of the refresh that wrote it; a process
  whose entry carries a number below one Redis answered it (`acked`) sees writes lost: a learning
  window of a lease, the others told (`lost`) to report now, and this process keeps no more of
  the block Redis counts for it than it knows it has (`known`), of its rate share than it sends.

  A rate (`rate`: `limit:per:burst`, '' for none; layout `leased/1+rate`) is leased the same
  way, as Doorman leases capacity: each process gets a rate share, whole calls per `per` ms
  (its burst share, `floor(burst × share / limit)`, follows from it on the process), a max-min
  fair share of `limit` by its rate demand (`rateWants`), within what the others' counted
  shares leave. `L._r` keeps Σ counted over the entries. Each process paces its share (GCRA),
  so the fleet's calls in a window follow its shares' sum over the window and a share given
  back is free at once (issue 32, item 6: a rolling deploy ran at 70-75% while a closed
  process's last sends were counted until they left the window). What a process may send beyond
  its share is counted (includes/leasedCounted.lua): its old share while Redis's cut is on its
  way to it (`holdMs`, one command timeout; a process that passes `selfcut` is never cut under
  what it reports sending at: it is answered its target, cuts itself at once and says so); for a
  window after its share went down, one call and the burst it lost; after a clean close, its
  burst share and one call for a window; and a process whose lease lapsed, its last share until
  `per` after its lease. Then, over counted shares, Σ ≤ limit, and the fleet's calls in any
  window of `per` ms stay within `limit + burst`.

  KEYS: M meta, L blocks, H and Q the FIFO mode's holders and tickets (only read), one hash slot.
  ARGV[1]  cap           the caller's, used only if Redis has none
  ARGV[2]  leaseMs
  ARGV[3]  windowMs      the recovery window of a first use (see Recovery)
  ARGV[4]  processId
  ARGV[5]  held          permits the caller holds (and reserves while the answer is on its way)
  ARGV[6]  wants         its demand, in units of the cap
  ARGV[7]  valid         '1': its block is still valid
  ARGV[8]  setCap        > 0: the cap becomes this
  ARGV[9]  scanMs        walk `L` at most this often
  ARGV[10] rate          `limit:per:burst` of the caller's (used only if Redis has none), '' none
  ARGV[11] rateUsed      the share the caller sends at now
  ARGV[12] rateWants     its rate demand, whole calls per `per`
  ARGV[13] holdMs        one command timeout: how long a cut is on its way
  ARGV[14] setRate       '': none, else the rate becomes this
  ARGV[15] seen          Redis ms of the caller's last answer, 0 none
  ARGV[16] elapsed       its monotonic ms since
  ARGV[17] down          '1': its last refresh failed
  ARGV[18] had           '1': it had an entry (Redis answered it before)
  ARGV[19] need          its heaviest waiting head
  ARGV[20] tol           a reply's delay beyond this is a step (a command timeout, ≤ lease / 4)
  ARGV[21] gapMs         a gap after failed refreshes longer than this is an outage
                         (refresh + command timeout, ≤ lease / 2)
  ARGV[22] closing       '1': a clean close, the entry goes
  ARGV[23]               closing: its rate sends of the last window, space-separated, by age
                         (8 buckets: eighths of the window)
  ARGV[24] selfcut       '1': the caller cuts its own rate share to a lower target
  ARGV[25] head          its token for its heaviest waiting head (0: none): a new token is a new
                         head, and the heads' floors are met oldest first (since Redis first
                         heard of each)
  ARGV[26] rateNeed      the rate share its costliest waiting head needs (whole calls per `per`,
                         at most its rate wants): a floor of its rate share, met as the cap's
                         floors are (oldest head first, while they fit)
  ARGV[27] signal        the gate's signal channel ('' none), ARGV[28] signalMs: see Signals
  ARGV[29] lead          the units its TAT runs ahead of now (a call that cost more than its
                         burst share leaves more than burst + 1); not closing, at least those it
                         ran ahead when its share last went down, for a window after
  ARGV[30] leadMs        ms until its pace would let its next call go: closing, the slot a
                         replacement taking its parked place goes on from; else, when a share it
                         gives back here may be sent at by a process taking a share from none
  ARGV[31] downMs        ms since its refreshes began to fail (0: they do not; an older
                         process sends none): Redis away, or only this process cut off from it
                         (includes/leasedGap.lua)
  ARGV[32] seq           this refresh's number (each of the process's refreshes of the gate
                         numbered up from 1; an older process sends none: 0), written in its entry
  ARGV[33] acked         the highest number among its refreshes Redis answered (0: none);
           ARGV[34] known, its block as it knows it: see Lost writes
  ARGV[35] overrun       its fallback may grant past what Redis counts: 1 the cap, 2 the rate

  Signals (issue 35): busy processes refresh on change, not every interval, so Redis tells them
  of a change on the gate's channel (SPUBLISH, in the gate's slot; a hint, never a grant):
  `give <level> <top>` when a caller is below its fair share (its block under its target: it
  waits for units others hold; at most every `signalMs`), or when a walk moved the fair level
  (units to give back, or to take); `owed` when a process let units go while floors met at the
  walk still lack some (processes with a head their block cannot serve refresh now);
  `floor` after a `give` that a floor heavier than 1 met at the walk is short of units in use
  over the level (their processes give them back now, not at their interval);
  `lost` when the state was missing (a first use or a loss):
  the processes that hold a block refresh now and stretch the recovery window to a lease, as
  they did within one interval when every busy process refreshed every interval. `M.g` is the
  last `give`.

  An entry of `L`: `"<expiry> <block> <held> <wants> <share> <counted> <counted until> <rate
  wants> <need> <since> <head> <owed> <rate need> <rc>"` (includes/leasedEntry.lua).

  Returns {block, leaseMs, cap, processes, Σ blocks, Σ held, free, target, recovering (ms left
  of the recovery window, 0: none), share, rate target, Σ counted shares, rate, Redis now (ms),
  the fair level as of the last walk (`M.b`: a process refreshes when a head met as a floor
  above it was served), ms until the first call of a share taken from a parked place (0: now),
  this refresh's number (`seq`)}.
]]
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
local head = tonumber(ARGV[25] or 0) or 0
local rneed = tonumber(ARGV[26] or 0) or 0
-- The units its TAT runs ahead (closing: now; else as of its share's last cut, for a window).
local rlead = tonumber(ARGV[29] or 0) or 0
-- The ms until its pace would let its next call go (its parked place's slot, or a cut's: M.cs).
local rleadMs = tonumber(ARGV[30] or 0) or 0
local downMs = tonumber(ARGV[31] or 0) or 0
local signal, signalMs = ARGV[27] or '', tonumber(ARGV[28] or 0)
local seq, acked = tonumber(ARGV[32] or 0) or 0, tonumber(ARGV[33] or 0) or 0
local known = tonumber(ARGV[34] or 0) or 0
local function tell(message)
  -- A Redis before 7.0, or a user whose ACL forbids the channel: nobody hears (each process then
  -- refreshes every interval, its subscription refused as this publish is). Returns false when
  -- the publish was refused (a user allowed SSUBSCRIBE but not SPUBLISH: processes that think
  -- they hear would not).
  if signal == '' then return true end
  local sent = redis.pcall('SPUBLISH', signal, message)
  return type(sent) == 'number'
end
local RATED = rateArg ~= ''
local LAYOUT = RATED and '{{LEASED_RATE_LAYOUT}}' or '{{LEASED_LAYOUT}}'
local META_TTL = 2592000000
-- 'wc': a walk split over refreshes under way (includes/leasedPass.lua).
local meta = redis.call('HMGET', M, 'v', 'c', 'r', 'x', 't', 'b', 'e', 'n', 'k', 'u', 'rt', 'rb', 're',
  'lr', 'f', 'o', 'rf', 'wc', 'g', 'lx', 'pk', 'ot', 'ns', 'cs', 'ri', 'll', 'lq', 'rq')
if meta[1] and meta[1] ~= LAYOUT and not (RATED and meta[1] == '{{LEASED_LAYOUT}}') then
  return redis.error_reply('HOSTGATE_LAYOUT ' .. meta[1])
end
if not meta[1] and meta[2] then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
-- No meta hash, but a FIFO gate's leases or tickets (its meta hash evicted or flushed): refused
-- before any write, or the meta hash written below would lock the FIFO processes out of their
-- own gate (they refuse `leased/1`).
if not meta[1] and redis.call('EXISTS', H, Q) > 0 then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap, ends, walked = tonumber(meta[2]), tonumber(meta[3] or 0), tonumber(meta[5] or 0)
local lastRun = tonumber(meta[14] or 0)
--- @include "includes/leasedEntry"
--- @include "includes/leasedGap"
-- A block said valid by a command that ran more than a lease after the answer that gave it (in
-- Redis's time, less time that stood still) was not valid when it ran: sent before its process
-- was cut off, and held on the way or queued by its client until it reconnected. Its entry
-- lapsed meanwhile, as entries do, and its missing entry is no loss of state: taken for one, it
-- opened a learning window of a lease for the whole fleet, in which the rate's shares, squeezed
-- by the late process's sends, could only fall (fault campaign, replica-partition, seed 626: the
-- fleet at 0 for 2.1-2.4 s once the process was back, 3 runs in 6; 0 in 5 after).
if valid and seen > 0 and now - shift - seen > lease + tol then valid = false end
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
-- Whole numbers passed to Redis as '%d' text: Redis writes a Lua number by '%.17g' (libc's slower
-- floating-point path), the same digits (as the entry, leasedEntry.lua).
redis.call('HSET', M, 'lr', string.format('%d', now))
if RATED and meta[1] == '{{LEASED_LAYOUT}}' then
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
--- @include "includes/leasedCounted"
-- Rate shares clean closes gave back (M.pk, '<until>:<share>:<slot>' items, leasedClose.lua):
-- those still within their window, as shares and as items. One ending more than a window from
-- now was set before Redis's clock stepped back: lapsed (a place only ever holds the survivors
-- back). An item of an older release has no slot (read as 0: none).
local function parked()
  local shares, items = {}, {}
  for u, sh, at in string.gmatch(meta[21] or '', '(%d+):(%d+):?(%d*)') do
    if tonumber(u) > now and tonumber(u) <= now + rper then
      shares[#shares + 1] = tonumber(sh)
      items[#items + 1] = u .. ':' .. sh .. (at ~= '' and (':' .. at) or '')
    end
  end
  return shares, items
end
local cur = redis.call('HMGET', L, proc, '_s', '_r')
local mine = cur[1] ~= false
-- No-shows (M.ns, ids a space apart, leasedWalk.lua): owed units they never came for; a walk
-- treats them as silent until they refresh, as this one does.
local noShows = meta[23] or ''
if noShows ~= '' and string.find(' ' .. noShows .. ' ', ' ' .. proc .. ' ', 1, true) then
  local rest = {}
  for id in string.gmatch(noShows, '%S+') do
    if id ~= proc then rest[#rest + 1] = id end
  end
  noShows = table.concat(rest, ' ')
  if noShows ~= '' then redis.call('HSET', M, 'ns', noShows) else redis.call('HDEL', M, 'ns') end
end
-- No state (a first use or a loss), or the blocks hash gone: whoever holds a block refreshes now.
if not closing and (not meta[2] or cur[2] == false) and not tell('lost') and ends < now + lease then
  -- Nobody was told (the publish refused): the processes that hold a block refresh on their own
  -- time, within half a lease, so nobody grows for a lease, as after any loss.
  ends = now + lease
  redis.call('HSET', M, 'r', ends)
end
if had and not mine and cur[2] == false and ends < now + lease then
  -- This process had an entry and the blocks hash is gone (evicted, or lost with a restart
  -- while the meta hash came back): nobody's permits are counted. Learn for a lease.
  learn = true
end
-- Lost writes (see the header): this process's entry is older than a refresh Redis answered.
local lostWrites = false
if mine and not closing and acked > 0 then
  local sq = select(16, parse(cur[1]))
  if sq > 0 and sq < acked then
    -- The first to see it tells the others (each process's own entry shows it only to itself,
    -- at its first refresh after: told by each, a fleet of n would refresh n times over).
    if not learn and ends <= now then tell('lost') end
    lostWrites, learn = true, true
  end
end
-- The state older than this caller's last answer: the others are told to report now, too.
if (behind or restarted) and ends <= now then tell('lost') end
if learn and ends < now + lease then
  ends = now + lease
  redis.call('HSET', M, 'r', ends)
end
local sum, rsum = tonumber(cur[2] or 0), tonumber(cur[3] or 0)
local before, ownBlock, ownHeld, ownWants = 0, 0, 0, 0
local ownShare, ownCounted, ownUntil, rbefore, ownRateWants, ownOwed = 0, 0, 0, 0, 0, 0
local ownLead = 0
-- Its head as the last refresh reported it: need, since, token.
local ownNeed, ownSince, ownHead = 0, 0, 0
-- When its entry lapses (0: it has none).
local ownExpiry = 0
-- Since when Redis knows of this process's heaviest head: kept while the head is the same.
local since = need > 0 and now or 0
if mine then
  local e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, _, rc, rl = parse(cur[1])
  ownExpiry = e
  ownBlock, ownHeld, ownWants, ownRateWants, ownOwed = b, h, w, rw, ow
  ownNeed, ownSince, ownHead = nd, sn, tk
  if need > 0 and nd == need and tk == head and sn > 0 then since = sn end
  before = math.max(ownBlock, ownHeld)
  ownShare, ownCounted, ownUntil, ownLead = rs, rk, ru, rl
  -- What `_r` holds for it (an entry of an older writer: as counted now).
  rbefore = rc or countedOf(rs, rk, ru, rl)
end
-- FIFO keys beside ours: checked when a process registers (once per process and lease), not
-- at every refresh; FIFO processes of a versioned layout refuse ours themselves.
if not mine and redis.call('EXISTS', H, Q) > 0 then
  return redis.error_reply('HOSTGATE_LAYOUT fifo/0')
end
-- `L` lives while some process refreshes it, and a gate nobody uses any more leaves no key behind
-- (issue 32, item 8): three leases, renewed when under half of that is left (`M.lx`: when it runs
-- out as a refresh last set it), not by every refresh: after any refresh `L` has 1.5 leases left
-- at the least, so it outlives every live entry (one lease). Renewed as well by a process that
-- registers (its entry missing or lapsed: a clean close that leaves only a rate's tail sets a
-- shorter TTL) and when `_s` is missing (`L` new).
local renewL = not closing and (not mine or ownExpiry <= now or cur[2] == false
  or tonumber(meta[20] or 0) - now < 1.5 * lease)
--- @include "includes/leasedFloor"
local level, top, met = tonumber(meta[6] or -1), meta[7] or '', meta[15] or ''
local rlevel, rtop, rmet = tonumber(meta[12] or -1), meta[13] or '', meta[17] or ''
local n, blocks, helds = tonumber(meta[8] or 1), tonumber(meta[9] or 0), tonumber(meta[10] or 0)
-- Σ owed: units the floors met at the last walk still lack (entries' owed, this one's before).
local osum = math.max(0, tonumber(meta[16] or 0))
local osumWas = osum
local others_live = nil
local lastLevel, lastTop = level, top
-- A walk split over refreshes goes on after this one's slice: a rise of its owed counts in it.
local opass = false
-- A walk that checked for no-shows (it deletes M.ot itself).
local checked = false
--- @include "includes/leasedWalk"
if valid and not mine and ends < now + lease then
  -- Our block was valid and Redis has no trace of it: its state was lost under us.
  ends = now + lease
  redis.call('HSET', M, 'r', ends)
end
local recovering = ends > now
local target
-- Its floor, if it was met at the walk: the units it lacks are owed to it (M.o).
local metFloor = 0
if recovering then
  -- Learning: nobody grows; a process keeps what it holds, and the block Redis still counts,
  -- whatever it wants now. What it gave back in the window nobody could take (nobody grows),
  -- and it could not take it back either: back from an outage under 'reject', a process whose
  -- lease had lapsed reported no use and no demand at its first refresh (its callers shed), and
  -- its block stayed at 0 for the whole window, a lease (fault campaign, leased seed 117042).
  -- Back from a dump older than its last write (lostWrites), the block Redis counts for it may
  -- be one it has given back since, and another process took: no more of it than it knows.
  target = math.max(held, lostWrites and math.min(ownBlock, known) or ownBlock)
elseif level < 0 then
  target = wants
else
  -- Its need is a minimum only if its floor was met at the walk: the floors that fit the cap
  -- are met, and the others' partial blocks must not hold the units those need.
  local floor = math.min(need, wants)
  if not floorMet(floor, since, proc, met) then floor = 0 end
  metFloor = floor
  target = math.min(wants, math.max(floor, level + ((top ~= '' and proc <= top) and 1 or 0)))
end
local others = sum - before
if not recovering and level >= 0 and need > 0 and target < math.min(need, wants) then
  -- A share below its head's need serves nothing: nothing passes the head in its process, so
  -- the units would sit idle in its block while other heads wait for them (issue 32, seed 20099:
  -- a weighted fleet's blocks of 1 beside heads of 2 and 3, the cap counted and 40% of the rate
  -- sent). None, then: the head is met as a floor, or taken whole below.
  target = 0
end
if not recovering and level >= 0 and need > 0 and target < math.min(wants, held + need) then
  -- Its head, whole, from units nobody counts: the level is as of the last walk, and the floors
  -- met then were granted at once and their heads moved on, so a weighted fleet sat with the
  -- cap free and every target 0 until the next walk (issue 32: heavy heads timed out, 4 of 150
  -- weighted schedules). Only a whole head: a part of one is no use to it and would hold units
  -- others' heads need (the seed 10014 deadlock); the floors met at the walk gather theirs.
  -- Not the units owed to the floors met at the walk (M.o): those heads are older, and they
  -- gather their units one refresh at a time; a younger head that took them as they came free
  -- would pass them for good (a busy process's releases are its own next refresh).
  -- Nor, for a process that has a share already, units a process under its fair share waits
  -- for (it said so within a few `signalMs`, M.g): taken by whichever head refreshed first, they
  -- kept a fleet of weight-1 callers at its level churning (a unit grabbed, a process short, a
  -- give-back, a unit grabbed again: 4-6 refreshes per process per second and 0.93-0.985 of the
  -- cap held in bench:fleet --steady). A process with no share (more processes than the cap, a
  -- head its share cannot serve) still takes them: it has nothing else.
  local grab = math.min(wants, held + need)
  local shortLately = now - tonumber(meta[19] or 0) < 3 * math.max(1, signalMs)
  if grab <= cap - others - (osum - ownOwed) and not (shortLately and target > 0) then
    target = grab
  end
end
if closing then target = 0 end
local block = math.max(0, math.min(target, cap - others))
local after = math.max(block, held)
sum = others + after
if not closing and not recovering then
  -- A walk (or the last slice of one) moved the level: some blocks are over it, some under.
  local moved = (level ~= lastLevel or top ~= lastTop) and (level >= 0 or lastLevel >= 0)
  local short = block < target and now - tonumber(meta[19] or 0) >= signalMs
  if moved or short then
    if short then redis.call('HSET', M, 'g', now) end
    tell('give ' .. level .. ' ' .. top)
    -- Short of a floor met at the walk: the units it lacks are in use in blocks over the level,
    -- which otherwise come back at their processes' interval (a unit in use is given back no
    -- more often than that, not to churn a level that moves): those processes give back now
    -- what they hold over it, so the head is served as its units' calls end, as on a local
    -- gate (issue 32, item 5: a weight-3 head waited 0.5-0.6 s beside a busy process).
    -- A head of 1 is served by the first unit let go (`owed`), and the met heads of a cap
    -- smaller than the fleet take turns: told at every shortfall, their units went from process
    -- to process each call (cap 3 over 6: 86-88% in use, was 91-95%).
    if short and metFloor > block and metFloor > 1 then tell('floor') end
  end
end
if not recovering and after < before and osum - ownOwed > 0 then
  -- Units came free while floors met at the walk still lack theirs (M.o): their processes take
  -- them at their next refresh, and nothing else tells them (a waiting head asks once per walk).
  -- A unit handed between processes (a cap smaller than the fleet, heavy heads) sat idle 50-170
  -- ms at each handoff, 16% of a cap of 3 over 6 processes.
  tell('owed')
  -- The oldest tell not yet checked (M.ot): owners that have not come a while after it are
  -- no-shows (leasedWalk.lua).
  if not meta[22] then redis.call('HSET', M, 'ot', now) end
end
local share, rtarget, rcOwn, counted, untl, lead = 0, 0, 0, 0, 0, 0
-- A share taken from a parked place or from none: ms until the slot it goes on from (leasedShare.lua).
local rslot = 0
--- @include "includes/leasedShare"
--- @include "includes/leasedClose"
if RATED and not rlearning and share == 0 and rused == 0 and rwants > 0 and block > held then
  -- No share of the rate to send with: units of the cap beyond what it holds would sit idle in
  -- its block while processes with a share wait for them (issue 32, seed 20010: rate 5/500 ms
  -- over 7 processes, the cap's blocks in the two without a share, heads of 3 blocked in those
  -- with one; the partner at 50-60% of the rate). It asks again when a share comes.
  block, target, metFloor = held, held, 0
  sum = others + held
end
local owed = math.max(0, metFloor - block)
osum = math.max(0, osum - ownOwed + owed)
if osum ~= osumWas then redis.call('HSET', M, 'o', osum) end
-- Nothing owed any more: no tell waits to be checked.
if osum == 0 and meta[22] and not checked then redis.call('HDEL', M, 'ot') end
if opass and owed > ownOwed then redis.call('HINCRBY', M, 'wo', owed - ownOwed) end
-- Redis counts the entry a gap (a refresh and a command timeout) past the lease the process
-- uses its block for: a process whose refreshes failed (Redis refusing writes, or away) and
-- whose lease lapsed on its own clock just after Redis came back grants from its last block
-- under 'local' until its next refresh, which lands within that gap; counted only to its lease,
-- another process that refreshed first took that block meanwhile (campaign seed 73144: OOM
-- errors for 1.1 s, 11 in flight at cap 7 for 0.4 s after Redis answered again).
local entry = format(now + lease + gapMs, block, held, wants, share, counted, untl, RATED and rwants or 0,
  need, since, need > 0 and head or 0, owed, RATED and rneed or 0, rcOwn, lead, seq)
if RATED then
  redis.call('HSET', L, proc, entry, '_s', string.format('%d', sum), '_r',
    string.format('%d', rsum))
else
  redis.call('HSET', L, proc, entry, '_s', string.format('%d', sum))
end
if renewL then
  redis.call('PEXPIRE', L, 3 * lease)
  redis.call('HSET', M, 'lx', now + 3 * lease)
end
-- Parked shares are no one's to take but a newcomer's: Σ counted as answered includes them, so
-- that the others do not ask for them every `refreshMs / 10` for a window.
local reserved = 0
if RATED and (meta[21] or '') ~= '' then
  for _, sh in ipairs((parked())) do reserved = reserved + sh end
end
return {block, lease, cap, n, blocks, helds, cap - sum, target, recovering and math.max(1, ends - now) or 0, share, rtarget, rsum + reserved, rateStr, now, level, rslot, seq}
