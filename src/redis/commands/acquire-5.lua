--[[
  ACQUIRE: a lease now if its units are free, its rate slot has come and nobody waits, else a
  ticket at the tail (its owner is then recorded as live: that is what keeps the ticket).

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9]  processId
    ARGV[10] id          the lease/ticket id (`<process id>:<n>[~<cost>][/<weight>]`)
    ARGV[11] register    1: also record the process and ask for the fleet size
    ARGV[12] deadlineMs

  Returns {granted, held, queued, processes, cap, recoveryMs, retryMs, ...rate}: granted 1 (a
  lease), 0 (a ticket), -1 (no ticket: the id's weight is above the cap Redis holds), -2 (no
  ticket: its rate slot, after the cost queued ahead, comes after its deadline, `retryMs` from
  now), -3 (no ticket: its cost is above the burst + 1 Redis holds, `retryMs` that bound);
  processes -1 when not asked, recoveryMs what is left of a recovery window.
]]
--- @include "includes/prelude"

local proc, id, register, deadline = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
caller = proc
fill()
local granted, retry = 0, 0
local cost = costOf(id)
if weightOf(id) > limit then
  granted = -1
elseif RATED and cost > rateBurst + 1 then
  granted, retry = -3, rateBurst + 1
elseif RATED and slotWait(cost, queued == 0 and 0 or backlog) > deadline then
  granted, retry = -2, math.max(1, math.ceil(slotWait(cost, queued == 0 and 0 or backlog)))
elseif not recovering and queued == 0 and held + weightOf(id) <= limit
    and (not RATED or slotWait(cost, 0) <= 0) then
  grantUnits(id, now + lease)
  if RATED then takeSlot(cost) end
  granted = 1
else
  enqueue({id})
  alive(proc)
  -- Alone at the head with a free permit, it waits for its slot: told when, in the reply.
  if RATED and queued == 1 then fill() end
end
local processes = -1
if register == '1' then
  if granted == 1 then alive(proc) end
  processes = redis.call('ZCARD', P)
end
markHolders()
return withRate({granted, held, queued, processes, limit, recovering and recoveryEnds - now or 0, retry})
