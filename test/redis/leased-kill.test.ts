/**
 * Issue 32, "ordinary operations" (leased mode): a SIGKILLed replica never leaves the survivors
 * at 0 for more than 500 ms while they have demand. Cap 5, 3 replica processes × 10 callers
 * (real processes, a real SIGKILL); the oracle is a partner that counts its own concurrent
 * requests, sampled every 10 ms.
 */
import { afterAll, expect, it } from 'vitest';
import { forkWorker, type Worker } from '../../bench/lib/fleet.js';
import { bundled } from '../helpers/bundled.js';
import { startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis } from './clients.js';
import type { LeasedChildConfig } from './leased-child.js';

const redis = privateRedis();
const workers: Worker[] = [];
afterAll(() => {
  for (const w of workers) w.kill('SIGKILL');
});

describeRedis('a leased gate when a replica is SIGKILLed (issue 32)', () => {
  it('cap 5, 3 replicas × 10 callers, one SIGKILLed: the partner never sees 0 for more than 500 ms', async () => {
    const partner = await startPartner();
    try {
      const script = await bundled(new URL('./leased-child.ts', import.meta.url));
      const config: LeasedChildConfig = {
        redisPort: redis().port,
        client: 'node-redis',
        name: 'killed',
        limit: 5,
        leaseMs: 3000,
        refreshMs: 1000,
      };
      const forked = [0, 1, 2].map((i) =>
        forkWorker(
          script,
          { ...config, client: i % 2 ? 'ioredis' : 'node-redis' },
          { execArgv: [] },
        ),
      );
      workers.push(...forked);
      await Promise.all(forked.map((w) => w.next('ready', 60_000)));
      for (const w of forked)
        w.send({ type: 'loop', origin: partner.origin, callers: 10, delay: 50 });
      await Promise.all(forked.map((w) => w.next('looping')));
      await partner.waitForActive(5);
      await new Promise((r) => setTimeout(r, 1500));
      partner.resetPeak();
      forked[0]!.kill('SIGKILL');
      let zeroSince: number | undefined;
      let longest = 0;
      const end = performance.now() + 4000; // past the dead one's lease
      while (performance.now() < end) {
        const now = performance.now();
        if (partner.active === 0) zeroSince ??= now;
        else zeroSince = undefined;
        if (zeroSince !== undefined) longest = Math.max(longest, now - zeroSince);
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(longest, 'longest stretch at 0 (ms)').toBeLessThanOrEqual(500);
      expect(partner.peak).toBeLessThanOrEqual(5);
    } finally {
      await partner.close();
    }
  }, 60_000);
});
