--[[
  An entry of a leased gate's blocks hash `L`, read and written: twelve numbers, space-separated
  (the layout: src/redis/leased-scripts.ts). Functions only: uses nothing of the script.
]]
-- An entry: expiry, block, held, wants, share, counted, until, rate wants, need (the heaviest
-- head waiting: a unit that cannot be split), since (Redis ms when this head was first reported,
-- 0: none), its token (the process's name for that head) and what it adds to `L._r` (rc: its
-- counted rate share as of its last write or walk, so that `_r` is Σ rc exactly and a walk split
-- over many refreshes corrects it entry by entry). Entries written before 'need' end at 'rate
-- wants', before 'since' at 'need', before 'rc' at the token (rc nil: read as counted now).
local function parse(entry)
  local e, b, h, w, rs, rk, ru, rw, nd, sn, tk, rc = string.match(entry,
    '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  if e then
    -- The current layout in one match (a walk reads thousands).
    return tonumber(e), tonumber(b), tonumber(h), tonumber(w), tonumber(rs), tonumber(rk),
      tonumber(ru), tonumber(rw), tonumber(nd), tonumber(sn), tonumber(tk), tonumber(rc)
  end
  local rest
  e, b, h, w, rest = string.match(entry, '^(%d+) (%d+) (%d+) (%d+)(.*)$')
  local rs, rk, ru, rw, tail = string.match(rest, '^ (%d+) (%d+) (%d+) (%d+)(.*)$')
  local nd, more = string.match(tail or '', '^ (%d+)(.*)$')
  local sn, tk, rc = string.match(more or '', '^ (%d+) (%d+) ?(%d*)$')
  return tonumber(e), tonumber(b), tonumber(h), tonumber(w),
    tonumber(rs or 0), tonumber(rk or 0), tonumber(ru or 0), tonumber(rw or 0), tonumber(nd or 0),
    tonumber(sn or 0), tonumber(tk or 0), tonumber(rc or '')
end
local function format(e, b, h, w, rs, rk, ru, rw, nd, sn, tk, rc)
  return e .. ' ' .. b .. ' ' .. h .. ' ' .. w .. ' ' .. rs .. ' ' .. rk .. ' ' .. ru .. ' ' .. rw
    .. ' ' .. nd .. ' ' .. (sn or 0) .. ' ' .. (tk or 0) .. ' ' .. (rc or 0)
end
