import { channels, type ReleaseReason } from '../diagnostics.js';
import {
  LeaseLostError,
  QueueFullError,
  QueueTimeoutError,
  StoreUnavailableError,
} from '../errors.js';
import {
  checkKnownKeys,
  checkObject,
  durationMs,
  nonNegativeInteger,
  optionalSignal,
  positiveInteger,
} from '../options.js';
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
} from '../semaphore.js';
import { storeChannels } from './channels.js';
import type { SharedSemaphoreOptions, SharedSemaphoreStats } from './shared-stats.js';
import {
  DONE,
  FALLBACK,
  onTimer,
  QUEUED,
  SENDING,
  SharedWaiter,
  waitTimeout,
} from './shared-waiter.js';
import type { RedisStore } from './store.js';

export type {
  SharedGateView,
  SharedSemaphoreOptions,
  SharedSemaphoreStats,
} from './shared-stats.js';

const ACQUIRE_KEYS = ['signal', 'timeout', 'weight', 'priority'] as const;

interface Lease {
  id: string;
  /** Granted by Redis (false: granted by the local fallback, not yet registered in Redis). */
  inRedis: boolean;
}

/**
 * A gate whose cap is shared through Redis by every process of the same store prefix and name.
 * Locally it is a `Semaphore` (held permits, `maxHold`, leak detection, stats); the decision to
 * grant is Redis's. `tryAcquire()` always answers `undefined`: every grant is a Redis round trip.
 */
export class SharedSemaphore extends Semaphore {
  readonly keys: readonly string[];
  readonly #store: RedisStore;
  readonly #maxQueue: number;
  readonly #queueTimeout: number;
  /** Every waiter of this process, in arrival order (which is its tickets' order in Redis). */
  readonly #waiters = new Set<SharedWaiter>();
  readonly #byTicket = new Map<string, SharedWaiter>();
  readonly #leases = new Map<Permit, Lease>();
  readonly #byId = new Map<string, Permit>();
  #clusterHeld = 0;
  #clusterQueued = 0;
  #processes = 1;
  #shedQueueFull = 0;
  #shedQueueTimeout = 0;
  #abortedWaiting = 0;
  #shedStoreUnavailable = 0;
  #leasesLost = 0;
  #known = false;

