--[[
  fair(): the max-min fair share by demand, with floors (Doorman's FAIR_SHARE), of the cap and of
  the rate alike. A function only: uses nothing of the script.
]]
-- Max-min fair share by demand, with floors: each process's heaviest waiting head (need, at
-- most its demand) is a unit that cannot be split, so it is met first (smallest first, while
-- they fit) and nothing below it is a share that can serve it; the rest is filled to a level
-- L: target = min(want, max(floor, L)), L the highest with Σ ≤ total; the units left over go
-- one each to the lowest ids at the level. Returns L (-1: every demand fits), the highest id
-- that gets one unit over it (''), and the last floor met, `<floor> <id>` in the order floors
-- are met ('': none met): a process whose floor comes after it in that order is not met, and
-- its need is no minimum of its share (issue 32: a rolling deploy left every process of a
-- weighted gate holding part of its head's need, and none could grant: the fleet at 0).
local function floorKey(f, id)
  return f .. ' ' .. id
end
local function fair(ids, want, needs, total)
  local n, all = #ids, 0
  for _, id in ipairs(ids) do all = all + want[id] end
  if all <= total then return -1, '', '' end
  local floor, order = {}, {}
  for i, id in ipairs(ids) do
    order[i] = id
    floor[id] = math.min(needs[id] or 0, want[id])
  end
  table.sort(order, function(a, b)
    if floor[a] ~= floor[b] then return floor[a] < floor[b] end
    return a < b
  end)
  local used, met = 0, ''
  for _, id in ipairs(order) do
    if used + floor[id] <= total then
      used = used + floor[id]
      met = floorKey(floor[id], id)
    else
      floor[id] = 0
    end
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
  if extra <= 0 then return lo, '', met end
  local at = {}
  for _, id in ipairs(ids) do
    if floor[id] <= lo and want[id] > lo then at[#at + 1] = id end
  end
  table.sort(at)
  return lo, at[math.min(extra, #at)] or '', met
end
-- Whether a process's floor (`f`, its need within its demand) was met at the last walk (`met`
-- as fair() returned it): floors are met in order of (floor, id) while they fit.
local function floorMet(f, id, met)
  if f <= 0 then return true end
  local mf, mid = string.match(met or '', '^(%d+) (.+)$')
  if not mf then return false end
  mf = tonumber(mf)
  return f < mf or (f == mf and id <= mid)
end
