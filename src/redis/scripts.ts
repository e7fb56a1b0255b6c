/**
 * The Lua scripts behind a shared gate: every state change is one of these, atomic in Redis,
 * on Redis `TIME` (never a client clock), touching only the gate's keys (one hash slot).
 *
 * Keys of a gate, all under one `{...}` hash tag:
 * - `H` holders: ZSET lease unit -> expiry (ms, Redis time), one member per unit of the cap, so
 *   `ZCARD H` is the units held: a lease of weight w is its id plus `<id>#2` … `<id>#<w>`, all
 *   added, renewed, expired and removed together. A ticket granted by a release gets a short
 *   claim window; its owner's claim (or heartbeat) turns it into a full lease.
 * - `Q` tickets: ZSET ticket id -> arrival sequence (FIFO)
 * - `S` arrival sequence counter
 * - `P` processes: ZSET process id -> end of its liveness window (renewed by its heartbeat): a
 *   ticket lives while its owner does, so a heartbeat never renews tickets one by one, and a
 *   dead process's tickets are skipped, never granted. An entry stays a lease past its window,
 *   so `ZCARD P` (the fleet size behind the local share) forgives a late heartbeat.
 * - `M` meta, a hash: `v` the layout version ({@link LAYOUT}), `c` the cap (the first process's,
 *   changed only by SETCAP), `r` the end of a recovery window (ms) or 0, `h` 1 while `H` holds
 *   leases. Missing while a process that used the gate before calls means Redis lost the gate's
 *   state (a restart, a flush, an eviction): for one lease nobody is granted, so every live
 *   holder can register its lease again first. Missing for a process that never used the gate
 *   (a first use, or a loss it cannot tell from one): nobody is granted for `firstUseWaitMs`.
 *   Either way every process of the gate is told at once on `<wake prefix>lost` and registers
 *   its leases again without waiting for its heartbeat. `h` 1 with `H` gone (evicted by an
 *   `allkeys-*` policy) opens the whole lease's window too. A `v` other than ours (another
 *   hostgate version or shared-gate mode on the same prefix) makes every script refuse before
 *   it reads or writes anything else; an `M` with a cap and no `v` is the layout of the release
 *   before versions, the same keys and members as `fifo/1` for weight-1 permits: it is adopted
 *   (its `v` written) rather than refused, so a rolling upgrade from it needs no new prefix.
 *   `lr` is the Redis time (ms) of the last script run on the gate, every script's first write:
 *   a gap longer than a heartbeat and a command timeout, or `lr` ahead of the clock by that much,
 *   is Redis away or its clock stepped, and time is taken as frozen during it (PRELUDE, `gap`).
 * Wake-ups: `SPUBLISH` of a granted ticket's id on `<prefix>{<name>}:wake:<owner process id>`, a
 * shard channel in the gate's slot (on a Cluster it stays on the gate's node).
 * A ticket and the lease it becomes share one id, `<process id>:<n>`, `<process id>:<n>/<w>` for
 * a weight w > 1: the owner and the weight are in the id, so no script needs another key for them.
 *
 * Every Redis-time timestamp of a gate (what an emulated clock step must move, all by the same
 * ms; issue 32's campaign does so with one script): the scores of `H` (lease and claim
 * expiries) and of `P` (liveness ends); in `M`: `r` (recovery window end, 0 for none), `t`
 * (GCRA's timestamp, fractional ms), `lr` (last run), and the time after the `@` of `n`
 * (`<ticket>@<ms>`, when the head was told its slot; only used to tell it again, never to
 * grant). `Q`'s scores are arrival sequence numbers, not times. A grant's age (for a rate's
 * late grants) is read from its `H` score less the claim window, so it moves with `H`.
 *
 * `H` and `Q` have no TTL (an empty sorted set is deleted by Redis itself), so a `volatile-*`
 * eviction policy can never drop a lease or a ticket; `S`, `P` and `M` live 30 days past the
 * last heartbeat, and losing `M` to eviction opens a recovery window rather than a gap.
 */
