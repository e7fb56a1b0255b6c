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
