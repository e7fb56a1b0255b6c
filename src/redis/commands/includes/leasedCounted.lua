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
-- paces' sum) and the burst the old share allowed beyond the new one's (sent early).
local function burstOf(units)
  if rlimit <= 0 then return 0 end
  return math.floor(rburst * units / rlimit)
end
local function countedOf(rs, rk, ru)
  if ru <= now then return rs end
  if ru - rper > now then return math.max(rs, rk) end
  -- A hold the share has since grown past (rk <= rs): no edge, its pace went up.
  if rk <= rs then return rs end
  return rs + 1 + math.max(0, burstOf(rk) - burstOf(rs))
end
