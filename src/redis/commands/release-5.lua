--[[
  RELEASE: gives back leases and withdraws tickets (a cancelled waiter), then hands freed
  permits on.

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9..] ids, leases and tickets alike

  Returns {held, queued, cap, ...rate}.
]]
--- @include "includes/prelude"

local ids, units = {}, {}
shows = ARGV[9] and string.match(ARGV[9], '^(.*):')
for i = 9, #ARGV do
  ids[#ids + 1] = ARGV[i]
  for _, unit in ipairs(unitsOf(ARGV[i])) do units[#units + 1] = unit end
end
if RATED and queued > 0 then
  -- The withdrawn tickets' cost leaves the backlog.
  local inQ = chunked('ZMSCORE', Q, ids)
  for i, id in ipairs(ids) do
    if inQ[i] then backlog = backlog - costOf(id) end
  end
end
for i = 1, #ids, CHUNK do
  queued = queued - redis.call('ZREM', Q, unpack(ids, i, math.min(#ids, i + CHUNK - 1)))
end
for i = 1, #units, CHUNK do
  held = held - redis.call('ZREM', H, unpack(units, i, math.min(#units, i + CHUNK - 1)))
end
fill()
markHolders()
return withRate({held, queued, limit})
