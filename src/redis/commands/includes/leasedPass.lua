--[[
  A walk split over refreshes (a hash of more than WALK_FULL entries, includes/leasedWalk.lua):
  each refresh while one is under way walks one slice of `L` (HSCAN, its cursor in `M.wc`) and
  keeps what the fair share needs in `M` (leasedLevel.lua: `wa` processes, blocks, held; `wh`
  `wr` histograms of demands and rate demands; `wf` `wg` the oldest heads of the cap and of the
  rate (their rate needs); `wl` `wq` the lowest ids with a demand and a rate demand; `wo` Σ owed
  so far); the slice that ends the cursor stores the levels (`f` and `rf` the last floors met)
  and `M.o` as a whole walk does. A slice reaps what it finds expired and puts `_s` and `_r`
  right by each entry's difference: `_s` is kept Σ max(block, held) over the entries by every
  write, and `_r` Σ rc (each entry's counted share as of its last write or slice,
  leasedEntry.lua), so no sum over the hash is needed at once. An entry written after its slice
  was walked counts at the next walk: the levels are as of a walk, as they always were.
  `M.o` (Σ owed, only a restraint on grabs: leasedRefresh-4.lua) errs high, never low: `wo` is
  Σ owed of the live entries (but silent ones, as in the small walk) as their slices found
  them plus every rise of an entry's owed while the pass is under way (the script adds it,
  `opass`), so an entry that rose after its slice, or came after the cursor passed it, is
  counted at its new value; one that fell or left stays counted at the old until the next pass.
  A slice takes a reaped entry's owed out of `M.o` at once.
  Uses (leasedWalk.lua and the script): as leasedWalk.lua; leasedLevel.lua. Sets: opass (a pass
  goes on after this slice).
]]
local CHUNK = 64
local st
if passing then
  st = redis.call('HMGET', M, 'wa', 'wh', 'wr', 'wf', 'wl', 'wq', 'wg', 'wo')
else
  st = {}
  walked = now
  redis.call('HSET', M, 't', now)
end
local cnt, kb, ku = string.match(st[1] or '0 0 0', '^(%d+) (%d+) (%d+)$')
cnt, kb, ku = tonumber(cnt), tonumber(kb), tonumber(ku)
local hist, rhist = readHist(st[2]), readHist(st[3])
local heads, low, rlow = keptEdge(st[4]), keptEdge(st[5]), keptEdge(st[6])
local rheads, wo = keptEdge(st[7]), tonumber(st[8] or 0)
local nheads, nlow, nrlow, nrheads = {}, {}, {}, {}
local keepCap, keepRate = math.min(cap, KEEP), math.min(rlimit, KEEP)
local function count(id, w, nd, sn, rw, rn, b, h, ow)
  cnt, kb, ku, wo = cnt + 1, kb + b, ku + h, wo + ow
  hist[w] = (hist[w] or 0) + 1
  local f = math.min(nd, w)
  -- A record only for what may be kept (most of a large fleet's ids are past the kept ones).
  if w > 0 and (low.n < keepCap or id < low.last.id) then
    nlow[#nlow + 1] = { w = w, f = f, since = sn, id = id }
  end
  if f > 0 then
    local r = { w = w, f = f, since = sn, id = id }
    if fits(heads, r, bySince, keepCap) then nheads[#nheads + 1] = r end
  end
  if RATED then
    -- The rate's floors as the cap's (fair() with rate needs and the heads' sinces).
    rhist[rw] = (rhist[rw] or 0) + 1
    local rf = math.min(rn, rw)
    if rw > 0 and (rlow.n < keepRate or id < rlow.last.id) then
      nrlow[#nrlow + 1] = { w = rw, f = rf, since = sn, id = id }
    end
    if rf > 0 then
      local r = { w = rw, f = rf, since = sn, id = id }
      if fits(rheads, r, bySince, keepRate) then nrheads[#nrheads + 1] = r end
    end
  end
end
local scanned = redis.call('HSCAN', L, meta[18] or '0', 'COUNT', CHUNK)
local cursor, kv, dead, moved = scanned[1], scanned[2], {}, {}
for i = 1, #kv, 2 do
  local id = kv[i]
  if id == proc then
    if not closing then
      count(id, wants, need, since, rwants, rneed, ownBlock, ownHeld, ownOwed)
    end
  elseif id ~= '_s' and id ~= '_r' then
    local e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, rc, rl, sq = parse(kv[i + 1])
    local c = countedOf(rs, rk, ru, rl)
    -- An entry of an older writer: `_r` taken to hold it as counted now.
    rc = rc or c
    if e <= now then
      -- Its permits and owed go (they stayed in `_s` and `M.o` until now); a lapsed rate as in
      -- leasedWalk.lua.
      sum = sum - math.max(b, h)
      osum = math.max(0, osum - ow)
      if RATED and e + rper > now and c > 0 then
        rsum = rsum + c - rc
        if b > 0 or h > 0 or rc ~= c then
          moved[#moved + 1] = id
          moved[#moved + 1] = format(e, 0, 0, 0, rs, rk, ru, 0, 0, 0, 0, 0, 0, c, rl)
        end
      else
        rsum = rsum - rc
        dead[#dead + 1] = id
      end
    else
      -- Silent (no refresh for half a lease and a gap: killed or stopped), as in the small walk
      -- (leasedWalk.lua): its block counted, but no floor, nothing owed, no growth.
      if now > e - lease / 2 then
        count(id, math.min(w, math.max(b, h)), 0, sn, rw, 0, b, h, 0)
      else
        count(id, w, nd, sn, rw, rn, b, h, ow)
      end
      if rc ~= c then
        rsum = rsum + c - rc
        moved[#moved + 1] = id
        moved[#moved + 1] = format(e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, c, rl, sq)
      end
    end
  end
end
if #dead > 0 then redis.call('HDEL', L, unpack(dead)) end
if #moved > 0 then redis.call('HSET', L, unpack(moved)) end
local wf = keep(heads, nheads, bySince, keepCap)
local wl = keep(low, nlow, byId, keepCap)
local wq = RATED and keep(rlow, nrlow, byId, keepRate) or ''
local wg = RATED and keep(rheads, nrheads, bySince, keepRate) or ''
if cursor == '0' then
  n, blocks, helds, osum = cnt, kb, ku, wo
  level, top, met = fairOf(hist, readKept(wf), readKept(wl), cap)
  rlevel, rtop, rmet = -1, '', ''
  if RATED then rlevel, rtop, rmet = fairOf(rhist, readKept(wg), readKept(wq), rlimit) end
  redis.call('HSET', M, 'b', level, 'e', top, 'n', n, 'k', blocks, 'u', helds,
    'rb', rlevel, 're', rtop, 'f', met, 'rf', rmet)
  redis.call('HDEL', M, 'wc', 'wa', 'wh', 'wr', 'wf', 'wl', 'wq', 'wg', 'wo')
else
  opass = true
  redis.call('HSET', M, 'wc', cursor, 'wa', cnt .. ' ' .. kb .. ' ' .. ku, 'wh', writeHist(hist),
    'wr', writeHist(rhist), 'wf', wf, 'wl', wl, 'wq', wq, 'wg', wg, 'wo', wo)
  if grown and level < 0 then
    -- Every demand fit at the last walk and ours grew: until this walk ends, an equal split.
    level, top, met = math.floor(cap / size), '', ''
  end
  if RATED and grown and rlevel < 0 then rlevel, rtop, rmet = math.floor(rlimit / size), '', '' end
end
