/**
 * A process whose tickets of a shared gate wait while it holds none of the gate's permits asks
 * Redis again on its own (the gate's heartbeat script): `pollMs` after it found itself so, then
 * twice as long each time, until that reaches `heartbeatMs` (from there its heartbeat asks).
 *
 * Why: Redis takes back a grant whose owner died before claiming it only when a script runs
 * (takeBackDeaf, commands/includes/fill.lua). When such grants and the dead owner's leases hold
 * every permit, the others' callers all wait and none of them releases or acquires: nothing
 * runs a script until a heartbeat (up to `heartbeatMs`) or a waiter's deadline. fifo-sigkill
 * saw the survivors at 0 for 3 s, the grants' claim window, under CI load. Pushed wake-ups
 * only: while they are polled, every poll asks already.
 *
 * On a gate with a rate, only while Redis last said its cap was full: its processes hold nothing
 * most of the time while their tickets wait for *slots* (a head that does not come to its slot
 * is passed over through its backup, includes/rate.lua), so every process asked every `pollMs`;
 * measured so, fifo-rate-stall (a replica SIGSTOPped 1.5 s, the cap never full) saw 57-62 calls
 * in the busiest second at a promise of 55 beside a CPU hog (56 without it, every run), and
 * failed once in CI at 56 in 750 ms. A killed replica's heard grants hold *units*: with the cap
 * full the others asked only at their heartbeats (1.9 s in fifo-sigkill's rated case).
 */

import type { WaiterQueue } from './shared-queue.js';
import type { ClusterView, GateStore, PartsGate } from './shared-store.js';

export class StarvedRecheck {
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  #delay: number;

  constructor(
    readonly gate: PartsGate,
    readonly queue: WaiterQueue,
    readonly store: GateStore,
    readonly view: ClusterView,
    /** A gate with a rate: starved only while its cap is full (see above). */
    readonly rated: boolean,
  ) {
    this.#delay = store.options.pollMs;
  }

  /** Tickets in Redis (or on their way), no permit held, wake-ups pushed, Redis answering. */
  get starved(): boolean {
    const { store } = this;
    return (
      this.queue.ticketed > 0 &&
      this.gate.held === 0 &&
      store.wakeups === 'push' &&
      !store.degraded &&
      !store.closed &&
      (!this.rated || this.view.held >= this.view.cap)
    );
  }

  /** Redis answered about the gate: armed if this process is starved, reset once it is not. */
  update(): void {
    if (!this.starved) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#delay = this.store.options.pollMs;
      return;
    }
    if (this.#timer !== undefined) return;
    if (this.#delay >= this.store.options.heartbeatMs) return;
    this.#timer = setTimeout(() => this.#fire(), this.#delay);
    this.#timer.unref?.();
  }

  #fire(): void {
    this.#timer = undefined;
    if (!this.starved) {
      this.#delay = this.store.options.pollMs;
      return;
    }
    this.store.recheck();
    this.#delay *= 2;
    this.update();
  }
}
