/**
 * A FIFO gate with a `rate` through an `onStoreError: 'local'` outage: each process sends on its
 * local share of the rate while Redis is away, and when Redis answers again what it sent within
 * the last window is charged to the rate in Redis, so the return opens no fresh burst on top of
 * it. The race this pins: the whole outage's local sends were charged, as of the return, and the
 * gate then waited them out as a debt: a 3 s outage at 20 calls a second left it idle about 3 s
 * after Redis was back (fault campaign seed 718: a replica's link slowed past its command
 * timeout for 3.6 s, both replicas at 0 for 1.9 s after it). Judged by the grants' own times (a
 * partner would see the calls as they are granted, 5 ms each): the longest pause after the
 * return, and every window of `per` within `limit + burst` and the local share's one call.
 */
import { performance } from 'node:perf_hooks';
import { afterEach, expect, it } from 'vitest';
import { describeRedis } from '../helpers/redis-server.js';
import { Fleet, privateRedis } from './clients.js';

const redis = privateRedis();
const fleet = new Fleet('ioredis', redis);
afterEach(async () => {
  redis().resume();
  await fleet.closeAll();
  await redis().command('FLUSHALL');
});

const RATE = { limit: 10, per: 500, burst: 0 } as const;
const OUTAGE_MS = 3000;

describeRedis("a FIFO rate back from a 'local' outage", () => {
  it('charges the last window of local sends, not the whole outage: no pause of the outage length after Redis is back', async () => {
    const store = await fleet.store({
      commandTimeoutMs: 200,
      heartbeatMs: 200,
      leaseMs: 1000,
      onStoreError: 'local',
    });
    const gate = store.semaphore({ name: 'local-rate', limit: 4, rate: RATE });
    const grants: number[] = [];
    let running = true;
    const callers = Array.from({ length: 4 }, async () => {
      while (running) {
        try {
          const permit = await gate.acquire({ timeout: 6000 });
          grants.push(performance.now());
          await new Promise((r) => setTimeout(r, 5));
          permit.release();
        } catch {
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    });
    await new Promise((r) => setTimeout(r, 1000));
    const pausedAt = performance.now();
    redis().pause();
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    redis().resume();
    const backAt = performance.now();
    await new Promise((r) => setTimeout(r, 2500));
    running = false;
    await Promise.all(callers);
    // It sent locally through the outage (its share is the whole rate: one process).
    const local = grants.filter((t) => t > pausedAt + 500 && t < backAt).length;
    expect(local).toBeGreaterThan(OUTAGE_MS / 100);
    // The longest pause from the return on: a window's debt and a heartbeat, not the outage.
    const after = grants.filter((t) => t >= backAt - 100);
    let pause = (after[0] ?? Number.POSITIVE_INFINITY) - backAt;
    for (let i = 1; i < after.length; i++) pause = Math.max(pause, after[i]! - after[i - 1]!);
    console.log(
      `local rate back: ${local} sent locally, longest pause after ${Math.round(pause)} ms`,
    );
    expect(pause).toBeLessThan(1500);
    // Never over the promise in a window of per: limit + burst, and the local share's call.
    let most = 0;
    for (let i = 0, j = 0; i < grants.length; i++) {
      while (grants[i]! - grants[j]! >= RATE.per) j++;
      most = Math.max(most, i - j + 1);
    }
    expect(most).toBeLessThanOrEqual(RATE.limit + RATE.burst + 1);
  }, 20_000);
});
