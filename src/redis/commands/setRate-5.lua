--[[
  SETRATE: the explicit change of a gate's rate for every process; the timestamp stays.

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9] rate, `limit:per:burst`

  Returns {held, queued, cap, ...rate}.
]]
--- @include "includes/prelude"

rateStr = ARGV[9]
redis.call('HSET', M, 'rt', rateStr)
local rl, rp, rb = string.match(rateStr, '^([^:]+):([^:]+):([^:]+)$')
T = tonumber(rp) / tonumber(rl)
rateBurst = tonumber(rb)
reach = (rateBurst + 1) * T
fill()
markHolders()
return withRate({held, queued, limit})
