--[[
  Time that passed unobserved (issue 32): a gap since the last run (Redis away) or a step of
  Redis's clock. Every stored Redis-time timestamp of the gate moves by the gap, as if time had
  stood still; `learn` asks for a recovery window when Redis came back from an outage.
  Uses (leasedRefresh-4.lua): L, M, cap, now, lastRun, ends, walked, seen, elapsed, down,
  downMs, tol, gapMs; parse and format (leasedEntry). Sets: shift, learn, behind, ends, walked.
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
local shift, learn, behind = 0, false, false
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
    if stepped or away then shift = gap end
    -- Back from an outage, or from older data: a restart may have brought back older data than
    -- the processes hold (stop 52: a process whose own entry is older, refreshing after one whose
    -- is not, found nobody learning; leasedRefresh-4.lua, Lost writes).
    learn = away or behind
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