import { createHash } from 'node:crypto';
import { LATE_FLOOR_MS } from './shared-rate.js';

/** The key layout these scripts read and write, stored in each gate's meta hash as `v`. */
export const LAYOUT = 'fifo/1';
/**
 * The layout of a gate with a request rate: `fifo/1` plus the GCRA state in the meta hash. A
 * process without a rate (or of a release before rates) is refused on it, so no process grants
 * past the rate unknowingly; a process with a rate adopts a `fifo/1` gate (same keys otherwise).
 */
export const RATE_LAYOUT = 'fifo/1+rate';
/**
 * "Redis lost this gate's state": the message, and the suffix of the gate's channel that carries
 * it (`<prefix>{<name>}:wake:lost`); never a ticket id, which holds a `:`.
 */
export const LOST = 'lost';
/** The error reply of a script that found another layout: this prefix, then the layout found. */
export const LAYOUT_REFUSED = 'HOSTGATE_LAYOUT ';

// Counts are kept in Lua variables rather than asked again: every call inside a script is
// Redis work that all processes wait behind. Lists of ids go to Redis in one variadic call
// (ZMSCORE, ZADD), in chunks that Lua's unpack() takes: a heartbeat's cost does not grow in
// calls with the number of leases and tickets it carries.
const PRELUDE = `
local H, Q, S, P, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, live, wake = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local claim = tonumber(ARGV[7])
-- The calling process, for the scripts that name it (ACQUIRE, HEARTBEAT): a grant to it needs
-- no wake-up, it learns of it from this reply or its next heartbeat.
local caller = nil
-- The caller's rate, 'limit:per:burst', or '' for a gate without one.
local rateArg = ARGV[8]
local RATED = rateArg ~= ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The rate's clock, to the microsecond: GCRA spaces calls by fractions of a ms.
local nowf = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local META_TTL = 2592000000
local CHUNK = 1000
local LAYOUT = RATED and '${RATE_LAYOUT}' or '${LAYOUT}'
local meta = redis.call('HMGET', M, 'c', 'r', 'v', 'h', 't', 'b', 'rt', 'n', 'lr')
-- Another layout's gate (another version or mode on this prefix): refused before any write.
-- A rated process adopts a gate kept without a rate; never the other way round.
local function foreignLayout(found)
  return found and found ~= LAYOUT and not (RATED and found == '${LAYOUT}')
end
if foreignLayout(meta[3]) then return redis.error_reply('${LAYOUT_REFUSED}' .. meta[3]) end
-- The Redis time of the last script run on the gate. Written first, and it is a write Redis
-- refuses out of memory (noeviction): a script that runs out of memory fails here, before it
-- has changed anything (it must not reap leases and then fail to count its own).
local lastRun = tonumber(meta[9])
redis.call('HSET', M, 'lr', now)
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
  redis.pcall('SPUBLISH', wake .. '${LOST}', '${LOST}')
end
local limit = tonumber(meta[1])
local recoveryEnds = tonumber(meta[2] or 0)
-- Redis lost leases that may still be held: nobody is granted for windowMs, while every live
-- process of the gate is told (SPUBLISH on the gate's 'lost' channel) to register its leases
-- again at once, not at its next heartbeat.
local function recover(windowMs)
  recoveryEnds = math.max(recoveryEnds, now + windowMs)
  redis.call('HSET', M, 'r', recoveryEnds)
  redis.pcall('SPUBLISH', wake .. '${LOST}', '${LOST}')
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
-- GCRA (src/gate/rate.ts): one timestamp, the theoretical arrival time \`tat\`. The rate lives
-- in Redis like the cap: the first process's ('rt'), changed only by SETRATE. \`backlog\` is
-- the cost queued (what a joining ticket's slot comes after). A missing 'tat' starts full.
local rateStr, T, reach, rateBurst = '', 0, 0, 0
local tat, backlog = 0, 0
local tat0, backlog0 = nil, nil
if RATED then
  rateStr = meta[7] or rateArg
  if not meta[7] then redis.call('HSET', M, 'rt', rateStr) end
  local rl, rp, rb = string.match(rateStr, '^([^:]+):([^:]+):([^:]+)$')
  T = tonumber(rp) / tonumber(rl)
  rateBurst = tonumber(rb)
  reach = (rateBurst + 1) * T
  tat0 = tonumber(meta[5]) or 0
  backlog0 = tonumber(meta[6]) or 0
  tat, backlog = tat0, backlog0
end
-- A rated grant is good for its slot only: claimed (or its answer read) more than this after
-- it was granted, it would be sent on top of the calls granted since (a stalled process's
-- grants, all sent when it wakes). lateMs in shared-rate.ts is the same bound.
local lateMs = RATED and math.max(${LATE_FLOOR_MS}, T) or 0
-- Units of the rate a ticket takes: its cost, 1 unless the id carries ~<cost>.
local function costOf(id)
  return tonumber(string.match(id, '~([^/]+)')) or 1
end
-- Ms from now until \`cost\` conforms after \`ahead\` queued before it (<= 0: now).
local function slotWait(cost, ahead)
  return math.max(tat, nowf) - nowf + (ahead + cost) * T - reach
end
local function takeSlot(cost)
  tat = math.max(tat, nowf) + cost * T
end
-- The head whose permit is free waits for its slot: '<ticket>@<ms>' goes back in the reply, and
-- on the owner's wake-up channel once per head and slot (a later, earlier slot is told again):
-- the owner claims it then on a timer of its own, as no release may come to hand it on.
local hint = ''
local function hintHead(head, owner, wait)
  local at = nowf + wait
  hint = head .. '@' .. math.ceil(wait)
  local toldHead, toldAt = string.match(meta[8] or '', '^(.*)@(.*)$')
  if toldHead ~= head or at < tonumber(toldAt) - 1 then
    meta[8] = head .. '@' .. string.format('%.17g', at)
    redis.call('HSET', M, 'n', meta[8])
    redis.pcall('SPUBLISH', wake .. owner, hint)
  end
end
local held = stored - redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
local queued = redis.call('ZCARD', Q)
-- Variadic calls in chunks: fn(key, chunk of list) for each chunk, results concatenated.
local function chunked(cmd, key, list, stride)
  local out = {}
  local step = CHUNK * (stride or 1)
  for i = 1, #list, step do
    local part = redis.call(cmd, key, unpack(list, i, math.min(#list, i + step - 1)))
    if type(part) == 'table' then
      for _, v in ipairs(part) do out[#out + 1] = v end
    end
  end
  return out
end
-- Units of the cap a ticket or lease id stands for: its weight, 1 unless the id ends in /<w>.
local function weightOf(id)
  return tonumber(string.match(id, '/(%d+)$')) or 1
end
-- The members of H that hold lease id's units: the id itself, then <id>#2 … <id>#<w>.
local function unitsOf(id)
  local units = {id}
  for k = 2, weightOf(id) do units[k] = id .. '#' .. k end
  return units
end
-- Appends (score, member) pairs for every unit of lease id to args, for one ZADD.
local function addUnits(args, score, id)
  for _, unit in ipairs(unitsOf(id)) do
    args[#args + 1] = score
    args[#args + 1] = unit
  end
end
local function grantUnits(id, score)
  local args = {}
  addUnits(args, score, id)
  chunked('ZADD', H, args, 2)
  held = held + weightOf(id)
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
-- A rated grant that reached its process too late to go in its slot: its units go back and its
-- ticket to the head of the queue, where it waits for a slot of now; the old slot stays spent
-- (it was counted when granted; what matters is that nobody sends in it now).
local function retake(id)
  held = held - redis.call('ZREM', H, unpack(unitsOf(id)))
  local first = redis.call('ZPOPMIN', Q)
  if first[2] then redis.call('ZADD', Q, first[2], first[1]) end
  redis.call('ZADD', Q, first[2] and tonumber(first[2]) - 1 or 0, id)
  queued = queued + 1
  backlog = backlog + costOf(id)
end
local function enqueue(ids)
  local last = redis.call('INCRBY', S, #ids)
  local args = {}
  for i, id in ipairs(ids) do
    args[#args + 1] = last - #ids + i
    args[#args + 1] = id
  end
  chunked('ZADD', Q, args, 2)
  queued = queued + #ids
  if RATED then
    for _, id in ipairs(ids) do backlog = backlog + costOf(id) end
  end
end
local function alive(proc)
  redis.call('ZADD', P, now + live, proc)
end
-- Keeps meta's 'h' (the lease set holds leases) true to the lease set, written only when it
-- flips: what lets a later script tell an evicted lease set from an emptied one.
local function markHolders()
  local holding = held > 0
  if holding ~= (meta[4] == '1') then redis.call('HSET', M, 'h', holding and 1 or 0) end
  if RATED then
    if queued == 0 then backlog = 0 end
    if tat ~= tat0 or backlog ~= backlog0 then
      redis.call('HSET', M, 't', string.format('%.17g', tat), 'b', string.format('%.17g', backlog))
    end
  end
end
-- Every reply ends with the rate's state: the head's hint, ms until a call of cost 1 would
-- conform (ignoring the queue), the cost queued, and the rate Redis holds ('' without one).
local function withRate(reply)
  reply[#reply + 1] = hint
  reply[#reply + 1] = RATED and math.max(0, math.ceil(slotWait(1, 0))) or 0
  reply[#reply + 1] = string.format('%.17g', backlog)
  reply[#reply + 1] = rateStr
  return reply
end
`;

