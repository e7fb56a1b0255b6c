/**
 * A leased gate with fewer units than processes (fault campaign seed 99009): the units are
 * floors met oldest head first, and a process whose met head was served says so at once, so the
 * unit moves on in age order. The oracles: a partner counting its own concurrent requests, and
 * each caller's wait.
 */
import { fetch } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { QueueTimeoutError } from '../../src/common/errors.js';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
let partner: Partner | undefined;
afterEach(async () => {
  await partner?.close();
  partner = undefined;
});

describeRedis('a leased gate with fewer units than processes', () => {
  const fleet = useFleet('node-redis', redis);

  it('campaign seed 99009, cap 1 over 4 busy processes: the unit moves on after each served head, and no caller waits out its deadline (it stayed with one process for half a lease)', async () => {
    partner = await startPartner();
    const options = {
      name: 'one',
      limit: 1,
      maxQueue: 64,
      queueTimeout: 2500,
      mode: 'leased',
      leaseMs: 1500,
      refreshMs: 375,
    } as const;
    const callers = [4, 11, 5, 6];
    const gates: LeasedSemaphore[] = [];
    for (let i = 0; i < callers.length; i++) gates.push((await fleet.store()).semaphore(options));
    let seed = 99009;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const warned: string[] = [];
    const onWarning = (warning: Error & { code?: string }) => {
      if (warning.code === 'HOSTGATE_LEASED_SMALL_CAP') warned.push(warning.message);
    };
    process.on('warning', onWarning);
    const waits: number[][] = callers.map(() => []);
    const timeouts: number[] = callers.map(() => 0);
    const until = performance.now() + 3500;
    const loops = callers.flatMap((n, p) =>
      Array.from({ length: n }, async () => {
        while (performance.now() < until) {
          const asked = performance.now();
          const delay = Math.round(5 + random() * 25);
          try {
            await gates[p]!.run(async () => {
              waits[p]!.push(performance.now() - asked);
              const response = await fetch(`${partner!.url}/ok?delay=${delay}`);
              await response.text();
            });
          } catch (error) {
            if (!(error instanceof QueueTimeoutError)) throw error;
            timeouts[p]!++;
          }
        }
      }),
    );
    await Promise.all(loops);
    process.off('warning', onWarning);
    expect(partner.peak, 'the partner never saw 2 at once').toBe(1);
    // Loud, once per gate: the FIFO mode serves such a gate better.
    expect(warned.length).toBe(callers.length);
    expect(warned[0]).toMatch(
      /"one" \(mode 'leased'\) has [2-4] processes and a cap of 1: .*the FIFO mode/,
    );
    expect(timeouts, 'callers that waited out their 2.5 s deadline, per process').toEqual([
      0, 0, 0, 0,
    ]);
    for (const [p, w] of waits.entries()) {
      expect(w.length, `process ${p} was served`).toBeGreaterThan(0);
    }
  }, 20_000);
});
