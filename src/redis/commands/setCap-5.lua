--[[
  SETCAP: the explicit change of a gate's cap (a rolling deploy's), then hands any permits it
  freed on.

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9] cap

  Returns {held, queued, cap, ...rate}.
]]
--- @include "includes/prelude"

limit = tonumber(ARGV[9])
redis.call('HSET', M, 'c', limit)
fill()
markHolders()
return withRate({held, queued, limit})
