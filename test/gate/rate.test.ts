import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { QueueTimeoutError, RateLimitedError, ShedError } from '../../src/common/errors.js';
import { type Permit, Semaphore } from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';
import { maxInWindow } from '../helpers/windows.js';

/** Replay a failure with HOSTGATE_FC_SEED=<seed printed by fast-check>. */
const SEED = Number(process.env.HOSTGATE_FC_SEED ?? 0x7a7e);
const realSetImmediate = globalThis.setImmediate;
const flush = (): Promise<void> => new Promise((resolve) => realSetImmediate(resolve));

describe('rate options', () => {
  it('rejects bad rates with an error naming the option and the value', () => {
    const bad: [unknown, RegExp][] = [
      [{ limit: 0 }, /rate\.limit must be a positive finite number, got 0/],
      [{ limit: -5 }, /rate\.limit .* got -5/],
      [{ limit: Number.POSITIVE_INFINITY }, /rate\.limit .* got Infinity/],
      [
        { limit: 10, per: Number.POSITIVE_INFINITY },
        /rate\.per must be a positive finite number of ms, got Infinity/,
      ],
      [{ limit: 10, per: 0 }, /rate\.per .* got 0/],
      [{ limit: 10, burst: -1 }, /rate\.burst/],
      [{ limit: 10, burst: 1.5 }, /rate\.burst/],
      [{ limit: 10, perSecond: 3 }, /perSecond/],
      [5, /rate/],
    ];
    for (const [rate, message] of bad) {
      expect(() => new Semaphore({ limit: 1, rate: rate as never })).toThrow(message);
    }
  });

  it('refuses a cost on a gate without a rate, and a cost above burst + 1 (never grantable)', async () => {
    const plain = new Semaphore({ limit: 1, name: 'plain' });
    await expect(plain.acquire({ cost: 2 })).rejects.toThrow(
      /cost counts against a rate, and plain has none/,
    );
    const rated = new Semaphore({ limit: 1, name: 'r', rate: { limit: 10, burst: 3 } });
    await expect(rated.acquire({ cost: 5 })).rejects.toThrow(RangeError);
    await expect(rated.acquire({ cost: 5 })).rejects.toThrow(/cost 5 exceeds burst \+ 1 \(4\)/);
    await expect(rated.acquire({ cost: -1 })).rejects.toThrow(
      /cost must be a non-negative finite number, got -1/,
    );
    expect(() => rated.tryAcquire({ cost: Number.NaN })).toThrow(TypeError);
    const permit = rated.tryAcquire({ cost: 4 })!;
    expect(() => permit.settleCost(-2)).toThrow(/settleCost\(actual\)/);
    permit.release();
    const p = plain.tryAcquire()!;
    expect(() => p.settleCost(1)).toThrow(/plain has no rate/);
    p.release();
    expectInvariant(rated);
    expectInvariant(plain);
  });
});