/**
 * Every script's ARGV starts: cap (the caller's, used only if Redis has none), leaseMs, liveMs
 * (a process's liveness window), wakePrefix (the gate's wake-up channels), known (1 when this
 * process used the gate before), firstUseWaitMs, claimMs, rate (`limit:per:burst` of the
 * caller's, used only if Redis has none; '' for a gate without a rate). Held and queued counts
 * are in units of the cap. Every reply ends with the rate's state (`withRate`): `hint`
 * (`<ticket>@<ms>`: the head whose permit is free gets its slot in ms; '' if none), `nextSlotMs`,
 * `backlog` (cost units queued) and the rate Redis holds.
 *
 * ACQUIRE(..., processId, id, register, deadlineMs): a lease now if its units are free, its
 * rate slot has come and nobody waits, else a ticket at the tail (its owner is then recorded as
 * live: that is what keeps the ticket); `register` 1 also records the process and asks for the
 * fleet size. Returns `{granted, held, queued, processes, cap, recoveryMs, retryMs, ...rate}`:
 * granted 1 (a lease), 0 (a ticket), -1 (no ticket: the id's weight is above the cap Redis
 * holds), -2 (no ticket: its rate slot, after the cost queued ahead, comes after its deadline,
 * `retryMs` from now), -3 (no ticket: its cost is above the burst + 1 Redis holds, `retryMs`
 * that bound); processes -1 when not asked, recoveryMs what is left of a recovery window.
 */
