--[[
  The fair share of a walk split over refreshes (includes/leasedPass.lua), from what its slices
  kept instead of every entry: a histogram of demands (`hist`: demand -> processes), the oldest
  heads (`heads`: {w, f, since, id} by since then id) and the lowest ids with a demand (`low`:
  the same records by id). fairOf() returns what fair() (leasedFair.lua) returns over the
  entries, in O(distinct demands × log total + kept): the level from the histogram, the floors
  met from the oldest heads, the id that gets the last unit over the level from the lowest ids.
  Exact while `total` ≤ KEEP: floors are whole units, so at most `total` heads are met, and the
  `extra` < total units over the level go to at most `total` of the lowest ids (at level 0 the
  met heads among them take at most what the floors took, the rest are at the level; above 0,
  every process with a demand is among them, as each fills at least a unit). Past KEEP, heads
  and units beyond the kept ones wait for a later walk (a level never gives more than fits).
  Functions only: uses nothing of the script but metKey, floorMet (leasedFloor.lua) and highest
  (leasedFair.lua).
]]
local KEEP = 256
local function byId(a, b) return a.id < b.id end
local function bySince(a, b)
  if a.since ~= b.since then return a.since < b.since end
  return a.id < b.id
end
-- Kept records as stored in M: one a line, `<w> <f> <since> <id>` (an id may hold spaces), the
-- last in order first (what a slice compares with, read without the rest); in order here.
local function recordOf(w, f, sn, id)
  return { w = tonumber(w), f = tonumber(f), since = tonumber(sn), id = id }
end
local function readKept(text)
  local back = {}
  for w, f, sn, id in string.gmatch(text or '', '(%d+) (%d+) (%d+) ([^\n]*)\n') do
    back[#back + 1] = recordOf(w, f, sn, id)
  end
  local out = {}
  for i = #back, 1, -1 do out[#out + 1] = back[i] end
  return out
end
-- Kept records as a slice sees them: how many, and the last (a record after it and no room
-- left is not kept: most of a large fleet's, read without parsing the list).
local function keptEdge(text)
  text = text or ''
  local n = select(2, string.gsub(text, '\n', '\n'))
  local last = readKept(string.match(text, '^[^\n]*\n'))[1]
  return { n = n, last = last, text = text }
end
local function fits(edge, r, order, limit)
  return edge.n < limit or order(r, edge.last)
end
-- The kept records and the slice's merged, the first `limit` in `order`, as stored. The kept
-- ones are in order already: each of the slice's (in order) goes in by a binary search over them,
-- so a slice parses a few kept lines, not all (a large fleet's later slices bring few records,
-- and a sort and a rewrite of every kept one were half of a slice's cost, issue 35).
local function keep(edge, more, order, limit)
  if #more == 0 and edge.n <= limit then return edge.text end
  table.sort(more, order)
  local lines = {}
  for line in string.gmatch(edge.text, '[^\n]*\n') do lines[#lines + 1] = line end
  local n, read = #lines, {}
  -- The i-th kept record in order is lines[n + 1 - i] (stored last first).
  local function before(i, r)
    local k = read[i]
    if not k then
      k = recordOf(string.match(lines[n + 1 - i], '^(%d+) (%d+) (%d+) ([^\n]*)\n'))
      read[i] = k
    end
    return order(k, r)
  end
  local merged, at = {}, 0
  for _, r in ipairs(more) do
    if #merged >= limit then break end
    -- The kept records before r: a prefix, and at least those before the slice's last one.
    local lo, hi = at, n
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if before(mid, r) then lo = mid else hi = mid - 1 end
    end
    for i = at + 1, lo do merged[#merged + 1] = lines[n + 1 - i] end
    at = lo
    merged[#merged + 1] = r.w .. ' ' .. r.f .. ' ' .. r.since .. ' ' .. r.id .. '\n'
  end
  for i = at + 1, math.min(n, at + limit - #merged) do merged[#merged + 1] = lines[n + 1 - i] end
  local parts = {}
  for i = math.min(#merged, limit), 1, -1 do parts[#parts + 1] = merged[i] end
  return table.concat(parts)
end
local function readHist(text)
  local out = {}
  for w, c in string.gmatch(text or '', '(%d+):(%d+)') do out[tonumber(w)] = tonumber(c) end
  return out
end
local function writeHist(hist)
  local parts = {}
  for w, c in pairs(hist) do parts[#parts + 1] = w .. ':' .. c end
  return table.concat(parts, ' ')
end
local function fairOf(hist, heads, low, total)
  local all = 0
  for w, c in pairs(hist) do all = all + w * c end
  if all <= total then return -1, '', '' end
  local used, met, over = 0, '', {}
  for _, r in ipairs(heads) do
    if used + r.f > total then break end
    used = used + r.f
    met = metKey(r.since, r.id)
    over[#over + 1] = r
  end
  local function filled(level)
    local s = 0
    for w, c in pairs(hist) do s = s + c * math.min(w, level) end
    for _, r in ipairs(over) do
      s = s + math.min(r.w, math.max(r.f, level)) - math.min(r.w, level)
    end
    return s
  end
  local lo, extra = highest(filled, total)
  if extra <= 0 then return lo, '', met end
  local at = {}
  for _, r in ipairs(low) do
    local f = floorMet(r.f, r.since, r.id, met) and r.f or 0
    if f <= lo and r.w > lo then at[#at + 1] = r.id end
  end
  return lo, at[math.min(extra, #at)] or '', met
end
