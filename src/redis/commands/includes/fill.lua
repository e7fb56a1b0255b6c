--[[
  Hands free units to the oldest tickets of live processes, and takes back the grants of owners
  that stopped listening when the queue waits for units.
  Uses (gate, recovery, rate, holders, queue).
]]
-- A grant whose owner heard its wake-up (HEARD, holders.lua) and no longer listens: its process
-- died between the grant and its CLAIM (a SIGKILL's connections close a moment after the kill,
-- and a script in between still finds it subscribed: in fifo-sigkill under CI load, 4 grants to
-- the killed replica made 13-24 ms after the kill held the survivors at 0 for their claim window,
-- 3 s), or its wake-ups went down (it polls). Asked again on its channel (the command the ACL
-- rule already allows; a live owner just hears its wake-up twice) and heard by nobody, it is
-- taken back: its units go on, its ticket to the head of the queue, where fill passes it over as
-- any deaf owner's (a live owner is granted by its own heartbeat or poll). Only when tickets
-- wait for units, so the scan costs nothing on a gate with room; and only grants older than
-- a tenth of a second (at most a quarter of the claim window): a live owner claims well within
-- that, so a saturated gate's every release does not ask its fresh grants' owners again (a
-- process whose tickets wait asks Redis again after pollMs: shared-starved.ts). `deaf`: the
-- owners fill found deaf.
local function takeBackDeaf(deaf)
  local upto = now + claim - math.min(100, math.floor(claim / 4)) + HEARD
  local rows = redis.call('ZRANGE', H, '(' .. now, upto, 'BYSCORE', 'LIMIT', 0, CHUNK,
    'WITHSCORES')
  local back, heard = {}, {}
  for i = 1, #rows, 2 do
    local id = rows[i]
    local owner = string.match(id, '^(.*):')
    if tonumber(rows[i + 1]) % 1 == HEARD and not string.find(id, '#%d+$') and owner ~= caller then
      if heard[owner] == nil then
        local n = deaf[owner] and 0 or redis.pcall('SPUBLISH', wake .. owner, id)
        heard[owner] = n ~= 0
      end
      if not heard[owner] then
        deaf[owner] = true
        back[#back + 1] = id
      end
    end
  end
  -- Retaken latest first: each goes to the head, so they keep their order.
  for i = #back, 1, -1 do retake(back[i]) end
  return #back > 0
end
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
  -- Hands units on; true when it stopped for want of units with tickets still queued.
  local function hand()
    while queued > 0 and budget > 0 do
      if held >= limit then return true end
      budget = budget - 1
      local popped = redis.call('ZPOPMIN', Q)
      local head = popped[1]
      queued = queued - 1
      local owner = string.match(head, '^(.*):')
      if alive[owner] == nil then
        local ends = redis.call('ZSCORE', P, owner)
        alive[owner] = ends ~= false and tonumber(ends) > now
      end
      if deaf[owner] or (RATED and alive[owner] and isOverdue(head, owner)) then
        passed[#passed + 1] = popped[2]
        passed[#passed + 1] = head
      elseif alive[owner] then
        if held + weightOf(head) > limit then
          redis.call('ZADD', Q, popped[2], head)
          queued = queued + 1
          return true
        end
        local wait = RATED and slotWait(costOf(head), 0) or 0
        -- SPUBLISH: the channel is in the gate's slot, so on a Cluster the hint stays on this
        -- shard. pcall: an ACL user without channel permission, or a Redis before 7.0 (no
        -- SPUBLISH), polls instead (its waiters are told so). Sent before the grant is written:
        -- nothing runs between the two, and whether it was heard decides the grant.
        local heard = 1
        if wait > 0 then
          -- Its slot is to come: the head, back in place, is told when (includes/rate.lua).
          redis.call('ZADD', Q, popped[2], head)
          if hintHead(head, owner, wait) then
            queued = queued + 1
            return false
          end
          redis.call('ZREM', Q, head)
          heard = 0
        else
          heard = redis.pcall('SPUBLISH', wake .. owner, head)
        end
        if heard == 0 and owner ~= caller then
          -- Nobody is subscribed to the owner's channel: its process is gone (a SIGKILL closes
          -- its connections at once, long before its liveness window ends) or its wake-ups are
          -- down (it polls). A grant would sit out its claim window, and every ticket of that
          -- process would take the next permit and do the same (issue 32: a killed replica
          -- stopped the others for 4.6 s). Not granted: the ticket keeps its place, the permit
          -- goes on down the queue; a live owner is granted by its own heartbeat or poll.
          deaf[owner] = true
          passed[#passed + 1] = popped[2]
          passed[#passed + 1] = head
        else
          if RATED then
            local cost = costOf(head)
            takeSlot(cost)
            backlog = backlog - cost
          end
          -- Heard (a count above 0): marked, so that takeBackDeaf can tell it from a lease.
          local mark = type(heard) == 'number' and heard > 0 and HEARD or 0
          grantUnits(head, now + claim + mark)
        end
      elseif RATED then
        backlog = backlog - costOf(head) -- a dead process's ticket, skipped
      end
    end
    return false
  end
  if hand() and takeBackDeaf(deaf) then hand() end
  if #passed > 0 then
    chunked('ZADD', Q, passed, 2)
    queued = queued + #passed / 2
  end
  if RATED then saveOverdue() end
end
