/**
 * Issue 32, items 1 and 2 (leased mode): Redis away longer than a lease (SIGSTOP, OOM errors,
 * a restart with its data), Redis back empty, and a forward step of Redis's clock must not
 * push the fleet past its cap when Redis answers again. Cap 8, 4 processes × 6 callers, lease
 * 3 s. The oracle is a partner that counts its own concurrent requests.
 */
import { afterEach, expect, it } from 'vitest';
import { describeRedis, type RedisServer } from '../helpers/redis-server.js';
import { privateRedis } from './clients.js';
import { type LeasedFleet, leasedFleet } from './leased-fleet.js';

const redis = privateRedis();
const CAP = 8;
const LEASE_MS = 3000;

let fleet: LeasedFleet | undefined;
afterEach(async () => {
  redis().resume();
  await redis().command('CONFIG', 'SET', 'maxmemory', '0');
  await fleet?.stop();
  fleet = undefined;
  await redis().command('FLUSHALL');
});

async function start(name: string): Promise<LeasedFleet> {
  fleet = await leasedFleet(redis, {
    name,
    processes: 4,
    callers: 6,
    cap: CAP,
    leaseMs: LEASE_MS,
    refreshMs: 1000,
  });
  // Every process busy at its block.
  await fleet.partner.waitForActive(CAP);
  await new Promise((r) => setTimeout(r, 1500));
  return fleet;
}

/** Sleeps on a timer: the fault's length, not a wait for an event. */
const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The clock step as the campaign emulates it: every Redis-time timestamp the leased gate
 * stores moved back `ms` (entry expiries, rate hold ends, the recovery window, the walk's and
 * the last run's time), which is what the state looks like after Redis's clock jumped `ms`
 * ahead. The list of fields is the one in leased-scripts.ts's header.
 */
export async function emulateClockStep(
  server: RedisServer,
  gate: string,
  ms: number,
): Promise<void> {
  const script = `
local M, L, d = KEYS[1], KEYS[2], tonumber(ARGV[1])
for _, f in ipairs({'r', 't', 'lr'}) do
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

describeRedis(
  'a leased gate when Redis comes back after a fault longer than a lease (issue 32)',
  () => {
    it('Redis SIGSTOPped 4.5 s with a 3 s lease: no excess at the partner when it resumes', async () => {
      const f = await start('stopped');
      f.partner.resetPeak();
      redis().pause();
      await hold(4500);
      redis().resume();
      await hold(3000);
      expect(f.partner.peak).toBeLessThanOrEqual(CAP);
    }, 20_000);

    it('Redis answering OOM errors (maxmemory, noeviction) for 4.5 s: no excess when it recovers', async () => {
      const f = await start('oom');
      f.partner.resetPeak();
      await redis().command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
      await redis().command('CONFIG', 'SET', 'maxmemory', '1');
      await hold(4500);
      await redis().command('CONFIG', 'SET', 'maxmemory', '0');
      await hold(3000);
      expect(f.partner.peak).toBeLessThanOrEqual(CAP);
    }, 20_000);

    it("a forward step of Redis's clock (+5 s, emulated) admits nobody past the cap", async () => {
      const f = await start('step');
      f.partner.resetPeak();
      await emulateClockStep(redis(), 'step', 5000);
      await hold(3000);
      expect(f.partner.peak).toBeLessThanOrEqual(CAP);
    }, 20_000);
  },
);
