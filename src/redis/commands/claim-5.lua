--[[
  CLAIM: a wake-up is a hint, never a grant: the owner asks Redis whether its ticket was granted
  and, if so, turns the claim window into a full lease. On a gate with a rate it first hands on
  what is due (its owner claims on a timer when the head's slot comes, with no release to do
  it), and a grant claimed more than `lateMs` after it was made, or one whose owner read it late
  (`late` 1: its ACQUIRE or CLAIM answer came back after `lateMs`), goes back to the head of the
  queue for a slot of now, once per waiter (`late` 2: taken again before).

  KEYS and ARGV[1..8]: see includes/prelude.lua.
    ARGV[9]  id
    ARGV[10] late   0 check, 1 read late (take it again), 2 taken again before (never again)

  Returns {granted 0|1, held, queued, cap, ...rate}.
]]
--- @include "includes/prelude"

local id, late = ARGV[9], ARGV[10]
shows = string.match(id, '^(.*):')
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
