--[[
  Every script's last writes and the rate's part of its reply.
  Uses (gate, rate, holders).
]]
-- Keeps meta's 'h' (the lease set holds leases) true to the lease set, written only when it
-- flips: what lets a later script tell an evicted lease set from an emptied one.
local function markHolders()
  local holding = held > 0
  if holding ~= (meta[4] == '1') then redis.call('HSET', M, 'h', holding and 1 or 0) end
  if RATED then
    if queued == 0 then backlog = 0 end
    if tat ~= tat0 or backlog ~= backlog0 then
      redis.call('HSET', M, 't', string.format('%.17g', tat), 'b', string.format('%.17g', backlog))
    end
  end
end
-- Every reply ends with the rate's state: the head's hint, ms until a call of cost 1 would
-- conform (ignoring the queue), the cost queued, and the rate Redis holds ('' without one).
-- The hint names another process's head: the caller is told when it is that head's backup
-- (`<head>@<ms>@<its ticket>`, includes/rate.lua).
local function withRate(reply)
  local me, said = caller or shows, hint
  if hint ~= '' and me then
    local head = string.match(hint, '^(.*)@')
    local owner = string.match(head, '^(.*):')
    if owner ~= me then
      local backup, other = backupOf(head, owner)
      if other == me then said = hint .. '@' .. backup end
    end
  end
  reply[#reply + 1] = said
  reply[#reply + 1] = RATED and math.max(0, math.ceil(slotWait(1, 0))) or 0
  reply[#reply + 1] = string.format('%.17g', backlog)
  reply[#reply + 1] = rateStr
  return reply
end
