import { describe, expect, it } from 'vitest';
import { AimdLimit } from '../../src/adaptive/aimd.js';
import { PLATEAU } from '../../src/adaptive/rtt.js';
import { drive, mean, quantile } from './model.js';

const bounds = { min: 2, max: 500, initial: 10 };

describe('AimdLimit', () => {
  it('grows about one permit per round trip while the gate is full and latency steady', () => {
    const limits = drive(new AimdLimit(bounds), {
      rounds: 20,
      baseMs: 40,
      capacity: () => 1000,
    });
    expect(limits[19]).toBeGreaterThanOrEqual(27);
    expect(limits[19]).toBeLessThanOrEqual(31);
  });

  it('does not grow while the gate uses less than half its limit (app-limited)', () => {
    const limits = drive(new AimdLimit(bounds), {
      rounds: 50,
      baseMs: 40,
      capacity: () => 1000,
      demand: () => 4,
    });
    expect(limits.at(-1)).toBe(10);
  });

  it('cuts once per round trip on a burst of drops, not once per drop', () => {
    const aimd = new AimdLimit({ ...bounds, initial: 100 });
    for (let i = 0; i < 50; i++)
      aimd.update({ now: 1000, rttMs: 40, inflight: 100, dropped: true });
    expect(aimd.limit).toBe(90);
    aimd.update({ now: 1000 + 41, rttMs: 40, inflight: 90, dropped: true });
    expect(aimd.limit).toBe(81);
  });

  it('never leaves [min, max], whatever the signals', () => {
    const aimd = new AimdLimit({ min: 3, max: 12, initial: 12 });
    const grown = drive(aimd, { rounds: 100, baseMs: 10, capacity: () => 1000 });
    expect(Math.max(...grown)).toBe(12);
    const cut = drive(aimd, { rounds: 100, baseMs: 10, capacity: () => 1000, drops: () => true });
    expect(Math.min(...cut)).toBe(3);
  });

  it('settles within 1.3x of the unloaded latency under a 500 contract with capacity 40', () => {
    const limits = drive(new AimdLimit(bounds), {
      rounds: 400,
      baseMs: 40,
      capacity: () => 40,
      jitter: 0.05,
    });
    const settled = limits.slice(200);
    expect(quantile(settled, 0.05)).toBeGreaterThanOrEqual(36); // >= 90% of the partner's goodput (RTT probes dip to 3/4 for two round trips)
    expect(mean(settled)).toBeLessThanOrEqual(52); // RTT <= 1.3x the unloaded 40 ms
  });

  it('follows the partner down when its capacity drops, and back up when it returns', () => {
    const capacity = (round: number) => (round >= 100 && round < 200 ? 10 : 40);
    const limits = drive(new AimdLimit(bounds), { rounds: 300, baseMs: 40, capacity });
    expect(limits[99]).toBeGreaterThanOrEqual(36);
    // capacity 10: latency past 2x the minimum is a drop, so the limit comes down under 20
    expect(Math.max(...limits.slice(150, 200))).toBeLessThanOrEqual(20);
    expect(limits[299]).toBeGreaterThanOrEqual(36);
  });

  it('does not grow while a Retry-After holds it down, but still cuts', () => {
    const aimd = new AimdLimit(bounds);
    for (let i = 0; i < 100; i++) {
      aimd.update({ now: i, rttMs: 40, inflight: 10, dropped: false, holdDown: true });
    }
    expect(aimd.limit).toBe(10);
    aimd.update({ now: 200, rttMs: 40, inflight: 10, dropped: true, holdDown: true });
    expect(aimd.limit).toBe(9);
  });

  it('keeps a pinned minimum RTT', () => {
    const aimd = new AimdLimit({ ...bounds, minRttMs: 25 });
    drive(aimd, { rounds: 10, baseMs: 20, capacity: () => 1000 });
    expect(aimd.minRttMs).toBe(25);
  });

  it('re-learns a slower baseline from its decaying minimum, without collapsing to min', () => {
    const aimd = new AimdLimit({ ...bounds, minRttDecayMs: 1000 });
    const baseMs = (round: number) => (round < 50 ? 20 : 60);
    let now = 0;
    for (let round = 0; round < 400; round++) {
      const inflight = aimd.limit;
      for (let i = 0; i < inflight; i++) {
        aimd.update({ now: now + i, rttMs: baseMs(round), inflight, dropped: false });
      }
      now += baseMs(round);
    }
    expect(aimd.minRttMs).toBeGreaterThan(50);
    expect(aimd.limit).toBeGreaterThan(bounds.min);
  });

  it('a refusal right after growth cuts at once, and growth back into that level takes PLATEAU round trips (issue 33)', () => {
    // A partner that serves 5 and refuses the sixth at once: the limit is 6, the sixth slot's
    // 503 comes back 0.3 ms after its grant.
    const aimd = new AimdLimit({ min: 1, max: 50, initial: 6, minRttMs: 50 });
    let now = 1000;
    const at = (ms: number) => {
      now += ms;
      return now;
    };
    const success = () => aimd.update({ now: at(10), rttMs: 50, inflight: 5, dropped: false });
    const refusal = () => aimd.update({ now: at(0.3), rttMs: 0.3, inflight: 6, dropped: true });
    expect(refusal()).toBe(5);
    let samples = 0;
    while (aimd.limit < 6 && samples < 1000) {
      success();
      samples++;
    }
    // About PLATEAU round trips of 5 answers, not one.
    expect(samples).toBeGreaterThanOrEqual(PLATEAU * 5 - 1);
    // At 6 the sixth slot is refused again: cut again at once.
    expect(refusal()).toBe(5);
    // A refusal in flight at that cut is the same episode; one granted after it is a new one.
    expect(aimd.update({ now: at(0.1), rttMs: 0.5, inflight: 5, dropped: true })).toBe(5);
    expect(refusal()).toBe(4);
  });
});
