--[[
  BYE: a process that closes cleanly leaves the gate's process set, after its releases. If no
  process is left in it, whatever the lease set and the queue still hold has no live owner (a
  live process is in the set from its first acquire; one stalled past its liveness is reaped
  from it only a lease later, when its leases have expired too): a lease a snapshot brought back
  after its owner released it, a ticket of a process that died. They go now, and their keys with
  them: nothing keeps a key without a TTL once every process closed (issue 32, item 8; the
  campaign's seed 10040, FIFO, a restart from a snapshot).

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9]   processId

  Returns {held, queued, processes}.
]]
--- @include "includes/prelude"

redis.call('ZREM', P, ARGV[9])
local processes = redis.call('ZCARD', P)
if processes == 0 then
  redis.call('DEL', H, Q)
  held, queued = 0, 0
  markHolders()
end
return {held, queued, processes}
