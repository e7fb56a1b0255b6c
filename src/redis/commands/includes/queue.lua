--[[
  The ticket queue: a late rated grant taken back, tickets enqueued, a process kept live.
  Uses (gate, rate, holders).
]]
-- A rated grant that reached its process too late to go in its slot: its units go back and its
-- ticket to the head of the queue, where it waits for a slot of now; the old slot stays spent
-- (it was counted when granted; what matters is that nobody sends in it now).
local function retake(id)
  held = held - redis.call('ZREM', H, unpack(unitsOf(id)))
  local first = redis.call('ZPOPMIN', Q)
  if first[2] then redis.call('ZADD', Q, first[2], first[1]) end
  redis.call('ZADD', Q, first[2] and tonumber(first[2]) - 1 or 0, id)
  queued = queued + 1
  backlog = backlog + costOf(id)
end
local function enqueue(ids)
  local last = redis.call('INCRBY', S, #ids)
  -- A sequence just created carries the gate's TTL from the start (heartbeats renew it): a
  -- process that dies before its first heartbeat leaves no key without one (issue 32, item 8).
  if last == #ids then redis.call('PEXPIRE', S, META_TTL) end
  local args = {}
  for i, id in ipairs(ids) do
    args[#args + 1] = last - #ids + i
    args[#args + 1] = id
  end
  chunked('ZADD', Q, args, 2)
  queued = queued + #ids
  if RATED then
    for _, id in ipairs(ids) do backlog = backlog + costOf(id) end
  end
end
local function alive(proc)
  -- The same for the process set, when this is its first member.
  if redis.call('ZADD', P, now + live, proc) == 1 and redis.call('ZCARD', P) == 1 then
    redis.call('PEXPIRE', P, META_TTL)
  end
end
