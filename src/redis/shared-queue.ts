/**
 * This process's waiters of a shared gate: in arrival order (which is their tickets' order in
 * Redis), by ticket id, and where each one is (shared-waiter.ts): held back by this process's
 * `limit` (LOCAL), on the wire or queued in Redis (SENDING, QUEUED), waiting for the local share
 * while Redis is unreachable (FALLBACK), or gone (DONE).
 */
import { DONE, FALLBACK, LOCAL, QUEUED, SENDING, type SharedWaiter } from './shared-waiter.js';

export class WaiterQueue {
  /** Every waiter of this process, in arrival order. */
  readonly all = new Set<SharedWaiter>();
  readonly #byTicket = new Map<string, SharedWaiter>();
  /** Waiters held back by this process's `limit` (state LOCAL), in arrival order. */
  readonly local = new Set<SharedWaiter>();
  /** Units of the waiters holding a Redis ticket or with an acquire on the wire (SENDING or QUEUED). */
  ticketed = 0;

  get size(): number {
    return this.all.size;
  }

  byTicket(id: string): SharedWaiter | undefined {
    return this.#byTicket.get(id);
  }

  add(waiter: SharedWaiter): void {
    this.all.add(waiter);
    this.#byTicket.set(waiter.id, waiter);
  }

  /** Held back by this process's `limit` until a permit of this process goes back. */
  holdBack(waiter: SharedWaiter): void {
    waiter.state = LOCAL;
    this.local.add(waiter);
  }

  /** Its acquire goes on the wire: its units count as ticketed. */
  sending(waiter: SharedWaiter): void {
    if (waiter.state !== SENDING && waiter.state !== QUEUED) this.ticketed += waiter.weight;
    waiter.state = SENDING;
  }

  /** The waiter leaves (granted, refused, shed, aborted or timed out): DONE, its timer cleared. */
  finish(waiter: SharedWaiter): void {
    if (waiter.state === SENDING || waiter.state === QUEUED) this.ticketed -= waiter.weight;
    else if (waiter.state === LOCAL) this.local.delete(waiter);
    waiter.state = DONE;
    this.all.delete(waiter);
    this.#byTicket.delete(waiter.id);
    if (waiter.timer !== undefined) clearTimeout(waiter.timer);
    waiter.timer = undefined;
  }

  /** To the local share while Redis is unreachable, under `id`: a fresh id, as the old one may still turn up in Redis. */
  toFallback(waiter: SharedWaiter, id: string): void {
    if (waiter.state === SENDING || waiter.state === QUEUED) this.ticketed -= waiter.weight;
    else if (waiter.state === LOCAL) this.local.delete(waiter);
    waiter.state = FALLBACK;
    waiter.grantedEarly = false;
    this.#byTicket.delete(waiter.id);
    waiter.id = id;
    this.#byTicket.set(waiter.id, waiter);
  }

  /** Redis answers again: the local share's waiters are held back here, in their order, to take tickets. */
  backFromFallback(): void {
    for (const waiter of this.all) {
      if (waiter.state !== FALLBACK) continue;
      waiter.state = LOCAL;
      this.local.add(waiter);
    }
  }

  /** Ids of this process's tickets known to be queued in Redis, for the heartbeat. */
  ticketIds(): string[] {
    const ids: string[] = [];
    for (const waiter of this.all) if (waiter.state === QUEUED) ids.push(waiter.id);
    return ids;
  }
}
