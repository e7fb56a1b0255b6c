/**
 * A leased share's GCRA sends a call that costs more than its burst share once the process has
 * gone that much beyond a full bucket without sending (the idle credit, GateRate.waitMs). The
 * oracle is the promise's own: in any half-open window of `per` a share of `s` calls with a burst
 * share of `b` sends at most `s + b` units; and a call the share carries is sent. On a fake clock,
 * every random choice seeded.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GateRate } from '../../src/gate/rate.js';
import { rateNeedOf, rateShareOf } from '../../src/redis/leased-rate.js';
import { maxInWindow } from '../helpers/windows.js';

/** Replay a failure with HOSTGATE_FC_SEED=<seed printed by fast-check>. */
const SEED = Number(process.env.HOSTGATE_FC_SEED ?? 0x1d1e);

let clock = 0;
beforeEach(() => {
  vi.useFakeTimers(); // take() arms a timer for the head's slot: never a real one here
  clock = 1_000;
});
afterEach(() => {
  vi.useRealTimers();
});

function shareOf(rate: { limit: number; per: number; burst: number }, share: number) {
  const gcra = new GateRate(
    rate,
    () => clock,
    () => {},
  );
  gcra.share(rate, share, rateShareOf(rate, share), Number.POSITIVE_INFINITY);
  return gcra;
}

/** Sends `costs` in order, each as soon as it conforms (after `gaps[i]` ms of the caller's own). */
function sendAll(gcra: GateRate, costs: readonly number[], gaps: readonly number[]) {
  const times: number[] = [];
  for (const [i, cost] of costs.entries()) {
    clock += gaps[i] ?? 0;
    // As the gate's timer would: wait for the slot, then a hair more while a float's rounding
    // leaves it just ahead (the real timer counts whole ms).
    for (let tries = 0; !gcra.take(cost); tries++) {
      expect(tries).toBeLessThan(3);
      clock += Math.max(gcra.waitMs(cost, 0, clock), 1e-6);
    }
    times.push(clock);
  }
  return times;
}

