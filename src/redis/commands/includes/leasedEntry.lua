--[[
  An entry of a leased gate's blocks hash `L`, read and written: fourteen numbers (fifteen during a
  lead's hold), space-separated
  (the layout: src/redis/leased-scripts.ts). Functions only: uses nothing of the script.
]]
-- An entry: expiry, block, held, wants, share, counted, until, rate wants, need (the heaviest
-- head waiting: a unit that cannot be split), since (Redis ms when this head was first reported,
-- 0: none), its token (the process's name for that head), owed (units its met floor still
-- lacks: Σ in M.o, kept from the heads of others that take units between walks), rate need (the
-- share its costliest head needs for a burst share that fits it: a floor of the rate's fair
-- share) and what it adds to `L._r` (rc: its counted rate share as of its last write or walk, so
-- that `_r` is Σ rc exactly and a walk split over many refreshes corrects it entry by entry)
-- and, only while a rate hold is on after calls sent ahead of their pace, the hold's lead (rl:
-- the units its TAT ran ahead when its share went down, leasedCounted.lua; 0 when absent). Every
-- other entry has the fourteen numbers an older writer reads. Since stop 52 a writer that numbers
-- its refreshes adds the number of the refresh that wrote the entry (sq: the lead then written as
-- 0 if none; an older reader takes such a tail for no lead): a process whose own entry carries a
-- number below that of a refresh Redis already answered it sees writes lost under it (Redis back
-- from an older dump, a failover to a lagging replica). 0: none (an older writer's entry).
-- Entries written before 'need' end at 'rate wants', before 'since' at 'need', before 'owed' at
-- 'head', before 'rate need' at 'owed', before 'rc' at 'rate need' (rc nil: read as counted now;
-- format() keeps it nil, so `_r` stays as that entry's writer left it).
local function parse(entry)
  local e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, rc, tail = string.match(entry,
    '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)(.*)$')
  if e then
    -- The current layout in one match (a walk reads thousands), then its tail: lead, number.
    local rl, sq = string.match(tail, '^ (%d+) ?(%d*)$')
    return tonumber(e), tonumber(b), tonumber(h), tonumber(w), tonumber(rs), tonumber(rk),
      tonumber(ru), tonumber(rw), tonumber(nd), tonumber(sn), tonumber(tk), tonumber(ow),
      tonumber(rn), tonumber(rc), tonumber(rl or 0), tonumber(sq ~= '' and sq or 0) or 0
  end
  local rest
  e, b, h, w, rest = string.match(entry, '^(%d+) (%d+) (%d+) (%d+)(.*)$')
  local rs, rk, ru, rw, tail = string.match(rest, '^ (%d+) (%d+) (%d+) (%d+)(.*)$')
  local nd, more = string.match(tail or '', '^ (%d+)(.*)$')
  local sn, tk, last = string.match(more or '', '^ (%d+) (%d+)(.*)$')
  local ow, rnrc = string.match(last or '', '^ (%d+)(.*)$')
  local rn = rnrc and string.match(rnrc, '^ (%d+)$')
  return tonumber(e), tonumber(b), tonumber(h), tonumber(w),
    tonumber(rs or 0), tonumber(rk or 0), tonumber(ru or 0), tonumber(rw or 0), tonumber(nd or 0),
    tonumber(sn or 0), tonumber(tk or 0), tonumber(ow or 0), tonumber(rn or 0), nil, 0, 0
end
-- One string.format, not a chain of `..`: Lua turns each number of a chain into text by '%.14g'
-- (libc's floating-point path), a refresh's most costly Lua work; '%d' writes the same digits
-- for whole numbers (and whole numbers past 1e14 in full, where '%.14g' wrote an exponent).
local ENTRY = '%d %d %d %d %d %d %d %d %d %d %d %d %d'
local function format(e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, rc, rl, sq)
  if rc and sq and sq > 0 then
    return string.format(ENTRY .. ' %d %d %d', e, b, h, w, rs, rk, ru, rw, nd, sn or 0, tk or 0,
      ow or 0, rn or 0, rc, rl or 0, sq)
  end
  if rc and rl and rl > 0 then
    return string.format(ENTRY .. ' %d %d', e, b, h, w, rs, rk, ru, rw, nd, sn or 0, tk or 0,
      ow or 0, rn or 0, rc, rl)
  end
  if rc then
    return string.format(ENTRY .. ' %d', e, b, h, w, rs, rk, ru, rw, nd, sn or 0, tk or 0, ow or 0,
      rn or 0, rc)
  end
  return string.format(ENTRY, e, b, h, w, rs, rk, ru, rw, nd, sn or 0, tk or 0, ow or 0, rn or 0)
end
