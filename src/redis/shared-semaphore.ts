import {
  LeaseLostError,
  type QueueFullError,
  SharedLayoutError,
  StoreUnavailableError,
} from '../common/errors.js';
import { durationMs, nonNegativeInteger, positiveInteger } from '../common/options.js';
import { tooHeavy } from '../gate/call-options.js';
import type { ReleaseReason } from '../gate/diagnostics.js';
import { checkSettled, type RateOptions, resolveRate } from '../gate/rate.js';
import {
  type AcquireOptions,
  DEFAULT_QUEUE_PER_PERMIT,
  DEFAULT_QUEUE_TIMEOUT_MS,
  MAX_RETRY_AFTER_MS,
  type Permit,
  type RunCallback,
  Semaphore,
  type WaitOptions,
  type WaitTarget,
  type WaitTicket,
} from '../gate/semaphore.js';
import { storeChannels } from './channels.js';
import type { ResolvedStoreOptions } from './options.js';
import { acquireShared } from './shared-acquire.js';
import { type RateTail, SharedRate } from './shared-rate.js';
import { SharedShed } from './shared-shed.js';
import type { SharedSemaphoreOptions, SharedSemaphoreStats } from './shared-stats.js';
import {
  DONE,
  FALLBACK,
  LOCAL,
  onRecheck,
  onTimer,
  QUEUED,
  SENDING,
  SharedWaiter,
  sharedCall,
} from './shared-waiter.js';
import type { WakeupMode } from './wakeups.js';

/** A Redis reply of a gate's script: cluster-wide holders and tickets (and live processes). */
export interface ClusterCounts {
  held: number;
  queued: number;
}

/**
 * ACQUIRE's answer: 1 granted, 0 queued, -1 refused (heavier than the cap Redis holds), -2
 * refused (its rate slot comes after its deadline), -3 refused (costlier than burst + 1).
 */
export type GrantAnswer = 1 | 0 | -1 | -2 | -3;

/** ACQUIRE's whole answer; `retryMs` for -2 and -3 (see {@link GrantAnswer}). */
export interface AcquireAnswer extends ClusterCounts {
  granted: GrantAnswer;
  processes: number;
  cap: number;
  recoveryMs: number;
  retryMs: number;
}

/**
 * What a shared gate uses of its store (a `RedisStore`), declared here rather than imported:
 * store.ts builds the gates, so importing it back would close an import circle.
 */
export interface SharedGateStore {
  readonly options: ResolvedStoreOptions;
  readonly closed: boolean;
  readonly degraded: boolean;
  nextId(weight?: number, cost?: number): string;
  acquire(gate: SharedSemaphore, id: string, deadlineMs: number): Promise<AcquireAnswer>;
  claim(
    gate: SharedSemaphore,
    id: string,
    /** A rated grant: 1 read late (take it again), 2 taken again before (never again), 0 check. */
    late?: 0 | 1 | 2,
  ): Promise<{ granted: boolean; cap: number } & ClusterCounts>;
  replicate(): Promise<void>;
  setCap(gate: SharedSemaphore, cap: number): Promise<{ cap: number } & ClusterCounts>;
  setRate(gate: SharedSemaphore, rate: string): Promise<{ cap: number } & ClusterCounts>;
  settle(gate: SharedSemaphore, units: number): void;
  release(gate: SharedSemaphore, ids: readonly string[]): void;
  forget(id: string): void;
  readonly wakeups: WakeupMode;
  readonly wakeupEpoch: number;
  wakeupsUnreliableSince(epoch: number): boolean;
  recheck(gate: SharedSemaphore): void;
}

export type {
  SharedGateView,
  SharedSemaphoreOptions,
  SharedSemaphoreStats,
} from './shared-stats.js';

/** Weight of a new hold time in this process's moving estimate (as a local gate's observer). */
const HOLD_ESTIMATE_WEIGHT = 0.1;

interface Lease {
  id: string;
  /** Units of the cap it holds. */
  weight: number;
  /** Granted by Redis (false: granted by the local fallback, not yet registered in Redis). */
  inRedis: boolean;
}

/**
 * A gate whose cap is shared through Redis by every process of the same store prefix and name.
 * Locally it is a `Semaphore` (held permits, `maxHold`, leak detection, stats); the decision to
 * grant is Redis's. `tryAcquire()` always answers `undefined`: every grant is a Redis round trip.
 *
 * Two limits: `sharedLimit`, the cap in Redis for every process, and `limit`, this process's
 * own bound within it (equal to the cap unless `setLimit` or an adaptive limit lowered it).
 * Below the cap, a waiter takes a Redis ticket only while this process's held permits plus
 * tickets are under `limit`; the others wait here, so this process never holds more than its
 * limit and never changes the cap other processes see.
 */
