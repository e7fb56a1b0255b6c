import { SharedLayoutError, StoreUnavailableError } from '../common/errors.js';
import { positiveInteger } from '../common/options.js';
import type { ReleaseReason } from '../gate/diagnostics.js';
import type { RateOptions } from '../gate/rate.js';
import {
  type AcquireOptions,
  type Permit,
  type RunCallback,
  Semaphore,
  type TryAcquireOptions,
  type WaitOptions,
  type WaitTarget,
  type WaitTicket,
} from '../gate/semaphore.js';
import { within } from './calls.js';
import { BlockLease } from './leased-block.js';
import { RateShare } from './leased-rate-share.js';
import {
  costliestHead,
  heaviestHead,
  type LeasedGateStore,
  NO_RATE,
  RefreshCalls,
} from './leased-refresh.js';
import { LEASED_LAYOUT, LEASED_RATE_LAYOUT } from './leased-scripts.js';
import {
  Demand,
  type LeasedSemaphoreOptions,
  type ResolvedLeasedOptions,
  resolveLeasedOptions,
} from './leased-share.js';
import type { LeasedSemaphoreStats } from './leased-stats.js';

export type { LeasedGateStore } from './leased-refresh.js';
export type { LeasedGateView, LeasedRateView, LeasedSemaphoreStats } from './leased-stats.js';

/**
 * A shared gate in leased mode: a local `Semaphore` (queue bound, deadlines, abort, maxHold,
 * priorities, weights, metrics, leak reports as a local gate's) whose grants stay within this
 * process's *block* of the cap. The block is renewed by one Redis script per refresh, not per
 * request. Create it with `store.semaphore({ name, limit, mode: 'leased' })`.
 *
 * Safety: Redis keeps Σ max(block, held) ≤ cap over live processes. A block is used only until
 * `sent + leaseMs` on this process's clock (sent: when its refresh left), earlier than Redis
 * lets it expire; while a refresh is on its way the gate grows past nothing it held when it
 * was sent. Cross-process FIFO is what this mode gives up: each process serves its own queue.
 */
export class LeasedSemaphore extends Semaphore {
  readonly keys: readonly string[];
  readonly #store: LeasedGateStore;
  readonly #calls: RefreshCalls;
  readonly #o: ResolvedLeasedOptions;
  readonly #demand: Demand;
  #requested: number;
  #cap: number;
  #warnedCap: number | undefined = undefined;
  /** The block as Redis last answered it, and when to ask again. */
  readonly #lease: BlockLease;
  #wants = 0;
  /** The refresh on its way, or undefined. */
  #inflight: Promise<void> | undefined = undefined;
  #refused: SharedLayoutError | undefined = undefined;
  #ceiling = 0;
  #leasesLost = 0;
  #lapsed = true;
  #shedUnavailable = 0;
  #closed = false;
  /** Closed and drained (or given up on): no refresh any more. */
  #final = false;
  /** A gate with a `rate`: the fleet's rate as Redis holds it, and this process's share of it. */
  readonly #rate: RateShare | undefined;
  readonly #timer: ReturnType<typeof setInterval>;

