--[[
  The last floor met at a walk, `<since> <id>` (metKey, written by fair() in leasedFair.lua and
  fairOf() in leasedLevel.lua), and whether a process's floor is among those met (floorMet, read
  by every refresh). Functions only: uses nothing of the script.
]]
local function metKey(since, id)
  return since .. ' ' .. id
end
-- Whether a process's floor (`f`, its need within its demand; its head known since `since`) was
-- met at the last walk (`met` as fair() returned it): floors are met oldest head first.
local function floorMet(f, since, id, met)
  if f <= 0 then return true end
  local ms, mid = string.match(met or '', '^(%d+) (.+)$')
  if not ms then return false end
  ms = tonumber(ms)
  return since < ms or (since == ms and id <= mid)
end