const ACQUIRE = `${PRELUDE}
local proc, id, register, deadline = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
caller = proc
fill()
local granted, retry = 0, 0
local cost = costOf(id)
if weightOf(id) > limit then
  granted = -1
elseif RATED and cost > rateBurst + 1 then
  granted, retry = -3, rateBurst + 1
elseif RATED and slotWait(cost, queued == 0 and 0 or backlog) > deadline then
  granted, retry = -2, math.max(1, math.ceil(slotWait(cost, queued == 0 and 0 or backlog)))
elseif not recovering and queued == 0 and held + weightOf(id) <= limit
    and (not RATED or slotWait(cost, 0) <= 0) then
  grantUnits(id, now + lease)
  if RATED then takeSlot(cost) end
  granted = 1
else
  enqueue({id})
  alive(proc)
  -- Alone at the head with a free permit, it waits for its slot: told when, in the reply.
  if RATED and queued == 1 then fill() end
end
local processes = -1
if register == '1' then
  if granted == 1 then alive(proc) end
  processes = redis.call('ZCARD', P)
end
markHolders()
return withRate({granted, held, queued, processes, limit, recovering and recoveryEnds - now or 0, retry})
`;

/**
 * RELEASE(..., id...): gives back leases and withdraws tickets (a cancelled waiter), then
 * hands freed permits on. Returns `{held, queued, cap, ...rate}`.
 */