export class SharedSemaphore extends Semaphore {
  readonly keys: readonly string[];
  /** The cap this process asked for (`store.semaphore()`'s `limit`, or its `setSharedLimit`). */
  #requested: number;
  /** The cap every process shares: Redis's, as of its last answer (the first process set it). */
  #cap: number;
  #warnedCap: number | undefined = undefined;
  readonly #store: SharedGateStore;
  readonly #maxQueue: number;
  readonly #queueTimeout: number;
  /** Every waiter of this process, in arrival order (which is its tickets' order in Redis). */
  readonly #waiters = new Set<SharedWaiter>();
  readonly #byTicket = new Map<string, SharedWaiter>();
  /** Waiters held back by this process's `limit` (state LOCAL), in arrival order. */
  readonly #local = new Set<SharedWaiter>();
  /** Units of the waiters holding a Redis ticket or with an acquire on the wire (SENDING or QUEUED). */
  #tickets = 0;
  readonly #leases = new Map<Permit, Lease>();
  readonly #byId = new Map<string, Permit>();
  #clusterHeld = 0;
  /** This process's units when Redis last answered: the rest of `#clusterHeld` is others'. */
  #ownHeld = 0;
  #clusterQueued = 0;
  #processes = 1;
  readonly #shed = new SharedShed(this);
  #leasesLost = 0;
  #known = false;
  /** Moving average of how long this process held its permits (ms): Retry-After's unit. */
  #holdEstimate: number | undefined = undefined;
  /** At the start of an outage: permits held here, and the cap's free part as last seen. */
  #outageHeld = 0;
  #outageFree = 0;
  #layoutWarned = false;
  #recoveryTimer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** The request rate, in Redis beside the cap (shared-rate.ts); undefined without one. */
  readonly #rate: SharedRate | undefined;
  /** Waiters whose grant came back late once and were sent for a slot of now (see #late). */
  readonly #retaken = new WeakSet<SharedWaiter>();
  /** Permits' costs other than 1 (kept past the release: `settleCost` may come later). */
  readonly #costs = new WeakMap<object, number>();

  /** @internal use `store.semaphore(options)` */
  constructor(store: SharedGateStore, keys: readonly string[], options: SharedSemaphoreOptions) {
    super({
      limit: options.limit,
      maxQueue: options.maxQueue,
      queueTimeout: options.queueTimeout,
      maxHold: options.maxHold,
      leakWarnAfter: options.leakWarnAfter,
      name: options.name,
    });
    this.#store = store;
    this.keys = keys;
    this.#requested = this.limit;
    this.#cap = this.limit;
    this.#maxQueue =
      options.maxQueue === undefined
        ? positiveInteger('limit', options.limit) * DEFAULT_QUEUE_PER_PERMIT
        : nonNegativeInteger('maxQueue', options.maxQueue);
    this.#queueTimeout =
      options.queueTimeout === undefined
        ? DEFAULT_QUEUE_TIMEOUT_MS
        : durationMs('queueTimeout', options.queueTimeout);
    this.#rate =
      options.rate === undefined
        ? undefined
        : new SharedRate(resolveRate('rate', options.rate), this.name, () => this.now(), {
            slot: (id) => this.#slotCame(id),
            settle: (units) => store.settle(this, units),
            serveFallback: () => this.#serveFallback(),
          });
  }

  /** The request rate Redis holds for every process (the first process's, or `setSharedRate`'s). */
  override get rate(): Readonly<Required<RateOptions>> | undefined {
    return this.#rate?.options;
  }

  /** @internal The rate as the scripts take it (`limit:per:burst`), '' without one. */
  get rateArg(): string {
    return this.#rate?.arg ?? '';
  }

  /**
   * Changes this gate's request rate in Redis, for every process (as `setSharedLimit` does the
   * cap). Only on a gate created with a `rate`. Rejects while Redis is unreachable.
   *
   * @example
   * await billing.setSharedRate({ limit: 200, per: 1000, burst: 20 }); // a new contract
   */
  async setSharedRate(rate: RateOptions): Promise<void> {
    const shared = this.#rate;
    if (shared === undefined) {
      throw new TypeError(
        `shared gate ${this.name ?? ''} has no rate: create it with one (a rate changes the gate's layout in Redis)`,
      );
    }
    shared.request(resolveRate('rate', rate));
    const { held, queued, cap } = await this.#store.setRate(this, shared.arg);
    this.cluster(held, queued, cap);
  }

