/** Priority classes: guaranteed minimum shares, FIFO within a class, shedding the lowest first. */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { QueueFullError, QueueTimeoutError } from '../../src/common/errors.js';
import type { ShedMessage } from '../../src/gate/diagnostics.js';
import {
  type Permit,
  Semaphore,
  type WaitTarget,
  type WaitTicket,
} from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';

const CLASSES = [
  { name: 'interactive', share: 0.75 },
  { name: 'batch', share: 0.25 },
];

/** A wait() caller that records its grant (synchronously) in `log`. */
function caller(log: string[], permits: Permit[], name: string): WaitTarget {
  return {
    granted(permit) {
      log.push(name);
      permits.push(permit);
    },
    rejected(reason) {
      log.push(`${name}:${(reason as Error).name}`);
    },
  };
}

describe('priority classes', () => {
  it('gives each waiting class its share: 3 interactive to 1 batch while both wait', () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 100, priorities: CLASSES });
    const log: string[] = [];
    const permits: Permit[] = [];
    permits.push(gate.tryAcquire()!);
    for (let i = 0; i < 8; i++) {
      gate.wait(caller(log, permits, `i${i}`), { priority: 'interactive' });
      gate.wait(caller(log, permits, `b${i}`), { priority: 'batch' });
    }
    for (let i = 0; i < 8; i++) permits.shift()!.release();
    // FIFO within each class; between them, 3 : 1.
    expect(log).toEqual(['i0', 'b0', 'i1', 'i2', 'i3', 'b1', 'i4', 'i5']);
    expect(gate.stats().priorities).toMatchObject({
      interactive: { queued: 2, acquired: 7 }, // the first permit too: unnamed is the first class
      batch: { queued: 6, acquired: 2 },
    });
    expectInvariant(gate);
  });

  it('serves a batch backlog in full once interactive traffic stops (no starvation either way)', () => {
    const gate = new Semaphore({ limit: 2, priorities: CLASSES });
    const log: string[] = [];
    const permits: Permit[] = [gate.tryAcquire()!, gate.tryAcquire()!];
    for (let i = 0; i < 3; i++) gate.wait(caller(log, permits, `b${i}`), { priority: 'batch' });
    for (let i = 0; i < 3; i++) permits.shift()!.release();
    expect(log).toEqual(['b0', 'b1', 'b2']);
  });

  it('refuses an arrival whose own class queue is full, and keeps the other classes open', () => {
    const gate = new Semaphore({
      limit: 1,
      maxQueue: 10,
      priorities: [
        { name: 'interactive', share: 0.75 },
        { name: 'batch', share: 0.25, maxQueue: 1 },
      ],
    });
    gate.tryAcquire();
    const log: string[] = [];
    gate.wait(caller(log, [], 'b0'), { priority: 'batch' });
    gate.wait(caller(log, [], 'b1'), { priority: 'batch' });
    gate.wait(caller(log, [], 'i0'), { priority: 'interactive' });
    expect(log).toEqual(['b1:QueueFullError']);
    expect(gate.stats().priorities?.batch).toMatchObject({ queued: 1, shedQueueFull: 1 });
  });

  it('sheds the newest waiter of the lowest class when the queue is full, never a higher one', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 2, priorities: CLASSES, name: 'p' });
    const shed: ShedMessage[] = [];
    const onShed = (m: unknown) => shed.push(m as ShedMessage);
    subscribe('hostgate:shed', onShed);
    try {
      gate.tryAcquire();
      const log: string[] = [];
      gate.wait(caller(log, [], 'b0'), { priority: 'batch' });
      gate.wait(caller(log, [], 'b1'), { priority: 'batch' });
      gate.wait(caller(log, [], 'i0'), { priority: 'interactive' }); // sheds b1, the newest batch
      gate.wait(caller(log, [], 'i1'), { priority: 'interactive' }); // sheds b0
      gate.wait(caller(log, [], 'i2'), { priority: 'interactive' }); // nobody lower: refused
      gate.wait(caller(log, [], 'b2'), { priority: 'batch' }); // refused
      expect(log).toEqual([
        'b1:QueueFullError',
        'b0:QueueFullError',
        'i2:QueueFullError',
        'b2:QueueFullError',
      ]);
      expect(shed.map((m) => m.priority)).toEqual(['batch', 'batch', 'interactive', 'batch']);
      expect(shed[0]!.error).toBeInstanceOf(QueueFullError);
      expect(gate.queued).toBe(2);
      expectInvariant(gate);
    } finally {
      unsubscribe('hostgate:shed', onShed);
    }
  });

  it('takes priority through acquire() and run() too', async () => {
    const gate = new Semaphore({ limit: 1, priorities: CLASSES });
    const first = gate.tryAcquire()!;
    const order: string[] = [];
    const batch = gate.run(() => order.push('batch'), { priority: 'batch' });
    const interactive = gate.acquire({ priority: 'interactive' }).then((p) => {
      order.push('interactive');
      p.release();
    });
    first.release();
    await Promise.all([batch, interactive]);
    expect(order).toEqual(['interactive', 'batch']);
  });

  it('rejects bad classes and unknown priorities with a TypeError naming them', async () => {
    expect(() => new Semaphore({ limit: 1, priorities: [] })).toThrow(/priorities must be/);
    expect(() => new Semaphore({ limit: 1, priorities: [{ name: 'a', share: 0 }] })).toThrow(
      /share/,
    );
    expect(
      () =>
        new Semaphore({
          limit: 1,
          priorities: [
            { name: 'a', share: 0.7 },
            { name: 'b', share: 0.7 },
          ],
        }),
    ).toThrow(/add up to 1.4/);
    expect(
      () =>
        new Semaphore({
          limit: 1,
          priorities: [
            { name: 'a', share: 0.5 },
            { name: 'a', share: 0.5 },
          ],
        }),
    ).toThrow(/unique/);
    const gate = new Semaphore({ limit: 1, priorities: CLASSES });
    // Promise-returning methods reject, never throw (issue 23).
    await expect(gate.acquire({ priority: 'bulk' })).rejects.toThrow(
      /interactive, batch, got "bulk"/,
    );
    await expect(new Semaphore({ limit: 1 }).acquire({ priority: 'batch' })).rejects.toThrow(
      TypeError,
    );
  });

  describe('deadlines', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    it('applies each class its own wait deadline', async () => {
      const gate = new Semaphore({
        limit: 1,
        queueTimeout: 1000,
        priorities: [
          { name: 'interactive', share: 0.75, queueTimeout: 100 },
          { name: 'batch', share: 0.25 },
        ],
      });
      gate.tryAcquire();
      const interactive = gate.acquire({ priority: 'interactive' }).catch((e: unknown) => e);
      const batch = gate.acquire({ priority: 'batch' }).catch((e: unknown) => e);
      await vi.advanceTimersByTimeAsync(100);
      expect(await interactive).toBeInstanceOf(QueueTimeoutError);
      expect(gate.stats().priorities?.interactive?.shedQueueTimeout).toBe(1);
      await vi.advanceTimersByTimeAsync(900);
      expect(await batch).toBeInstanceOf(QueueTimeoutError);
    });
  });
});

