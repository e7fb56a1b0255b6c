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

  Returns {granted 0|1, held, queued, cap, ...rate, since}: `since`, on a gate with a rate, the
  ms since Redis made the grant (0: made by this script, or none). The owner adds its own wait
  for this answer: a grant made by a release reaches its owner by a wake-up, and this claim's
  round trip is only the last part of its way (fault campaign, FIFO seed 116065: every link
  slowed 90 ms each way, grants sent 270 ms after they were made, each part under `lateMs`).
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
local granted, since = 0, 0
local score = redis.call('ZSCORE', H, id)
if score then
  -- A claim window's score is the grant's time + claim (+ HEARD's half); a lease's is later.
  local made = math.floor(tonumber(score)) - claim
  if RATED and made <= now then since = now - made end
  local renew = {}
  addUnits(renew, now + lease, id)
  chunked('ZADD', H, renew, 2)
  granted = 1
end
markHolders()
local reply = withRate({granted, held, queued, limit})
reply[#reply + 1] = since
return reply
