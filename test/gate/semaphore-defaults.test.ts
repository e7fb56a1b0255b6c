/** Issue 23's gate-level defaults: what bites people coming from p-limit and p-queue. */
import { describe, expect, it } from 'vitest';
import { QueueClearedError, QueueFullError } from '../../src/common/errors.js';
import { type Permit, Semaphore } from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';

/** A task of `ms` milliseconds: the work being limited, not a wait for a condition. */
const task = (ms: number) => (): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * 1,000 `run()` calls of 10 ms tasks at once on a gate of 20 (queue 200): the first shed's
 * Retry-After, and how long the queue really took to drain (until the last admitted task ended).
 */
async function burst(gate: Semaphore): Promise<{ retryAfterMs: number; drainMs: number }> {
  const start = performance.now();
  let shed: QueueFullError | undefined;
  const calls: Promise<void>[] = [];
  for (let i = 0; i < 1000; i++) {
    calls.push(
      gate.run(task(10)).catch((error: unknown) => {
        if (!(error instanceof QueueFullError)) throw error;
        shed ??= error;
      }),
    );
  }
  expectInvariant(gate);
  await Promise.all(calls);
  expectInvariant(gate);
  expect(shed).toBeInstanceOf(QueueFullError);
  return { retryAfterMs: shed!.retryAfterMs, drainMs: performance.now() - start };
}

describe('Retry-After of a gate that has measured no hold yet', () => {
  it('is not 100x the real drain time ("retry after 10.1 s" for 10 ms tasks)', async () => {
    const gate = new Semaphore({ limit: 20 });
    const first = await burst(gate);
    // Every caller queued now has left by the wait deadline: a fresh gate never says more.
    expect(first.retryAfterMs).toBeLessThanOrEqual(1000);
    expect(first.retryAfterMs).toBeLessThan(20 * first.drainMs);
    // Once holds are measured the estimate follows them. (No lower bound: on a busy machine the
    // drain also pays for the sheds and the scheduling between tasks, which no hold time shows.)
    const second = await burst(gate);
    expect(second.retryAfterMs).toBeLessThan(4 * second.drainMs);
  });
});

describe('QueueFullError', () => {
  it('says which bound was hit and how to raise it', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 1, name: 'db' });
    const held = gate.tryAcquire()!;
    const waiting = gate.acquire();
    const error = (await gate.acquire().catch((e: unknown) => e)) as QueueFullError;
    expect(error).toBeInstanceOf(QueueFullError);
    expect(error.message).toMatch(/^queue for db is full \(1 waiting, maxQueue 1\)/);
    expect(error.message).toMatch(/raise maxQueue \(maxQueue: Infinity for batch work\)/);
    held.release();
    (await waiting).release();
    expectInvariant(gate);
  });

  it("names a priority class's own bound when that one was hit", () => {
    const gate = new Semaphore({
      limit: 1,
      priorities: [
        { name: 'interactive', share: 0.8 },
        { name: 'batch', share: 0.2, maxQueue: 0 },
      ],
    });
    gate.tryAcquire();
    const refused: unknown[] = [];
    gate.wait({ granted: () => {}, rejected: (e) => refused.push(e) }, { priority: 'batch' });
    expect((refused[0] as Error).message).toMatch(/\(0 waiting, priorities\[1\]\.maxQueue 0\)/);
  });

  it('maxQueue: Infinity queues batch work without bound: 1,000 run() calls on a gate of 20', async () => {
    const gate = new Semaphore({ limit: 20, maxQueue: Number.POSITIVE_INFINITY });
    let running = 0;
    let peak = 0;
    const results = await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        gate.run(async () => {
          peak = Math.max(peak, ++running);
          await Promise.resolve();
          running--;
          return i;
        }),
      ),
    );
    expect(results).toHaveLength(1000);
    expect(peak).toBe(20);
    expect(gate.stats()).toMatchObject({ maxQueue: Number.POSITIVE_INFINITY, shedQueueFull: 0 });
    expectInvariant(gate);
  });
});

describe('promise-returning methods reject, never throw', () => {
  it('acquire() and run() with a weight above the limit reject with the RangeError', async () => {
    const gate = new Semaphore({ limit: 1, name: 'mem' });
    let acquired: Promise<Permit> | undefined;
    expect(() => {
      acquired = gate.acquire({ weight: 3 });
    }).not.toThrow();
    await expect(acquired).rejects.toThrow(RangeError);
    let ran = false;
    const run = gate.run(
      () => {
        ran = true;
      },
      { weight: 3 },
    );
    await expect(run).rejects.toThrow(/weight 3 exceeds the limit 1 of mem/);
    expect(ran).toBe(false);
    expectInvariant(gate);
  });

  it('acquire() and run() with bad options reject with the TypeError naming them', async () => {
    const gate = new Semaphore({ limit: 1 });
    await expect(gate.acquire({ priority: 'batch' })).rejects.toThrow(TypeError);
    await expect(gate.acquire({ timeout: -1 })).rejects.toThrow(/timeout must be a duration/);
    await expect(gate.acquire({ signal: 'x' as never })).rejects.toThrow(TypeError);
    await expect(gate.acquire('fast' as never)).rejects.toThrow(TypeError);
    await expect(gate.run(() => 1, { colour: 'red' } as never)).rejects.toThrow(/colour/);
    expect(gate.stats()).toMatchObject({ held: 0, queued: 0, acquired: 0 });
  });
});

describe('onIdle() and clearQueue(): p-queue habits', () => {
  it('onIdle() resolves once nothing is held or queued, and at once on an idle gate', async () => {
    const gate = new Semaphore({ limit: 2 });
    await gate.onIdle();
    const done: number[] = [];
    for (let i = 0; i < 6; i++) void gate.run(task(5)).then(() => done.push(i));
    await gate.onIdle();
    expect(gate.stats()).toMatchObject({ held: 0, queued: 0, acquired: 6, released: 6 });
    expectInvariant(gate);
    // Every onIdle() caller hears it, not only the first.
    const a = gate.acquire();
    const both = Promise.all([gate.onIdle(), gate.onIdle()]);
    (await a).release();
    await both;
  });

  it('clearQueue() rejects every waiter with QueueClearedError, leaves holders alone', async () => {
    const gate = new Semaphore({ limit: 1, name: 'jobs' });
    const held = gate.tryAcquire()!;
    const waiting = [gate.acquire(), gate.run(() => 'never'), gate.acquire({ weight: 1 })];
    const settled = Promise.allSettled(waiting);
    expect(gate.clearQueue()).toBe(3);
    const results = await settled;
    for (const result of results) {
      expect(result.status).toBe('rejected');
      const reason = (result as PromiseRejectedResult).reason;
      expect(reason).toBeInstanceOf(QueueClearedError);
      expect(reason).toMatchObject({ code: 'HOSTGATE_QUEUE_CLEARED', partner: 'jobs' });
    }
    expect(gate.stats()).toMatchObject({ held: 1, queued: 0, abortedWaiting: 3 });
    expectInvariant(gate);
    // The gate keeps working: the holder's release serves a new caller.
    const next = gate.acquire();
    held.release();
    (await next).release();
    expect(gate.clearQueue()).toBe(0);
    expectInvariant(gate);
  });

  it('clearQueue(reason) rejects with the reason given', async () => {
    const gate = new Semaphore({ limit: 1 });
    gate.tryAcquire();
    const waiting = gate.acquire();
    const reason = new Error('shutting down');
    gate.clearQueue(reason);
    await expect(waiting).rejects.toBe(reason);
  });
});
