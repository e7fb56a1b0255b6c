--[[
  The gate's keys and arguments, Redis's clock, and its meta hash: a gate kept in another layout
  is refused before any write; then the run is recorded (`lr`).
]]
local H, Q, S, P, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, live, wake = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local claim = tonumber(ARGV[7])
-- The calling process, for the scripts that name it (ACQUIRE, HEARTBEAT): a grant to it needs
-- no wake-up, it learns of it from this reply or its next heartbeat.
local caller = nil
-- The process this script shows alive (the caller; CLAIM's and RELEASE's id owner): a process
-- passed over as overdue (includes/rate.lua) is served again once it runs a script.
local shows = nil
-- The caller's rate, 'limit:per:burst', or '' for a gate without one.
local rateArg = ARGV[8]
local RATED = rateArg ~= ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The rate's clock, to the microsecond: GCRA spaces calls by fractions of a ms.
local nowf = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local META_TTL = 2592000000
local CHUNK = 1000
local LAYOUT = RATED and '{{RATE_LAYOUT}}' or '{{LAYOUT}}'
local meta = redis.call('HMGET', M, 'c', 'r', 'v', 'h', 't', 'b', 'rt', 'n', 'lr', 'o', 'oq',
  'od')
-- Another layout's gate (another version or mode on this prefix): refused before any write.
-- A rated process adopts a gate kept without a rate; never the other way round.
local function foreignLayout(found)
  return found and found ~= LAYOUT and not (RATED and found == '{{LAYOUT}}')
end
if foreignLayout(meta[3]) then return redis.error_reply('{{LAYOUT_REFUSED}}' .. meta[3]) end
-- The Redis time of the last script run on the gate. Written first, and it is a write Redis
-- refuses out of memory (noeviction): a script that runs out of memory fails here, before it
-- has changed anything (it must not reap leases and then fail to count its own).
local lastRun = tonumber(meta[9])
redis.call('HSET', M, 'lr', now)
-- The last live process left (BYE): the lease set was set to expire with its last lease. In use
-- again, it keeps no TTL; gone by now, it expired (not an eviction): the holders flag goes too.
if meta[10] then
  if redis.call('PERSIST', H) == 0 and redis.call('EXISTS', H) == 0 and meta[4] == '1' then
    meta[4] = '0'
    redis.call('HSET', M, 'h', 0)
  end
  redis.call('HDEL', M, 'o')
end
-- A process left while others Redis took for live were left (BYE): the queue and the lease set
-- were set to expire a lease after the last of them lapses. In use again, they keep no TTL; the
-- lease set gone meanwhile is a loss as any other (the holders flag stays: a recovery window).
if meta[11] then
  redis.call('PERSIST', Q)
  redis.call('PERSIST', H)
  redis.call('HDEL', M, 'oq')
end
