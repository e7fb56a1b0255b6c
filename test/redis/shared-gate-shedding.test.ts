import { request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { QueueFullError, QueueTimeoutError } from '../../src/common/errors.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, deferred, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();

for (const kind of CLIENT_KINDS) {
  describeRedis(`a shared gate's queue bound and Retry-After on ${kind}`, () => {
    const fleet = useFleet(kind, redis);
    let partner: Partner | undefined;
    afterEach(async () => {
      redis().resume();
      await partner?.close();
      partner = undefined;
    });

    it('maxQueue 0 with Redis up: a caller the cap cannot serve now is shed, its ticket withdrawn', async () => {
      const [a, b] = [await fleet.store(), await fleet.store()];
      const ga = a.semaphore({ name: 'q0', limit: 1, maxQueue: 0, queueTimeout: 5000 });
      const gb = b.semaphore({ name: 'q0', limit: 1, maxQueue: 0, queueTimeout: 5000 });
      const held = await gb.acquire();
      const started = performance.now();
      // Before the fix it waited its whole queueTimeout and failed with QueueTimeoutError.
      await expect(ga.acquire()).rejects.toBeInstanceOf(QueueFullError);
      expect(performance.now() - started).toBeLessThan(2500);
      await a.settled();
      expect(await zcard(redis(), 'q0', 'q')).toBe(0);
      held.release();
      await b.settled();
      (await ga.acquire()).release(); // the cap is whole again
    });

    it('maxQueue 0 in local fallback mode sheds at once when the local share is full', async () => {
      // Two processes on a cap of 4: while Redis is unreachable each may hold 2.
      const options = { leaseMs: 4000, heartbeatMs: 1000, commandTimeoutMs: 300 } as const;
      const [a, b] = [await fleet.store(options), await fleet.store(options)];
      const gb = b.semaphore({ name: 'fb', limit: 4, maxQueue: 0, queueTimeout: 5000 });
      const ga = a.semaphore({ name: 'fb', limit: 4, maxQueue: 0, queueTimeout: 5000 });
      const other = await gb.acquire();
      const mine: Permit[] = [await ga.acquire(), await ga.acquire()];
      expect(ga.stats().shared.processes).toBe(2);
      redis().pause();
      const started = performance.now();
      // Its acquire times out (300 ms), the store degrades, the share (2) is full: shed now,
      // not after the 5 s deadline (before the fix: QueueTimeoutError after 5 s).
      await expect(ga.acquire()).rejects.toBeInstanceOf(QueueFullError);
      expect(a.degraded).toBe(true);
      // Degraded, and no room in the share: refused without a timer or a Redis call.
      const refused = ga.acquire();
      await expect(refused).rejects.toBeInstanceOf(QueueFullError);
      expect(performance.now() - started).toBeLessThan(2500);
      // One permit back: the share has room again and grants locally.
      mine.pop()!.release();
      mine.push(await ga.acquire({ timeout: 2000 }));
      expect(ga.held).toBe(2);
      redis().resume();
      for (const p of mine) p.release();
      other.release();
    });

    it('Retry-After for a 100 ms partner is about the real drain time of the queue', async () => {
      partner = await startPartner();
      const origin = partner.origin;
      const [a, b] = [await fleet.store(), await fleet.store()];
      const gate = { name: 'drain', limit: 4, queueTimeout: 20_000 } as const;
      const ga = a.semaphore(gate);
      const gb = b.semaphore(gate);
      // A 100 ms partner, 60 calls on a cap of 4: about 1.5 s of work.
      const call = async () => {
        const res = await request(`${origin}/ok?delay=100`);
        await res.body.text();
      };
      let done = 0;
      const someDone = deferred<void>();
      const job = (g: typeof ga) =>
        g.run(call).then(() => {
          if (++done === 8) someDone.resolve();
        });
      const jobs: Promise<void>[] = [];
      for (let i = 0; i < 30; i++) jobs.push(job(ga), job(gb));
      await someDone.promise; // a's own hold times are known (two waves ran)
      // What a's sheds (queue full, timeout) tell their callers right now.
      const retryAfterMs = ga.retryAfterMs();
      const estimatedAt = performance.now();
      await Promise.all(jobs);
      const drainMs = performance.now() - estimatedAt;
      // Before the fix: the 20 s wait deadline stood in for an unobserved hold time, and the
      // hint was 60 s (the clamp) for about a second of real drain.
      expect(retryAfterMs).toBeLessThan(2 * drainMs + 200);
      expect(retryAfterMs).toBeGreaterThan(drainMs / 4);
      expect(partner.peak).toBeLessThanOrEqual(4);
    });

    it('a waiter timing out is told the drain time of the queue ahead of it', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'timeout', limit: 1, queueTimeout: 5000 });
      const first = await gate.acquire();
      await new Promise<void>((resolve) => setTimeout(resolve, 50));
      first.release(); // one hold of ~50 ms seen
      const held = await gate.acquire();
      const error = await gate.acquire({ timeout: 100 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(QueueTimeoutError);
      // One ahead (the caller itself) on a cap of 1, ~50 ms holds: well under a second.
      expect((error as QueueTimeoutError).retryAfterMs).toBeLessThan(1000);
      held.release();
    });
  });
}
