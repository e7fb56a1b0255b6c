--[[
  fair(): the max-min fair share by demand, with floors (Doorman's FAIR_SHARE), of the cap and of
  the rate alike. Functions only, for a walk (leasedWalk.lua includes them where one begins, so a
  refresh that does not walk builds none of them): uses nothing of the script but metKey
  (leasedFloor.lua).
]]
-- Max-min fair share by demand, with floors: each process's heaviest waiting head (need, at
-- most its demand) is a unit that cannot be split, so it is met first and nothing below it is a
-- share that can serve it; the rest is filled to a level L: target = min(want, max(floor, L)), L
-- the highest with Σ ≤ total; the units left over go one each to the lowest ids at the level.
-- Floors are met oldest head first (`sinces`: when Redis first heard of each head; ties by id)
-- while they fit, and none after the first that does not: across the fleet as on a local gate,
-- the head is served as soon as it fits and nothing passes it (Go's semaphore.Weighted). Met
-- smallest first, a heavy head waited behind every lighter one for good (issue 32: 4 of 150
-- weighted schedules starved). Returns L (-1: every demand fits), the highest id that gets one
-- unit over it (''), and the last floor met, `<since> <id>` in that order ('': none met): a
-- process whose head comes after it is not met, and its need is no minimum of its share (issue
-- 32: a rolling deploy left every process of a weighted gate holding part of its head's need,
-- and none could grant: the fleet at 0).
-- The highest level L in [0, total] whose fill (`filled(L)`, growing with L) fits `total`, and
-- the units left over at it (fair() here, fairOf in leasedLevel.lua).
local function highest(filled, total)
  local lo, hi = 0, total
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if filled(mid) <= total then lo = mid else hi = mid - 1 end
  end
  return lo, total - filled(lo)
end
local function fair(ids, want, needs, sinces, total)
  local n, all = #ids, 0
  for _, id in ipairs(ids) do all = all + want[id] end
  if all <= total then return -1, '', '' end
  local floor, order = {}, {}
  for _, id in ipairs(ids) do
    floor[id] = math.min(needs[id] or 0, want[id])
    if floor[id] > 0 then order[#order + 1] = id end
  end
  table.sort(order, function(a, b)
    local sa, sb = sinces[a] or 0, sinces[b] or 0
    if sa ~= sb then return sa < sb end
    return a < b
  end)
  local used, met, full = 0, '', false
  for _, id in ipairs(order) do
    if not full and used + floor[id] <= total then
      used = used + floor[id]
      met = metKey(sinces[id] or 0, id)
    else
      full = true
      floor[id] = 0
    end
  end
  local function filled(level)
    local s = 0
    for _, id in ipairs(ids) do s = s + math.min(want[id], math.max(floor[id], level)) end
    return s
  end
  local lo, extra = highest(filled, total)
  if extra <= 0 then return lo, '', met end
  local at = {}
  for _, id in ipairs(ids) do
    if floor[id] <= lo and want[id] > lo then at[#at + 1] = id end
  end
  table.sort(at)
  return lo, at[math.min(extra, #at)] or '', met
end