  /** @internal use `store.semaphore(options)` */
  constructor(store: RedisStore, keys: readonly string[], options: SharedSemaphoreOptions) {
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
    this.#maxQueue =
      options.maxQueue === undefined
        ? positiveInteger('limit', options.limit) * DEFAULT_QUEUE_PER_PERMIT
        : nonNegativeInteger('maxQueue', options.maxQueue);
    this.#queueTimeout =
      options.queueTimeout === undefined
        ? DEFAULT_QUEUE_TIMEOUT_MS
        : durationMs('queueTimeout', options.queueTimeout);
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
    return { limit: this.limit, held: this.#clusterHeld, queued: this.#clusterQueued };
  }

  override get queued(): number {
    return this.#waiters.size;
  }

  /** Always `undefined`: a shared permit needs Redis. Use `wait`, `acquire` or `run`. */
  override tryAcquire(): Permit | undefined {
    return undefined;
  }

  override wait(target: WaitTarget, options?: number | WaitOptions): WaitTicket | undefined {
    const timeout = typeof options === 'object' ? waitTimeout(options) : options;
    const wait =
      timeout === undefined ? this.#queueTimeout : Math.max(1, durationMs('timeout', timeout));
    const store = this.#store;
    if (store.closed) {
      target.rejected(this.#unavailable('the store is closed'));
      return undefined;
    }
    // Local bound first, in microseconds and without Redis: what a local gate would admit
    // at once (limit − held) plus its queue.
    if (this.#waiters.size >= this.#maxQueue + Math.max(0, this.limit - this.held)) {
      target.rejected(this.#queueFull());
      return undefined;
    }
    const policy = store.options.onStoreError;
    if (store.degraded && policy === 'reject') {
      target.rejected(this.#shedUnavailable());
      return undefined;
    }
    const waiter = new SharedWaiter(this, store.nextId(), target, this.now());
    this.#waiters.add(waiter);
    this.#byTicket.set(waiter.id, waiter);
    waiter.timer = setTimeout(onTimer, wait, waiter);
    if (store.degraded) {
      waiter.state = FALLBACK;
      this.#serveFallback();
    } else {
      this.#send(waiter);
    }
    return waiter.state === DONE ? undefined : waiter;
  }

  override acquire(options?: AcquireOptions): Promise<Permit> {
    let signal: AbortSignal | undefined;
    let timeout: number | undefined;
    if (options !== undefined) {
      checkObject('acquire options', options);
      checkKnownKeys('acquire', options, ACQUIRE_KEYS);
      signal = optionalSignal('signal', options.signal);
      timeout = waitTimeout(options);
      if (timeout !== undefined) timeout = durationMs('timeout', timeout);
      if (signal?.aborted) return Promise.reject(signal.reason);
    }
    return new Promise<Permit>((resolve, reject) => {
      let ticket: WaitTicket | undefined;
      const onAbort = (): void => ticket?.cancel(signal?.reason);
      ticket = this.wait(
        {
          granted(permit) {
            signal?.removeEventListener('abort', onAbort);
            // Cancel vs grant in one tick: the permit goes straight back, the caller sees the abort.
            if (signal?.aborted) {
              permit.release();
              reject(signal.reason);
            } else resolve(permit);
          },
          rejected(reason) {
            signal?.removeEventListener('abort', onAbort);
            reject(reason);
          },
        },
        timeout,
      );
      if (ticket !== undefined) signal?.addEventListener('abort', onAbort, { once: true });
    });
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

  override retryAfterMs(): number {
    const position = Math.max(this.#waiters.size, this.#clusterQueued) + 1;
    return Math.min(MAX_RETRY_AFTER_MS, Math.max(1, super.retryAfterMs() * position));
  }

  override stats(): SharedSemaphoreStats {
    const s = super.stats();
    const store = this.#store;
    return {
      ...s,
      queued: this.#waiters.size,
      shedQueueFull: s.shedQueueFull + this.#shedQueueFull,
      shedQueueTimeout: s.shedQueueTimeout + this.#shedQueueTimeout,
      abortedWaiting: s.abortedWaiting + this.#abortedWaiting,
      shared: {
        held: this.#clusterHeld,
        queued: this.#clusterQueued,
        processes: this.#processes,
        mode: store.degraded ? store.options.onStoreError : 'redis',
        leasesLost: this.#leasesLost,
        shedStoreUnavailable: this.#shedStoreUnavailable,
      },
    };
  }

  #send(waiter: SharedWaiter): void {
    waiter.state = SENDING;
    this.#store.acquire(this, waiter.id).then(
      ({ granted, held, queued, processes }) => {
        this.cluster(held, queued);
        this.#processes = Math.max(1, processes);
        if (waiter.state !== SENDING) return; // it left meanwhile; its release follows this reply
        if (granted || waiter.grantedEarly) this.#grant(waiter, true);
        else waiter.state = QUEUED;
      },
      () => this.#sendFailed(waiter),
    );
  }

  #sendFailed(waiter: SharedWaiter): void {
    if (waiter.state !== SENDING) return;
    // The outcome is unknown: give the id back (after a late answer, never before it).
    this.#store.release(this, [waiter.id]);
    if (this.#store.options.onStoreError === 'reject') {
      this.#finish(waiter);
      waiter.target.rejected(this.#shedUnavailable());
    } else {
      this.#toFallback(waiter);
      this.#serveFallback();
    }
  }

  #grant(waiter: SharedWaiter, inRedis: boolean): void {
    this.#finish(waiter);
    const permit = this.grantNow(this.now() - waiter.enqueuedAt);
    const lease = { id: waiter.id, inRedis };
    this.#leases.set(permit, lease);
    this.#byId.set(lease.id, permit);
    waiter.target.granted(permit);
  }

  #finish(waiter: SharedWaiter): void {
    waiter.state = DONE;
    this.#waiters.delete(waiter);
    this.#byTicket.delete(waiter.id);
    if (waiter.timer !== undefined) clearTimeout(waiter.timer);
    waiter.timer = undefined;
  }

  /** Our ticket was granted in Redis (a wake-up message or a heartbeat found it). */
  wake(id: string): void {
    const waiter = this.#byTicket.get(id);
    if (waiter === undefined) return;
    if (waiter.state === SENDING) waiter.grantedEarly = true;
    else if (waiter.state === QUEUED) {
      this.#store.forget(id);
      if (this.#store.options.replicas === 0) {
        this.#grant(waiter, true);
        return;
      }
      waiter.state = SENDING; // strict mode: granted only once the replicas have the grant
      this.#store.confirm(this, id).then(
        () => {
          if (waiter.state === SENDING) this.#grant(waiter, true);
        },
        () => this.#sendFailed(waiter),
      );
    }
  }

  /** A waiter leaves: aborted by its caller, or its deadline passed. */
  leave(waiter: SharedWaiter, reason: unknown, how: 'aborted' | 'timeout'): void {
    if (waiter.state === DONE) return;
    const wasFallback = waiter.state === FALLBACK;
    this.#finish(waiter);
    // Out of the Redis queue at once (in this tick's batch; after its own acquire's reply).
    if (!wasFallback) this.#store.release(this, [waiter.id]);
    if (how === 'aborted') {
      this.#abortedWaiting++;
      if (channels.waitAborted.hasSubscribers) {
        channels.waitAborted.publish({ gate: this, partner: this.name, reason });
      }
      waiter.target.rejected(reason);
      return;
    }
    if (this.#store.degraded && this.#store.options.onStoreError === 'reject') {
      waiter.target.rejected(this.#shedUnavailable());
      return;
    }
    this.#shedQueueTimeout++;
    const waited = this.now() - waiter.enqueuedAt;
    const error = new QueueTimeoutError(this.name, waited, this.retryAfterMs());
    if (channels.shed.hasSubscribers) {
      const queued = this.#waiters.size;
      channels.shed.publish({
        gate: this,
        partner: this.name,
        reason: 'queue_timeout',
        error,
        queued,
      });
    }
    waiter.target.rejected(error);
  }

  /** Semaphore hook: a permit went back (released, aborted, or taken back after maxHold). */
  protected override released(permit: Permit, _reason: ReleaseReason): void {
    const lease = this.#leases.get(permit);
    if (lease === undefined) return;
    this.#leases.delete(permit);
    this.#byId.delete(lease.id);
    this.#store.release(this, [lease.id]);
    if (this.#store.degraded) this.#serveFallback();
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

  cluster(held: number, queued: number): void {
    this.#known = true;
    this.#clusterHeld = held;
    this.#clusterQueued = queued;
  }

  heartbeat(
    lost: string[],
    granted: string[],
    held: number,
    queued: number,
    processes: number,
  ): void {
    this.cluster(held, queued);
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
    for (const id of granted) this.wake(id);
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
    for (const waiter of [...this.#waiters]) {
      if (waiter.state !== QUEUED) continue;
      this.#store.release(this, [waiter.id]); // kept until Redis answers again
      if (reject) {
        this.#finish(waiter);
        waiter.target.rejected(this.#shedUnavailable());
      } else this.#toFallback(waiter);
    }
    if (!reject) this.#serveFallback();
  }

  /** Redis answers again: local waiters take tickets, in their order. */
  storeUp(): void {
    for (const waiter of [...this.#waiters]) {
      if (waiter.state === FALLBACK) this.#send(waiter);
    }
  }

  /** The store is closing: waiters are shed; returns every id to give back. */
  storeClosed(): string[] {
    const ids = this.leaseIds();
    for (const waiter of [...this.#waiters]) {
      if (waiter.state !== FALLBACK) ids.push(waiter.id);
      this.#finish(waiter);
      waiter.target.rejected(this.#unavailable('the store is closed'));
    }
    this.#leases.clear();
    this.#byId.clear();
    return ids;
  }

  #toFallback(waiter: SharedWaiter): void {
    waiter.state = FALLBACK;
    waiter.grantedEarly = false;
    this.#byTicket.delete(waiter.id);
    waiter.id = this.#store.nextId(); // a fresh id: the old one may still turn up in Redis
    this.#byTicket.set(waiter.id, waiter);
  }

  /**
   * While Redis is unreachable under 'local': grant in arrival order up to this process's share,
   * `localLimit` or `ceil(limit / processes last seen)` (1 if it never reached Redis), counting
   * permits still held from Redis.
   */
  #serveFallback(): void {
    const { localLimit, onStoreError } = this.#store.options;
    if (!this.#store.degraded || onStoreError !== 'local') return;
    // A process that never heard from Redis knows no fleet size: one permit until it does.
    const share = localLimit ?? (this.#known ? Math.ceil(this.limit / this.#processes) : 1);
    for (const waiter of [...this.#waiters]) {
      if (this.held >= share) return;
      if (waiter.state === FALLBACK) this.#grant(waiter, false);
    }
  }

  #queueFull(): QueueFullError {
    this.#shedQueueFull++;
    const queued = this.#waiters.size;
    const error = new QueueFullError(this.name, queued, this.retryAfterMs());
    if (channels.shed.hasSubscribers) {
      channels.shed.publish({
        gate: this,
        partner: this.name,
        reason: 'queue_full',
        error,
        queued,
      });
    }
    return error;
  }

  /** Counts and publishes a caller shed because Redis is unavailable under `'reject'`. */
  #shedUnavailable(): StoreUnavailableError {
    this.#shedStoreUnavailable++;
    const error = this.#unavailable();
    if (channels.shed.hasSubscribers) {
      channels.shed.publish({
        gate: this,
        partner: this.name,
        reason: 'store_unavailable',
        error,
        queued: this.#waiters.size,
      });
    }
    return error;
  }

  #unavailable(why?: string): StoreUnavailableError {
    const retryAfter = Math.max(this.#store.options.heartbeatMs, 1);
    return new StoreUnavailableError(this.name, retryAfter, why);
  }
}
