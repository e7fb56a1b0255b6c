import { expect } from 'vitest';
import type { Semaphore } from '../../src/gate/semaphore.js';

/**
 * Grants and releases not in the histograms, per gate: those before it was first observed
 * (a bare gate is observed from its first stats() call). Fixed from then on.
 */
const unobserved = new WeakMap<Semaphore, { grants: number; releases: number }>();

/**
 * The gate invariant, checked from the outside: `held + available === limit` while
 * `held <= limit` (after a shrink `available` is 0, never negative), in weight units; every
 * grant is either still held or released.
 */
export function expectInvariant(gate: Semaphore): void {
  const s = gate.stats();
  expect(s.limit).toBe(gate.limit);
  expect(s.held).toBe(gate.held);
  expect(s.available).toBe(gate.available);
  expect(s.queued).toBe(gate.queued);
  expect(s.available).toBeGreaterThanOrEqual(0);
  if (s.held <= s.limit) expect(s.held + s.available).toBe(s.limit);
  else expect(s.available).toBe(0);
  // held counts weight units; every grant not yet released is one holder.
  const holders = gate.holders();
  expect(holders).toHaveLength(s.acquired - s.released);
  expect(s.held).toBe(holders.reduce((sum, permit) => sum + permit.weight, 0));
  expect(s.queued).toBeGreaterThanOrEqual(0);
  expect(s.queued).toBeLessThanOrEqual(s.maxQueue);
  // A waiter sits beside free units only when it needs more than are free (weights), or, on a
  // gate with a rate, waits for its slot.
  if (s.queued > 0 && s.rate === undefined) expect(s.available).toBeLessThan(s.limit);
  if (s.rate !== undefined) expect(s.rate.backlog).toBeGreaterThanOrEqual(0);
  // Every grant and release since the gate was first observed is in its histograms.
  let before = unobserved.get(gate);
  if (before === undefined) {
    before = { grants: s.acquired - s.wait.count, releases: s.released - s.hold.count };
    unobserved.set(gate, before);
  }
  expect(s.wait.count).toBe(s.acquired - before.grants);
  expect(s.hold.count).toBe(s.released - before.releases);
}