  /** @internal A Redis answer's rate part: its state, and the head's slot if it is ours. */
  rateAnswer(tail: RateTail): void {
    const rate = this.#rate;
    if (rate === undefined) return;
    rate.answer(tail);
    if (tail.hint !== '') this.slotHint(tail.hint);
  }

  /** @internal `<ticket>@<ms>`: the head's slot comes in ms; if the ticket is ours, claimed then. */
  slotHint(hint: string): void {
    const waiter = this.#byTicket.get(hint.slice(0, hint.lastIndexOf('@')));
    if (waiter === undefined || waiter.state === DONE) return;
    this.#rate?.arm(hint);
  }

  /** Our head's slot came: claimed now (Redis grants it in the claim, if it is still the head). */
  #slotCame(id: string): void {
    const waiter = this.#byTicket.get(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING)
      waiter.grantedEarly = true; // claimed after that answer
    else if (waiter.state === QUEUED) this.#claim(waiter);
  }

  protected override permitCost(permit: object): number {
    return this.#costs.get(permit) ?? 1;
  }

  /**
   * `permit.settleCost(actual)`: the rate in Redis moves by `actual − charged` (batched per
   * tick); a refund may let the head go at once, from the script that applies it.
   */
  protected override settlePermitCost(permit: object, actual: number): void {
    const rate = this.#rate;
    checkSettled(rate, this.name, actual);
    const charged = this.#costs.get(permit) ?? 1;
    if (actual === 1) this.#costs.delete(permit);
    else this.#costs.set(permit, actual);
    rate!.settle(charged, actual);
  }

  /** The cap every process shares: the one in Redis, as of its last answer. */
  get sharedLimit(): number {
    return this.#cap;
  }

  /** @internal The cap this process asks for when Redis holds none (a first use, a loss). */
  get requestedLimit(): number {
    return this.#requested;
  }

  /**
   * Changes the cap of this gate in Redis, for every process (the explicit call a rolling
   * deploy makes: a process that merely asks for another `limit` gets the stored cap and a
   * warning). Permits it frees are granted at once, in FIFO order. Rejects while Redis is
   * unreachable.
   *
   * @example
   * await billing.setSharedLimit(40); // the partner raised our contract from 20 to 40
   */
  async setSharedLimit(limit: number): Promise<void> {
    const value = positiveInteger('limit', limit);
    this.#requested = value;
    const { held, queued, cap } = await this.#store.setCap(this, value);
    this.cluster(held, queued, cap);
  }

  /** Redis has answered this process about this gate before (so a missing state means a loss). */
  get known(): boolean {
    return this.#known;
  }

  /**
   * The whole cluster's load as of the last Redis answer: what a call arriving now waits behind
   * (the deadline rule reads it instead of this process's `held`/`queued`).
   */
  get load(): { limit: number; held: number; queued: number } {
    return { limit: this.sharedLimit, held: this.#clusterHeld, queued: this.#clusterQueued };
  }

  /**
   * Bounds this process's share of the shared cap: at most `limit` permits held here (plus
   * tickets in Redis), within [1, `sharedLimit`]. The cap other processes see does not move.
   * Lowering it takes back nothing: permits held and tickets already in Redis run their course.
   */
  override setLimit(limit: number): void {
    const value = positiveInteger('limit', limit);
    if (value > this.sharedLimit) {
      throw new RangeError(
        `limit of shared gate ${this.name ?? ''} must be at most its shared cap ${this.sharedLimit} (this process's share), got ${value}`,
      );
    }
    super.setLimit(value);
    this.#refuseHeavierThan(value);
    this.#pump();
  }

  override get queued(): number {
    return this.#waiters.size;
  }

  /** Always `undefined`: a shared permit needs Redis. Use `wait`, `acquire` or `run`. */
  override tryAcquire(): Permit | undefined {
    return undefined;
  }

  /**
   * A permit of `weight` units of the shared cap (default 1), FIFO across every process: a heavy
   * ticket at the head waits for room, and lighter ones behind it wait too. A weight above this
   * process's `limit` is a RangeError, as on a local gate.
   */
  override wait(target: WaitTarget, options?: number | WaitOptions): WaitTicket | undefined {
    const { timeout, weight, cost } =
      typeof options === 'object'
        ? sharedCall(options, this.#rate?.options, this.name)
        : { timeout: options, weight: 1, cost: 1 };
    if (weight > this.limit) throw tooHeavy(weight, this.limit, this.name);
    const wait =
      timeout === undefined ? this.#queueTimeout : Math.max(1, durationMs('timeout', timeout));
    const store = this.#store;
    if (store.closed) {
      target.rejected(this.#unavailable('the store is closed'));
      return undefined;
    }
    // Local bound first, in microseconds and without Redis: what a local gate would admit
    // at once (limit − held, or the local share while Redis is unreachable) plus its queue.
    const room = (store.degraded ? this.#fallbackShare() : this.limit) - this.held;
    if (this.#waiters.size >= this.#maxQueue + Math.max(0, room)) {
      target.rejected(this.#queueFull());
      return undefined;
    }
    const policy = store.options.onStoreError;
    if (store.degraded && policy === 'reject') {
      target.rejected(this.#shedUnavailable());
      return undefined;
    }
    const waiter = new SharedWaiter(this, store.nextId(weight, cost), target, this.now(), weight);
    waiter.cost = cost;
    waiter.deadline = waiter.enqueuedAt + wait;
    this.#waiters.add(waiter);
    this.#byTicket.set(waiter.id, waiter);
    // A re-check shortly before the deadline (the heartbeat may be far later): a wake-up lost
    // to a dropped subscription must not cost the waiter its permit.
    const margin = Math.min(store.options.pollMs, Math.floor(wait / 4));
    waiter.timer =
      margin > 0
        ? setTimeout(onRecheck, wait - margin, waiter, margin)
        : setTimeout(onTimer, wait, waiter);
    if (store.degraded) {
      waiter.state = FALLBACK;
      this.#serveFallback();
    } else {
      waiter.state = LOCAL;
      this.#local.add(waiter);
      this.#pump();
    }
    return waiter.state === DONE ? undefined : waiter;
  }

  override acquire(options?: AcquireOptions): Promise<Permit> {
    try {
      return acquireShared(
        (target, call) => this.wait(target, call),
        options,
        this.#rate?.options,
        this.name,
      );
    } catch (error) {
      return Promise.reject(error); // bad options reject, as a local gate's do: never a throw
    }
  }

  override run<T>(
    fn: (signal: AbortSignal) => T | PromiseLike<T>,
    options: AcquireOptions & { signal: AbortSignal },
  ): Promise<T>;
  override run<T>(
    fn: (signal: AbortSignal | undefined) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T>;
  override async run<T>(fn: RunCallback<T>, options?: AcquireOptions): Promise<T> {
    const permit = await this.acquire(options);
    try {
      return await fn(options?.signal ?? undefined);
    } finally {
      permit.release();
    }
  }

  /**
   * When a caller arriving now could be served: its place in the whole queue, drained at the
   * shared cap (at the local share during an outage), each permit held as long as this process
   * has seen its own permits held (before any was released, the wait deadline stands in). But
   * no ticket waits past its deadline: however long the queue, the tickets ahead are served or
   * gone within one deadline (this process's; replicas share options) and one hold from now.
   */
  override retryAfterMs(): number {
    const degraded = this.#store.degraded;
    const queued = degraded
      ? this.#waiters.size
      : Math.max(this.#waiters.size, this.#clusterQueued);
    const rate = degraded ? Math.max(1, this.#fallbackShare()) : this.sharedLimit;
    const hold = this.#holdEstimate ?? this.#queueTimeout;
    const drain = ((queued + 1) / rate) * hold;
    const ms = Math.ceil(Math.min(drain, this.#queueTimeout + hold));
    // At least the rate's wait for the cost queued, as a local gate's.
    const slot = degraded ? 0 : (this.#rate?.waitMs() ?? 0);
    return Math.min(MAX_RETRY_AFTER_MS, Math.max(1, ms, slot));
  }

  override stats(): SharedSemaphoreStats {
    const s = super.stats();
    const store = this.#store;
    return {
      ...s,
      queued: this.#waiters.size,
      shedQueueFull: s.shedQueueFull + this.#shed.queueFull,
      shedQueueTimeout: s.shedQueueTimeout + this.#shed.queueTimeout,
      abortedWaiting: s.abortedWaiting + this.#shed.abortedWaiting,
      shared: {
        held: this.#clusterHeld,
        queued: this.#clusterQueued,
        processes: this.#processes,
        mode: store.degraded ? store.options.onStoreError : 'redis',
        wakeups: store.wakeups,
        leasesLost: this.#leasesLost,
        shedStoreUnavailable: this.#shed.storeUnavailable,
      },
      ...(this.#rate === undefined ? {} : { rate: this.#rate.stats() }),
    };
  }

  /** Sends this process's held-back waiters, in order, while its own limit has room. */
  #pump(): void {
    if (this.#store.degraded) return; // storeDown moved them to the local share
    for (const waiter of this.#local) {
      // In units, and in order: a waiter that does not fit holds back the ones behind it.
      if (this.limit < this.sharedLimit && this.held + this.#tickets + waiter.weight > this.limit)
        return;
      this.#local.delete(waiter);
      this.#send(waiter);
    }
  }

  #send(waiter: SharedWaiter): void {
    if (waiter.state !== SENDING && waiter.state !== QUEUED) this.#tickets += waiter.weight;
    waiter.state = SENDING;
    waiter.epoch = this.#store.wakeupEpoch;
    const deadlineMs = Math.max(0, waiter.deadline - this.now());
    const sent = performance.now();
    this.#store.acquire(this, waiter.id, deadlineMs).then(
      ({ granted, held, queued, processes, cap, recoveryMs, retryMs }) => {
        this.cluster(held, queued, cap);
        if (recoveryMs > 0) this.#recheckAfter(recoveryMs);
        if (processes > 0) this.#processes = processes; // -1: not asked (the heartbeat tells)
        if (waiter.state !== SENDING) return; // it left meanwhile; its release follows this reply
        if (granted === 1 && this.#late(waiter, sent)) this.#claim(waiter, true);
        else if (granted === 1) this.#grant(waiter, true);
        else if (granted === -1) this.#refuse(waiter, tooHeavy(waiter.weight, cap, this.name));
        else if (granted === -2)
          this.#refuse(
            waiter,
            this.#shed.rateLimited(this.#rate!.refused(retryMs), this.#waiters.size),
          );
        else if (granted === -3) this.#refuse(waiter, costly(waiter.cost, retryMs, this.name));
        else if (waiter.grantedEarly) this.#claim(waiter);
        else if (this.#maxQueue === 0)
          this.#shedFull(waiter); // no waiting, in Redis either
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
      if (this.#waiters.size > 0) this.#store.recheck(this);
    }, ms + 1);
    this.#recoveryTimer.unref?.();
  }

  /**
   * A rated grant read more than `lateMs` after its script was sent (this process stalled, or
   * its Redis answers were held up): Redis may have made it long ago, so it is taken again for
   * a slot of now rather than sent on top of the calls granted since.
   */
  #late(waiter: SharedWaiter, sent: number): boolean {
    const rate = this.#rate;
    if (rate === undefined || performance.now() - sent <= rate.lateMs) return false;
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
    this.#store.claim(this, waiter.id, late ? 1 : retaken ? 2 : 0).then(
      ({ granted, held, queued, cap }) => {
        this.cluster(held, queued, cap);
        // A claim of a rated grant answered "not granted" was taken again (claimed late), or
        // the wake-up was forged: either way, never again for this waiter.
        if (!granted && this.#rate !== undefined) this.#retaken.add(waiter);
        if (waiter.state !== SENDING) return; // it left meanwhile; its release follows this reply
        if (granted && this.#late(waiter, sent)) this.#claim(waiter, true);
        else if (granted) {
          this.#store.forget(waiter.id);
          this.#grant(waiter, true);
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
      this.#finish(waiter);
      this.layoutRefused(error);
      waiter.target.rejected(error);
      this.#pump();
      return;
    }
    // The outcome is unknown: give the id back (after a late answer, never before it).
    this.#store.release(this, [waiter.id]);
    if (this.#store.options.onStoreError === 'reject') {
      this.#finish(waiter);
      waiter.target.rejected(this.#shedUnavailable());
    } else {
      this.#toFallback(waiter);
      this.#serveFallback();
    }
    this.#pump();
  }

  #grant(waiter: SharedWaiter, inRedis: boolean): void {
    this.#finish(waiter);
    const permit = this.grantNow(this.now() - waiter.enqueuedAt, waiter.weight);
    if (waiter.cost !== 1) this.#costs.set(permit, waiter.cost);
    const lease = { id: waiter.id, weight: waiter.weight, inRedis };
    this.#leases.set(permit, lease);
    this.#byId.set(lease.id, permit);
    waiter.target.granted(permit);
  }

  #finish(waiter: SharedWaiter): void {
    if (waiter.state === SENDING || waiter.state === QUEUED) this.#tickets -= waiter.weight;
    else if (waiter.state === LOCAL) this.#local.delete(waiter);
    waiter.state = DONE;
    this.#waiters.delete(waiter);
    this.#byTicket.delete(waiter.id);
    if (waiter.timer !== undefined) clearTimeout(waiter.timer);
    waiter.timer = undefined;
  }

  /**
   * A wake-up message named our ticket: a hint, never a grant (anyone who can PUBLISH can send
   * one). The waiter claims it in Redis, which answers whether it was granted.
   */
  wake(id: string): void {
    const waiter = this.#byTicket.get(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING) waiter.grantedEarly = true;
    else if (waiter.state === QUEUED) this.#claim(waiter);
  }

  /** A heartbeat found our ticket granted and claimed it: the grant is Redis's own answer. */
  #confirmed(id: string): void {
    const waiter = this.#byTicket.get(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING) {
      waiter.grantedEarly = true; // a claim or acquire on the wire answers it
      return;
    }
    if (waiter.state !== QUEUED) return;
    // A rated grant is claimed, never taken from a heartbeat: the claim checks it is not late.
    if (this.#rate !== undefined) {
      this.#claim(waiter);
      return;
    }
    this.#store.forget(id);
    if (this.#store.options.replicas === 0) {
      this.#grant(waiter, true);
      return;
    }
    waiter.state = SENDING; // strict mode: granted only once the replicas have the grant
    this.#store.replicate().then(
      () => {
        if (waiter.state === SENDING) this.#grant(waiter, true);
      },
      () => this.#sendFailed(waiter),
    );
  }

  /** A queued waiter near its deadline: Redis is asked if its wake-up may have been lost. */
  beforeDeadline(waiter: SharedWaiter): void {
    if (waiter.state === QUEUED && this.#store.wakeupsUnreliableSince(waiter.epoch)) {
      this.#store.recheck(this);
    }
  }

  /**
   * Redis keeps this gate in another layout (another hostgate version or mode on the prefix):
   * said once per gate as a process warning, `HOSTGATE_SHARED_LAYOUT`; every call rejects.
   */
  layoutRefused(error: SharedLayoutError): void {
    if (this.#layoutWarned) return;
    this.#layoutWarned = true;
    process.emitWarning(error.message, { code: SharedLayoutError.CODE });
  }

  /** A waiter leaves: aborted by its caller, or its deadline passed. */
  leave(waiter: SharedWaiter, reason: unknown, how: 'aborted' | 'timeout'): void {
    if (waiter.state === DONE) return;
    const ticketed = waiter.state === SENDING || waiter.state === QUEUED;
    this.#finish(waiter);
    // Out of the Redis queue at once (in this tick's batch; after its own acquire's reply).
    if (ticketed) {
      this.#store.release(this, [waiter.id]);
      this.#pump();
    }
    if (how === 'aborted') {
      this.#shed.aborted(reason);
      waiter.target.rejected(reason);
    } else if (this.#store.degraded && this.#store.options.onStoreError === 'reject') {
      waiter.target.rejected(this.#shedUnavailable());
    } else {
      const waited = this.now() - waiter.enqueuedAt;
      waiter.target.rejected(this.#shed.timedOut(waited, this.#waiters.size));
    }
  }

  /** Semaphore hook: a permit went back (released, aborted, or taken back after maxHold). */
  protected override released(permit: Permit, _reason: ReleaseReason): void {
    const lease = this.#leases.get(permit);
    if (lease === undefined) return;
    const heldMs = this.now() - permit.acquiredAt;
    const estimate = this.#holdEstimate;
    this.#holdEstimate =
      estimate === undefined ? heldMs : estimate + (heldMs - estimate) * HOLD_ESTIMATE_WEIGHT;
    this.#leases.delete(permit);
    this.#byId.delete(lease.id);
    this.#store.release(this, [lease.id]);
    if (this.#store.degraded) this.#serveFallback();
    else this.#pump();
  }

  /** Ids of the leases this process holds, for the heartbeat. */
  leaseIds(): string[] {
    const ids: string[] = [];
    for (const lease of this.#leases.values()) ids.push(lease.id);
    return ids;
  }

  /** Ids of this process's tickets known to be queued in Redis, for the heartbeat. */
  ticketIds(): string[] {
    const ids: string[] = [];
    for (const waiter of this.#waiters) if (waiter.state === QUEUED) ids.push(waiter.id);
    return ids;
  }

  /** A Redis answer: the cluster's holders and tickets, and the cap Redis holds. */
  cluster(held: number, queued: number, cap: number): void {
    this.#known = true;
    this.#clusterHeld = held;
    this.#clusterQueued = queued;
    let own = 0;
    for (const lease of this.#leases.values()) own += lease.weight;
    this.#ownHeld = own;
    if (cap !== this.#cap && Number.isSafeInteger(cap) && cap > 0) this.#adoptCap(cap);
  }

  /**
   * The cap lives in Redis: a process that asked for another one gates by Redis's and says so
   * once per value (a rolling deploy changes it with `setSharedLimit`). This process's own
   * bound follows unless `setLimit` lowered it.
   */
  #adoptCap(cap: number): void {
    const previous = this.#cap;
    this.#cap = cap;
    if (cap !== this.#requested && this.#warnedCap !== cap) {
      this.#warnedCap = cap;
      process.emitWarning(
        `shared gate ${JSON.stringify(this.name ?? '')}: Redis holds cap ${cap} for it, this process asked for ${this.#requested}; gating by ${cap} (change it for every process with setSharedLimit(n))`,
        { code: 'HOSTGATE_SHARED_CAP_MISMATCH' },
      );
    }
    const limit = this.limit >= previous ? cap : Math.min(this.limit, cap);
    super.setLimit(limit);
    this.#refuseHeavierThan(limit);
    this.#pump();
  }

  /** Waiters heavier than `limit` could never be granted: refused, as a local gate's are. */
  #refuseHeavierThan(limit: number): void {
    for (const waiter of [...this.#waiters]) {
      if (waiter.weight > limit) this.#refuse(waiter, tooHeavy(waiter.weight, limit, this.name));
    }
  }

  /** A waiter leaves with `reason` (its ticket, if any, withdrawn). */
  #refuse(waiter: SharedWaiter, reason: unknown): void {
    const ticketed = waiter.state === SENDING || waiter.state === QUEUED;
    this.#finish(waiter);
    if (ticketed) this.#store.release(this, [waiter.id]);
    waiter.target.rejected(reason);
    if (ticketed) this.#pump();
  }

  heartbeat(
    lost: string[],
    granted: string[],
    processes: number,
    requeued: readonly string[],
  ): void {
    this.#processes = Math.max(1, processes);
    for (const id of lost) {
      const permit = this.#byId.get(id);
      if (permit === undefined) {
        // Released while the heartbeat was on its way: it registered a lease nobody holds.
        this.#store.release(this, [id]);
        continue;
      }
      const lease = this.#leases.get(permit)!;
      if (!lease.inRedis) {
        lease.inRedis = true; // granted locally during an outage, now counted in Redis
        continue;
      }
      this.#leaseLost(permit);
    }
    for (const id of granted) this.#confirmed(id);
    for (const id of requeued) {
      // Queued again by a heartbeat that reached Redis after its waiter left (the withdrawal
      // ran first): withdrawn again, or a later grant would hold a permit for nobody until
      // its lease ran out.
      const state = this.#byTicket.get(id)?.state;
      if (state !== QUEUED && state !== SENDING) this.#store.release(this, [id]);
    }
  }

  /** Redis lost a lease we hold: never silent. Its request still runs and counts again. */
  #leaseLost(permit: Permit): void {
    this.#leasesLost++;
    const policy = this.#store.options.onLeaseLost;
    const heldMs = this.now() - permit.acquiredAt;
    if (storeChannels.leaseLost.hasSubscribers) {
      storeChannels.leaseLost.publish({ gate: this, partner: this.name, heldMs, policy });
    }
    if (policy === 'abort') {
      const hook = permit.onHoldTimeout;
      permit.onHoldTimeout = undefined;
      // The holder's stop hook (the HTTP layers abort their request there).
      hook?.(new LeaseLostError(this.name, heldMs) as never);
    }
  }

  /** Redis went away: under 'local', queued waiters move to the local share. */
  storeDown(): void {
    const reject = this.#store.options.onStoreError === 'reject';
    // The cap's free part as this process last saw it: what the others held stays theirs.
    const others = Math.max(0, this.#clusterHeld - this.#ownHeld);
    this.#outageHeld = this.held;
    this.#outageFree = Math.max(0, this.#cap - others - this.held);
    for (const waiter of [...this.#waiters]) {
      if (waiter.state === LOCAL) {
        // Never sent: no ticket to give back.
        if (reject) {
          this.#finish(waiter);
          waiter.target.rejected(this.#shedUnavailable());
        } else this.#toFallback(waiter);
        continue;
      }
      if (waiter.state !== QUEUED) continue;
      this.#store.release(this, [waiter.id]); // kept until Redis answers again
      if (reject) {
        this.#finish(waiter);
        waiter.target.rejected(this.#shedUnavailable());
      } else this.#toFallback(waiter);
    }
    if (!reject) this.#serveFallback();
  }

  /** Redis answers again: local waiters take tickets, in their order, as this process's limit allows. */
  storeUp(): void {
    this.#rate?.storeUp();
    for (const waiter of this.#waiters) {
      if (waiter.state !== FALLBACK) continue;
      waiter.state = LOCAL;
      this.#local.add(waiter);
    }
    this.#pump();
  }

  /** The store is closing: waiters are shed; returns every id to give back. */
  storeClosed(): string[] {
    this.#rate?.close();
    const ids = this.leaseIds();
    for (const waiter of [...this.#waiters]) {
      if (waiter.state === SENDING || waiter.state === QUEUED) ids.push(waiter.id);
      this.#finish(waiter);
      waiter.target.rejected(this.#unavailable('the store is closed'));
    }
    this.#leases.clear();
    this.#byId.clear();
    return ids;
  }

  #toFallback(waiter: SharedWaiter): void {
    if (waiter.state === SENDING || waiter.state === QUEUED) this.#tickets -= waiter.weight;
    else if (waiter.state === LOCAL) this.#local.delete(waiter);
    waiter.state = FALLBACK;
    waiter.grantedEarly = false;
    this.#byTicket.delete(waiter.id);
    waiter.id = this.#store.nextId(waiter.weight, waiter.cost); // a fresh id: the old one may still turn up in Redis
    this.#byTicket.set(waiter.id, waiter);
  }

  /**
   * While Redis is unreachable under 'local': grant in arrival order up to this process's share,
   * `localLimit`, or what it held when the outage began plus its part of the cap that was free
   * then, `ceil(free / processes last seen)`, but never more than the larger of its holdings and
   * `ceil(limit / processes)` (1 if it never reached Redis), counting permits still held from
   * Redis. What the others held stays theirs: with every process cut off, the partner sees at
   * most `limit + processes − 1`.
   */
  #serveFallback(): void {
    if (!this.#store.degraded || this.#store.options.onStoreError !== 'local') return;
    const share = this.#fallbackShare();
    let waiting = 0;
    for (const waiter of [...this.#waiters]) {
      if (waiter.state !== FALLBACK) continue;
      // In units and in order: once one does not fit, nobody behind it is granted either.
      if (
        waiting === 0 &&
        this.held + waiter.weight <= share &&
        (this.#rate === undefined || this.#rate.takeLocal(waiter.cost, this.#processes))
      )
        this.#grant(waiter, false);
      // Past the local queue bound (the newest): shed now, as a local gate would, not at the deadline.
      else if (++waiting > this.#maxQueue) this.#shedFull(waiter);
    }
  }

  /** This process's share of the cap while Redis is unreachable (see {@link #serveFallback}). */
  #fallbackShare(): number {
    const { localLimit } = this.#store.options;
    // A process that never heard from Redis knows no fleet size: one permit until it does.
    const fleetShare = this.#known
      ? Math.min(
          this.#outageHeld + Math.ceil(this.#outageFree / this.#processes),
          Math.max(this.#outageHeld, Math.ceil(this.#cap / this.#processes)),
        )
      : 1;
    return Math.min(this.limit, localLimit ?? fleetShare);
  }

  /** A waiter past the queue bound leaves with `QueueFullError` (its ticket, if any, withdrawn). */
  #shedFull(waiter: SharedWaiter): void {
    const ticketed = waiter.state === SENDING || waiter.state === QUEUED;
    this.#finish(waiter);
    if (ticketed) this.#store.release(this, [waiter.id]);
    waiter.target.rejected(this.#queueFull());
    if (ticketed) this.#pump();
  }

  #queueFull(): QueueFullError {
    return this.#shed.full(this.#waiters.size, this.#maxQueue);
  }

  /** Counts and publishes a caller shed because Redis is unavailable under `'reject'`. */
  #shedUnavailable(): StoreUnavailableError {
    const retryAfter = Math.max(this.#store.options.heartbeatMs, 1);
    return this.#shed.unavailable(retryAfter, this.#waiters.size);
  }

  #unavailable(why?: string): StoreUnavailableError {
    const retryAfter = Math.max(this.#store.options.heartbeatMs, 1);
    return new StoreUnavailableError(this.name, retryAfter, why);
  }
}

/** A cost above the burst + 1 Redis holds: it could never be granted. */
function costly(cost: number, bound: number, name: string | undefined): RangeError {
  return new RangeError(
    `cost ${cost} exceeds burst + 1 (${bound}) of ${name ?? 'this gate'}'s rate in Redis: it could never be granted`,
  );
}
