--[[
  Hands free units to the oldest tickets of live processes.
  Uses (gate, recovery, rate, holders).
]]
-- Free units go to the oldest tickets of live processes, here, in the script: no barging, and a
-- head heavier than the free units waits for room with everyone behind it (no overtaking).
-- The owner is told on its wake-up channel, a hint it confirms with CLAIM (a lost message is
-- found by its next heartbeat); an unclaimed grant lapses after the claim window.
local function fill()
  if recovering then return end
  local alive = {}
  -- Owners nobody listens for (see below), and their tickets passed over, put back in place.
  local deaf, passed = {}, {}
  local budget = 1000
  while held < limit and queued > 0 and budget > 0 do
    budget = budget - 1
    local popped = redis.call('ZPOPMIN', Q)
    local head = popped[1]
    queued = queued - 1
    local owner = string.match(head, '^(.*):')
    if alive[owner] == nil then
      local ends = redis.call('ZSCORE', P, owner)
      alive[owner] = ends ~= false and tonumber(ends) > now
    end
    if deaf[owner] then
      passed[#passed + 1] = popped[2]
      passed[#passed + 1] = head
    elseif alive[owner] then
      if held + weightOf(head) > limit then
        redis.call('ZADD', Q, popped[2], head)
        queued = queued + 1
        break
      end
      local tatBefore, backlogBefore = tat, backlog
      if RATED then
        local cost = costOf(head)
        local wait = slotWait(cost, 0)
        if wait > 0 then
          redis.call('ZADD', Q, popped[2], head)
          queued = queued + 1
          hintHead(head, owner, wait)
          break
        end
        takeSlot(cost)
        backlog = backlog - cost
      end
      grantUnits(head, now + claim)
      -- SPUBLISH: the channel is in the gate's slot, so on a Cluster the hint stays on this
      -- shard. pcall: an ACL user without channel permission, or a Redis before 7.0 (no
      -- SPUBLISH), polls instead (its waiters are told so).
      local heard = redis.pcall('SPUBLISH', wake .. owner, head)
      if heard == 0 and owner ~= caller then
        -- Nobody is subscribed to the owner's channel: its process is gone (a SIGKILL closes
        -- its connections at once, long before its liveness window ends) or its wake-ups are
        -- down (it polls). A grant would sit out its claim window, and every ticket of that
        -- process would take the next permit and do the same (issue 32: a killed replica
        -- stopped the others for 4.6 s). Not granted: the ticket keeps its place, the permit
        -- goes on down the queue; a live owner is granted by its own heartbeat or poll.
        redis.call('ZREM', H, unpack(unitsOf(head)))
        held = held - weightOf(head)
        tat, backlog = tatBefore, backlogBefore
        deaf[owner] = true
        passed[#passed + 1] = popped[2]
        passed[#passed + 1] = head
      end
    elseif RATED then
      backlog = backlog - costOf(head) -- a dead process's ticket, skipped
    end
  end
  if #passed > 0 then
    chunked('ZADD', Q, passed, 2)
    queued = queued + #passed / 2
  end
end
