--[[
  A clean close (ARGV[22] '1'): the entry goes at once, and the hash with the last one; with a
  rate, what the process may still have in the fleet's windows stays counted for one, in a tail
  entry `<id>~0`. Returns the script's reply.
  Uses (leasedRefresh-4.lua): L, M, proc, closing, RATED, rused, rper, now, sum, rsum, osum,
  ownOwed, ownShare, ownCounted, ownUntil, ownLead, rlead, others_live, lease, cap, n, blocks,
  helds, rateStr; format (leasedEntry), burstOf and countedOf (leasedCounted), parked,
  WALK_FULL (leasedWalk). Parks its rate share (M.pk) while others are live, in a fleet walked
  in one call.
]]
if closing then
  -- A clean close: the entry goes at once, and the hash with the last one; nothing is owed to it.
  if ownOwed > 0 then redis.call('HSET', M, 'o', math.max(0, osum - ownOwed)) end
  if RATED and ownShare > 0 and others_live > 0 and others_live <= WALK_FULL then
    -- Its share parked for a window: a newcomer asking for its first share takes its place
    -- (leasedShare.lua), the others' level does not grow into it meanwhile (leasedWalk.lua).
    -- At most 16 places, the newest. Not in a fleet walked in slices: its level keeps no places
    -- (others_live is then the hash's size), and the answers would count the units for nothing.
    -- With its next slot (Redis's clock: when its pace would have let its next call go, as it
    -- reports it): the newcomer that takes the place goes on from it.
    local _, items = parked()
    local slot = string.format('%d', now + math.max(0, rleadMs))
    items[#items + 1] = (now + rper) .. ':' .. ownShare .. ':' .. slot
    while #items > 16 do table.remove(items, 1) end
    redis.call('HSET', M, 'pk', table.concat(items, ' '))
  end
  -- A hold still on (its share went down lately, to 0 too) counts as its sends ahead of the pace.
  local holding = RATED and ownUntil > now and countedOf(0, ownCounted, ownUntil, ownLead) or 0
  if RATED and (rused > 0 or holding > 0 or rlead > 0) then
    -- It paced its share: its sends still in windows are those of its pace, which the fleet's
    -- shares go on from, except what it sent ahead of its pace: its TAT runs at most burst + 1
    -- intervals ahead of now, or its lead as it reports it. So much stays counted for a window
    -- (never more than it sent in the last one, ARGV[23]: its sends by age), in a lapsed entry
    -- '<id>~0' that walks reap.
    local sent, any = 0, false
    for c in string.gmatch(ARGV[23] or '', '%d+') do
      sent, any = sent + tonumber(c), true
    end
    if not any then sent = rused end
    -- A call that cost more than its burst share (sent on idle credit) leaves its TAT further
    -- ahead, as the process reports (ARGV[29], or as when its share last went down).
    local paced = rused > 0 and burstOf(rused) + 1 or 0
    local units = math.min(sent, math.max(paced, rlead, holding))
    rsum = rsum + units
    redis.call('HDEL', L, proc)
    redis.call('HSET', L, '_s', sum, '_r', rsum)
    if units > 0 then
      redis.call('HSET', L, proc .. '~0',
        format(now, 0, 0, 0, 0, units, now + 2 * rper, 0, 0, 0, 0, 0, 0, units))
    end
    if others_live == 0 then redis.call('PEXPIRE', L, rper + 1) end
  else
    redis.call('HDEL', L, proc)
    local left = redis.call('HLEN', L) - redis.call('HEXISTS', L, '_s') - redis.call('HEXISTS', L, '_r')
    if left == 0 then
      redis.call('DEL', L)
    else
      redis.call('HSET', L, '_s', sum)
      if RATED then redis.call('HSET', L, '_r', rsum) end
    end
  end
  return {0, lease, cap, n, blocks, helds, cap - sum, 0, 0, 0, 0, rsum, rateStr, now}
end
