/** Weighted permits, with Go `semaphore.Weighted` semantics (issue 14). */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { runMemoryBudget } from '../../examples/memory-budget.js';
import { QueueTimeoutError } from '../../src/common/errors.js';
import { type Permit, Semaphore, type WaitTarget } from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';

const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Records the order in which acquire() calls were granted. */
function recorder(gate: Semaphore) {
  const order: string[] = [];
  const permits = new Map<string, Permit>();
  const take = (name: string, weight: number, options: { signal?: AbortSignal } = {}) =>
    gate.acquire({ weight, timeout: 60_000, ...options }).then(
      (permit) => {
        order.push(name);
        permits.set(name, permit);
        return permit;
      },
      (error: unknown) => {
        order.push(`${name}:rejected`);
        return error;
      },
    );
  return { order, permits, take };
}

describe('weighted permits', () => {
  it('counts held and available in weight units', () => {
    const gate = new Semaphore({ limit: 10 });
    const a = gate.tryAcquire(4)!;
    const b = gate.tryAcquire(5)!;
    expect(a.weight).toBe(4);
    expect(gate.stats()).toMatchObject({ held: 9, available: 1 });
    expect(gate.tryAcquire(2)).toBeUndefined();
    const c = gate.tryAcquire()!;
    expect(c.weight).toBe(1);
    expectInvariant(gate);
    a.release();
    b.release();
    c.release();
    expect(gate.stats()).toMatchObject({ held: 0, available: 10, acquired: 3, released: 3 });
  });

  it('refuses a weight above the limit at once, with an error naming both', async () => {
    const gate = new Semaphore({ limit: 4, name: 'mem' });
    expect(() => gate.tryAcquire(5)).toThrow(RangeError);
    // Promise-returning methods reject, never throw (issue 23).
    await expect(gate.acquire({ weight: 5 })).rejects.toThrow(
      /weight 5 exceeds the limit 4 of mem/,
    );
    await expect(gate.run(() => 1, { weight: 5 })).rejects.toThrow(RangeError);
    const target: WaitTarget = { granted: vi.fn(), rejected: vi.fn() };
    expect(() => gate.wait(target, { weight: 5 })).toThrow(RangeError);
    for (const bad of [0, -1, 1.5, Number.NaN, '2']) {
      expect(() => gate.tryAcquire(bad as number)).toThrow(TypeError);
      await expect(gate.acquire({ weight: bad as number })).rejects.toThrow(
        /weight must be a positive integer/,
      );
    }
    expect(gate.stats()).toMatchObject({ held: 0, queued: 0, acquired: 0 });
  });

  it('serves a heavy head before lighter callers behind it, however many arrive (no starvation)', async () => {
    const gate = new Semaphore({ limit: 10, maxQueue: 100 });
    const { order, permits, take } = recorder(gate);
    const first = gate.tryAcquire(6)!;
    const heavy = take('heavy', 8); // 4 free: waits
    const light = [1, 2, 3].map((i) => take(`light${i}`, 1)); // would fit, must not overtake
    expect(gate.tryAcquire(1)).toBeUndefined(); // no barging past the heavy waiter
    await flush();
    expect(order).toEqual([]);
    expect(gate.stats()).toMatchObject({ held: 6, available: 4, queued: 4 });
    first.release();
    await heavy;
    await Promise.all(light.slice(0, 2));
    expect(order).toEqual(['heavy', 'light1', 'light2']); // 8 + 1 + 1 = 10
    permits.get('heavy')!.release();
    await light[2];
    expect(order).toEqual(['heavy', 'light1', 'light2', 'light3']);
    expectInvariant(gate);
  });

  it('lets the lighter waiters behind through at once when the heavy head is cancelled (golang/go#63615)', async () => {
    const gate = new Semaphore({ limit: 10 });
    const { order, take } = recorder(gate);
    gate.tryAcquire(6);
    const controller = new AbortController();
    const heavy = take('heavy', 8, { signal: controller.signal });
    const light = [take('light1', 2), take('light2', 2), take('light3', 1)];
    controller.abort(new Error('gave up'));
    await heavy;
    await Promise.all(light.slice(0, 2));
    expect(order.sort()).toEqual(['heavy:rejected', 'light1', 'light2']);
    expect(gate.stats()).toMatchObject({ held: 10, queued: 1, abortedWaiting: 1 });
    expectInvariant(gate);
  });

  it('hands a heavy grant aborted in the same tick to the waiters behind, whole', async () => {
    const gate = new Semaphore({ limit: 4 });
    const { order, take } = recorder(gate);
    const first = gate.tryAcquire(4)!;
    const controller = new AbortController();
    const heavy = take('heavy', 4, { signal: controller.signal });
    const light = [take('light1', 2), take('light2', 2)];
    first.release(); // heavy is granted all 4 ...
    controller.abort(new Error('late')); // ... and aborts before it resumes
    await heavy;
    await Promise.all(light);
    expect(order.sort()).toEqual(['heavy:rejected', 'light1', 'light2']);
    expect(gate.stats()).toMatchObject({ held: 4, queued: 0, acquired: 4, released: 2 });
    expectInvariant(gate);
  });

  it('lets the lighter waiters behind through when a heavy head cancels its wait() ticket', () => {
    const gate = new Semaphore({ limit: 3 });
    gate.tryAcquire(2);
    const granted: string[] = [];
    const target = (name: string): WaitTarget => ({
      granted: () => granted.push(name),
      rejected: () => granted.push(`${name}:rejected`),
    });
    const ticket = gate.wait(target('heavy'), { weight: 3 })!;
    gate.wait(target('light'), { weight: 1 });
    expect(granted).toEqual([]);
    ticket.cancel(new Error('cancelled'));
    expect(granted).toEqual(['heavy:rejected', 'light']);
    expectInvariant(gate);
  });

  describe('deadlines', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    it('lets the lighter waiters behind through when the heavy head times out', async () => {
      const gate = new Semaphore({ limit: 4, queueTimeout: 100 });
      gate.tryAcquire(3);
      const heavy = gate.acquire({ weight: 4 }).catch((error: unknown) => error);
      const light = gate.acquire({ weight: 1, timeout: 1000 });
      await vi.advanceTimersByTimeAsync(100);
      expect(await heavy).toBeInstanceOf(QueueTimeoutError);
      expect((await light).weight).toBe(1);
      expect(gate.stats()).toMatchObject({ held: 4, queued: 0, shedQueueTimeout: 1 });
      expectInvariant(gate);
    });
  });

  it('runs a weighted task and returns all its units when it settles', async () => {
    const gate = new Semaphore({ limit: 5 });
    const seen: number[] = [];
    await gate.run(
      () => {
        seen.push(gate.held);
      },
      { weight: 3 },
    );
    expect(seen).toEqual([3]);
    expect(gate.held).toBe(0);
  });

  it('setLimit: growing serves heavy waiters, shrinking refuses the ones that can never fit', async () => {
    const gate = new Semaphore({ limit: 4 });
    const { order, take } = recorder(gate);
    const first = gate.tryAcquire(4)!;
    const heavy = take('heavy', 3);
    const light = take('light', 1);
    gate.setLimit(8);
    await Promise.all([heavy, light]);
    expect(order).toEqual(['heavy', 'light']);
    const big = take('big', 8);
    gate.setLimit(7); // 8 can never fit now
    const error = await big;
    expect(error).toBeInstanceOf(RangeError);
    expect(order).toEqual(['heavy', 'light', 'big:rejected']);
    first.release();
    expectInvariant(gate);
  });
});

describe('examples/memory-budget.ts', () => {
  it('never exceeds the budget, and fills it: 20 jobs of 200 MB at once under 4096 MB', async () => {
    const report = await runMemoryBudget({
      jobsMb: Array.from({ length: 60 }, () => 200),
      jobMs: 2,
    });
    expect(report.peakMb).toBe(4000);
    expect(report.idleWhileWaiting).toBe(0);
  });

  it('holds the budget with mixed sizes and real buffers', async () => {
    const jobsMb = Array.from({ length: 40 }, (_, i) => (i % 10 === 9 ? 1500 : 200));
    const report = await runMemoryBudget({ jobsMb, jobMs: 2, real: true });
    expect(report.peakMb).toBeLessThanOrEqual(4096);
    expect(report.idleWhileWaiting).toBe(0);
  });
});