describe('a gate with a rate (fake clock)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });
  const now = () => Date.now();

  it('grants limit + burst at once, then one per interval, in arrival order', async () => {
    const gate = new Semaphore({
      limit: 100,
      now,
      maxQueue: 100,
      queueTimeout: 1000,
      rate: { limit: 10, per: 100, burst: 2 },
    });
    const t0 = Date.now();
    const order: number[] = [];
    const grants: number[] = [];
    const all = Array.from({ length: 8 }, (_, i) =>
      gate.acquire().then((p) => {
        order.push(i);
        grants.push(Date.now() - t0);
        return p;
      }),
    );
    await flush();
    expect(grants).toEqual([0, 0, 0]); // burst 2: three at once
    expect(gate.stats().rate).toMatchObject({
      limit: 10,
      per: 100,
      burst: 2,
      backlog: 5,
      nextSlotMs: 10,
    });
    expectInvariant(gate);
    await vi.advanceTimersByTimeAsync(60);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(grants).toEqual([0, 0, 0, 10, 20, 30, 40, 50]);
    for (const p of await Promise.all(all)) p.release();
    expectInvariant(gate);
    expect(gate.stats().rate!.backlog).toBe(0);
  });

  it('a head whose permit is free waits for its slot, and nobody behind it barges', async () => {
    const gate = new Semaphore({ limit: 2, now, rate: { limit: 1, per: 100 } });
    const first = gate.tryAcquire()!;
    first.release();
    const head = gate.acquire();
    await flush();
    expect(gate.queued).toBe(1);
    expect(gate.available).toBe(2); // a permit is free: the slot is what it waits for
    expect(gate.tryAcquire()).toBeUndefined(); // no barging past the head
    expectInvariant(gate);
    await vi.advanceTimersByTimeAsync(99);
    expect(gate.queued).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    (await head).release();
    expectInvariant(gate);
  });

  it('waits for a permit and for its slot: both at the head', async () => {
    const gate = new Semaphore({ limit: 1, now, rate: { limit: 10, per: 100 } });
    const holder = gate.tryAcquire()!;
    const next = gate.acquire();
    await vi.advanceTimersByTimeAsync(50); // slot long come, permit still held
    expect(gate.queued).toBe(1);
    holder.release();
    expect(gate.queued).toBe(0);
    (await next).release();
    expectInvariant(gate);
  });

  it('sheds at once a caller whose wait deadline comes before its slot, with the exact retryAfterMs', async () => {
    const gate = new Semaphore({
      limit: 10,
      now,
      name: 'billing',
      queueTimeout: 250,
      rate: { limit: 10, per: 1000 },
    });
    gate.tryAcquire()!.release(); // the one slot of this 100 ms
    const queued = [gate.acquire(), gate.acquire()]; // slots at 100 and 200 ms
    const shed = gate.acquire(); // slot at 300 ms: past its 250 ms deadline
    const error = await shed.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitedError);
    expect(error).toBeInstanceOf(ShedError);
    expect((error as RateLimitedError).code).toBe('HOSTGATE_RATE_LIMITED');
    expect((error as RateLimitedError).retryAfterMs).toBe(300);
    expect((error as Error).message).toMatch(
      /rate of billing \(10 per 1000 ms, burst 0; 2 queued\).*retry after 300 ms/,
    );
    // A per-call deadline long enough waits instead.
    const patient = gate.acquire({ timeout: 400 });
    expect(gate.stats().rate).toMatchObject({ backlog: 3, shedRateLimited: 1 });
    expect(gate.retryAfterMs()).toBe(400);
    await vi.advanceTimersByTimeAsync(300);
    for (const p of await Promise.all([...queued, patient])) p.release();
    expectInvariant(gate);
  });

  it('a waiter that outlives its deadline waiting for a permit is shed by the deadline as before', async () => {
    const gate = new Semaphore({
      limit: 1,
      now,
      queueTimeout: 50,
      rate: { limit: 100, per: 1000 },
    });
    const holder = gate.tryAcquire()!;
    const waiting = gate.acquire().catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(50);
    expect(await waiting).toBeInstanceOf(QueueTimeoutError);
    holder.release();
    expect(gate.stats().rate!.backlog).toBe(0);
    expectInvariant(gate);
  });

  it('an aborted head hands its slot to the next waiter', async () => {
    const gate = new Semaphore({ limit: 5, now, rate: { limit: 10, per: 100 } });
    gate.tryAcquire()!.release();
    const ac = new AbortController();
    const head = gate.acquire({ signal: ac.signal });
    const second = gate.acquire();
    ac.abort(new Error('gone'));
    await expect(head).rejects.toThrow('gone');
    expect(gate.stats().rate!.backlog).toBe(1);
    await vi.advanceTimersByTimeAsync(10); // the head's slot, now the second's
    expect(gate.queued).toBe(0);
    (await second).release();
    expectInvariant(gate);
  });

  it('priority classes share the one rate: the class picked next waits at its head for the slot', async () => {
    const gate = new Semaphore({
      limit: 10,
      now,
      rate: { limit: 10, per: 100 },
      priorities: [
        { name: 'interactive', share: 0.75 },
        { name: 'batch', share: 0.25 },
      ],
    });
    gate.tryAcquire()!.release();
    const order: string[] = [];
    const ask = (priority: string, id: string) =>
      gate.acquire({ priority }).then((p) => {
        order.push(id);
        p.release();
      });
    const all = [
      ask('batch', 'b1'),
      ask('batch', 'b2'),
      ask('interactive', 'i1'),
      ask('interactive', 'i2'),
    ];
    expect(gate.stats().rate!.backlog).toBe(4);
    await vi.advanceTimersByTimeAsync(40);
    await Promise.all(all);
    expect(order).toHaveLength(4);
    expect(order.indexOf('i1')).toBeLessThan(order.indexOf('b2')); // interactive's share is served
    expect(order.indexOf('b1')).toBeLessThan(order.indexOf('b2')); // FIFO within a class
    expectInvariant(gate);
  });

  it('cost 5 takes five slots', async () => {
    const gate = new Semaphore({ limit: 10, now, rate: { limit: 10, per: 100, burst: 4 } });
    const big = gate.tryAcquire({ cost: 5 })!;
    expect(big.cost).toBe(5);
    expect(gate.tryAcquire()).toBeUndefined(); // the bucket (burst + 1 = 5 units) is spent
    const next = gate.acquire({ cost: 2 });
    await vi.advanceTimersByTimeAsync(19);
    expect(gate.queued).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    (await next).release();
    big.release();
    expectInvariant(gate);
  });

  it('settleCost corrects the rate: a refund lets the next call go sooner, extra units delay it', async () => {
    const gate = new Semaphore({ limit: 10, now, rate: { limit: 10, per: 100, burst: 9 } });
    const call = gate.tryAcquire({ cost: 10 })!; // charged the whole bucket up front
    const next = gate.acquire();
    expect(gate.queued).toBe(1);
    call.settleCost(3); // used 3: 7 units back, and the waiter goes at once
    expect(call.cost).toBe(3);
    expect(gate.queued).toBe(0);
    (await next).release();
    call.release();
    call.settleCost(3); // after the release, and again: nothing more moves
    expect(gate.stats().rate!.nextSlotMs).toBe(0);
    const heavy = gate.tryAcquire({ cost: 1 })!;
    heavy.settleCost(25); // 24 units more than charged: a debt the next calls wait out
    heavy.release();
    // TAT 50 + 24 units × 10 ms = 290; a unit conforms once TAT + 10 − now ≤ 100: at 200 ms.
    expect(gate.stats().rate!.nextSlotMs).toBe(200);
    const later = gate.acquire({ timeout: 1000 });
    await vi.advanceTimersByTimeAsync(199);
    expect(gate.queued).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    (await later).release();
    expectInvariant(gate);
  });
});

