import { SharedLayoutError } from '../common/errors.js';
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
import { acquireShared } from './shared-acquire.js';
import type { SharedFallback } from './shared-fallback.js';
import { SharedLeases } from './shared-leases.js';
import { WaiterQueue } from './shared-queue.js';
import { type RateTail, SharedRate } from './shared-rate.js';
import { SharedShed } from './shared-shed.js';
import type { SharedSemaphoreOptions, SharedSemaphoreStats } from './shared-stats.js';
import { bindStore, type ClusterView, type StoreOfGates } from './shared-store.js';
import { SharedTickets } from './shared-tickets.js';
import { type SharedWaiter, sharedCall } from './shared-waiter.js';

export type { AcquireAnswer, ClaimAnswer, ClusterCounts, GrantAnswer } from './shared-store.js';

/** What a shared gate uses of its store (a `RedisStore`): see shared-store.ts. */
export type SharedGateStore = StoreOfGates<SharedSemaphore>;

export type {
  SharedGateView,
  SharedSemaphoreOptions,
  SharedSemaphoreStats,
} from './shared-stats.js';

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
 *
 * Its parts: this process's waiters (shared-queue.ts) and their way through Redis
 * (shared-tickets.ts), the local share while Redis is unreachable (shared-fallback.ts), and the
 * leases it holds (shared-leases.ts); the gate keeps the cap, the rate and the public face.
 */
