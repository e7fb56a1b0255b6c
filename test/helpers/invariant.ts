import { expect } from 'vitest';
import type { Semaphore } from '../../src/semaphore.js';

/**
 * The gate invariant, checked from the outside: `held + available === limit` while
 * `held <= limit` (after a shrink `available` is 0, never negative), every grant is either
 * still held or released, and a waiter never sits next to a free permit.
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
  expect(s.held).toBe(s.acquired - s.released);
  expect(gate.holders()).toHaveLength(s.held);
  expect(s.queued).toBeGreaterThanOrEqual(0);
  expect(s.queued).toBeLessThanOrEqual(s.maxQueue);
  if (s.queued > 0) expect(s.available).toBe(0);
  expect(s.wait.count).toBe(s.acquired);
  expect(s.hold.count).toBe(s.released);
}
