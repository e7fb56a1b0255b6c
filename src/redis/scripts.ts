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

const PRELUDE = `
local H, Q, X, S, P, E = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local limit, lease, ttl, wake = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('GET', E)
local recovering = false
if not epoch then
  if ARGV[5] == '1' then
    redis.call('SET', E, now + tonumber(ARGV[6]))
    recovering = true
  else
    redis.call('SET', E, 0)
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
redis.call('ZREMRANGEBYSCORE', P, '-inf', now)
-- Free permits go to the oldest live tickets, here, in the script: no barging, and the owner
-- is told on its wake-up channel (a lost message is found by its next heartbeat).
local function fill()
  if recovering then return end
  local free = limit - redis.call('ZCARD', H)
  while free > 0 do
    local head = redis.call('ZRANGE', Q, 0, 0)[1]
    if not head then return end
    redis.call('ZREM', Q, head)
    redis.call('ZREM', X, head)
    redis.call('ZADD', H, now + lease, head)
    redis.call('PUBLISH', wake .. string.match(head, '^(.*):'), head)
    free = free - 1
  end
end
-- Every key lives 2 leases past the last call of any process: a gate nobody uses leaves
-- nothing (the epoch lives 30 days: it is how a restart is told from a first use).
local function touch()
  for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], 2 * lease) end
  redis.call('PEXPIRE', E, 2592000000)
end
local function enqueue(id)
  redis.call('ZADD', Q, redis.call('INCR', S), id)
  redis.call('ZADD', X, now + ttl, id)
end
`;

/**
 * Every script's ARGV starts: limit, leaseMs, ttlMs, wakePrefix, known (1 when this process
 * used the gate before), recoverMs. ACQUIRE(..., processId, id): a lease now if a permit is
 * free and nobody waits, else a ticket at the tail. Returns `{granted 0|1, held, queued,
 * processes}`.
 */
const ACQUIRE = `${PRELUDE}
local proc, id = ARGV[7], ARGV[8]
fill()
local granted = 0
if not recovering and redis.call('ZCARD', Q) == 0 and redis.call('ZCARD', H) < limit then
  redis.call('ZADD', H, now + lease, id)
  granted = 1
else
  enqueue(id)
end
redis.call('ZADD', P, now + ttl, proc)
touch()
return {granted, redis.call('ZCARD', H), redis.call('ZCARD', Q), redis.call('ZCARD', P)}
`;

/**
 * RELEASE(..., id...): gives back leases and withdraws
 * tickets (a cancelled waiter), then hands freed permits on. Returns `{held, queued}`.
 */
const RELEASE = `${PRELUDE}
for i = 7, #ARGV do
  local id = ARGV[i]
  redis.call('ZREM', H, id)
  redis.call('ZREM', Q, id)
  redis.call('ZREM', X, id)
end
fill()
touch()
return {redis.call('ZCARD', H), redis.call('ZCARD', Q)}
`;

/**
 * HEARTBEAT(..., processId, nLeases, lease id..., ticket id...): renews this process's leases and tickets. A lease Redis no longer has
 * (expired during a stall, or Redis restarted empty) is registered again — its request is
 * still running, so it counts against the cap — and reported as lost. A ticket already granted
 * is reported (its wake-up was lost); a vanished ticket joins the tail again.
 * Returns `{lost ids, granted ids, held, queued, processes}`.
 */
const HEARTBEAT = `${PRELUDE}
local proc, n = ARGV[7], tonumber(ARGV[8])
local lost, granted = {}, {}
for i = 9, 8 + n do
  local id = ARGV[i]
  if not redis.call('ZSCORE', H, id) then lost[#lost + 1] = id end
  redis.call('ZADD', H, now + lease, id)
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
  end
end
redis.call('ZADD', P, now + ttl, proc)
fill()
touch()
return {lost, granted, redis.call('ZCARD', H), redis.call('ZCARD', Q), redis.call('ZCARD', P)}
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