export class SharedSemaphore extends Semaphore {
  readonly keys: readonly string[];
  /** The cap this process asked for (`store.semaphore()`'s `limit`, or its `setSharedLimit`). */
  #requested: number;
  #warnedCap: number | undefined = undefined;
  readonly #store: SharedGateStore;
  readonly #maxQueue: number;
  readonly #queueTimeout: number;
  /** The cluster as of Redis's last answer; the cap every process shares is its `cap`. */
  readonly #view: ClusterView;
  readonly #queue = new WaiterQueue();
  readonly #leases: SharedLeases;
  readonly #tickets: SharedTickets;
  readonly #fallback: SharedFallback;
  readonly #shed = new SharedShed(this);
  #layoutWarned = false;
  /** The request rate, in Redis beside the cap (shared-rate.ts); undefined without one. */
  readonly #rate: SharedRate | undefined;
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
    this.#view = { cap: this.limit, held: 0, ownHeld: 0, queued: 0, processes: 1, known: false };
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
            slot: (id) => this.#tickets.slotCame(id),
            settle: (units) => store.settle(this, units),
            serveFallback: () => this.#fallback.serve(),
          });
    const bound = bindStore(store, this);
    this.#leases = new SharedLeases(this, bound);
    this.#tickets = new SharedTickets({
      gate: this,
      grantNow: (waitedMs, weight) => this.grantNow(waitedMs, weight),
      queue: this.#queue,
      store: bound,
      view: this.#view,
      rate: this.#rate,
      leases: this.#leases,
      shed: this.#shed,
      costs: this.#costs,
      maxQueue: this.#maxQueue,
    });
    this.#fallback = this.#tickets.fallback;
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
    this.#tickets.slotHint(hint);
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
    return this.#view.cap;
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
    return this.#view.known;
  }

  /**
   * The whole cluster's load as of the last Redis answer: what a call arriving now waits behind
   * (the deadline rule reads it instead of this process's `held`/`queued`).
   */
  get load(): { limit: number; held: number; queued: number } {
    return { limit: this.sharedLimit, held: this.#view.held, queued: this.#view.queued };
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
    this.#tickets.refuseHeavierThan(value);
    this.#tickets.pump();
  }

  override get queued(): number {
    return this.#queue.size;
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
    return this.#tickets.admit(target, { timeout, weight, cost }, wait);
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
    const queued = degraded ? this.#queue.size : Math.max(this.#queue.size, this.#view.queued);
    const rate = degraded ? Math.max(1, this.#fallback.share()) : this.sharedLimit;
    const hold = this.#leases.holdEstimate ?? this.#queueTimeout;
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
      queued: this.#queue.size,
      shedQueueFull: s.shedQueueFull + this.#shed.queueFull,
      shedQueueTimeout: s.shedQueueTimeout + this.#shed.queueTimeout,
      abortedWaiting: s.abortedWaiting + this.#shed.abortedWaiting,
      shared: {
        held: this.#view.held,
        queued: this.#view.queued,
        processes: this.#view.processes,
        mode: store.degraded ? store.options.onStoreError : 'redis',
        wakeups: store.wakeups,
        leasesLost: this.#leases.lost,
        shedStoreUnavailable: this.#shed.storeUnavailable,
      },
      ...(this.#rate === undefined ? {} : { rate: this.#rate.stats() }),
    };
  }

  /**
   * A wake-up message named our ticket: a hint, never a grant (anyone who can PUBLISH can send
   * one). The waiter claims it in Redis, which answers whether it was granted. A `stray`: a
   * ticket of this process no waiter or lease here has (Redis back from an older dump).
   */
  wake(id: string, stray = false): void {
    if (!stray) this.#tickets.wake(id);
    else if (this.#queue.byTicket(id) === undefined) this.#leases.stray(id);
  }

  /** A queued waiter near its deadline: Redis is asked if its wake-up may have been lost. */
  beforeDeadline(waiter: SharedWaiter): void {
    this.#tickets.beforeDeadline(waiter);
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
    this.#tickets.leave(waiter, reason, how);
  }

  /** Semaphore hook: a permit went back (released, aborted, or taken back after maxHold). */
  protected override released(permit: Permit, _reason: ReleaseReason): void {
    const lease = this.#leases.take(permit);
    if (lease === undefined) return;
    this.#store.release(this, [lease.id]);
    if (this.#store.degraded) this.#fallback.serve();
    else this.#tickets.pump();
  }

  /** Ids of the leases this process holds, for the heartbeat. */
  leaseIds(): string[] {
    return this.#leases.ids();
  }

  /** Ids of this process's tickets known to be queued in Redis, for the heartbeat. */
  ticketIds(): string[] {
    return this.#queue.ticketIds();
  }

  /** A Redis answer: the cluster's holders and tickets, and the cap Redis holds. */
  cluster(held: number, queued: number, cap: number): void {
    const view = this.#view;
    view.known = true;
    view.held = held;
    view.queued = queued;
    view.ownHeld = this.#leases.units();
    if (cap !== view.cap && Number.isSafeInteger(cap) && cap > 0) this.#adoptCap(cap);
    this.#tickets.starved.update();
  }

  /**
   * The cap lives in Redis: a process that asked for another one gates by Redis's and says so
   * once per value (a rolling deploy changes it with `setSharedLimit`). This process's own
   * bound follows unless `setLimit` lowered it.
   */
  #adoptCap(cap: number): void {
    const previous = this.#view.cap;
    this.#view.cap = cap;
    if (cap !== this.#requested && this.#warnedCap !== cap) {
      this.#warnedCap = cap;
      process.emitWarning(
        `shared gate ${JSON.stringify(this.name ?? '')}: Redis holds cap ${cap} for it, this process asked for ${this.#requested}; gating by ${cap} (change it for every process with setSharedLimit(n))`,
        { code: 'HOSTGATE_SHARED_CAP_MISMATCH' },
      );
    }
    const limit = this.limit >= previous ? cap : Math.min(this.limit, cap);
    super.setLimit(limit);
    this.#tickets.refuseHeavierThan(limit);
    this.#tickets.pump();
  }

  heartbeat(
    lost: string[],
    granted: string[],
    processes: number,
    requeued: readonly string[],
  ): void {
    this.#view.processes = Math.max(1, processes);
    this.#leases.lostInRedis(lost);
    this.#tickets.heartbeat(granted, requeued);
  }

  /** Redis went away: under 'local', queued waiters move to the local share. */
  storeDown(): void {
    this.#fallback.down();
  }

  /** Redis answers again: local waiters take tickets, in their order, as this process's limit allows. */
  storeUp(): void {
    this.#rate?.storeUp();
    this.#queue.backFromFallback();
    this.#tickets.pump();
  }

  /** The store begins to close: waiters are shed; returns their tickets' ids to give back. */
  storeDraining(): string[] {
    return this.#tickets.closeAll();
  }

  /** Closed, drained: tickets to give back; held permits' leases stay until they run out. */
  storeClosed(): string[] {
    this.#rate?.close();
    const ids = this.#tickets.closeAll();
    this.#leases.clear();
    return ids;
  }
}