describe('priority classes under random schedules', () => {
  const classesArb = fc
    .array(fc.integer({ min: 1, max: 10 }), { minLength: 2, maxLength: 3 })
    .map((parts) => {
      const total = parts.reduce((a, b) => a + b, 0);
      return parts.map((p, i) => ({ name: `c${i}`, share: p / total }));
    });
  const opArb = fc.oneof(
    fc.record({
      kind: fc.constant('arrive' as const),
      cls: fc.nat(),
      weight: fc.integer({ min: 1, max: 2 }),
    }),
    fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
  );

  it('keeps the invariant, FIFO within a class, and each waiting class its share within the stated bound', () => {
    fc.assert(
      fc.property(
        classesArb,
        fc.integer({ min: 2, max: 3 }),
        fc.array(opArb, { minLength: 10, maxLength: 120, size: 'max' }),
        (classes, limit, ops) => {
          const gate = new Semaphore({
            limit,
            maxQueue: 1000,
            queueTimeout: 60_000,
            priorities: classes,
          });
          const holders: Permit[] = [];
          const nextId = classes.map(() => 0);
          const grantedIds = classes.map(() => [] as number[]);
          /** Per grant: its class, its weight, and which classes were waiting just before it. */
          const grants: { cls: number; weight: number; waiting: boolean[] }[] = [];
          const queuedIn = (k: number) => gate.stats().priorities?.[classes[k]!.name]?.queued ?? 0;
          let refused = 0;
          const tickets: (WaitTicket | undefined)[] = [];
          const target = (cls: number, id: number, weight: number): WaitTarget => ({
            granted(permit) {
              holders.push(permit);
              grantedIds[cls]!.push(id);
              // Waiting just before this grant: this class, and every class still queued now.
              const waiting = classes.map((_, k) => k === cls || queuedIn(k) > 0);
              grants.push({ cls, weight, waiting });
            },
            rejected() {
              refused++;
            },
          });
          for (const op of ops) {
            if (op.kind === 'arrive') {
              const cls = op.cls % classes.length;
              tickets.push(
                gate.wait(target(cls, nextId[cls]!++, op.weight), {
                  priority: classes[cls]!.name,
                  weight: op.weight,
                }),
              );
            } else if (holders.length > 0) {
              holders.splice(op.pick % holders.length, 1)[0]!.release();
            }
            expectInvariant(gate);
          }
          expect(refused).toBe(0); // nothing is refused in this schedule
          // No waiter outlives its schedule (its deadline timer would fire later).
          for (const ticket of tickets) ticket?.cancel(new Error('schedule over'));
          // FIFO within every class.
          for (const ids of grantedIds) expect(ids).toEqual([...ids].sort((a, b) => a - b));
          // The bound: over any run of grants during which class c waited throughout, c got at
          // least floor(share × units) − maxWeight of the units granted in it.
          const maxWeight = 2;
          for (let c = 0; c < classes.length; c++) {
            const share = classes[c]!.share;
            for (let i = 0; i < grants.length; i++) {
              let units = 0;
              let mine = 0;
              for (let j = i; j < grants.length && grants[j]!.waiting[c]; j++) {
                units += grants[j]!.weight;
                if (grants[j]!.cls === c) mine += grants[j]!.weight;
                expect(
                  mine,
                  `class ${c} share ${share} over ${units} units`,
                ).toBeGreaterThanOrEqual(Math.floor(share * units) - 2 * maxWeight);
              }
            }
          }
        },
      ),
      {
        numRuns: Number(process.env.HOSTGATE_FC_RUNS ?? 100),
        seed: Number(process.env.HOSTGATE_FC_SEED ?? 0x9a10),
      },
    );
  }, 300_000); // seconds on a quiet machine; minutes with every core taken
});
