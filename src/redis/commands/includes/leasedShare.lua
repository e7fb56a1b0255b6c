--[[
  The rate share of this refresh (a gate with a rate): the fair target, grown slowly, within what
  the others' counted shares leave; a self-cut process kept at what it sends; the hold a cut
  keeps counted (countedOf), and room left for its edge.
  Uses (leasedRefresh-4.lua): RATED, recovering, rateEnds, lostWrites, closing, selfcut, proc, now, n, rused, rwants,
  rneed, since, holdMs, cap, rlimit, rper, rlevel, rtop, rmet, rsum, rbefore, ownShare, ownCounted,
  ownUntil, ownLead, rlead, rleadMs, meta[21] (M.pk), meta[24] (M.cs); burstOf, edgeOf, countedOf (leasedCounted),
  floorMet (leasedFloor), parked.
  Sets: share, rtarget, rsum, rcOwn, counted, untl and lead (the entry's rate hold); takes a parked
  place (M.pk), and rslot (ms until the closed process's next slot, or a share's given back:
  M.cs, from rleadMs); rlearning (a learning window of the cap and rate, or of the rate alone).
]]
local rlearning = recovering or rateEnds > now
if RATED and not rlearning and not closing and ownShare == 0 and rwants > 0
  and (meta[21] or '') ~= '' then
  -- Its first share: it takes the place of a share a clean close parked (the walk's level kept
  -- it), the oldest one, and goes on from that process's pace: its first call no sooner than
  -- the closed process's next slot (a fresh pace sent at once, and a window held the closed
  -- process's last calls and the newcomer's first: 6 at a promise of 5, campaign seed 92287).
  local _, items = parked()
  local at = tonumber(string.match(items[1] or '', '^%d+:%d+:(%d+)$') or 0)
  -- (At most a window: one set before Redis's clock stepped back holds no one back longer.)
  if at > now then rslot = math.min(at - now, rper) end
  table.remove(items, 1)
  meta[21] = table.concat(items, ' ')
  if #items > 0 then redis.call('HSET', M, 'pk', meta[21]) else redis.call('HDEL', M, 'pk') end
end
if RATED then
  -- Its costliest head's need, if its floor was met at the walk: a burst share below the head's
  -- cost - 1 never sends it (issue 32: the cost stall, a fleet of such processes at 0).
  local rfloor = 0
  if rlearning then
    -- Learning (leasedRefresh-4.lua): nobody grows; a process keeps what it sends, and the
    -- share Redis still counts for it (as the cap's block), whatever it wants now. Kept at what
    -- it sent, a share lowered in the window stayed there until its end: back from an outage
    -- under 'reject' nobody had sent, and a rated fleet sent nothing for a lease after Redis
    -- answered again (campaign seed 117042: 3.2 s).
    -- Back from a dump older than its last write (lostWrites): no more than it sends at.
    rtarget = lostWrites and rused or math.max(rused, ownShare)
  elseif rlevel < 0 then
    rtarget = rwants
  else
    rfloor = math.min(rneed, rwants)
    if not floorMet(rfloor, since, proc, rmet) then rfloor = 0 end
    rtarget = math.min(rwants, math.max(rfloor, rlevel + ((rtop ~= '' and proc <= rtop) and 1 or 0)))
  end
  -- Slow start: a share grows to the equal split at once, past it at most twofold a refresh.
  -- The level is as of the last walk, and processes that just turned busy are not in it yet:
  -- the first of them would take the whole rate and the others wait for its hold to end.
  -- (The target answered is the fair one: a process below it asks again soon.) The split is
  -- among the processes that can send at once: no more than the cap's units (with fewer units
  -- than processes, one that holds none asks for no rate, src/redis/leased-rate-share.ts, and
  -- a unit's new holder took a refresh per doubling to reach the rate).
  local grow = rtarget
  if not rlearning then
    local split = math.floor(rlimit / math.max(1, math.min(n, cap)))
    grow = math.min(rtarget, math.max(1, 2 * ownShare, split, rfloor))
  end
  local rothers = rsum - rbefore
  local avail = rlimit - rothers
  share = math.max(0, math.min(grow, avail))
  if selfcut and not closing and not rlearning and rused > share and rused <= math.min(avail, ownShare) then
    -- Not cut here: the process sends at rused until this answer reaches it, so a cut made here
    -- would count rused a command timeout longer. It is answered its target below its share,
    -- cuts itself at once and says so in a refresh right away, and is counted at the cut then.
    share = rused
  end
  -- The hold (countedOf): hk in full until hu - per, then the edge until hu. Sent at until
  -- this answer reaches the process (one command timeout): a share it reports above the new
  -- one. For a window: a share that went down (its TAT was set at the faster pace: one call
  -- ahead of the slower one, and the burst the faster one allowed). A share that goes up needs
  -- none: its first call after the change still waits out the slower pace. An earlier hold
  -- keeps its own end.
  local hk, hu, hl = 0, 0, 0
  if not closing then
    if ownUntil > now then hk, hu, hl = ownCounted, ownUntil, ownLead end
    if rused > share then hk, hu = math.max(hk, rused), math.max(hu, now + holdMs + rper) end
    if math.max(ownShare, rused) > share then
      hk, hu = math.max(hk, ownShare, rused), math.max(hu, now + rper)
    end
    if hu > 0 then
      -- Its lead as it reports it (rlead: the units its TAT ran ahead when its share last went
      -- down, for a window after): a call sent on idle credit before the cut (leasedCounted).
      hl = math.max(hl, rlead)
      -- Room for the edge: a share that changes takes one call less, and a cut burst's less.
      for _ = 1, 2 do
        local edge = edgeOf(share, hk, hl)
        if share + edge > avail then share = math.max(0, avail - edge) end
      end
    end
  else
    share = 0
  end
  counted, untl, lead = hk, hu, hu > 0 and hl or 0
  -- A share given back goes on from its pace. A process that takes a share from none begins
  -- with a full bucket, so it sends no sooner than the next slot of a share given back lately
  -- (M.cs, Redis's clock: the latest such slot). Without it, shares moved from process to
  -- process each sent at once: with fewer units than processes a unit's holder gives its share
  -- back at each turn (src/redis/leased-rate-share.ts), and the hold counts one call ahead of
  -- the pace however many such shares began within a window (cap 1 over 2, a rate of 3 per
  -- 500 ms: 4 calls in 405 ms).
  local cutSlot = tonumber(meta[24] or 0) or 0
  if math.max(ownShare, rused) > share and rleadMs > 0 and now + rleadMs > cutSlot then
    cutSlot = now + rleadMs
    redis.call('HSET', M, 'cs', string.format('%d', cutSlot))
  end
  if ownShare == 0 and rused == 0 and share > 0 and cutSlot > now then
    rslot = math.max(rslot, math.min(cutSlot - now, rper))
  end
  rcOwn = countedOf(share, hk, hu, hl)
  rsum = rothers + rcOwn
end
