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
  item 8; the campaign's seeds 10040 and 10065, FIFO). Others left that Redis takes for live
  (perhaps dead: after a gap a dead process's liveness is rebased too) give the queue a TTL a
  lease past the last of them, and the lease set too (not before its last lease), which their next
  script takes off (`oq`).

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
    redis.call('PEXPIRE', H, math.max(1, math.ceil(tonumber(last[2]) - now + 1)))
    redis.call('HSET', M, 'o', 1)
  end
  markHolders()
else
  -- Others Redis takes for live may be dead: after a gap every liveness still ahead is rebased
  -- a lease on (rebaseGap), a killed process's too (the campaign's seeds 97041 and 97059: Redis
  -- away after a SIGKILL or a failed close, then every replica closed, and the dead ones' tickets
  -- and leases stayed with no TTL for good). The queue and the lease set expire a lease after the
  -- last of them lapses (the lease set not before its last lease), unless one runs a script
  -- before (`oq`: any script takes the TTL off again, gate.lua; a live process runs one every
  -- heartbeat). A queue lost to it loses no permit (a live owner queues its tickets again at its
  -- next heartbeat); a lease set lost to it while Redis was away past it reads as a loss (the
  -- holders flag stays: a recovery window), never as an expiry (`o`).
  local lastP = redis.call('ZRANGE', P, -1, -1, 'WITHSCORES')
  local ends = tonumber(lastP[2]) + lease
  local lastH = redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')
  if lastH[2] then ends = math.max(ends, tonumber(lastH[2])) end
  local ttl = math.max(1, math.ceil(ends - now + 1))
  local q = redis.call('PEXPIRE', Q, ttl)
  local h = redis.call('PEXPIRE', H, ttl)
  if q + h > 0 then redis.call('HSET', M, 'oq', 1) end
end
return {held, queued, processes}
