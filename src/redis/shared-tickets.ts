/**
 * A shared gate's waiters from arrival to exit: admitted within the local bounds, sent as this
 * process's `limit` allows (ACQUIRE: a lease now, or a ticket in the one FIFO), claimed when a
 * wake-up, a heartbeat or their rate slot says so (CLAIM: a wake-up is a hint, never a grant),
 * a rated grant read late taken again for a slot of now, a call that failed handed to the
 * fallback; and each way out: granted, refused, shed, aborted or timed out, its ticket withdrawn.
 */
import { type QueueFullError, SharedLayoutError, StoreUnavailableError } from '../common/errors.js';
import { tooHeavy } from '../gate/call-options.js';
import type { Permit, WaitTarget, WaitTicket } from '../gate/semaphore.js';
import { SharedFallback } from './shared-fallback.js';
import type { SharedLeases } from './shared-leases.js';
import type { WaiterQueue } from './shared-queue.js';
import type { SharedRate } from './shared-rate.js';
import type { SharedShed } from './shared-shed.js';
import { StarvedRecheck } from './shared-starved.js';
import type { ClusterView, GateStore, PartsGate, WaiterExits } from './shared-store.js';
import {
  DONE,
  FALLBACK,
  onRecheck,
  onTimer,
  QUEUED,
  SENDING,
  type SharedCall,
  SharedWaiter,
  type WaiterGate,
} from './shared-waiter.js';

/** The gate's parts and bounds the tickets work with (shared-semaphore.ts builds them). */
export interface TicketsParts {
  gate: PartsGate & WaiterGate;
  /** The gate's `grantNow`: a permit of `weight` units, its wait recorded. */
  grantNow(waitedMs: number, weight: number): Permit;
  queue: WaiterQueue;
  store: GateStore;
  view: ClusterView;
  rate: SharedRate | undefined;
  leases: SharedLeases;
  shed: SharedShed;
  /** Permits' costs other than 1 (the gate's: `settleCost` may come after the release). */
  costs: WeakMap<object, number>;
  /** The local queue bound (0: no waiting, in Redis either). */
  maxQueue: number;
}

export class SharedTickets implements WaiterExits {
  #recoveryTimer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** Waiters whose grant came back late once and were sent for a slot of now (see #late). */
  readonly #retaken = new WeakSet<SharedWaiter>();
  readonly gate: PartsGate & WaiterGate;
  readonly queue: WaiterQueue;
  readonly store: GateStore;
  readonly view: ClusterView;
  readonly rate: SharedRate | undefined;
  /** The local share while Redis is unreachable: its waiters leave by this object's exits. */
  readonly fallback: SharedFallback;
  readonly shed: SharedShed;
  readonly maxQueue: number;
  /**
   * Asks Redis again while this process waits holding nothing (shared-starved.ts); on a gate
   * with a rate only while its cap is full.
   */
  readonly starved: StarvedRecheck;

  constructor(readonly parts: TicketsParts) {
    this.gate = parts.gate;
    this.queue = parts.queue;
    this.store = parts.store;
    this.view = parts.view;
    this.rate = parts.rate;
    this.fallback = new SharedFallback(
      parts.gate,
      this,
      parts.queue,
      parts.store,
      parts.view,
      parts.rate,
      parts.maxQueue,
    );
    this.shed = parts.shed;
    this.maxQueue = parts.maxQueue;
    this.starved = new StarvedRecheck(
      parts.gate,
      parts.queue,
      parts.store,
      parts.view,
      parts.rate !== undefined,
    );
  }

