--[[
  The walk over `L`, at most every `scanMs` (and at a close, or when this process's demand grew
  past a level that fit every demand, or a head met as a floor was served, or a new heavy head
  waits unmet): expired entries reaped (a lapsed one's rate kept counted
  for a window), `_s`, `_r` and `M.o` summed again, and the fair-share levels stored in `M` for
  the refreshes until the next walk. A hash of more than WALK_FULL entries is walked a slice per
  refresh instead (includes/leasedPass.lua): one script never walks a large fleet at once.
  Uses (leasedRefresh-4.lua): L, M, proc, now, scan, walked, closing, RATED, cap, rlimit, rper,
  wants, rwants, need, rneed, since, head, ownWants, ownRateWants, own entry (before, ownBlock,
  ownHeld, rbefore, ownOwed, ownNeed, ownSince, ownHead), meta[18] (a slice walk under way);
  parse, format (leasedEntry), countedOf (leasedCounted), floorMet (leasedFloor), parked (the
  rate's parked places, M.pk), ownShare; it includes fair (leasedFair), fairOf and the pass
  state (leasedLevel) where a walk begins.
  Sets: sum, rsum, osum, blocks, helds, n, level, top, met, rlevel, rtop, rmet, others_live,
  opass (leasedPass.lua).
]]
-- The last walk found every demand fitting, and ours has grown since (a fresh fleet registers
-- before its callers queue): that level would hand the first asker everything. Walk now. The
-- same for the rate: a first asker handed most of the rate cuts it again a refresh later, and
-- each cut keeps its lost burst counted for a window (a fresh fleet ran at 60-85% of its rate).
local grown = (level < 0 and wants > ownWants) or (RATED and rlevel < 0 and rwants > ownRateWants)
-- A head met as a floor at the last walk is served (the process reports another head, or none):
-- its turn is over, and the next head in age order waits for a walk to be met. Walk now, not a
-- scan later (issue 32: with a heavy head in every process, a few floors were met per walk and
-- a weight-3 head waited walk after walk, 1.4-2.5 s, seed 20025).
-- Only a floor above the level (a unit the level would not give): heads of 1 in a fleet at its
-- cap move at every grant, and would walk at every refresh. Only a walk in one call: a large
-- fleet's slices keep their own pace.
local ownFloor = math.min(ownNeed, ownWants)
local served = level >= 0 and ownFloor > level and floorMet(ownFloor, ownSince, proc, met)
  and (need ~= ownNeed or head ~= ownHead)
-- A new head heavier than 1 and above the level, not met, while no floor met at the last walk
-- lacks units (M.o 0: nothing gathers for an older head): meet it now, not at the next scan (a
-- fresh fleet of 2 at cap 4 with heads of 3 sent 8-18 of 30 calls/s: each new heavy head waited
-- for a walk while its process's rate share idled, campaign seed 86007). Heads of 1 take a unit
-- whole between walks (leasedRefresh-4.lua). Only a walk in one call, as `served`.
local newFloor = math.min(need, wants)
local unmet = level >= 0 and newFloor > 1 and newFloor > level and osum == 0
  and (need ~= ownNeed or head ~= ownHead) and not floorMet(newFloor, since, proc, met)
-- The owed no-show: Redis told `owed` (units came free for floors met at the walk, M.o) at
-- M.ot, and a live owner refreshes within an ask of hearing it. One that has not refreshed a few
-- asks after the tell was killed or stopped at the worst moment: until it is silent (half a lease
-- and a gap) its owed units were reserved for nobody while every other head waited (seed 88263:
-- cap 1 over 6, a replica SIGKILLed just after the unit came free for its head, the survivors
-- at 0 for 3.1 s with the cap free). A walk then treats it as silent, and keeps it so (M.ns)
-- until it refreshes again. Processes still waiting ask again at that time (leased-block.ts).
local toldAt = tonumber(meta[22] or 0)
local noshow = toldAt > 0 and now - toldAt > math.max(50, 3 * signalMs)
local noShowSet = {}
for id in string.gmatch(noShows, '%S+') do noShowSet[id] = true end
local passing = (meta[18] or '') ~= ''
local WALK_FULL = 128
if passing or now - walked >= scan or closing or grown or served or unmet or noshow then
  -- The walk's functions, built only by a refresh that walks (most do not).
--- @include "leasedFair"
--- @include "leasedLevel"
  local size = redis.call('HLEN', L)
  if size > WALK_FULL or passing then
    -- Others are live (a close in a large fleet leaves the hash be).
    others_live = size
    -- A walk of `size` entries costs about 3-9 µs of Redis each: begun at most every 2 × size
    -- ms (and scanMs), a gate's walks take under 0.5% of a core at any size (issue 35).
    if passing or now - walked >= math.max(scan, 2 * size) or grown then
--- @include "leasedPass"
    end
  else
    local all = redis.call('HGETALL', L)
    -- Processes asking for their first share of the rate: each takes a parked place (below).
    local firsts = (not closing and ownShare == 0 and rwants > 0) and 1 or 0
    local ids, want, rwant, needs, rneeds, sinces, dead, moved = {}, {}, {}, {}, {}, {}, {}, {}
    -- Sums over every entry, ours as it stood before this refresh (what stats report).
    sum, blocks, helds, rsum, osum = before, ownBlock, ownHeld, rbefore, ownOwed
    others_live = 0
    for i = 1, #all, 2 do
      local id = all[i]
      if id ~= '_s' and id ~= '_r' and id ~= proc then
        local e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, rc, rl, sq = parse(all[i + 1])
        -- A share with a hold counts as countedOf says until the hold ends, then the share alone.
        -- The owner reads its entry's rc, which the walk sets to that: Σ rc is `_r`.
        local c = countedOf(rs, rk, ru, rl)
        if e <= now then
          if RATED and e + rper > now and c > 0 then
            -- Lapsed (or closed), but its last sends still land in windows until per after its
            -- lease (or its close): its rate stays counted until then, its permits no longer.
            rsum = rsum + c
            if b > 0 or h > 0 or rc ~= c then
              moved[#moved + 1] = id
              moved[#moved + 1] = format(e, 0, 0, 0, rs, rk, ru, 0, 0, 0, 0, 0, 0, c, rl)
            end
          else
            dead[#dead + 1] = id
          end
        else
          others_live = others_live + 1
          -- Silent: no refresh for half a lease and a gap (each an interval and a command
          -- timeout), the longest a live process goes between refreshes (a busy one whose
          -- signals are heard refreshes every half lease), so killed or stopped (its entry is
          -- written to end a lease and a gap after its refresh). Its block stays counted
          -- until its lease lapses, but no floor is met for its head, nothing is owed to it and
          -- its share does not grow past what it has: a SIGKILLed process's heavy head, met
          -- oldest first, held its share of the cap for nobody while the survivors' heads did
          -- not fit beside it (seed 82285: cap 4 over 2, weights up to 3, the partner at 0 for
          -- 1.4-1.9 s).
          local silent = now > e - lease / 2 or noShowSet[id]
          -- Owed at the tell and no refresh since (its entry is written a lease and a gap ahead).
          if noshow and not silent and ow > 0 and e - lease - gapMs < toldAt then
            silent = true
            noShowSet[id] = true
          end
          sum = sum + math.max(b, h)
          if not silent then osum = osum + ow end
          rsum = rsum + c
          blocks, helds = blocks + b, helds + h
          ids[#ids + 1] = id
          want[id], rwant[id], needs[id], rneeds[id], sinces[id] = w, rw, nd, rn, sn
          if silent then
            want[id], needs[id], rneeds[id] = math.min(w, math.max(b, h)), 0, 0
          end
          if rs == 0 and rw > 0 then firsts = firsts + 1 end
          if rc ~= c then
            moved[#moved + 1] = id
            moved[#moved + 1] = format(e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, c, rl, sq)
          end
        end
      end
    end
    for i = 1, #dead, 1000 do
      redis.call('HDEL', L, unpack(dead, i, math.min(#dead, i + 999)))
    end
    for i = 1, #moved, 1000 do
      redis.call('HSET', L, unpack(moved, i, math.min(#moved, i + 999)))
    end
    if not closing then
      ids[#ids + 1] = proc
      want[proc], rwant[proc], needs[proc], rneeds[proc], sinces[proc] =
        wants, rwants, need, rneed, since
    end
    n = #ids
    local rids = {}
    for i = 1, n do rids[i] = ids[i] end
    if RATED then
      -- A share a clean close gave back in the last window (M.pk), and this closing one's, keeps
      -- its place in the rate's level until a process asking for its first share takes it
      -- (leasedShare.lua) or the window ends: a rolling deploy's replacement comes within a
      -- refresh, and without the place the survivors grew into the freed share and were cut back
      -- a refresh later, each cut counted for a window (issue 32, "ordinary operations": a
      -- rolling restart at 43-45 of 50 calls/s). A fleet walked in slices keeps no places.
      local shares = parked()
      if closing and ownShare > 0 then shares[#shares + 1] = ownShare end
      for i = firsts + 1, #shares do
        local pid = '~' .. i
        rids[#rids + 1] = pid
        rwant[pid], rneeds[pid], sinces[pid] = shares[i], 0, 0
      end
    end
    -- The no-shows still live (a reaped or refreshed one leaves the list).
    local shows = {}
    for _, id in ipairs(ids) do
      if noShowSet[id] then shows[#shows + 1] = id end
    end
    local nsNow = table.concat(shows, ' ')
    if nsNow ~= noShows then
      if nsNow ~= '' then redis.call('HSET', M, 'ns', nsNow) else redis.call('HDEL', M, 'ns') end
    end
    if noshow then
      checked, meta[22] = true, nil
      redis.call('HDEL', M, 'ot')
    end
    level, top, met = fair(ids, want, needs, sinces, cap)
    rlevel, rtop, rmet = -1, '', ''
    if RATED then rlevel, rtop, rmet = fair(rids, rwant, rneeds, sinces, rlimit) end
    redis.call('HSET', M, 't', now, 'b', level, 'e', top, 'n', n, 'k', blocks, 'u', helds,
      'rb', rlevel, 're', rtop, 'f', met, 'rf', rmet)
  end
end