describe('the idle credit of a leased share', () => {
  it('a call of cost 3 on a share of 4 with no burst share (rate 20/s burst 4) is sent after 2 intervals beyond a full bucket', () => {
    const rate = { limit: 20, per: 1000, burst: 4 };
    const gcra = shareOf(rate, 4); // T = 250 ms, burst share floor(4 × 4 / 20) = 0
    expect(gcra.waitMs(3, 0, clock)).toBe(0); // never sent: idle since ever
    expect(gcra.take(3)).toBe(true);
    // Then the pace: cost 1 waits out the 3 × 250 ms the call took (no burst: at the TAT).
    expect(gcra.waitMs(1, 0, clock)).toBe(750);
    clock += 750;
    expect(gcra.take(1)).toBe(true);
    // A second cost 3 right after: the TAT (now + 250) must first fall 2 intervals behind now.
    expect(gcra.waitMs(3, 0, clock)).toBe(250 + 500);
    clock += 750;
    expect(gcra.take(3)).toBe(true);
  });

  it('the fresh-share credit race (campaign seed 72021): a share that follows none starts with a full bucket, no credit for the time it had none', () => {
    const rate = { limit: 20, per: 1000, burst: 4 };
    const gcra = new GateRate(
      rate,
      () => clock,
      () => {},
    );
    // As a leased gate's rate starts: no share until Redis answers.
    gcra.share(rate, 0, 0, Number.POSITIVE_INFINITY);
    clock += 10_000; // the rate was others' to send at meanwhile
    gcra.share(rate, 4, rateShareOf(rate, 4), Number.POSITIVE_INFINITY); // T = 250, burst 0
    expect(gcra.waitMs(1, 0, clock)).toBe(0); // a full bucket: burst share + 1 at once
    expect(gcra.waitMs(3, 0, clock)).toBe(500); // cost 3: two intervals of this share idle first
    // The same after a lease that lapsed (a share usable until a time now past).
    clock += 500;
    expect(gcra.take(3)).toBe(true);
    gcra.share(rate, 4, 0, clock + 100);
    clock += 5_000;
    gcra.share(rate, 4, 0, Number.POSITIVE_INFINITY);
    expect(gcra.waitMs(3, 0, clock)).toBe(500);
  });

  it('a cost above the share and its burst share waits for a larger share (no timer, no refusal)', () => {
    const rate = { limit: 10, per: 1000, burst: 2 };
    const gcra = shareOf(rate, 2); // carries 2 units a window
    expect(gcra.waitMs(3 - 0.5, 0, clock)).toBe(0);
    expect(gcra.take(2.5)).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
    gcra.share(rate, 3, rateShareOf(rate, 3), Number.POSITIVE_INFINITY);
    expect(gcra.take(2.5)).toBe(true);
  });

  it('the rate need of a cost is the least share that carries it: cost 3 at 10/s burst 2 needs 3 (was 10, the whole rate), at 25/500 ms burst 8 needs 3 (was 7)', () => {
    expect(rateNeedOf({ limit: 10, per: 1000, burst: 2 }, 3)).toBe(3);
    expect(rateNeedOf({ limit: 25, per: 500, burst: 8 }, 3)).toBe(3);
    expect(rateNeedOf({ limit: 25, per: 500, burst: 8 }, 1)).toBe(0);
    expect(rateNeedOf({ limit: 2, per: 1000, burst: 5 }, 6)).toBe(2); // 2 + 5 carries 6
    expect(rateNeedOf({ limit: 4, per: 1000, burst: 8 }, 5)).toBe(2); // 2 + floor(8 × 2 / 4)
    for (const rate of [
      { limit: 7, per: 100, burst: 3 },
      { limit: 90_000, per: 60_000, burst: 8_000 },
    ]) {
      for (let cost = 1.5; cost <= rate.burst + 1; cost += rate.burst / 7) {
        const need = rateNeedOf(rate, cost);
        expect(need + rateShareOf(rate, need)).toBeGreaterThanOrEqual(cost);
        expect(need - 1 + rateShareOf(rate, need - 1)).toBeLessThan(cost);
      }
    }
  });

  it('after a costly call, a cut to a slower share carries the lead beyond burst + 1 in units: a window straddling the cut holds no more than the standard lead would let through', () => {
    const rate = { limit: 40, per: 1000, burst: 10 };
    const gcra = shareOf(rate, 4); // T = 250 ms, burst share 1: reach 500 ms
    const t0 = clock;
    expect(gcra.take(4)).toBe(true); // TAT t0 + 1000: 500 ms past the standard lead
    gcra.share(rate, 2, rateShareOf(rate, 2), Number.POSITIVE_INFINITY); // T = 500 ms, burst 0
    // The excess 500 ms was 2 units of the old pace: 1000 ms of the new. The next call then
    // conforms at TAT = t0 + 500 + 1000 (+ the burst-0 reach of one interval: at TAT − 0).
    expect(gcra.waitMs(1, 0, clock)).toBe(1500);
    expect(clock - t0).toBe(0);
  });
});

describe('idle credit schedules (property)', () => {
  it('a share of s calls with a burst share of b never sends more than s + b units in any window of per, costs up to what it carries, each sent', () => {
    fc.assert(
      fc.property(
        fc.record({
          limit: fc.integer({ min: 2, max: 30 }),
          per: fc.constantFrom(100, 500, 1000),
          burst: fc.integer({ min: 0, max: 8 }),
          share: fc.integer({ min: 1, max: 30 }),
        }),
        fc.array(fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.nat(400)), {
          minLength: 1,
          maxLength: 60,
        }),
        (r, calls) => {
          const rate = { limit: r.limit, per: r.per, burst: r.burst };
          const share = Math.min(r.share, r.limit);
          const b = rateShareOf(rate, share);
          const most = Math.min(r.burst + 1, share + b); // what the fleet's rate and the share allow
          const costs = calls.map(([f]) => Math.max(1, Math.round(f * most)));
          clock = 1_000;
          const gcra = shareOf(rate, share);
          const times = sendAll(
            gcra,
            costs,
            calls.map(([, gap]) => gap),
          );
          // (A float's hair off the window: a send exactly `per` after another is in the next.)
          expect(maxInWindow(times, rate.per - 1e-6, costs)).toBeLessThanOrEqual(share + b);
        },
      ),
      { seed: SEED, numRuns: 400 },
    );
  });
});