const RELEASE = `${PRELUDE}
local ids, units = {}, {}
for i = 9, #ARGV do
  ids[#ids + 1] = ARGV[i]
  for _, unit in ipairs(unitsOf(ARGV[i])) do units[#units + 1] = unit end
end
if RATED and queued > 0 then
  -- The withdrawn tickets' cost leaves the backlog.
  local inQ = chunked('ZMSCORE', Q, ids)
  for i, id in ipairs(ids) do
    if inQ[i] then backlog = backlog - costOf(id) end
  end
end
for i = 1, #ids, CHUNK do
  queued = queued - redis.call('ZREM', Q, unpack(ids, i, math.min(#ids, i + CHUNK - 1)))
end
for i = 1, #units, CHUNK do
  held = held - redis.call('ZREM', H, unpack(units, i, math.min(#units, i + CHUNK - 1)))
end
fill()
markHolders()
return withRate({held, queued, limit})
`;

/**
 * HEARTBEAT(..., processId, nLeases, lease id..., ticket id...): renews this process's leases
 * and its liveness (which keeps its tickets). A lease Redis no longer has (expired during a
 * stall, or Redis restarted empty) is registered again — its request is still running, so it
 * counts against the cap — and reported as lost. A ticket already granted is claimed and
 * reported (its wake-up was lost); a vanished ticket joins the tail again and is reported (its
 * waiter may have left while this heartbeat was on its way: then the process withdraws it
 * again). A fixed number of calls however many ids it carries. Returns `{lost ids, granted
 * ids, held, queued, processes, requeued ids, cap, ...rate}`.
 */
const HEARTBEAT = `${PRELUDE}
local proc, n = ARGV[9], tonumber(ARGV[10])
caller = proc
local lost, granted, requeued = {}, {}, {}
local leases, tickets = {}, {}
for i = 11, 10 + n do leases[#leases + 1] = ARGV[i] end
for i = 11 + n, #ARGV do tickets[#tickets + 1] = ARGV[i] end
local renew = {}
if #leases > 0 then
  local scores = chunked('ZMSCORE', H, leases)
  for i, id in ipairs(leases) do
    if not scores[i] then
      lost[#lost + 1] = id
      held = held + weightOf(id)
    end
    addUnits(renew, now + lease, id)
  end
end
if #tickets > 0 then
  local inH = chunked('ZMSCORE', H, tickets)
  local inQ = chunked('ZMSCORE', Q, tickets)
  for i, id in ipairs(tickets) do
    if inH[i] and RATED then
      -- A rated grant is claimed by its owner (CLAIM), which checks it is not late; one that
      -- is late already goes back to the head of the queue.
      if now - (tonumber(inH[i]) - claim) > lateMs then
        retake(id)
      else
        granted[#granted + 1] = id
      end
    elseif inH[i] then
      granted[#granted + 1] = id
      addUnits(renew, now + lease, id)
    elseif not inQ[i] then
      requeued[#requeued + 1] = id
    end
  end
  if #requeued > 0 then enqueue(requeued) end
end
if #renew > 0 then chunked('ZADD', H, renew, 2) end
alive(proc)
redis.call('ZREMRANGEBYSCORE', P, '-inf', now - lease)
fill()
redis.call('PEXPIRE', S, META_TTL)
redis.call('PEXPIRE', P, META_TTL)
redis.call('PEXPIRE', M, META_TTL)
markHolders()
return withRate({lost, granted, held, queued, redis.call('ZCARD', P), requeued, limit})
`;

