--[[
  BYE: a process that closes cleanly leaves the gate's process set, after its releases. If no
  live process is left in it, what the lease set and the queue still hold has no live owner: a
  lease a snapshot brought back after its owner released it, the leases of a process killed or
  stalled past its liveness, tickets of processes taken for dead. Nothing would run on the gate
  to reap them, and the two keys carry no TTL (so that a `volatile-*` policy cannot evict them
  while they count): the queue goes now (a stalled owner that resumes queues its tickets again
  at its next heartbeat); the lease set is given a TTL that ends as its last lease does, so no
  lease is taken back before its time, and the meta hash's `o` says so: the next script that
  finds it takes the TTL off again, or, the set gone by then, clears the holders flag (an
  expiry, not an eviction). A gate every process closed leaves no key without a TTL (issue 32,
  item 8; the campaign's seeds 10040 and 10065, FIFO).

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9]   processId

  Returns {held, queued, processes}.
]]
-- A gate whose meta hash is gone (flushed, restarted empty, or never used) has nothing to
-- leave: the prelude would take it for a lost state and open a recovery window for the next
-- process (a flush right after a close, as tests do, then left a new gate without grants).
if redis.call('EXISTS', KEYS[5]) == 0 then return {0, 0, 0} end
--- @include "includes/prelude"

redis.call('ZREM', P, ARGV[9])
local processes = redis.call('ZCARD', P)
if redis.call('ZCOUNT', P, now, '+inf') == 0 then
  redis.call('DEL', Q)
  queued = 0
  local last = redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', H, math.max(1, tonumber(last[2]) - now + 1))
    redis.call('HSET', M, 'o', 1)
  end
  markHolders()
end
return {held, queued, processes}