  /**
   * A new waiter of `call` (its deadline `waitMs`): refused at once past the local bound (what a
   * local gate would admit at once plus its queue, without Redis) or while Redis is unavailable
   * under `'reject'`; else held back here or served by the local share.
   */
  admit(target: WaitTarget, call: SharedCall, waitMs: number): WaitTicket | undefined {
    const { store, gate, queue } = this;
    if (store.closed) {
      target.rejected(this.#unavailable('the store is closed'));
      return undefined;
    }
    // Local bound first, in microseconds and without Redis: what a local gate would admit
    // at once (limit − held, or the local share while Redis is unreachable) plus its queue.
    const room = (store.degraded ? this.fallback.share() : gate.limit) - gate.held;
    if (queue.size >= this.maxQueue + Math.max(0, room)) {
      target.rejected(this.#queueFull());
      return undefined;
    }
    const policy = store.options.onStoreError;
    if (store.degraded && policy === 'reject') {
      target.rejected(this.shedUnavailable());
      return undefined;
    }
    const { weight, cost } = call;
    const waiter = new SharedWaiter(gate, store.nextId(weight, cost), target, gate.now(), weight);
    waiter.cost = cost;
    waiter.deadline = waiter.enqueuedAt + waitMs;
    queue.add(waiter);
    // A re-check shortly before the deadline (the heartbeat may be far later): a wake-up lost
    // to a dropped subscription must not cost the waiter its permit.
    const margin = Math.min(store.options.pollMs, Math.floor(waitMs / 4));
    waiter.timer =
      margin > 0
        ? setTimeout(onRecheck, waitMs - margin, waiter, margin)
        : setTimeout(onTimer, waitMs, waiter);
    if (store.degraded) {
      waiter.state = FALLBACK;
      this.fallback.serve();
    } else {
      queue.holdBack(waiter);
      this.pump();
    }
    return waiter.state === DONE ? undefined : waiter;
  }

  /** Sends this process's held-back waiters, in order, while its own limit has room. */
  pump(): void {
    if (this.store.degraded) return; // storeDown moved them to the local share
    const { gate, queue } = this;
    for (const waiter of queue.local) {
      // In units, and in order: a waiter that does not fit holds back the ones behind it.
      if (gate.limit < gate.sharedLimit && gate.held + queue.ticketed + waiter.weight > gate.limit)
        return;
      queue.local.delete(waiter);
      this.#send(waiter);
    }
  }

  #send(waiter: SharedWaiter): void {
    this.queue.sending(waiter);
    waiter.epoch = this.store.wakeupEpoch;
    const deadlineMs = Math.max(0, waiter.deadline - this.gate.now());
    const sent = performance.now();
    this.store.acquire(waiter.id, deadlineMs).then(
      ({ granted, held, queued, processes, cap, recoveryMs, retryMs }) => {
        const gate = this.gate;
        gate.cluster(held, queued, cap);
        if (recoveryMs > 0) this.#recheckAfter(recoveryMs);
        if (processes > 0) this.view.processes = processes; // -1: not asked (the heartbeat tells)
        if (waiter.state !== SENDING) return; // it left meanwhile; its release follows this reply
        if (granted === 1 && this.#late(waiter, sent)) this.#claim(waiter, true);
        else if (granted === 1) this.grant(waiter, true);
        else if (granted === -1) this.refuse(waiter, tooHeavy(waiter.weight, cap, gate.name));
        else if (granted === -2)
          this.refuse(waiter, this.shed.rateLimited(this.rate!.refused(retryMs), this.queue.size));
        else if (granted === -3) this.refuse(waiter, costly(waiter.cost, retryMs, gate.name));
        else if (waiter.grantedEarly) this.#claim(waiter);
        else if (this.maxQueue === 0)
          this.shedFull(waiter); // no waiting, in Redis either
        else waiter.state = QUEUED;
      },
      (error: unknown) => this.#sendFailed(waiter, error),
    );
  }

  /**
   * Redis grants nothing for `ms` (it lost the gate's state): no release will hand our tickets
   * on when that window ends, so they are looked up then, not at the next heartbeat.
   */
  #recheckAfter(ms: number): void {
    if (this.#recoveryTimer !== undefined) return;
    this.#recoveryTimer = setTimeout(() => {
      this.#recoveryTimer = undefined;
      if (this.queue.size > 0) this.store.recheck();
    }, ms + 1);
    this.#recoveryTimer.unref?.();
  }

  /**
   * A rated grant read more than `lateMs` after its script was sent (this process stalled, or
   * its Redis answers were held up): Redis may have made it long ago, so it is taken again for
   * a slot of now rather than sent on top of the calls granted since.
   */
  #late(waiter: SharedWaiter, sent: number, sinceMs = 0): boolean {
    const rate = this.rate;
    // A claim's answer says how long before it ran Redis made the grant (a release's grant
    // came by a wake-up): its way here is that and this round trip (which counts the claim's
    // way out twice, an upper bound). Judged by the round trip alone, a grant sent 270 ms
    // after it was made passed both halves (every link slowed 90 ms each way: campaign seed
    // 116065, 7 calls in 250 ms at a promise of 6 when the links healed).
    if (rate === undefined || performance.now() - sent + sinceMs <= rate.lateMs) return false;
    // Once per waiter: a process whose every answer comes late (an event loop lagging that much
    // for good) would otherwise spend a slot on each try and never send.
    if (this.#retaken.has(waiter)) return false;
    this.#retaken.add(waiter);
    return true;
  }

