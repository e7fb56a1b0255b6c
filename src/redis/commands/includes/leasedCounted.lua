--[[
  A rate share as counted while a hold is on (`countedOf`), and the burst that goes with a share
  (`burstOf`, as rateShareOf in src/redis/leased-rate.ts).
  Uses (leasedRefresh-4.lua): now, and the rate Redis holds: rlimit, rper, rburst.
]]
-- A rate share as counted (issue 32, item 6). Every process paces its share (GCRA, the TAT
-- carried across shares), so the fleet's calls in a window of per follow its shares' sum over
-- time: a share given back can be taken at once, save for two things a hold (rk until ru) keeps
-- counted. While an answer that cut a share is on its way (until ru - per), the process still
-- sends at the old share (rk). For a window after a share went down, one call more (its TAT
-- was set at the faster pace: a window that straddles the cut may hold one call beyond the two
-- paces' sum) and the burst the old share allowed beyond the new one's (sent early). That is
-- the most a paced process runs ahead of its pace (its TAT at most burst + 1 intervals ahead of
-- now). A call that cost more than its burst share (sent on idle credit) runs further ahead: at
-- a new share that excess is carried, in units, into the slower pace (GateRate.share), so its
-- next calls wait it out; at a share of 0 nothing is carried, and the edge is the lead the
-- process reported when its share went down (rl, the hold's lead in units). Campaign seed
-- 74047: a process that sent a cost-2 call at share 2 and burst 0, then cut its share to 0, was
-- counted at 1 for the window after, and another share took the unit it had sent: 7 units in a
-- window at a promise of 6.
local function burstOf(units)
  if rlimit <= 0 then return 0 end
  return math.floor(rburst * units / rlimit)
end
local function edgeOf(rs, rk, rl)
  local paced = 1 + math.max(0, burstOf(rk) - burstOf(rs))
  if rs > 0 then return paced end
  return math.max(paced, rl or 0)
end
local function countedOf(rs, rk, ru, rl)
  if ru <= now then return rs end
  if ru - rper > now then return math.max(rs, rk) end
  -- A hold the share has since grown past (rk <= rs): no edge, its pace went up.
  if rk <= rs then return rs end
  return rs + edgeOf(rs, rk, rl)
end
