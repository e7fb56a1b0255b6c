import { describe, expect, it } from 'vitest';
import { Gradient2Port } from '../../bench/adaptive/netflix.js';
import { GradientLimit } from '../../src/adaptive/gradient.js';
import { drive, mean, quantile } from './model.js';

const bounds = { min: 2, max: 500, initial: 10 };

describe('GradientLimit', () => {
  it('settles at about capacity × tolerance + queueSize under a 500 contract', () => {
    const limits = drive(new GradientLimit(bounds), {
      rounds: 300,
      baseMs: 40,
      capacity: () => 40,
      jitter: 0.05,
    });
    const settled = limits.slice(100);
    expect(quantile(settled, 0.05)).toBeGreaterThanOrEqual(36); // RTT probes dip briefly
    expect(mean(settled)).toBeLessThanOrEqual(52);
  });

  it('does not drift upward under modest steady overload (Netflix PR #134)', () => {
    const gradient = new GradientLimit(bounds);
    const limits = drive(gradient, { rounds: 3000, baseMs: 40, capacity: () => 40 });
    // 3000 round trips of 40+ ms: two minutes of steady overload, and the limit stays put
    expect(Math.max(...limits.slice(1000))).toBeLessThanOrEqual(52);
    expect(limits.at(-1)! - limits[1000]!).toBeLessThanOrEqual(2);
  });

  it("is the fix: Netflix's Gradient2 (ported) climbs to the ceiling in the same scenario", () => {
    const limits = drive(new Gradient2Port(bounds), {
      rounds: 3000,
      baseMs: 40,
      capacity: () => 40,
    });
    expect(limits.at(-1)).toBe(500);
  });

  it('cuts on drops instead of ignoring them, once per round trip', () => {
    const gradient = new GradientLimit({ ...bounds, initial: 100 });
    for (let i = 0; i < 30; i++) {
      gradient.update({ now: 500, rttMs: 40, inflight: 100, dropped: true });
    }
    expect(gradient.limit).toBe(90);
  });

  it('follows a capacity drop and its return', () => {
    const capacity = (round: number) => (round >= 100 && round < 200 ? 10 : 40);
    const limits = drive(new GradientLimit(bounds), { rounds: 300, baseMs: 40, capacity });
    expect(limits[99]).toBeGreaterThanOrEqual(36);
    expect(Math.max(...limits.slice(130, 200))).toBeLessThanOrEqual(18);
    expect(Math.min(...limits.slice(250))).toBeGreaterThanOrEqual(36);
  });

  it('does not grow while app-limited or held down', () => {
    const gradient = new GradientLimit(bounds);
    drive(gradient, { rounds: 50, baseMs: 40, capacity: () => 1000, demand: () => 3 });
    expect(gradient.limit).toBe(10);
    for (let i = 0; i < 50; i++) {
      gradient.update({ now: 5000 + i, rttMs: 40, inflight: 10, dropped: false, holdDown: true });
    }
    expect(gradient.limit).toBe(10);
  });

  it('never leaves [min, max]', () => {
    const gradient = new GradientLimit({ min: 4, max: 30, initial: 30 });
    expect(Math.max(...drive(gradient, { rounds: 200, baseMs: 5, capacity: () => 1e3 }))).toBe(30);
    const cut = drive(gradient, { rounds: 200, baseMs: 5, capacity: () => 1, drops: () => true });
    expect(Math.min(...cut)).toBe(4);
  });
});