  /**
   * A wake-up came for this waiter: Redis confirms the grant (or not: it waits on). `late`: its
   * grant came back late (see {@link #late}); Redis takes it again at the head of the queue.
   */
  #claim(waiter: SharedWaiter, late = false): void {
    waiter.state = SENDING;
    waiter.grantedEarly = false;
    const sent = performance.now();
    const retaken = this.#retaken.has(waiter);
    this.store.claim(waiter.id, late ? 1 : retaken ? 2 : 0).then(
      ({ granted, held, queued, cap, sinceMs }) => {
        this.gate.cluster(held, queued, cap);
        // A claim of a rated grant answered "not granted" was taken again (claimed late), or
        // the wake-up was forged: either way, never again for this waiter.
        if (!granted && this.rate !== undefined) this.#retaken.add(waiter);
        if (waiter.state !== SENDING) return; // it left meanwhile; its release follows this reply
        if (granted && this.#late(waiter, sent, sinceMs)) this.#claim(waiter, true);
        else if (granted) {
          this.store.forget(waiter.id);
          this.grant(waiter, true);
        } else if (waiter.grantedEarly) this.#claim(waiter);
        else waiter.state = QUEUED;
      },
      (error: unknown) => this.#sendFailed(waiter, error),
    );
  }

  #sendFailed(waiter: SharedWaiter, error?: unknown): void {
    if (waiter.state !== SENDING) return;
    if (error instanceof SharedLayoutError) {
      // Refused before any write: no ticket to give back, and no local fallback either.
      this.queue.finish(waiter);
      this.gate.layoutRefused(error);
      waiter.target.rejected(error);
      this.pump();
      return;
    }
    // The outcome is unknown: give the id back (after a late answer, never before it).
    this.store.release([waiter.id]);
    if (this.store.options.onStoreError === 'reject') {
      this.queue.finish(waiter);
      waiter.target.rejected(this.shedUnavailable());
    } else {
      this.fallback.toFallback(waiter);
      this.fallback.serve();
    }
    this.pump();
  }

  /**
   * A wake-up message named our ticket: a hint, never a grant (anyone who can PUBLISH can send
   * one). The waiter claims it in Redis, which answers whether it was granted.
   */
  wake(id: string): void {
    const waiter = this.queue.byTicket(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING) waiter.grantedEarly = true;
    else if (waiter.state === QUEUED) this.#claim(waiter);
  }

  /**
   * `<ticket>@<ms>`: the head's slot comes in ms; if the ticket is ours, claimed then.
   * `<ticket>@<ms>@<ours>`: another process's head, and our ticket is its backup (the first of
   * another process behind it): if nothing newer reaches us, we ask Redis `lateMs` after that
   * slot, and Redis passes the head over if its owner has not come (includes/rate.lua).
   */
  slotHint(hint: string): void {
    const [head = '', ms = '', backup] = hint.split('@');
    if (backup !== undefined) {
      const ours = this.queue.byTicket(backup);
      if (ours !== undefined && ours.state !== DONE) this.#backupAfter(Number(ms));
      return;
    }
    const waiter = this.queue.byTicket(head);
    if (waiter === undefined || waiter.state === DONE) return;
    // Our ticket is the head: the head we were the backup of was served.
    clearTimeout(this.#backupTimer);
    this.rate?.arm(hint);
  }

  #backupTimer: ReturnType<typeof setTimeout> | undefined = undefined;

  #backupAfter(ms: number): void {
    const rate = this.rate;
    if (rate === undefined || !(ms >= 0)) return;
    clearTimeout(this.#backupTimer);
    this.#backupTimer = setTimeout(
      () => {
        this.#backupTimer = undefined;
        const { store } = this;
        if (this.queue.ticketed > 0 && !store.degraded && !store.closed) store.recheck();
      },
      ms + rate.lateMs + 10,
    );
    this.#backupTimer.unref?.();
  }

  /** Our head's slot came: claimed now (Redis grants it in the claim, if it is still the head). */
  slotCame(id: string): void {
    const waiter = this.queue.byTicket(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING)
      waiter.grantedEarly = true; // claimed after that answer
    else if (waiter.state === QUEUED) this.#claim(waiter);
  }

  /** A heartbeat found our ticket granted and claimed it: the grant is Redis's own answer. */
  confirmed(id: string): void {
    const waiter = this.queue.byTicket(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING) {
      waiter.grantedEarly = true; // a claim or acquire on the wire answers it
      return;
    }
    if (waiter.state !== QUEUED) return;
    // A rated grant is claimed, never taken from a heartbeat: the claim checks it is not late.
    if (this.rate !== undefined) {
      this.#claim(waiter);
      return;
    }
    this.store.forget(id);
    if (this.store.options.replicas === 0) {
      this.grant(waiter, true);
      return;
    }
    waiter.state = SENDING; // strict mode: granted only once the replicas have the grant
    this.store.replicate().then(
      () => {
        if (waiter.state === SENDING) this.grant(waiter, true);
      },
      () => this.#sendFailed(waiter),
    );
  }

  /** A queued waiter near its deadline: Redis is asked if its wake-up may have been lost. */
  beforeDeadline(waiter: SharedWaiter): void {
    if (waiter.state === QUEUED && this.store.wakeupsUnreliableSince(waiter.epoch)) {
      this.store.recheck();
    }
  }
  /** `waiter` gets its permit (`inRedis` false: granted by the local fallback). */
  grant(waiter: SharedWaiter, inRedis: boolean): void {
    this.queue.finish(waiter);
    const permit = this.parts.grantNow(this.gate.now() - waiter.enqueuedAt, waiter.weight);
    if (waiter.cost !== 1) this.parts.costs.set(permit, waiter.cost);
    this.parts.leases.add(permit, { id: waiter.id, weight: waiter.weight, inRedis });
    waiter.target.granted(permit);
  }

  /** A waiter leaves: aborted by its caller, or its deadline passed. */
  leave(waiter: SharedWaiter, reason: unknown, how: 'aborted' | 'timeout'): void {
    if (waiter.state === DONE) return;
    const ticketed = waiter.state === SENDING || waiter.state === QUEUED;
    this.queue.finish(waiter);
    // Out of the Redis queue at once (in this tick's batch; after its own acquire's reply).
    if (ticketed) {
      this.store.release([waiter.id]);
      this.pump();
    }
    if (how === 'aborted') {
      this.shed.aborted(reason);
      waiter.target.rejected(reason);
    } else if (this.store.degraded && this.store.options.onStoreError === 'reject') {
      waiter.target.rejected(this.shedUnavailable());
    } else {
      const waited = this.gate.now() - waiter.enqueuedAt;
      waiter.target.rejected(this.shed.timedOut(waited, this.queue.size));
    }
  }

  /** Waiters heavier than `limit` could never be granted: refused, as a local gate's are. */
  refuseHeavierThan(limit: number): void {
    for (const waiter of [...this.queue.all]) {
      if (waiter.weight > limit)
        this.refuse(waiter, tooHeavy(waiter.weight, limit, this.gate.name));
    }
  }

  /** A waiter leaves with `reason` (its ticket, if any, withdrawn). */
  refuse(waiter: SharedWaiter, reason: unknown): void {
    const ticketed = waiter.state === SENDING || waiter.state === QUEUED;
    this.queue.finish(waiter);
    if (ticketed) this.store.release([waiter.id]);
    waiter.target.rejected(reason);
    if (ticketed) this.pump();
  }

  /** A heartbeat's answer: tickets it found granted, and tickets it queued again. */
  heartbeat(granted: readonly string[], requeued: readonly string[]): void {
    for (const id of granted) this.confirmed(id);
    for (const id of requeued) {
      // Queued again by a heartbeat that reached Redis after its waiter left (the withdrawal
      // ran first): withdrawn again, or a later grant would hold a permit for nobody until
      // its lease ran out.
      const state = this.queue.byTicket(id)?.state;
      if (state !== QUEUED && state !== SENDING) this.store.release([id]);
    }
  }

  /** The store is closing: every waiter is shed; returns the ids of their tickets. */
  closeAll(): string[] {
    const ids: string[] = [];
    for (const waiter of [...this.queue.all]) {
      if (waiter.state === SENDING || waiter.state === QUEUED) ids.push(waiter.id);
      this.queue.finish(waiter);
      waiter.target.rejected(this.#unavailable('the store is closed'));
    }
    return ids;
  }

  /** A waiter past the queue bound leaves with `QueueFullError` (its ticket, if any, withdrawn). */
  shedFull(waiter: SharedWaiter): void {
    const ticketed = waiter.state === SENDING || waiter.state === QUEUED;
    this.queue.finish(waiter);
    if (ticketed) this.store.release([waiter.id]);
    waiter.target.rejected(this.#queueFull());
    if (ticketed) this.pump();
  }

  #queueFull(): QueueFullError {
    return this.shed.full(this.queue.size, this.maxQueue);
  }

  /** Counts and publishes a caller shed because Redis is unavailable under `'reject'`. */
  shedUnavailable(): StoreUnavailableError {
    const retryAfter = Math.max(this.store.options.heartbeatMs, 1);
    return this.shed.unavailable(retryAfter, this.queue.size);
  }

  #unavailable(why?: string): StoreUnavailableError {
    const retryAfter = Math.max(this.store.options.heartbeatMs, 1);
    return new StoreUnavailableError(this.gate.name, retryAfter, why);
  }
}

/** A cost above the burst + 1 Redis holds: it could never be granted. */
function costly(cost: number, bound: number, name: string | undefined): RangeError {
  return new RangeError(
    `cost ${cost} exceeds burst + 1 (${bound}) of ${name ?? 'this gate'}'s rate in Redis: it could never be granted`,
  );
}
