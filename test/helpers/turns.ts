import type { Semaphore } from '../../src/semaphore.js';

/** Waits, one event-loop turn at a time (no timers), until `done()`; throws after `turns`. */
export async function turnsUntil(done: () => boolean, what: string, turns = 200): Promise<void> {
  for (let i = 0; i < turns; i++) {
    if (done()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  if (!done()) throw new Error(`still not ${what} after ${turns} event-loop turns`);
}

/**
 * Waits until `gate` holds no permit. A request cancelled in flight returns its permit a few
 * turns after its caller saw the rejection: once the connection is down (afterTeardown).
 */
export function released(gate: Semaphore): Promise<void> {
  return turnsUntil(() => gate.held === 0, `released (${gate.name ?? 'gate'})`);
}
