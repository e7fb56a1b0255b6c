/**
 * A step of Redis's clock, emulated for the leased mode's tests (libfaketime crashes Debian's
 * redis-server): see {@link emulateClockStep}.
 */
import type { RedisServer } from '../helpers/redis-server.js';

/**
 * The clock step as the campaign emulates it: every Redis-time timestamp the leased gate
 * stores moved back `ms` (entry expiries, rate hold ends, the recovery window, the walk's and
 * the last run's time), which is what the state looks like after Redis's clock jumped `ms`
 * ahead (a negative `ms`: moved forward, a step back). The fields are the ones src/redis/leased-scripts.ts's
 * header lists: `M.r`, `M.t`, `M.lr`, `M.x`, `M.ot`, `M.ll`, `M.lq`, `M.rq`, and in each entry of `L` its expiry (field 1)
 * and its rate hold's end (field 7, when not 0).
 */
export async function emulateClockStep(
  server: RedisServer,
  gate: string,
  ms: number,
): Promise<void> {
  const script = `
local M, L, d = KEYS[1], KEYS[2], tonumber(ARGV[1])
for _, f in ipairs({'r', 't', 'lr', 'x', 'ot', 'll', 'lq', 'rq'}) do
  local v = tonumber(redis.call('HGET', M, f))
  if v then redis.call('HSET', M, f, v - d) end
end
local all = redis.call('HGETALL', L)
for i = 1, #all, 2 do
  local id, v = all[i], all[i + 1]
  if id:sub(1, 1) ~= '_' then
    local f = {}
    for x in v:gmatch('%S+') do f[#f + 1] = x end
    f[1] = tostring(tonumber(f[1]) - d)
    if f[7] and tonumber(f[7]) > 0 then f[7] = tostring(tonumber(f[7]) - d) end
    redis.call('HSET', L, id, table.concat(f, ' '))
  end
end
return 1`;
  await server.command('EVAL', script, 2, `test:{${gate}}:m`, `test:{${gate}}:l`, ms);
}
