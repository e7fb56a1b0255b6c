import { describe, expect, it } from 'vitest';
import { CutPacer, DropLevel, MinRtt, PLATEAU, RttProbe } from '../../src/adaptive/rtt.js';

describe('MinRtt', () => {
  it('takes a lower sample at once and rises towards higher ones with its time constant', () => {
    const min = new MinRtt({ decayMs: 1000 });
    min.observe(50, 0);
    min.observe(40, 10);
    expect(min.value).toBe(40);
    min.observe(80, 510); // half a time constant later
    expect(min.value).toBeCloseTo(60, 5);
  });

  it('never moves when pinned', () => {
    const min = new MinRtt({ pinnedMs: 30, decayMs: 1 });
    min.observe(5, 0);
    min.observe(500, 1000);
    expect(min.value).toBe(30);
    expect(min.staleFor(1000)).toBe(0);
  });
});

describe('RttProbe', () => {
  it('dips once the minimum went unconfirmed for its interval, for about two round trips', () => {
    const min = new MinRtt({ decayMs: 1e9 });
    const probe = new RttProbe(1000);
    min.observe(40, 0);
    let now = 0;
    for (; now < 1000; now += 10) {
      min.observe(50, now); // queued at the partner: never within 5% of 40
      expect(probe.active(min, now, 50)).toBe(false);
    }
    expect(probe.active(min, now, 50)).toBe(true);
    expect(probe.active(min, now + 99, 50)).toBe(true);
    expect(probe.active(min, now + 100, 50)).toBe(false);
    expect(RttProbe.dip(48, 2)).toBe(36);
    expect(RttProbe.dip(2, 2)).toBe(2);
  });
});

describe('CutPacer', () => {
  it('allows one cut per round trip', () => {
    const pacer = new CutPacer();
    expect(pacer.due(100, 40)).toBe(true);
    expect(pacer.due(139, 40)).toBe(false);
    expect(pacer.due(140, 40)).toBe(true);
  });

  it('cuts again at once for a drop of a request granted after the last cut (issue 33)', () => {
    const pacer = new CutPacer();
    expect(pacer.due(100, 40, 99)).toBe(true);
    // In flight at the cut: the same episode, paced as before.
    expect(pacer.due(101, 40, 99.5)).toBe(false);
    // Granted after it, it saw the lowered limit and was still refused: a new signal.
    expect(pacer.due(102, 40, 101.5)).toBe(true);
    expect(pacer.due(103, 40, 101.9)).toBe(false);
  });
});

describe('DropLevel', () => {
  it('slows growth one step below the last cut and at it, and forgets it past it', () => {
    const level = new DropLevel();
    expect(level.step(5, 1)).toBe(1);
    level.cut(6);
    expect(level.step(4, 1)).toBe(1);
    expect(level.step(5, 1)).toBe(1 / PLATEAU);
    expect(level.step(6, 1)).toBe(1 / PLATEAU);
    level.grew(6);
    expect(level.step(6, 1)).toBe(1 / PLATEAU);
    level.grew(7);
    expect(level.step(6, 1)).toBe(1);
  });
});
