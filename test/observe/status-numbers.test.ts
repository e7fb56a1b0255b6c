/**
 * Issue 33 item 6: no figure on the status page above the largest one observed. A wait of
 * 996 ms is counted at its log bucket's upper edge (1,048 ms), so in the (1 s, 2.5 s] export
 * bucket, where interpolation put the p99 at 2,470 ms for a gate whose waits never passed 1 s.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { statusHandler } from '../../middleware/index.js';
import { QueueFullError, QueueTimeoutError, Semaphore } from '../../src/index.js';

describe('the status page after a load with sheds and timeouts', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('p99 wait interpolated in a wide bucket is clamped to the longest wait: 996 ms, not 2,470', async () => {
    const now = () => Date.now();
    const gate = new Semaphore({ name: 'billing', limit: 1, maxQueue: 2, queueTimeout: 1000, now });
    const page = statusHandler(gate, { now });
    expect(page.body().partners[0]!.waitP99Ms).toBeNull(); // the first read: the window's start
    const first = gate.tryAcquire()!;
    const served = gate.acquire();
    const timedOut = gate.acquire().catch((e: unknown) => e);
    const full = await gate.acquire().catch((e: unknown) => e);
    expect(full).toBeInstanceOf(QueueFullError);
    await vi.advanceTimersByTimeAsync(996);
    first.release();
    const permit = await served;
    await vi.advanceTimersByTimeAsync(10);
    expect(await timedOut).toBeInstanceOf(QueueTimeoutError);
    await vi.advanceTimersByTimeAsync(1000);
    permit.release();
    const stats = gate.stats();
    expect(stats.wait.maxMs).toBe(996);
    const row = page.body().partners[0]!;
    expect(row.waitP99Ms).toBeLessThanOrEqual(stats.wait.maxMs);
    expect(row.waitP99Ms).toBe(996);
    expect(row).toMatchObject({ shedQueueFull: 1, shedQueueTimeout: 1, waitMaxMs: 996 });
    expect(row.holdMaxMs).toBe(stats.hold.maxMs);
    // The p50 and p99 of stats() never pass the largest either.
    expect(stats.wait.p99Ms).toBeLessThanOrEqual(stats.wait.maxMs);
    expect(stats.hold.p99Ms).toBeLessThanOrEqual(stats.hold.maxMs);
    const res = { headers: {} as Record<string, string>, body: '' };
    page(
      { url: '/', headers: {} } as never,
      {
        setHeader: (k: string, v: string) => {
          res.headers[k] = v;
        },
        end: (b: string) => {
          res.body = b;
        },
      } as never,
    );
    expect(res.body).toContain('996 ms');
    expect(res.body).not.toContain('2.5 s');
  });
});
