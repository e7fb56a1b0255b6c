/**
 * A shared gate while Redis is unreachable: under `onStoreError: 'local'` its waiters are
 * granted here, in arrival order, within this process's share of the cap as the outage found
 * it; under `'reject'` they are shed. Their tickets are withdrawn once Redis answers again.
 */

import type { WaiterQueue } from './shared-queue.js';
import type { SharedRate } from './shared-rate.js';
import type { ClusterView, GateStore, PartsGate, WaiterExits } from './shared-store.js';
import { FALLBACK, LOCAL, QUEUED, type SharedWaiter } from './shared-waiter.js';

export class SharedFallback {
  /** At the start of an outage: permits held here, and the cap's free part as last seen. */
  #outageHeld = 0;
  #outageFree = 0;

  constructor(
    readonly gate: PartsGate,
    readonly exits: WaiterExits,
    readonly queue: WaiterQueue,
    readonly store: GateStore,
    readonly view: ClusterView,
    readonly rate: SharedRate | undefined,
    /** The gate's local queue bound. */
    readonly maxQueue: number,
  ) {}

  /** Redis went away: under 'local', queued waiters move to the local share. */
  down(): void {
    const reject = this.store.options.onStoreError === 'reject';
    const { view, gate, queue } = this;
    // The cap's free part as this process last saw it: what the others held stays theirs.
    const others = Math.max(0, view.held - view.ownHeld);
    this.#outageHeld = gate.held;
    this.#outageFree = Math.max(0, view.cap - others - gate.held);
    for (const waiter of [...queue.all]) {
      if (waiter.state === LOCAL) {
        // Never sent: no ticket to give back.
        if (reject) {
          queue.finish(waiter);
          waiter.target.rejected(this.exits.shedUnavailable());
        } else this.toFallback(waiter);
        continue;
      }
      if (waiter.state !== QUEUED) continue;
      this.store.release([waiter.id]); // kept until Redis answers again
      if (reject) {
        queue.finish(waiter);
        waiter.target.rejected(this.exits.shedUnavailable());
      } else this.toFallback(waiter);
    }
    if (!reject) this.serve();
  }

  /** `waiter` waits for the local share, under a fresh id (the old one may still turn up in Redis). */
  toFallback(waiter: SharedWaiter): void {
    this.queue.toFallback(waiter, this.store.nextId(waiter.weight, waiter.cost));
  }

  /**
   * While Redis is unreachable under 'local': grant in arrival order up to this process's share,
   * `localLimit`, or what it held when the outage began plus its part of the cap that was free
   * then, `ceil(free / processes last seen)`, but never more than the larger of its holdings and
   * `ceil(limit / processes)` (1 if it never reached Redis), counting permits still held from
   * Redis. What the others held stays theirs: with every process cut off, the partner sees at
   * most `limit + processes − 1`.
   */
  serve(): void {
    if (!this.store.degraded || this.store.options.onStoreError !== 'local') return;
    const share = this.share();
    let waiting = 0;
    for (const waiter of [...this.queue.all]) {
      if (waiter.state !== FALLBACK) continue;
      // In units and in order: once one does not fit, nobody behind it is granted either.
      if (
        waiting === 0 &&
        this.gate.held + waiter.weight <= share &&
        (this.rate === undefined || this.rate.takeLocal(waiter.cost, this.view.processes))
      )
        this.exits.grant(waiter, false);
      // Past the local queue bound (the newest): shed now, as a local gate would, not at the deadline.
      else if (++waiting > this.maxQueue) this.exits.shedFull(waiter);
    }
  }

  /** This process's share of the cap while Redis is unreachable (see {@link serve}). */
  share(): number {
    const { localLimit } = this.store.options;
    const { known, processes, cap } = this.view;
    // A process that never heard from Redis knows no fleet size: one permit until it does.
    const fleetShare = known
      ? Math.min(
          this.#outageHeld + Math.ceil(this.#outageFree / processes),
          Math.max(this.#outageHeld, Math.ceil(cap / processes)),
        )
      : 1;
    return Math.min(this.gate.limit, localLimit ?? fleetShare);
  }
}
