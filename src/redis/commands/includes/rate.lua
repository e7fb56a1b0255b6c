--[[
  The request rate (GCRA) kept beside the cap, and the head's slot hint.
  Uses (gate): M, meta, RATED, rateArg, nowf, wake.
]]
-- GCRA (src/gate/rate.ts): one timestamp, the theoretical arrival time `tat`. The rate lives
-- in Redis like the cap: the first process's ('rt'), changed only by SETRATE. `backlog` is
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
local lateMs = RATED and math.max({{LATE_FLOOR_MS}}, T) or 0
-- Units of the rate a ticket takes: its cost, 1 unless the id carries ~<cost>.
local function costOf(id)
  return tonumber(string.match(id, '~([^/]+)')) or 1
end
-- Ms from now until `cost` conforms after `ahead` queued before it (<= 0: now).
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
-- The head last told of its slot, and when its slot came ('n': '<ticket>@<Redis ms>').
local function told()
  local head, at = string.match(meta[8] or '', '^(.*)@(.*)$')
  return head, tonumber(at)
end
-- A head told of its slot whose owner did not come `lateMs` after it (by CLAIM, or any script
-- of its own): its process stopped, stalls, or died and its connections have not closed yet.
-- Every waiting process of a rated gate waits for that owner's CLAIM (nothing else may run a
-- script at the slot), so its tickets are passed over, in place, until it runs a script again
-- (`overdue`, kept in the meta hash's 'od'). Before: a head SIGKILLed after it was told held
-- the others until one of them sent a heartbeat (1.9 s, fifo-sigkill), and a SIGSTOPped
-- replica's tickets held the fleet from when they came up to the end of the stall (0.3 s to
-- the whole 1.5 s of fifo-rate-stall).
local overdue, overdueDirty = {}, false
if RATED then
  for owner in string.gmatch(meta[12] or '', '%S+') do overdue[owner] = true end
end
local function isOverdue(head, owner)
  if owner == shows or owner == caller then return false end
  if overdue[owner] then return true end
  local toldHead, toldAt = told()
  if toldHead == head and toldAt and nowf > toldAt + lateMs then
    overdue[owner] = true
    overdueDirty = true
    return true
  end
  return false
end
local function saveOverdue()
  if shows and overdue[shows] then
    overdue[shows] = nil
    overdueDirty = true
  end
  if not overdueDirty and not meta[12] then return end
  -- Kept while their processes live (a dead one's tickets are skipped anyway); at most 64.
  local list = {}
  for owner in pairs(overdue) do
    local ends = redis.call('ZSCORE', P, owner)
    if ends and tonumber(ends) > now and #list < 64 then
      list[#list + 1] = owner
    else
      overdueDirty = true
    end
  end
  if not overdueDirty then return end
  if #list > 0 then
    redis.call('HSET', M, 'od', table.concat(list, ' '))
  else
    redis.call('HDEL', M, 'od')
  end
end
-- The backup for a head of `owner`: the first ticket behind it of another owner not overdue.
local function backupOf(head, owner)
  for _, id in ipairs(redis.call('ZRANGE', Q, 0, 64)) do
    local other = string.match(id, '^(.*):')
    if id ~= head and other ~= owner and not overdue[other] then return id, other end
  end
  return nil, nil
end
-- The head, back in place at the front of Q, is told of its slot `wait` ms from now; false when
-- nobody heard it (another process's channel with no subscriber: gone, or polling). A new head
-- also names a backup: the first ticket of another owner behind it is told `<head>@<ms>@<its
-- ticket>`, and its process asks Redis `lateMs` after that slot if nothing newer reached it
-- (shared-tickets.ts), so that an owner that does not come is passed over then.
local function hintHead(head, owner, wait)
  local at = nowf + wait
  hint = head .. '@' .. math.ceil(wait)
  local toldHead, toldAt = told()
  local heard = true
  if toldHead ~= head or at < toldAt - 1 then
    local n = redis.pcall('SPUBLISH', wake .. owner, hint)
    heard = owner == caller or owner == shows or type(n) ~= 'number' or n > 0
    local backup, other = backupOf(head, owner)
    if backup and other ~= caller then
      redis.pcall('SPUBLISH', wake .. other, hint .. '@' .. backup)
    end
  end
  if toldHead ~= head or math.abs(at - toldAt) > 1 then
    meta[8] = head .. '@' .. string.format('%.17g', at)
    redis.call('HSET', M, 'n', meta[8])
  end
  return heard
end