/**
 * CLAIM(..., id, late): a wake-up is a hint, never a grant: the owner asks Redis whether its
 * ticket was granted and, if so, turns the claim window into a full lease. On a gate with a rate
 * it first hands on what is due (its owner claims on a timer when the head's slot comes, with no
 * release to do it), and a grant claimed more than `lateMs` after it was made, or one whose
 * owner read it late (`late` 1: its ACQUIRE or CLAIM answer came back after `lateMs`), goes back
 * to the head of the queue for a slot of now, once per waiter (`late` 2: taken again before). Returns `{granted 0|1, held, queued, cap, ...rate}`.
 */
const CLAIM = `${PRELUDE}
local id, late = ARGV[9], ARGV[10]
if RATED then
  -- Granted by a release (a claim window: its score is the grant's time + claim) and claimed
  -- too late to go in its slot, or the owner read its grant's answer too late (late '1'): the
  -- grant is taken again, at the head of the queue. Once per waiter: late '2' says it was
  -- taken again before (an owner whose every claim is late must not spend a slot on each).
  local score = redis.call('ZSCORE', H, id)
  if score and late ~= '2' and (late == '1' or now - (tonumber(score) - claim) > lateMs) then
    retake(id)
  end
  fill()
end
local granted = 0
if redis.call('ZSCORE', H, id) then
  local renew = {}
  addUnits(renew, now + lease, id)
  chunked('ZADD', H, renew, 2)
  granted = 1
end
markHolders()
return withRate({granted, held, queued, limit})
`;

/**
 * SETCAP(..., cap): the explicit change of a gate's cap (a rolling deploy's), then hands any
 * permits it freed on. Returns `{held, queued, cap, ...rate}`.
 */
const SETCAP = `${PRELUDE}
limit = tonumber(ARGV[9])
redis.call('HSET', M, 'c', limit)
fill()
markHolders()
return withRate({held, queued, limit})
`;

/**
 * SETRATE(..., rate): the explicit change of a gate's rate (`limit:per:burst`) for every
 * process; the timestamp stays. Returns `{held, queued, cap, ...rate}`.
 */
const SETRATE = `${PRELUDE}
rateStr = ARGV[9]
redis.call('HSET', M, 'rt', rateStr)
local rl, rp, rb = string.match(rateStr, '^([^:]+):([^:]+):([^:]+)$')
T = tonumber(rp) / tonumber(rl)
rateBurst = tonumber(rb)
reach = (rateBurst + 1) * T
fill()
markHolders()
return withRate({held, queued, limit})
`;

/**
 * SETTLE(..., units): calls charged their cost and really used `units` more (or, negative,
 * fewer): the timestamp moves by `units × T`. Extra units are taken as of now (a debt the next
 * calls wait out); a refund moves it back, never below now, and may let the head go. Returns
 * `{held, queued, cap, ...rate}`.
 */
const SETTLE = `${PRELUDE}
local units = tonumber(ARGV[9])
if RATED then
  if units > 0 then
    tat = math.max(tat, nowf) + units * T
  elseif tat > nowf then
    tat = math.max(nowf, tat + units * T)
  end
  fill()
end
markHolders()
return withRate({held, queued, limit})
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
  claim: script('claim', CLAIM),
  setCap: script('setCap', SETCAP),
  setRate: script('setRate', SETRATE),
  settle: script('settle', SETTLE),
} as const;

/** The key suffixes, in the order every script declares them. */
export const KEY_SUFFIXES = ['h', 'q', 's', 'p', 'm'] as const;
