--[[
  Time that passed unobserved (issue 32): a gap since the last run, or a step of Redis's clock,
  is taken as frozen time. Rebases every stored time still ahead at the last run (H's and P's
  scores, M's `r` and `t`) and tells every process to report at once.
  Uses (gate): H, P, M, meta, now, nowf, lastRun, lease, live, claim, wake, CHUNK.
]]
-- A gap: no script ran for longer than any live process lets pass (each heartbeats every
-- heartbeatMs; claim is heartbeatMs + commandTimeoutMs), or Redis's clock went back. Redis was
-- away (SIGSTOP, out of memory, a restart with its data), or its clock stepped (forward, the
-- same to us), or every process was. What expired meanwhile expired unobserved: its holders
-- may all be alive, holding what they held. Time is taken as frozen during the gap: every
-- stored time still ahead at the last run keeps what it had left then, and a lease or a
-- process's liveness at least a whole lease (and a liveness window), so a live holder reports
-- before anything of its is reaped, as after a lost state; a dead one is reaped that much later. Entries already past at the last
-- run stay past. The same undoes a step back of the clock.
local gap = lastRun and (now - lastRun > claim or lastRun - now > claim)
if gap then
  -- Read with ZPOPMIN and written back (the commands the documented ACL rule already allows).
  local function rebase(key, floor)
    local count = redis.call('ZCARD', key)
    if count == 0 then return end
    -- Popping every member deletes the key, and its TTL with it (P has one): put it back.
    local ttl = redis.call('PTTL', key)
    local rows = redis.call('ZPOPMIN', key, count)
    local args = {}
    for i = 1, #rows, 2 do
      local at = tonumber(rows[i + 1])
      args[#args + 1] = at > lastRun and now + math.max(at - lastRun, floor) or at
      args[#args + 1] = rows[i]
    end
    for i = 1, #args, 2 * CHUNK do
      redis.call('ZADD', key, unpack(args, i, math.min(#args, i + 2 * CHUNK - 1)))
    end
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  end
  rebase(H, math.max(lease, live))
  rebase(P, math.max(lease, live))
  local r0 = tonumber(meta[2])
  if r0 and r0 > lastRun then
    meta[2] = now + (r0 - lastRun)
    redis.call('HSET', M, 'r', meta[2])
  end
  local t0 = tonumber(meta[5])
  if t0 and t0 > lastRun then
    meta[5] = string.format('%.17g', nowf + (t0 - lastRun))
    redis.call('HSET', M, 't', meta[5])
  end
  -- Every holder and waiter heartbeats now, not at its next heartbeat.
  redis.pcall('SPUBLISH', wake .. '{{LOST}}', '{{LOST}}')
end
