/**
 * The scenario of the FIFO "Redis away" tests (issue 32, items 1 and 2): 4 replicas × 6
 * callers on a cap of 8 (the issue's reproduction) and a private Redis, the fault made by the
 * test, then the partner's figures. The last replica's way to Redis goes through a proxy that
 * holds what it sends until LATE_MS after the fault ends, and its calls take a minute: it holds
 * what it held through the fault and grants nothing new (its local share is what it held), so
 * whatever goes over the cap is the others' grants over its permits, the issue's fault, and
 * does not depend on which replica's heartbeat happens to reach Redis first.
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { killAllWorkers, type Worker } from '../../bench/lib/fleet.js';
import { type RedisServer, startRedis, stopAllRedis } from '../helpers/redis-server.js';
import {
  type CountingPartner,
  countingPartner,
  faultFor,
  type HoldingProxy,
  holdingProxy,
  openFleet,
  startFleet,
  stopFleet,
} from './fifo-fleet.js';

export const CAP = 8;
/** heartbeatMs 200 (lease / 5), commandTimeoutMs 1000: a gap is more than 1.2 s. */
export const LEASE_MS = 1000;
export const FAULT_MS = 2000;
const LATE_MS = 400;
/**
 * What `onStoreError: 'local'` (the default) may add while Redis is away, as docs/shared-gates.md
 * states it: each process its holdings plus its part of the free cap, at most R - 1 over with R
 * processes cut off. Issue 32's fault is the excess once Redis answers again, judged at 0.
 */
const LOCAL_EXCESS = 4 - 1;
/** The local grants of the outage end with their requests (40 ms calls): judged after them. */
const SETTLE_MS = 500;

/**
 * The campaign's emulation of a forward step of `ms` in Redis's clock (SHARED-FIXES.md): one
 * script moves every Redis-time timestamp of a FIFO gate back by `ms` (leases' and claims'
 * expiries, processes' liveness, the recovery window, GCRA's timestamp, the last run `lr`).
 */
export const CLOCK_STEP = `
local H, P, M, S = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1])
for _, key in ipairs({H, P}) do
  local rows = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do redis.call('ZADD', key, tonumber(rows[i + 1]) - S, rows[i]) end
end
for _, f in ipairs({'r', 't', 'lr'}) do
  local v = tonumber(redis.call('HGET', M, f) or '')
  if v and v > 0 then redis.call('HSET', M, f, string.format('%.17g', v - S)) end
end
return 1`;

export interface OutageFleet {
  redis: RedisServer;
  /** The fleet busy on a fresh gate (the late replica holding its permits); its key prefix. */
  busy(): Promise<{ partner: CountingPartner; prefix: string }>;
  /** Called as the fault starts: the late replica's Redis stops answering too. */
  faultStarts(): void;
  /**
   * The fault is over for three replicas now; the fourth's Redis answers LATE_MS later. Then
   * two leases of traffic, the partner's figures logged and judged: never over the cap once
   * Redis answered (during an `outage`, what `onStoreError: 'local'` may add, the documented
   * bound), and the cap in use again within `boundMs` of the end of the fault.
   */
  judge(what: string, boundMs: number, outage?: boolean): Promise<void>;
}

/** Registers the hooks (call inside `describeRedis`). */
export function useOutageFleet(): OutageFleet {
  let fleet: Worker[];
  let late: HoldingProxy;
  let partner: CountingPartner | undefined;
  let n = 0;
  const scenario = {
    busy: async () => {
      partner = await countingPartner();
      const prefix = `outage${++n}:`;
      const slow = '/ok?delay=60000';
      await openFleet(
        fleet,
        {
          redisPort: scenario.redis.port,
          origin: partner.origin,
          path: '/ok?delay=40',
          prefix,
          name: 'billing',
          limit: CAP,
          callers: 6,
          leaseMs: LEASE_MS,
        },
        // The late one on node-redis (it reconnects every 100 ms; ioredis backs off to seconds).
        [undefined, undefined, late.port, undefined],
        [undefined, undefined, slow, undefined],
      );
      await partner.arrived(150);
      return { partner, prefix };
    },
    faultStarts: () => late.hold(),
    judge: async (what: string, boundMs: number, outage = true) => {
      const back = performance.now();
      await faultFor(LATE_MS);
      late.release();
      await faultFor(2 * LEASE_MS);
      const p = partner!;
      const peak = p.peak();
      const after = p.peak(back + SETTLE_MS);
      const full = p.reached(CAP, back) - back;
      await stopFleet(fleet);
      console.log(
        `${what}: peak ${peak} at cap ${CAP} (${after} once Redis answered), the cap in use again ${full.toFixed(0)} ms after`,
      );
      expect(peak, `${what}, in all`).toBeLessThanOrEqual(CAP + (outage ? LOCAL_EXCESS : 0));
      expect(after, `${what}, once Redis answered`).toBeLessThanOrEqual(CAP);
      expect(full, 'the cap in use again (ms after the fault)').toBeLessThan(boundMs);
    },
  } as OutageFleet;
  beforeAll(async () => {
    scenario.redis = await startRedis();
    late = await holdingProxy(scenario.redis.port);
    fleet = await startFleet(4);
  }, 60_000);
  afterEach(async () => {
    scenario.redis.resume();
    late.release();
    await partner?.close();
    partner = undefined;
  });
  afterAll(async () => {
    for (const w of fleet) w.send({ type: 'exit' });
    await late.close();
    await killAllWorkers();
    await stopAllRedis();
  });
  return scenario;
}
