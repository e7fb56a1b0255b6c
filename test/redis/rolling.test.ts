/**
 * Issue 32, "ordinary operations", both shared modes: a rolling restart (each replica in turn
 * closes its store cleanly and starts a new one, a new process id to Redis) keeps at least 90%
 * of the cap and of the rate in use at the partner, and never exceeds either. Never over:
 * asserted. In use: judged against the same fleet's pace in the second before the restarts (a
 * loaded machine lowers both). Quiet, FIFO: 97.5-98.7% of the cap, 49.6-50.0 of 50 calls/s;
 * leased: 95% of the cap, 45.8-47.0 calls/s. The leased rate was 43.1-45.0 (86-90%), named in
 * the test below: the survivors grew into a closed replica's share and were cut back when its
 * replacement asked a refresh later, each cut counted for a window; a clean close now parks its
 * share for the replacement (leasedClose.lua, M.pk). The 72-73% once measured here
 * was this file's own replicas: a stopping one left its 30 queued callers waiting, each granted
 * a slot of the fleet's rate in turn and then dropping it (its calls' signal was aborted, the
 * gate's wait was not), 600 ms of the rate at 0 per restart. A service that stops cancels its
 * waiters (`run(fn, { signal })`), as the replicas now do.
 */
import { expect, it } from 'vitest';
import type { Worker } from '../../bench/lib/fleet.js';
import { LATE_FLOOR_MS } from '../../src/redis/shared-rate.js';
import { describeRedis } from '../helpers/redis-server.js';
import { countingPartner, faultFor, openFleet, stopFleet, useFleet } from './fifo-fleet.js';
import type { FleetGate } from './fifo-fleet-worker.js';

const RESTART_EVERY_MS = 500;
const ROUNDS = 4;

for (const mode of ['fifo', 'leased'] as const)
  describeRedis(`a rolling restart of a ${mode} fleet`, () => {
    const file = useFleet(4);
    // The leased gate at the refresh interval of issue 32's rolling-deploy item (500 ms).
    const shared = mode === 'leased' ? { mode, refreshMs: 500 } : {};

    /** Replaces one replica after another, every RESTART_EVERY_MS, ROUNDS times. */
    async function roll(workers: readonly Worker[], gate: Omit<FleetGate, 'client'>) {
      for (let i = 0; i < ROUNDS; i++) {
        await faultFor(RESTART_EVERY_MS);
        const w = workers[i % workers.length]!;
        await stopFleet([w], true); // a graceful deploy: calls in flight finish, waiters leave
        await openFleet([w], gate);
      }
    }

    it('keeps >= 90% of the cap in use and never exceeds it', async () => {
      const partner = await countingPartner();
      try {
        const gate = {
          redisPort: file.redis.port,
          origin: partner.origin,
          path: '/ok?delay=200',
          prefix: 'rolling-cap:',
          name: 'billing',
          limit: 8,
          callers: 6,
          ...shared,
        };
        await openFleet(file.replicas, gate);
        await partner.arrived(40);
        const base = performance.now();
        await faultFor(1000);
        const baseline = partner.meanActive(base, performance.now()) / gate.limit;
        const from = performance.now();
        await roll(file.replicas, gate);
        const to = performance.now();
        await stopFleet(file.replicas);
        const used = partner.meanActive(from, to) / gate.limit;
        console.log(
          `${mode} rolling restart, cap 8: ${(used * 100).toFixed(1)}% in use (${(baseline * 100).toFixed(1)}% in the second before), peak ${partner.peak()}`,
        );
        expect(partner.peak()).toBeLessThanOrEqual(gate.limit);
        // The fleet's own pace without restarts is the ceiling a loaded machine allows.
        expect(used).toBeGreaterThanOrEqual(0.9 * Math.min(1, baseline));
      } finally {
        await partner.close();
      }
    }, 20_000);

    it('keeps >= 90% of the rate in use and never exceeds it', async () => {
      const partner = await countingPartner();
      const rate = { limit: 50, per: 1000, burst: 5 };
      try {
        const gate = {
          redisPort: file.redis.port,
          origin: partner.origin,
          path: '/ok?delay=5',
          prefix: 'rolling-rate:',
          name: 'billing',
          limit: 90,
          callers: 30,
          rate,
          queueTimeout: 10_000,
          ...shared,
        };
        const workers = file.replicas.slice(0, 3);
        await openFleet(workers, gate);
        await partner.arrived(60);
        const base = performance.now();
        await faultFor(1000);
        const baseline = partner.arrivals.filter((t) => t >= base).length;
        const from = performance.now();
        await roll(workers, gate);
        const to = performance.now();
        await stopFleet(workers);
        const sent = partner.arrivals.filter((t) => t >= from && t <= to).length;
        const perSecond = sent / ((to - from) / 1000);
        const windowed = partner.maxArrivals(rate.per - LATE_FLOOR_MS, from, to);
        console.log(
          `${mode} rolling restart, rate 50/s: ${perSecond.toFixed(1)}/s (${baseline} in the second before), busiest ${rate.per - LATE_FLOOR_MS} ms ${windowed} (promise 55)`,
        );
        expect(windowed).toBeLessThanOrEqual(rate.limit + rate.burst);
        // (leased: the survivors' grow-and-cut race, 86-90% before the parked share)
        expect(perSecond).toBeGreaterThanOrEqual(0.9 * Math.min(rate.limit, baseline));
      } finally {
        await partner.close();
      }
    }, 20_000);
  });