describe('rate schedules (property)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  type Step =
    | { kind: 'acquire'; cost: number; weight: number; timeout: number }
    | { kind: 'release' }
    | { kind: 'abort' }
    | { kind: 'settle'; actual: number }
    | { kind: 'tick'; ms: number }
    | { kind: 'setLimit'; limit: number };
  const stepArb: fc.Arbitrary<Step> = fc.oneof(
    fc.record({
      kind: fc.constant('acquire' as const),
      cost: fc.integer({ min: 0, max: 3 }),
      weight: fc.integer({ min: 1, max: 2 }),
      timeout: fc.constantFrom(40, 200, 1000),
    }),
    fc.record({ kind: fc.constant('release' as const) }),
    fc.record({ kind: fc.constant('abort' as const) }),
    fc.record({ kind: fc.constant('settle' as const), actual: fc.integer({ min: 0, max: 6 }) }),
    fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 40 }) }),
    fc.record({ kind: fc.constant('setLimit' as const), limit: fc.integer({ min: 2, max: 4 }) }),
  );

  it('never grants more than limit + burst units in any window of per ms, never out of order, invariant after every step', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          limit: fc.integer({ min: 1, max: 5 }),
          per: fc.constantFrom(50, 100, 70),
          burst: fc.integer({ min: 2, max: 4 }),
        }),
        fc.array(stepArb, { minLength: 1, maxLength: 60 }),
        async (rate, steps) => {
          vi.useFakeTimers();
          try {
            const gate = new Semaphore({ limit: 3, now: () => Date.now(), maxQueue: 20, rate });
            const grantTimes: number[] = [];
            const grantCosts: number[] = [];
            const grantOrder: number[] = [];
            const held: Permit[] = [];
            const waiting: { id: number; ac: AbortController }[] = [];
            let id = 0;
            for (const step of steps) {
              if (step.kind === 'acquire') {
                const me = id++;
                const ac = new AbortController();
                const entry = { id: me, ac };
                waiting.push(entry);
                gate
                  .acquire({
                    cost: step.cost,
                    weight: step.weight,
                    timeout: step.timeout,
                    signal: ac.signal,
                  })
                  .then(
                    (p) => {
                      grantTimes.push(Date.now());
                      grantCosts.push(p.cost);
                      grantOrder.push(me);
                      held.push(p);
                      waiting.splice(waiting.indexOf(entry), 1);
                    },
                    () => waiting.splice(waiting.indexOf(entry), 1),
                  );
              } else if (step.kind === 'release') held.shift()?.release();
              else if (step.kind === 'abort') waiting[0]?.ac.abort(new Error('abort'));
              else if (step.kind === 'settle') {
                const p = held[0];
                // Debts only: the promise is exact in the units charged at the grant, and a
                // debt can only push later slots back (refunds: the example test above).
                if (p !== undefined) p.settleCost(Math.max(p.cost, step.actual));
              } else if (step.kind === 'tick') await vi.advanceTimersByTimeAsync(step.ms);
              else gate.setLimit(step.limit);
              await flush();
              expectInvariant(gate);
              expect(maxInWindow(grantTimes, rate.per, grantCosts)).toBeLessThanOrEqual(
                rate.limit + rate.burst,
              );
              // One class, FIFO: grants in the order asked (the shed and aborted leave gaps).
              expect(grantOrder).toEqual([...grantOrder].sort((a, b) => a - b));
            }
            for (const p of held) p.release();
            await vi.advanceTimersByTimeAsync(2000);
            expectInvariant(gate);
            expect(gate.stats().rate!.backlog).toBe(0);
          } finally {
            vi.useRealTimers();
          }
        },
      ),
      { seed: SEED, numRuns: 150 },
    );
  });
});

