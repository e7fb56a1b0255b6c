/**
 * The Lua scripts behind a shared gate: every state change is one of these, atomic in Redis,
 * on Redis `TIME` (never a client clock), touching only the gate's keys (one hash slot).
 *
 * Keys of a gate, all under one `{...}` hash tag:
 * - `H` holders: ZSET lease id -> expiry (ms, Redis time)
 * - `Q` tickets: ZSET ticket id -> arrival sequence (FIFO)
 * - `X` ticket expiries: ZSET ticket id -> expiry
 * - `S` arrival sequence counter
 * - `P` live processes: ZSET process id -> expiry
 * - `E` epoch: the end of a recovery window (ms), or 0. Missing while a process that used the
 *   gate before calls means Redis lost the gate's state (a restart, a flush): for one window
 *   nobody is granted, so every live holder can register its lease again first.
 * A ticket and the lease it becomes share one id, `<process id>:<n>`: the owner is in the id.
 */
import { createHash } from 'node:crypto';

// Counts are kept in Lua variables rather than asked again: every call inside a script is
// Redis work that all processes wait behind.
const PRELUDE = `
local H, Q, X, S, P, E = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local limit, lease, ttl, wake = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local EPOCH_TTL = 2592000000
local epoch = redis.call('GET', E)
local recovering = false
if not epoch then
  if ARGV[5] == '1' then
    redis.call('SET', E, now + tonumber(ARGV[6]), 'PX', EPOCH_TTL)
    recovering = true
  else
    redis.call('SET', E, 0, 'PX', EPOCH_TTL)
  end
else
  recovering = tonumber(epoch) > now
end
-- Dead tickets (their process stopped renewing them) and expired leases go first.
local dead = redis.call('ZRANGEBYSCORE', X, '-inf', now, 'LIMIT', 0, 256)
if #dead > 0 then
  redis.call('ZREM', Q, unpack(dead))
  redis.call('ZREM', X, unpack(dead))
end
redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
local held = redis.call('ZCARD', H)
local queued = redis.call('ZCARD', Q)
-- Free permits go to the oldest live tickets, here, in the script: no barging, and the owner
-- is told on its wake-up channel (a lost message is found by its next heartbeat).
local function fill()
  if recovering then return end
  while held < limit and queued > 0 do
    local head = redis.call('ZPOPMIN', Q)[1]
    redis.call('ZREM', X, head)
    redis.call('ZADD', H, now + lease, head)
    -- pcall: an ACL user without channel permission polls instead (its waiters are told so).
    redis.pcall('PUBLISH', wake .. string.match(head, '^(.*):'), head)
    held = held + 1
    queued = queued - 1
  end
end
-- A key lives 2 leases past its creation or the last heartbeat (the epoch 30 days: it is how a
-- restart is told from a first use). The heartbeat refreshes every key while anyone uses the
-- gate, every lease / 5, so a script that adds to a key that exists leaves its expiry alone:
-- only a key it creates gets one (PEXPIRE is Redis work every process waits behind).
local function expire(...)
  for _, key in ipairs({...}) do redis.call('PEXPIRE', key, 2 * lease) end
end
local function enqueue(id)
  local seq = redis.call('INCR', S)
  if seq == 1 then expire(S) end
  redis.call('ZADD', Q, seq, id)
  redis.call('ZADD', X, now + ttl, id)
  -- Q and X hold the same ids: both were empty (missing) when the queue was.
  if queued == 0 then expire(Q, X) end
  queued = queued + 1
end
`;

/**
 * Every script's ARGV starts: limit, leaseMs, ttlMs, wakePrefix, known (1 when this process
 * used the gate before), recoverMs. ACQUIRE(..., processId, id, register): a lease now if a
 * permit is free and nobody waits, else a ticket at the tail; `register` 1 also records the
 * process as live (its heartbeat does that once it runs for the gate). Returns `{granted 0|1,
 * held, queued, processes}`, processes -1 when not registering.
 */
const ACQUIRE = `${PRELUDE}
local proc, id, register = ARGV[7], ARGV[8], ARGV[9]
fill()
local granted = 0
if not recovering and queued == 0 and held < limit then
  redis.call('ZADD', H, now + lease, id)
  if held == 0 then expire(H) end
  held = held + 1
  granted = 1
else
  enqueue(id)
end
local processes = -1
if register == '1' then
  redis.call('ZADD', P, now + ttl, proc)
  expire(P)
  processes = redis.call('ZCARD', P)
end
return {granted, held, queued, processes}
`;

/**
 * RELEASE(..., id...): gives back leases and withdraws tickets (a cancelled waiter), then
 * hands freed permits on. Returns `{held, queued}`.
 */
const RELEASE = `${PRELUDE}
local ids = {}
for i = 7, #ARGV do ids[#ids + 1] = ARGV[i] end
held = held - redis.call('ZREM', H, unpack(ids))
queued = queued - redis.call('ZREM', Q, unpack(ids))
redis.call('ZREM', X, unpack(ids))
fill()
return {held, queued}
`;

/**
 * HEARTBEAT(..., processId, nLeases, lease id..., ticket id...): renews this process's leases
 * and tickets. A lease Redis no longer has (expired during a stall, or Redis restarted empty)
 * is registered again — its request is still running, so it counts against the cap — and
 * reported as lost. A ticket already granted is reported (its wake-up was lost); a vanished
 * ticket joins the tail again and is reported (its waiter may have left while this heartbeat
 * was on its way: then the process withdraws it again). Returns `{lost ids, granted ids, held,
 * queued, processes, requeued ids}`.
 */
const HEARTBEAT = `${PRELUDE}
local proc, n = ARGV[7], tonumber(ARGV[8])
local lost, granted, requeued = {}, {}, {}
for i = 9, 8 + n do
  local id = ARGV[i]
  if redis.call('ZADD', H, now + lease, id) == 1 then
    lost[#lost + 1] = id
    held = held + 1
  end
end
for i = 9 + n, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', H, id) then
    granted[#granted + 1] = id
    redis.call('ZADD', H, now + lease, id)
  elseif redis.call('ZSCORE', Q, id) then
    redis.call('ZADD', X, now + ttl, id)
  else
    enqueue(id)
    requeued[#requeued + 1] = id
  end
end
redis.call('ZADD', P, now + ttl, proc)
redis.call('ZREMRANGEBYSCORE', P, '-inf', now)
fill()
expire(H, Q, X, S, P)
redis.call('PEXPIRE', E, EPOCH_TTL)
return {lost, granted, held, queued, redis.call('ZCARD', P), requeued}
`;

export interface Script {
  readonly name: string;
  readonly source: string;
  /** SHA1 of the source: what Redis names it by, known without a round trip. */
  readonly sha: string;
}

function script(name: string, source: string): Script {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

export const scripts = {
  acquire: script('acquire', ACQUIRE),
  release: script('release', RELEASE),
  heartbeat: script('heartbeat', HEARTBEAT),
} as const;

/** The key suffixes, in the order every script declares them. */
export const KEY_SUFFIXES = ['h', 'q', 'x', 's', 'p', 'e'] as const;
