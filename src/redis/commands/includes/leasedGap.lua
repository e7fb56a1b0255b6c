--[[
  Time that passed unobserved (issue 32): a gap since the last run (Redis away) or a step of
  Redis's clock. Every stored Redis-time timestamp of the gate moves by the gap, as if time had
  stood still; `learn` asks for a recovery window when Redis came back from an outage.
  Uses (leasedRefresh-4.lua): L, M, meta, cap, now, lease, lastRun, ends, walked, seen, elapsed,
  down, downMs, tol, gapMs; parse and format (leasedEntry). Sets: shift, learn, behind,
  restarted, rateEnds (a learning window of the rate alone), ends, walked.
]]
-- Time that passed unobserved (issue 32): Redis away (stopped, unreachable, refusing writes on
-- OOM, restarted with its data), or its clock stepped. Every stored Redis-time timestamp of the
-- gate (entry expiries and rate hold ends, M.r, M.t; M.lr is set below) moves by the gap since
-- the last run, as if time had stood still: no entry expires on it, a dead process is reaped a
-- lease later. Seen: (1) a caller whose refreshes failed meanwhile, and a gap since the last run
-- longer than a healthy fleet leaves while it refreshes (gapMs); (2) a caller whose monotonic
-- clock saw less time pass since its last answer than Redis's did (a forward step, or a command
-- Redis ran long after it was sent); (3) a caller that saw a Redis time later than the last run
-- (the stored state was moved back: the campaign's emulated step); (4) Redis time before the last
-- run: the clock went back, and every stored time moves back with it (a dead process's lease is
-- not stretched by the step).
-- Not time that passed unobserved: one process cut off from Redis while the others were not
-- (its link, its host's network). Its command can run long after it was sent (held on the way,
-- or queued by its client until it reconnected), and its refreshes failed, while Redis ran the
-- others' all along: the gap since the last run is only the fleet's quiet between refreshes.
-- So (2) counts a command's lateness as a step only as far as that gap explains it (a step of
-- S leaves a gap of S at least), and (1) takes failed refreshes for Redis away only when Redis
-- was silent for about as long as they failed (downMs: a process back from its own partition
-- had failed for seconds; fault campaign, replica-partition, seed 626: every such return
-- shifted the fleet's times by the quiet gap, 0.8-1.0 s, holding the rate's moved shares that
-- much longer).
-- A restart, or a failover to another server: Redis's run_id (INFO server) is not the one the
-- state was last written under (M.ri), so the state may be older than what the processes hold
-- (a dump's, a lagging replica's) and nobody grows for a lease (learn), whether or not any
-- refresh failed meanwhile: a process whose last answer predates the dump, refreshing first,
-- sees neither its own lost writes nor a state behind its answer (stop 52's open race). Read
-- once the gate is quiet for 5 ms (a restart is quiet longer), so a busy gate pays nothing;
-- else 2.6 µs of Redis CPU (INFO 2.3 µs; a plain find, not a pattern over the text: 3.9 µs).
local restarted, identified = false, false
local quiet = lastRun > 0 and now - lastRun or 5
if cap and (not meta[25] or quiet < 0 or quiet >= 5) then
  local info = redis.pcall('INFO', 'server')
  local at = type(info) == 'string' and string.find(info, 'run_id:', 1, true)
  local rid = at and string.match(info, '^%x+', at + 7)
  if rid then
    identified = true
    restarted = meta[25] and rid ~= meta[25]
    if rid ~= meta[25] then redis.call('HSET', M, 'ri', rid) end
  end
end
-- A process whose fallback may grant past what Redis counts for it while Redis is away
-- (ARGV[35], bits: 1 the cap's, `onStoreError: 'local'` with a `localLimit`; 2 the rate's,
-- 'local' with a rate, a share of `limit / processes`) keeps M.ll (the cap's) or M.lq (the
-- rate's), in Redis ms, at least a lease ahead.
local overrun, rateOverrun = tonumber(meta[26] or 0) or 0, tonumber(meta[27] or 0) or 0
local bits = tonumber(ARGV[35] or 0) or 0
if bits % 2 == 1 and overrun < now + lease then
  redis.call('HSET', M, 'll', string.format('%d', now + 2 * lease))
end
if bits >= 2 and rateOverrun < now + lease then
  redis.call('HSET', M, 'lq', string.format('%d', now + 2 * lease))
end
-- The end of a learning window of the rate alone (M.rq, Redis ms): back from an outage in which
-- only the rate's fallback sent past its count, the cap's blocks are what Redis counts.
local rateEnds = tonumber(meta[28] or 0) or 0
local shift, learn, behind, rateLearn = 0, restarted, false, false
if cap and lastRun > 0 then
  local gap = now - lastRun
  if gap < 0 then
    shift = gap
  elseif gap > tol then
    local late = seen > 0 and now - seen - elapsed or 0
    -- (3): the state is older than an answer this caller had: Redis back from a dump older than
    -- its state (the writes since lost) as well as a step.
    behind = seen > 0 and seen - lastRun > tol
    local stepped = seen > 0 and late > tol and late <= gap + tol or behind
    local away = down and gap > gapMs and downMs <= gap + tol
    if stepped or away or restarted then shift = gap end
    -- Back from older data (above, and leasedRefresh-4.lua, Lost writes). Back from an outage
    -- of the same server, its state is what the processes left: each granted within the block
    -- Redis counts for it (a failed refresh shrinks the block to what was held when it left),
    -- unless a fallback granted past it (M.ll live when the outage began) or the server cannot
    -- be told (INFO refused): then nobody grows for a lease. A lease after every outage kept a
    -- unit between processes idle that long (fault campaign, leased seed 134065: cap 1 over 4,
    -- the partner at 0 for 5.2 s after 2.2 s of OOM).
    learn = restarted or behind or away and (overrun > lastRun or not identified)
    -- Only a rate's fallback sent past its count: a window of the rate alone (leasedShare.lua).
    rateLearn = away and not learn and rateOverrun > lastRun
  end
end
if shift ~= 0 then
  local all = redis.call('HGETALL', L)
  local moved = {}
  for i = 1, #all, 2 do
    local id = all[i]
    if id ~= '_s' and id ~= '_r' then
      local e, b, h, w, rs, rk, ru, rw, nd, sn, tk, ow, rn, rc, rl, sq = parse(all[i + 1])
      moved[#moved + 1] = id
      moved[#moved + 1] = format(e + shift, b, h, w, rs, rk, ru > 0 and ru + shift or 0, rw, nd,
        sn > 0 and sn + shift or 0, tk, ow, rn, rc, rl, sq)
    end
  end
  for i = 1, #moved, 1000 do
    redis.call('HSET', L, unpack(moved, i, math.min(#moved, i + 999)))
  end
  if ends > 0 then ends = ends + shift end
  if rateEnds > 0 then
    rateEnds = rateEnds + shift
    redis.call('HSET', M, 'rq', rateEnds)
  end
  if walked > 0 then walked = walked + shift end
  -- A walk split over refreshes kept heads' sinces of before: it starts again.
  meta[18] = nil
  redis.call('HDEL', M, 'wc', 'wa', 'wh', 'wr', 'wf', 'wl', 'wq', 'wg', 'wo')
  redis.call('HSET', M, 'r', ends, 't', walked)
  -- The oldest unchecked `owed` tell (the owed no-show, leasedWalk.lua): moved with the entries.
  if meta[22] then
    meta[22] = tonumber(meta[22]) + shift
    redis.call('HSET', M, 'ot', string.format('%d', meta[22]))
  end
  -- The latest next slot of a rate share given back (M.cs, leasedShare.lua): moved with them.
  if meta[24] then
    meta[24] = tonumber(meta[24]) + shift
    redis.call('HSET', M, 'cs', string.format('%d', meta[24]))
  end
  -- The last floors met (the cap's, the rate's) are named by their heads' sinces: moved with them.
  for i, field in pairs({ [15] = 'f', [17] = 'rf' }) do
    local ms, mid = string.match(meta[i] or '', '^(%d+) (.+)$')
    if ms then
      meta[i] = (tonumber(ms) + shift) .. ' ' .. mid
      redis.call('HSET', M, field, meta[i])
    end
  end
end
if rateLearn then
  rateEnds = now + lease
  redis.call('HSET', M, 'rq', rateEnds)
end