describe('rate slack: the promise where calls arrive (issue 33 item 4)', () => {
  it('rejects a bad slack, and a slack on a shared rate, naming the option', async () => {
    const { resolveRate } = await import('../../src/gate/rate.js');
    expect(() => new Semaphore({ limit: 1, rate: { limit: 1, slack: -1 } })).toThrow(
      'rate.slack must be a non-negative finite number of ms, got -1',
    );
    expect(() => resolveRate('rate', { limit: 1, slack: 50 })).toThrow(
      "rate.slack is 50, but a shared gate's rate has no slack",
    );
    // What the slack takes of the burst, it takes of the most one call may cost.
    const gate = new Semaphore({ limit: 1, rate: { limit: 10, per: 100, burst: 5, slack: 20 } });
    expect(() => gate.tryAcquire({ cost: 5 })).toThrow(/exceeds 4.*lower rate\.slack/);
    expect(gate.tryAcquire({ cost: 4 })).toBeDefined();
    // A partner rule's default: 100 ms unless it charges a cost (or says otherwise).
    const { partnerRate } = await import('../../src/gate/rate.js');
    expect(partnerRate({ limit: 1 }, false)).toEqual({ limit: 1, slack: 100 });
    expect(partnerRate({ limit: 1, slack: undefined }, false)).toEqual({ limit: 1, slack: 100 });
    expect(partnerRate({ limit: 1, slack: 0 }, false)).toEqual({ limit: 1, slack: 0 });
    expect(partnerRate({ limit: 1 }, true)).toEqual({ limit: 1 });
  });

  it('arrivals shifted by any latencies within slack of each other: at most limit + burst in any window of per', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          limit: fc.integer({ min: 1, max: 6 }),
          per: fc.constantFrom(50, 100, 70),
          burst: fc.integer({ min: 0, max: 6 }),
          slack: fc.constantFrom(5, 20, 35, 120),
        }),
        fc.array(
          fc.oneof(
            fc.record({
              kind: fc.constant('acquire' as const),
              latency: fc.double({ min: 0, max: 1, noNaN: true }),
            }),
            fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 40 }) }),
          ),
          { minLength: 1, maxLength: 80 },
        ),
        async (rate, steps) => {
          vi.useFakeTimers();
          try {
            const gate = new Semaphore({
              limit: 100,
              now: () => Date.now(),
              maxQueue: 100,
              queueTimeout: 60_000,
              rate,
            });
            const arrivals: number[] = [];
            const pending: Promise<unknown>[] = [];
            for (const step of steps) {
              if (step.kind === 'acquire') {
                pending.push(
                  gate.acquire().then((p) => {
                    arrivals.push(Date.now() + step.latency * rate.slack);
                    p.release();
                  }),
                );
              } else await vi.advanceTimersByTimeAsync(step.ms);
              await flush();
            }
            await vi.advanceTimersByTimeAsync(60_000);
            await Promise.all(pending);
            arrivals.sort((a, b) => a - b);
            expect(maxInWindow(arrivals, rate.per)).toBeLessThanOrEqual(rate.limit + rate.burst);
            expectInvariant(gate);
          } finally {
            vi.useRealTimers();
          }
        },
      ),
      { seed: SEED, numRuns: 150 },
    );
  });
});
