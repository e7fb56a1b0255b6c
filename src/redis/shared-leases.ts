/**
 * The permits this process holds of a shared gate, each a lease in Redis under its ticket's id:
 * what the heartbeat renews, what Redis may find it lost, what a close gives back.
 */
import { LeaseLostError } from '../common/errors.js';
import type { Permit, Semaphore } from '../gate/semaphore.js';
import { storeChannels } from './channels.js';
import type { GateStore } from './shared-store.js';

/** Weight of a new hold time in this process's moving estimate (as a local gate's observer). */
const HOLD_ESTIMATE_WEIGHT = 0.1;

export interface Lease {
  id: string;
  /** Units of the cap it holds. */
  weight: number;
  /** Granted by Redis (false: granted by the local fallback, not yet registered in Redis). */
  inRedis: boolean;
}

export class SharedLeases {
  readonly #leases = new Map<Permit, Lease>();
  readonly #byId = new Map<string, Permit>();
  /** Leases Redis lost while this process held them (stalls, a Redis restart). */
  lost = 0;
  /** Moving average of how long this process held its permits (ms): Retry-After's unit. */
  holdEstimate: number | undefined = undefined;

  constructor(
    readonly gate: Semaphore,
    readonly store: GateStore,
  ) {}

  add(permit: Permit, lease: Lease): void {
    this.#leases.set(permit, lease);
    this.#byId.set(lease.id, permit);
  }

  /** A permit went back: its lease, no longer held (undefined: not one of ours). */
  take(permit: Permit): Lease | undefined {
    const lease = this.#leases.get(permit);
    if (lease === undefined) return undefined;
    const heldMs = this.gate.now() - permit.acquiredAt;
    const estimate = this.holdEstimate;
    this.holdEstimate =
      estimate === undefined ? heldMs : estimate + (heldMs - estimate) * HOLD_ESTIMATE_WEIGHT;
    this.#leases.delete(permit);
    this.#byId.delete(lease.id);
    return lease;
  }

  /** Ids of the leases this process holds, for the heartbeat. */
  ids(): string[] {
    const ids: string[] = [];
    for (const lease of this.#leases.values()) ids.push(lease.id);
    return ids;
  }

  /** Units this process holds. */
  units(): number {
    let own = 0;
    for (const lease of this.#leases.values()) own += lease.weight;
    return own;
  }

  /** A heartbeat registered these leases again: Redis no longer had them. */
  lostInRedis(lost: readonly string[]): void {
    for (const id of lost) {
      const permit = this.#byId.get(id);
      if (permit === undefined) {
        // Released while the heartbeat was on its way: it registered a lease nobody holds.
        this.store.release([id]);
        continue;
      }
      const lease = this.#leases.get(permit)!;
      if (!lease.inRedis) {
        lease.inRedis = true; // granted locally during an outage, now counted in Redis
        continue;
      }
      this.#leaseLost(permit);
    }
  }

  /**
   * A grant or a slot hint named a ticket of this process that no waiter of it has, nor a lease
   * (Redis back from a dump older than its state queues again the tickets served since: each,
   * granted to its live owner, held its units for nobody for a claim window, or, at the head of
   * a rated queue, its slot until passed over: fault campaign, FIFO seed 132012, the fleet at 0
   * for 3.1 s). Given back at once (RELEASE withdraws a ticket, frees a grant; twice, nothing).
   */
  stray(id: string): void {
    if (!this.#byId.has(id)) this.store.release([id]);
  }

  /** Redis lost a lease we hold: never silent. Its request still runs and counts again. */
  #leaseLost(permit: Permit): void {
    this.lost++;
    const policy = this.store.options.onLeaseLost;
    const gate = this.gate;
    const heldMs = gate.now() - permit.acquiredAt;
    if (storeChannels.leaseLost.hasSubscribers) {
      storeChannels.leaseLost.publish({ gate, partner: gate.name, heldMs, policy });
    }
    if (policy === 'abort') {
      const hook = permit.onHoldTimeout;
      permit.onHoldTimeout = undefined;
      // The holder's stop hook (the HTTP layers abort their request there).
      hook?.(new LeaseLostError(gate.name, heldMs) as never);
    }
  }

  clear(): void {
    this.#leases.clear();
    this.#byId.clear();
  }
}