  /** @internal use `store.semaphore({ mode: 'leased', ... })` */
  constructor(store: LeasedGateStore, keys: readonly string[], options: LeasedSemaphoreOptions) {
    super({
      limit: options.limit,
      maxQueue: options.maxQueue,
      queueTimeout: options.queueTimeout,
      maxHold: options.maxHold,
      leakWarnAfter: options.leakWarnAfter,
      name: options.name,
      priorities: options.priorities,
      rate: options.rate,
    });
    this.#o = resolveLeasedOptions(options, store.options.leaseMs);
    this.#store = store;
    this.#lease = new BlockLease(this.#o);
    this.#rate = options.rate === undefined ? undefined : this.#rateShare(options.rate);
    this.#calls = new RefreshCalls(store, keys, this.name ?? '', this.#o);
    this.keys = keys;
    this.#requested = this.limit;
    this.#cap = this.limit;
    this.#demand = new Demand(this.#o.refreshMs);
    this.setCeiling(0);
    this.#timer = setInterval(() => this.#tick(), this.#o.askMs);
    this.#timer.unref?.();
    store.listenLeased?.(this.#calls.channel, (message) => {
      this.#lease.heard(message);
      this.#tick();
    });
    this.#refresh();
  }

  /** The cap every process shares: Redis's, as of its last answer. */
  get sharedLimit(): number {
    return this.#cap;
  }

  /** This process's block of the cap (0 once its lease lapsed without a refresh). */
  get block(): number {
    return this.#ceiling;
  }

  /** Resolves once a refresh has been answered (or has failed): a first block, for tests and warm-ups. */
  async ready(): Promise<void> {
    while (
      this.#lease.answeredAt === Number.NEGATIVE_INFINITY &&
      !this.#closed &&
      !this.#lease.down &&
      this.#refused === undefined
    ) {
      await (this.#inflight ?? this.#refresh());
    }
  }

  /**
   * Changes the cap in Redis for every process of this gate (as a FIFO gate's
   * `setSharedLimit`). Rejects while Redis is unreachable.
   */
  async setSharedLimit(limit: number): Promise<void> {
    const value = positiveInteger('limit', limit);
    this.#requested = value;
    await this.#inflight;
    await this.#refresh(value);
    if (this.#lease.down) throw new StoreUnavailableError(this.name, this.#o.refreshMs);
  }

  /**
   * Changes this gate's request rate in Redis, for every process (as `setSharedLimit` does the
   * cap). Only on a gate created with a `rate`; its `limit` a whole number of calls (shares are
   * leased in whole calls). Rejects while Redis is unreachable.
   */
  async setSharedRate(rate: RateOptions): Promise<void> {
    if (this.#rate === undefined) {
      throw new TypeError(
        `shared gate ${this.name ?? ''} has no rate: create it with one (a rate changes the gate's layout in Redis)`,
      );
    }
    this.#rate.ask(rate);
    await this.#inflight;
    await this.#refresh(0, this.#rate.arg);
    if (this.#lease.down) throw new StoreUnavailableError(this.name, this.#o.refreshMs);
  }

  /** Bounds this process's share: at most `limit` permits here, within [1, `sharedLimit`]. */
  override setLimit(limit: number): void {
    const value = positiveInteger('limit', limit);
    if (value > this.#cap) {
      throw new RangeError(
        `limit of shared gate ${this.name ?? ''} must be at most its shared cap ${this.#cap} (this process's share), got ${value}`,
      );
    }
    super.setLimit(value);
  }

  override acquire(options?: AcquireOptions): Promise<Permit> {
    const refused = this.#refusal();
    if (refused !== undefined) return Promise.reject(refused);
    const promise = super.acquire(options);
    this.#nudge();
    return promise;
  }

  override tryAcquire(options?: number | TryAcquireOptions): Permit | undefined {
    if (this.#refusal() !== undefined) return undefined;
    return super.tryAcquire(options);
  }

  override wait(target: WaitTarget, options?: number | WaitOptions): WaitTicket | undefined {
    const refused = this.#refusal();
    if (refused !== undefined) {
      target.rejected(refused);
      return undefined;
    }
    const ticket = super.wait(target, options);
    this.#nudge();
    return ticket;
  }

  override run<T>(
    fn: (signal: AbortSignal) => T | PromiseLike<T>,
    options: AcquireOptions & { signal: AbortSignal },
  ): Promise<T>;
  override run<T>(
    fn: (signal: AbortSignal | undefined) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T>;
  override run<T>(fn: RunCallback<T>, options?: AcquireOptions): Promise<T> {
    const refused = this.#refusal();
    if (refused !== undefined) return Promise.reject(refused);
    const promise = super.run(fn as (signal: AbortSignal | undefined) => T, options);
    this.#nudge();
    return promise;
  }

  override stats(): LeasedSemaphoreStats {
    return {
      ...super.stats(),
      shared: {
        sharing: 'leased',
        held: this.#lease.clusterHeld,
        queued: 0,
        processes: this.#lease.processes,
        mode: this.#lease.down ? this.#store.options.onStoreError : 'redis',
        block: this.#ceiling,
        demand: this.#wants,
        target: this.#lease.target,
        blocks: this.#lease.blocks,
        leasesLost: this.#leasesLost,
        shedStoreUnavailable: this.#shedUnavailable,
        ...(this.#rate === undefined ? {} : { rate: this.#rate.view() }),
      },
    };
  }

  /** Semaphore hook: before a release serves the next waiter, a lapsed block is noticed. */
  protected override released(_permit: Permit, _reason: ReleaseReason): void {
    if (performance.now() >= this.#lease.validUntil) this.#apply();
    // Held past a shrunk block: the release may be what Redis waits for (BlockLease.due, drained).
    if (this.#lease.heldAtSend > this.#lease.block) queueMicrotask(() => this.#tick());
  }

  /**
   * Checked on every way in: the block's lease may have lapsed (a stall past it: its first
   * timer may not have run yet). Returns the error to refuse with, if any.
   */
  #refusal(): Error | undefined {
    if (performance.now() >= this.#lease.validUntil) this.#apply();
    if (this.#refused !== undefined) return this.#refused;
    if (this.#rejecting()) {
      this.#shedUnavailable++;
      return new StoreUnavailableError(this.name, this.#o.refreshMs);
    }
    return undefined;
  }

  #rejecting(): boolean {
    return this.#lease.down && this.#lapsed && this.#store.options.onStoreError === 'reject';
  }

  /** Someone queued: ask for more now if that can help (at most every `askMs`). */
  #nudge(): void {
    if (this.queuedWeight > 0 && this.#inflight === undefined) this.#tick();
  }

  #tick(): void {
    if (this.#final) return;
    const now = performance.now();
    if (now >= this.#lease.validUntil) this.#apply();
    const units = this.held + this.queuedWeight;
    // Closing: a demand of 0, so the unused block goes back at once and the held part stays
    // (the rate's share stays as it was: the close parks it for a replacement).
    const wants = this.#closed ? 0 : this.#demand.wants(units, now, this.#cap);
    const rateWants = this.#rate?.demand(now) ?? 0;
    if (this.#inflight !== undefined || this.#refused !== undefined) return;
    const head = heaviestHead(this);
    const need = head?.weight ?? 0;
    const signals = this.#signals;
    const demands = { held: this.held, wants, rateWants, rate: this.#rate, need, signals };
    const reported = this.#calls.reported(head);
    if (this.#lease.due(now, { ...demands, ...reported }, this.#store.processId)) this.#refresh();
  }

  #refresh(setCap = 0, setRate = ''): Promise<void> {
    const sentAt = performance.now();
    this.#wants = this.#demand.wants(this.held + this.queuedWeight, sentAt, this.#cap);
    const sent = this.#lease.sending(sentAt, this.held, this.#wants, this.#signals);
    this.#rate?.sending(sentAt);
    const rate = this.#rate?.args(this.#rate.wants, setRate) ?? NO_RATE;
    const args = this.#calls.args(
      {
        requested: this.#requested,
        ...sent, // held, valid, block
        wants: this.#closed ? 0 : this.#wants,
        setCap,
        rate,
        head: heaviestHead(this),
        rateNeed: this.#rate?.need ?? 0,
        rateLead: this.#rate?.lead(sentAt) ?? 0,
        rateLeadMs: this.#rate?.leadMs() ?? 0,
        ...this.#lease.fault(),
      },
      sentAt,
    );
    const inflight = this.#calls.call(args, this.#layout).then(
      (reply) => this.#answer(reply, sentAt),
      (error: unknown) => this.#failed(error),
    );
    this.#inflight = inflight;
    this.#apply(); // no growth while the answer is on its way
    void inflight.then(() => {
      if (this.#inflight === inflight) this.#inflight = undefined;
      this.#apply();
    });
    return inflight;
  }

  #answer(reply: unknown[], sentAt: number): void {
    const answer = this.#calls.answered(reply);
    const recovering = answer.recoveringMs;
    this.#rate?.answer(reply);
    // Ask again as the window ends, not up to a timer step later (a fresh fleet waits a window).
    if (recovering > 0 && recovering < this.#o.refreshMs * 2) {
      setTimeout(() => this.#tick(), recovering + 1).unref?.();
    }
    this.#lease.answered(answer, sentAt);
    const cap = answer.cap;
    if (cap !== this.#cap && Number.isSafeInteger(cap) && cap > 0) this.#adoptCap(cap);
  }

  /** The rate's share, its view of this gate. */
  #rateShare(rate: RateOptions): RateShare {
    return new RateShare(rate, this.#o.refreshMs, {
      name: this.name,
      options: this.#store.options, // readonly on the store
      shareRate: (share) => this.shareRate(share),
      lease: () => ({
        validUntil: this.#lease.validUntil,
        stopped: this.#refused !== undefined || this.#closed,
        sentAt: this.#inflight === undefined ? undefined : this.#lease.lastSent,
        down: this.#lease.down,
        processes: this.#lease.processes,
        capless: this.#lease.processes > this.#cap && this.#lease.block === 0 && this.held === 0,
        cap: this.#cap,
      }),
      refreshSoon: () => void (!this.#final && this.#inflight === undefined && this.#refresh()),
      costliest: () => costliestHead(this),
    });
  }

  /** The signal subscription's epoch while this gate's channel is heard, else -1. */
  get #signals(): number {
    return this.#store.leasedSignals?.(this.#calls.channel) ?? -1;
  }

  get #layout(): string {
    return this.#rate === undefined ? LEASED_LAYOUT : LEASED_RATE_LAYOUT;
  }

  #failed(error: unknown): void {
    if (error instanceof SharedLayoutError) {
      if (this.#refused === undefined) {
        this.#refused = error;
        process.emitWarning(error.message, { code: SharedLayoutError.CODE });
      }
      this.#apply();
      this.clearQueue(this.#refused);
      return;
    }
    this.#lease.failed();
    this.#rate?.failed();
  }

  /** The cap lives in Redis: as a FIFO gate, this process gates by Redis's and says so once. */
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
    super.setLimit(this.limit >= previous ? cap : Math.min(this.limit, cap));
  }

  /** Sets the local ceiling from the block, its lease, a refresh on its way and the store policy. */
  #apply(): void {
    const now = performance.now();
    let room: number;
    if (this.#refused !== undefined || this.#closed) room = 0;
    else if (now < this.#lease.validUntil) {
      if (this.#lapsed) this.#lapsed = false;
      room = this.#lease.block;
      // Redis will count max(new block, held at send): no growth past that while it answers.
      if (this.#inflight !== undefined) room = Math.min(room, this.#lease.heldAtSend);
    } else {
      if (!this.#lapsed && this.#lease.validUntil > Number.NEGATIVE_INFINITY) {
        // Redis stops counting our permits at the lease's end: what we hold now runs uncounted.
        this.#leasesLost += this.held;
      }
      this.#lapsed = true;
      room = this.#lease.down ? this.#fallback() : 0;
    }
    if (room !== this.#ceiling) {
      this.#ceiling = room;
      this.setCeiling(room);
    }
    this.#rate?.apply(now);
    if (this.#rejecting() && this.queued > 0) {
      this.#shedUnavailable += this.queued;
      this.clearQueue(new StoreUnavailableError(this.name, this.#o.refreshMs));
    }
  }

  /**
   * Redis unreachable past the block's lease, under `onStoreError: 'local'`: `localLimit`, else
   * the last block Redis granted (after a failed refresh, no more than was held when it left).
   * Redis away, every process is cut off and its state stands still (the script holds time
   * still over the gap when it answers again): each entry still counts that block, so Σ ≤ cap.
   * A process with a block of 0 grants nothing (it was 1: one call over the cap per such
   * process, 10 at cap 8 in the leased schedule test, seed 32002).
   */
  #fallback(): number {
    if (this.#store.options.onStoreError !== 'local') return 0;
    return this.#store.options.localLimit ?? this.#lease.block;
  }

  /**
   * Closing: waiters shed, nothing granted, refreshes on (demand 0: the unused block goes back)
   * until what is held is released or `drainUntil` passes; then the entry goes, unless permits
   * are still held (calls at the partner): it then stays, counting them until its lease ends.
   */
  close(drainUntil = performance.now()): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    this.#apply();
    this.clearQueue(new StoreUnavailableError(this.name, this.#o.refreshMs, 'the store is closed'));
    // Permits held: the unused part of the block goes back now. None: the close below at once
    // (a refresh first would cut a rate share the close parks for a replacement).
    if (this.held > 0) this.#tick();
    return within(this.onIdle(), drainUntil - performance.now())
      .then(() => {
        this.#final = true;
        clearInterval(this.#timer);
        return this.#inflight;
      })
      .then(() => {
        if (this.#refused !== undefined || this.held > 0) return;
        // The entry goes; on a gate with a rate, what was sent in the last window stays counted
        // until it is a window old (issue 32, item 6: a clean close gives its share back at once).
        const now = performance.now();
        const rate = this.#rate?.closing(now) ?? { args: NO_RATE, sent: '', lead: 0 };
        return this.#calls.leave(this.#requested, rate, this.#lease.down, now, this.#layout);
      });
  }
}
