--[[
  HEARTBEAT: renews this process's leases and its liveness (which keeps its tickets). A lease
  Redis no longer has (expired during a stall, or Redis restarted empty) is registered again
  (its request is still running, so it counts against the cap) and reported as lost. A ticket
  already granted is claimed and reported (its wake-up was lost); a vanished ticket joins the
  tail again and is reported (its waiter may have left while this heartbeat was on its way:
  then the process withdraws it again). A fixed number of calls however many ids it carries.

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9]   processId
    ARGV[10]  nLeases
    ARGV[11..10+nLeases] lease ids, then ticket ids to the end

  Returns {lost ids, granted ids, held, queued, processes, requeued ids, cap, ...rate}.
]]
--- @include "includes/prelude"

local proc, n = ARGV[9], tonumber(ARGV[10])
caller = proc
local lost, granted, requeued = {}, {}, {}
local leases, tickets = {}, {}
for i = 11, 10 + n do leases[#leases + 1] = ARGV[i] end
for i = 11 + n, #ARGV do tickets[#tickets + 1] = ARGV[i] end
local renew = {}
if #leases > 0 then
  local scores = chunked('ZMSCORE', H, leases)
  for i, id in ipairs(leases) do
    if not scores[i] then
      lost[#lost + 1] = id
      held = held + weightOf(id)
    end
    addUnits(renew, now + lease, id)
  end
end
if #tickets > 0 then
  local inH = chunked('ZMSCORE', H, tickets)
  local inQ = chunked('ZMSCORE', Q, tickets)
  for i, id in ipairs(tickets) do
    if inH[i] and RATED then
      -- A rated grant is claimed by its owner (CLAIM), which checks it is not late; one that
      -- is late already goes back to the head of the queue.
      if now - (tonumber(inH[i]) - claim) > lateMs then
        retake(id)
      else
        granted[#granted + 1] = id
      end
    elseif inH[i] then
      granted[#granted + 1] = id
      addUnits(renew, now + lease, id)
    elseif not inQ[i] then
      requeued[#requeued + 1] = id
    end
  end
  if #requeued > 0 then enqueue(requeued) end
end
if #renew > 0 then chunked('ZADD', H, renew, 2) end
alive(proc)
redis.call('ZREMRANGEBYSCORE', P, '-inf', now - lease)
fill()
redis.call('PEXPIRE', S, META_TTL)
redis.call('PEXPIRE', P, META_TTL)
redis.call('PEXPIRE', M, META_TTL)
markHolders()
return withRate({lost, granted, held, queued, redis.call('ZCARD', P), requeued, limit})
