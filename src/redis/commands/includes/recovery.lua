--[[
  The cap Redis holds, and the recovery window after Redis lost the gate's state (or a first
  use): nobody is granted while it lasts.
  Uses (gate): M, H, meta, now, lease, wake, META_TTL, LAYOUT.
]]
local limit = tonumber(meta[1])
local recoveryEnds = tonumber(meta[2] or 0)
-- Redis lost leases that may still be held: nobody is granted for windowMs, while every live
-- process of the gate is told (SPUBLISH on the gate's 'lost' channel) to register its leases
-- again at once, not at its next heartbeat.
local function recover(windowMs)
  recoveryEnds = math.max(recoveryEnds, now + windowMs)
  redis.call('HSET', M, 'r', recoveryEnds)
  redis.pcall('SPUBLISH', wake .. '{{LOST}}', '{{LOST}}')
end
local stored = redis.call('ZCARD', H)
if not limit then
  -- A process that used the gate knows it lost its state: a whole lease covers every holder
  -- still alive. Anyone else cannot tell a loss from a first use: firstUseWaitMs (ARGV[6]).
  limit = tonumber(ARGV[1])
  recoveryEnds = 0
  redis.call('HSET', M, 'c', limit, 'r', 0, 'v', LAYOUT)
  redis.call('PEXPIRE', M, META_TTL)
  meta[7] = nil -- a lost meta hash lost the rate's state with it: the rate restarts full
  recover(ARGV[5] == '1' and lease or tonumber(ARGV[6]))
else
  -- The layout before versions (the same keys and members), or a gate kept without a rate
  -- that a rated process takes over: adopted.
  if meta[3] ~= LAYOUT then redis.call('HSET', M, 'v', LAYOUT) end
  -- The lease set vanished with no script emptying it (meta says it held leases): evicted by an
  -- allkeys-* policy, or deleted. Its holders may all be alive: a whole lease.
  if meta[4] == '1' and stored == 0 then recover(lease) end
end
local recovering = recoveryEnds > now
