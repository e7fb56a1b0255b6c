--[[
  The units held (expired leases reaped) and queued, and the lease units of an id.
  Uses (gate, recovery): H, Q, now, CHUNK, stored.
]]
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
-- The fraction of a ms a grant's claim window ends later when its owner heard the wake-up: the
-- mark that tells such a grant from a lease (every other score of H is a whole ms), for
-- takeBackDeaf (fill.lua). A CLAIM or heartbeat that turns it into a lease drops it.
local HEARD = 0.5
local function grantUnits(id, score)
  local args = {}
  addUnits(args, score, id)
  chunked('ZADD', H, args, 2)
  held = held + weightOf(id)
end
