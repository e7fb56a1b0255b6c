import { request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { QueueFullError, QueueTimeoutError } from '../../src/common/errors.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();
/** Nothing here may time out and degrade the store on a busy machine unless Redis is paused. */
const PATIENT = { commandTimeoutMs: 3000 } as const;

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
      // No waiting at all: a new gate's first-use wait (firstUseWaitMs) would shed its first call.
      const options = { ...PATIENT, firstUseWaitMs: 0 };
      const [a, b] = [await fleet.store(options), await fleet.store(options)];
      const ga = a.semaphore({ name: 'q0', limit: 1, maxQueue: 0, queueTimeout: 10_000 });
      const gb = b.semaphore({ name: 'q0', limit: 1, maxQueue: 0, queueTimeout: 10_000 });
      const held = await gb.acquire();
      const started = performance.now();
      // Before the fix it waited its whole queueTimeout and failed with QueueTimeoutError.
      const shed = ga.acquire();
      await expect(shed).rejects.toBeInstanceOf(QueueFullError);
      // The message names the bound that was hit and how to raise it, as a local gate's does.
      await expect(shed).rejects.toThrow(/maxQueue 0\); retry after .*, or raise maxQueue/);
      expect(performance.now() - started).toBeLessThan(5000);
      await a.settled();
      expect(await zcard(redis(), 'q0', 'q')).toBe(0);
      held.release();
      await b.settled();
      (await ga.acquire()).release(); // the cap is whole again
    });

    it('maxQueue 0 in local fallback mode sheds at once when the local share is full', async () => {
      // Two processes on a cap of 4: while Redis is unreachable each may hold 2.
      const options = {
        leaseMs: 6000,
        heartbeatMs: 1000,
        commandTimeoutMs: 800,
        firstUseWaitMs: 0, // no waiting at all, not even a new gate's first-use wait
      } as const;
      const [a, b] = [await fleet.store(options), await fleet.store(options)];
      const gb = b.semaphore({ name: 'fb', limit: 4, maxQueue: 0, queueTimeout: 10_000 });
      const ga = a.semaphore({ name: 'fb', limit: 4, maxQueue: 0, queueTimeout: 10_000 });
      const other = await gb.acquire();
      const mine: Permit[] = [await ga.acquire(), await ga.acquire()];
      expect(ga.stats().shared.processes).toBe(2);
      redis().pause();
      const started = performance.now();
      // Its acquire times out (800 ms), the store degrades, the share (2) is full: shed now,
      // not after the 10 s deadline (before the fix: QueueTimeoutError after 10 s).
      await expect(ga.acquire()).rejects.toBeInstanceOf(QueueFullError);
      expect(a.degraded).toBe(true);
      // Degraded, and no room in the share: refused without a timer or a Redis call.
      const refused = ga.acquire();
      await expect(refused).rejects.toBeInstanceOf(QueueFullError);
      expect(performance.now() - started).toBeLessThan(5000);
      // One permit back: the share has room again and grants locally.
      mine.pop()!.release();
      mine.push(await ga.acquire({ timeout: 5000 }));
      expect(ga.held).toBe(2);
      redis().resume();
      for (const p of mine) p.release();
      other.release();
    });

    /**
     * Two processes on a cap of 4 with a 100 ms partner; `perProcess` jobs each. Resolves with
     * what a's sheds would tell their callers once the queue formed, and how long it then really
     * took to drain (every job served or timed out).
     */
    async function drain(name: string, perProcess: number, queueTimeout: number) {
      partner = await startPartner();
      const origin = partner.origin;
      const [a, b] = [await fleet.store(PATIENT), await fleet.store(PATIENT)];
      const gate = { name, limit: 4, maxQueue: 200, queueTimeout } as const;
      const ga = a.semaphore(gate);
      const gb = b.semaphore(gate);
      const call = async () => {
        const res = await request(`${origin}/ok?delay=100`);
        await res.body.text();
      };
      await ga.run(call); // a's own hold time is known (the others may all be b's)
      const jobs: Promise<unknown>[] = [];
      for (let i = 0; i < perProcess; i++) {
        // Served, or timed out in the queue.
        jobs.push(
          ga.run(call).catch(() => undefined),
          gb.run(call).catch(() => undefined),
        );
      }
      await a.settled(); // every acquire of a's answered: a has seen the queue
      const retryAfterMs = ga.retryAfterMs();
      const estimatedAt = performance.now();
      await Promise.all(jobs);
      expect(partner.peak).toBeLessThanOrEqual(4);
      return { retryAfterMs, drainMs: performance.now() - estimatedAt };
    }

    it('Retry-After for a 100 ms partner is the real drain time of a queue of 1 s waiters, not 5 s', async () => {
      // 200 tickets with the default 1 s deadline: ~40 are served, the rest time out, and the
      // queue is gone about 1 s after it formed. Before the fix the hint was the drain time of
      // every ticket, ~190 / 4 × 100 ms ≈ 4.8 s.
      const { retryAfterMs, drainMs } = await drain('deadline', 100, 1000);
      expect(retryAfterMs).toBeLessThan(2 * drainMs + 300);
      expect(retryAfterMs).toBeGreaterThan(drainMs / 4);
    });

    it('Retry-After for a 100 ms partner is about the real drain time of a queue of patient waiters', async () => {
      // 60 calls, 20 s deadlines: every one is served, about 1.5 s of work.
      const { retryAfterMs, drainMs } = await drain('patient', 30, 20_000);
      // Within a factor of the truth either way (a busy machine slows the drain, not the hint).
      expect(retryAfterMs).toBeLessThan(3 * drainMs + 500);
      expect(retryAfterMs).toBeGreaterThan(drainMs / 10);
    });

    it('a waiter timing out is told the drain time of the queue ahead of it', async () => {
      const store = await fleet.store(PATIENT);
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
