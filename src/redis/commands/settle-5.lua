--[[
  SETTLE: calls charged their cost and really used `units` more (or, negative, fewer): the
  timestamp moves by `units x T`. Extra units are taken as of now (a debt the next calls wait
  out); a refund moves it back, never below now, and may let the head go.

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9] units

  Returns {held, queued, cap, ...rate}.
]]
--- @include "includes/prelude"

local units = tonumber(ARGV[9])
if RATED then
  if units > 0 then
    tat = math.max(tat, nowf) + units * T
  elseif tat > nowf then
    tat = math.max(nowf, tat + units * T)
  end
  fill()
end
markHolders()
return withRate({held, queued, limit})
