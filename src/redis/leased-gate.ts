import { SharedLayoutError, StoreUnavailableError } from '../common/errors.js';
import { positiveInteger } from '../common/options.js';
import { coreEntry } from '../gate/counting-gate.js';
import type { ReleaseReason } from '../gate/diagnostics.js';
import type { RateOptions, ResolvedRate } from '../gate/rate.js';
import {
  type AcquireOptions,
  type Permit,
  type RunCallback,
  Semaphore,
  type SemaphoreStats,
  type TryAcquireOptions,
  type WaitOptions,
  type WaitTarget,
  type WaitTicket,
} from '../gate/semaphore.js';
import { leasedRate, RateUse, rateShareOf } from './leased-rate.js';
import { LEASED_LAYOUT, LEASED_RATE_LAYOUT } from './leased-scripts.js';
import {
  Demand,
  type LeasedSemaphoreOptions,
  type ResolvedLeasedOptions,
  resolveLeasedOptions,
} from './leased-share.js';
import type { ResolvedStoreOptions } from './options.js';
import { rateArg } from './shared-rate.js';

/**
 * What a leased gate uses of its store (a `RedisStore`), declared here so that store.ts can
 * build the gates without an import circle.
 */
export interface LeasedGateStore {
  readonly options: ResolvedStoreOptions;
  readonly processId: string;
  readonly closed: boolean;
  /** One REFRESH script; rejects on an error or a timeout ({@link SharedLayoutError} for a layout). */
  refreshLeased(
    keys: readonly string[],
    args: readonly (string | number)[],
    gate: string,
    layout: string,
  ): Promise<unknown[]>;
}

/** The cluster-wide view of a leased gate, as of its last refresh. */
export interface LeasedGateView {
  /** Always `'leased'` (a FIFO gate's view has no `sharing`). */
  sharing: 'leased';
  /** Permits held across every process (as each last reported them). */
  held: number;
  /** Nothing waits in Redis in this mode: always 0 (each process queues its own callers). */
  queued: number;
  /** Processes with a live block entry. */
  processes: number;
  /** `'redis'` while refreshes succeed, else the store's `onStoreError` policy. */
  mode: 'redis' | 'local' | 'reject';
  /** This process's block: how many permits it may hold now (0 once its lease lapsed). */
  block: number;
  /** This process's demand as last sent: held + queued units, smoothed. */
  demand: number;
  /** This process's max-min fair share of the cap by demand, as of the last refresh. */
  target: number;
  /** Every process's blocks summed. */
  blocks: number;
  /** Permits held when this process's block lapsed without a refresh (Redis stopped counting them). */
  leasesLost: number;
  /** Callers shed with `StoreUnavailableError`. */
  shedStoreUnavailable: number;
  /** A gate with a `rate`: this process's lease of it (the fleet's rate is `stats().rate`). */
  rate?: LeasedRateView;
}

/** A leased gate's rate, seen from this process, as of its last refresh. */
export interface LeasedRateView {
  /** Whole calls per `per` this process may send now (0 once its lease lapsed). */
  share: number;
  /** Calls beyond that pace it may send at once: `floor(burst × share / limit)`. */
  burst: number;
  /** Its max-min fair share of the rate by demand. */
  target: number;
  /** Its rate demand as last sent: cost units taken in the last `per` ms plus those queued. */
  demand: number;
  /** Every process's counted share summed (≤ the rate's `limit`). */
  counted: number;
}

export interface LeasedSemaphoreStats extends SemaphoreStats {
  shared: LeasedGateView;
}

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
  readonly #o: ResolvedLeasedOptions;
  readonly #demand: Demand;
  #requested: number;
  #cap: number;
  #warnedCap: number | undefined = undefined;
  #block = 0;
  #validUntil = Number.NEGATIVE_INFINITY;
  #target = 0;
  #free = 0;
  #processes = 1;
  #blocks = 0;
  #clusterHeld = 0;
  #answeredAt = Number.NEGATIVE_INFINITY;
  #recovering = false;
  /** When the recovery window Redis last reported ends (this process's clock): ask then. */
  #recoveredAt = 0;
  #wants = 0;
  /**
   * Redis's time in the last answer and this process's monotonic clock when it came: the script
   * holds the two against each other to see a step of Redis's clock (issue 32).
   */
  #seen = 0;
  #seenAt = 0;
  /** Redis answered this gate once: a missing state is then a loss, not a first use. */
  #had = false;
  /** The refresh on its way (and the units held when it left), or undefined. */
  #inflight: Promise<void> | undefined = undefined;
  #heldAtSend = 0;
  #lastSent = Number.NEGATIVE_INFINITY;
  /** The last refresh failed (Redis unreachable, slow, or erroring). */
  #down = false;
  #refused: SharedLayoutError | undefined = undefined;
  #ceiling = 0;
  #leasesLost = 0;
  #lapsed = true;
  #shedUnavailable = 0;
  #closed = false;
  /** The fleet's rate as Redis holds it (a gate with a `rate` only), and this process's lease of it. */
  #rate: ResolvedRate | undefined;
  #rateArg = '';
  #rateWarned: string | undefined = undefined;
  readonly #rateUse: RateUse | undefined;
  /** The share Redis granted, its target, Σ counted, and the share this process sends at now. */
  #rateShare = 0;
  #rateTarget = 0;
  /** A refresh that cuts the share to its target was sent at once after the last answer. */
  #cutting = false;
  #rateCounted = 0;
  #rateWants = 0;
  #rateApplied = 0;
  #rateBurst = 0;
  /** The rate the applied share is of (a new one from Redis is applied even at the same share). */
  #rateOf: ResolvedRate | undefined = undefined;
  #rateUntil = 0;
  /** A refresh failed: Redis may have shrunk the share it was sent for; none until an answer. */
  #rateUnsure = false;
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
    if (options.rate !== undefined) {
      this.#rate = leasedRate(options.rate);
      this.#rateArg = rateArg(this.#rate);
      this.#rateUse = new RateUse(this.#rate.per, this.#o.refreshMs);
      this.shareRate({ rate: this.#rate, limit: 0, burst: 0, until: Number.POSITIVE_INFINITY });
    }
    this.#store = store;
    this.keys = keys;
    this.#requested = this.limit;
    this.#cap = this.limit;
    this.#demand = new Demand(this.#o.refreshMs);
    this.setCeiling(0);
    this.#timer = setInterval(() => this.#tick(), this.#o.askMs);
    this.#timer.unref?.();
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
      this.#answeredAt === Number.NEGATIVE_INFINITY &&
      !this.#closed &&
      !this.#down &&
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
    if (this.#down) throw new StoreUnavailableError(this.name, this.#o.refreshMs);
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
    const value = leasedRate(rate);
    this.#rateArg = rateArg(value);
    await this.#inflight;
    await this.#refresh(0, this.#rateArg);
    if (this.#down) throw new StoreUnavailableError(this.name, this.#o.refreshMs);
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
        held: this.#clusterHeld,
        queued: 0,
        processes: this.#processes,
        mode: this.#down ? this.#store.options.onStoreError : 'redis',
        block: this.#ceiling,
        demand: this.#wants,
        target: this.#target,
        blocks: this.#blocks,
        leasesLost: this.#leasesLost,
        shedStoreUnavailable: this.#shedUnavailable,
        ...(this.#rate === undefined
          ? {}
          : {
              rate: {
                share: this.#rateApplied,
                burst: this.#rateBurst,
                target: this.#rateTarget,
                demand: this.#rateWants,
                counted: this.#rateCounted,
              },
            }),
      },
    };
  }

  /** Semaphore hook: before a release serves the next waiter, a lapsed block is noticed. */
  protected override released(_permit: Permit, _reason: ReleaseReason): void {
    if (performance.now() >= this.#validUntil) this.#apply();
  }

  /**
   * Checked on every way in: the block's lease may have lapsed (a stall past it: its first
   * timer may not have run yet). Returns the error to refuse with, if any.
   */
  #refusal(): Error | undefined {
    if (performance.now() >= this.#validUntil) this.#apply();
    if (this.#refused !== undefined) return this.#refused;
    if (this.#rejecting()) {
      this.#shedUnavailable++;
      return new StoreUnavailableError(this.name, this.#o.refreshMs);
    }
    return undefined;
  }

  #rejecting(): boolean {
    return this.#down && this.#lapsed && this.#store.options.onStoreError === 'reject';
  }

  /** Someone queued: ask for more now if that can help (at most every `askMs`). */
  #nudge(): void {
    if (this.queuedWeight > 0 && this.#inflight === undefined) this.#tick();
  }

  #tick(): void {
    if (this.#closed) return;
    const now = performance.now();
    if (now >= this.#validUntil) this.#apply();
    const units = this.held + this.queuedWeight;
    const wants = this.#demand.wants(units, now, this.#cap);
    const rateWants = this.#rateDemand(now);
    if (this.#inflight !== undefined || this.#refused !== undefined) return;
    const since = now - this.#lastSent;
    const block = this.#block;
    const share = this.#rateShare;
    const idle = wants === 0 && this.held === 0 && block === 0 && rateWants === 0 && share === 0;
    // A busy process refreshes one timer step early: within an interval of its last refresh
    // its entry is renewed (what a first use's window counts on after a loss).
    if (since >= (idle && !this.#down ? this.#o.leaseMs / 2 : this.#o.refreshMs - this.#o.askMs)) {
      this.#refresh();
      return;
    }
    if (since < this.#o.askMs) return;
    // More than the block, and Redis last said there is some (free permits, or a fair share
    // above this block that others give back), or that answer is old: ask now.
    // An old answer, or a recovery window that has ended since: ask now.
    const stale =
      now - this.#answeredAt >= this.#o.refreshMs || (this.#recovering && now >= this.#recoveredAt);
    const more =
      wants > block && (stale || (!this.#recovering && (this.#free > 0 || block < this.#target)));
    // A block twice what is wanted: give the unused part back now, for processes that need it.
    const less = block > this.held && wants <= Math.floor(block / 2);
    // The same for the rate's share (its free part: the rate's limit less every counted share).
    const rateFree = this.#rate === undefined ? 0 : this.#rate.limit - this.#rateCounted;
    const moreRate =
      rateWants > share &&
      (stale || (!this.#recovering && (rateFree > 0 || share < this.#rateTarget)));
    const lessRate = share > 0 && rateWants <= Math.floor(share / 2);
    // Redis shrank the block below what was held (another process's heavier head, a fairer
    // share): it counts what was held at the refresh until the next one says less. Say it as
    // soon as some of it is released, so the other process's head is not held up a whole interval.
    const drained = this.#heldAtSend > block && this.held < this.#heldAtSend;
    if (more || less || moreRate || lessRate || drained) this.#refresh();
  }

  /** The rate demand: cost units taken in the last `per` ms plus those queued, smoothed (0 without a rate). */
  #rateDemand(now: number): number {
    const use = this.#rateUse;
    if (use === undefined) return 0;
    const limit = this.#rate!.limit;
    const split = Math.ceil(limit / this.#processes);
    return use.wants(this.shareRate(), this.#rateApplied, now, limit, split);
  }

  #refresh(setCap = 0, setRate = ''): Promise<void> {
    const sentAt = performance.now();
    this.#lastSent = sentAt;
    const valid = sentAt < this.#validUntil;
    const wants = this.#demand.wants(this.held + this.queuedWeight, sentAt, this.#cap);
    this.#wants = wants;
    this.#rateWants = this.#rateDemand(sentAt);
    // A share above the rate's demand, or above the fair target Redis last answered, is cut
    // here, before asking: Redis then counts the cut from this refresh on (one call more for a
    // window), not from when an answer that cut it arrives. Redis does not cut a share this
    // process still sends at (`selfcut`); it answers the target, and a refresh leaves at once.
    const keep =
      this.#rateShare > this.#rateTarget
        ? Math.min(this.#rateWants, this.#rateTarget)
        : this.#rateWants;
    if (keep < this.#rateShare) {
      this.#rateShare = keep;
      this.#applyRate(sentAt);
    }
    // What Redis counts for us until the answer: held, plus a little of a valid block that
    // demand still wants, kept in use while the answer is on its way (so a refresh does not
    // stall the next grant). An idle process reserves nothing.
    const slack = Math.max(1, Math.ceil(this.held / 10));
    const held =
      valid && wants > this.held
        ? Math.max(this.held, Math.min(this.#block, wants, this.held + slack))
        : this.held;
    this.#heldAtSend = held;
    const args = [
      this.#requested,
      this.#o.leaseMs,
      // A first use, or a loss found by a process that never had an entry: no block beyond
      // what is held until a busy process that had one could have refreshed (one interval: a
      // busy process refreshes a timer step early, so its reply has that step to arrive); that
      // process makes it a lease. A command timeout more would leave a fresh fleet idle that
      // long (issue 32, item 7).
      this.#o.refreshMs,
      this.#store.processId,
      held,
      this.#closed ? 0 : this.#wants,
      valid ? 1 : 0,
      setCap,
      // How often some refresh walks the fleet's entries: twice per interval per gate.
      Math.max(1, Math.floor(this.#o.refreshMs / 2)),
      ...this.#rateArgs(this.#closed ? 0 : this.#rateWants, setRate),
      ...this.#faultArgs(sentAt, this.#headWeight(), false),
      '',
      1, // it cuts its own share to a lower target (issue 32, item 6)
    ];
    const inflight = this.#store.refreshLeased(this.keys, args, this.name ?? '', this.#layout).then(
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

  /**
   * The script's arguments that let it tell time that passed unobserved (issue 32): Redis's time
   * last seen and the monotonic ms since, whether the last refresh failed and whether this
   * process had an entry; the heaviest waiting head; the tolerance of a reply's delay (a command
   * timeout) and the longest gap between refreshes of a healthy fleet; a clean close.
   */
  #faultArgs(sentAt: number, need: number, closing: boolean): (string | number)[] {
    const timeout = this.#store.options.commandTimeoutMs;
    return [
      this.#seen,
      this.#seen > 0 ? Math.max(0, Math.floor(sentAt - this.#seenAt)) : 0,
      this.#down ? 1 : 0,
      this.#had ? 1 : 0,
      need,
      // A reply's delay beyond this is taken for a step (a false one only holds time still
      // for the gap since the last run): within a quarter lease, so a step too small to see
      // cannot expire an entry renewed within the last interval (refreshMs ≤ leaseMs / 2).
      Math.min(timeout, Math.floor(this.#o.leaseMs / 4)),
      // A gap longer than this after failed refreshes is an outage: no live entry expires
      // within half a lease of its last renewal.
      Math.min(this.#o.refreshMs + timeout, Math.floor(this.#o.leaseMs / 2)),
      closing ? 1 : 0,
    ];
  }

  /** The heaviest head waiting in any priority class: a unit the block must fit at once. */
  #headWeight(): number {
    let need = 0;
    for (const cls of coreEntry.parts(this).queue.classes) {
      const head = cls.head;
      if (head !== undefined && head.weight > need) need = head.weight;
    }
    return need;
  }

  #answer(reply: unknown[], sentAt: number): void {
    this.#seen = Number(reply[13]) || 0;
    this.#seenAt = performance.now();
    this.#had = true;
    const [block, lease, cap, processes, blocks, held, free, target, recovering] = reply.map(
      Number,
    ) as [number, number, number, number, number, number, number, number, number];
    if (this.#rate !== undefined) this.#rateAnswer(reply);
    this.#recovering = recovering > 0;
    this.#recoveredAt = sentAt + recovering;
    // Ask again as the window ends, not up to a timer step later (a fresh fleet waits a window).
    if (recovering > 0 && recovering < this.#o.refreshMs * 2) {
      setTimeout(() => this.#tick(), recovering + 1).unref?.();
    }
    this.#block = block;
    this.#validUntil = sentAt + lease;
    this.#processes = Math.max(1, processes);
    this.#blocks = blocks;
    this.#clusterHeld = held;
    this.#free = free;
    this.#target = target;
    this.#answeredAt = performance.now();
    this.#down = false;
    if (cap !== this.#cap && Number.isSafeInteger(cap) && cap > 0) this.#adoptCap(cap);
  }

  /** The rate's part of an answer: this process's share, and the rate Redis holds (adopted, warned once). */
  #rateAnswer(reply: unknown[]): void {
    this.#rateShare = Number(reply[9]);
    this.#rateTarget = Number(reply[10]);
    // A share above its target: cut it now, in a refresh that says so (once per answer that
    // asks; a cut answered with a share above the target again waits for the timer).
    if (this.#rateShare > this.#rateTarget && !this.#cutting) {
      this.#cutting = true;
      setImmediate(() => {
        if (!this.#closed && this.#inflight === undefined) this.#refresh();
      }).unref?.();
    } else this.#cutting = false;
    this.#rateCounted = Number(reply[11]);
    this.#rateUnsure = false;
    const held = String(reply[12] ?? '');
    if (held === '' || held === rateArg(this.#rate!)) return;
    const [limit, per, burst] = held.split(':').map(Number) as [number, number, number];
    if (!(limit >= 1) || !(per > 0) || !(burst >= 0)) return;
    this.#rate = { limit, per, burst };
    if (held !== this.#rateArg && this.#rateWarned !== held) {
      this.#rateWarned = held;
      const mine = this.#rateArg.split(':');
      process.emitWarning(
        `shared gate ${JSON.stringify(this.name ?? '')}: Redis holds rate ${limit} per ${per} ms (burst ${burst}) for it, this process asked for ${mine[0]} per ${mine[1]} ms (burst ${mine[2]}); gating by Redis's (change it for every process with setSharedRate(rate))`,
        { code: 'HOSTGATE_SHARED_RATE_MISMATCH' },
      );
    }
  }

  /** The REFRESH script's rate arguments (none for a gate without a rate). */
  #rateArgs(wants: number, setRate: string): (string | number)[] {
    if (this.#rate === undefined) return ['', 0, 0, 0, ''];
    return [this.#rateArg, this.#rateApplied, wants, this.#store.options.commandTimeoutMs, setRate];
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
    this.#down = true;
    // Redis may still run it (a timeout is not a refusal) and shrink the block, counting
    // max(new block, held at send) for us and giving the rest away: grow past nothing more.
    this.#block = Math.min(this.#block, this.#heldAtSend);
    // Redis may have run the refresh and shrunk this process's rate share, counting the old one
    // only a command timeout and a window past it: send on no share until an answer says.
    this.#rateUnsure = true;
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
    else if (now < this.#validUntil) {
      if (this.#lapsed) this.#lapsed = false;
      room = this.#block;
      // Redis will count max(new block, held at send): no growth past that while it answers.
      if (this.#inflight !== undefined) room = Math.min(room, this.#heldAtSend);
    } else {
      if (!this.#lapsed && this.#validUntil > Number.NEGATIVE_INFINITY) {
        // Redis stops counting our permits at the lease's end: what we hold now runs uncounted.
        this.#leasesLost += this.held;
      }
      this.#lapsed = true;
      room = this.#down ? this.#fallback() : 0;
    }
    if (room !== this.#ceiling) {
      this.#ceiling = room;
      this.setCeiling(room);
    }
    if (this.#rate !== undefined) this.#applyRate(now);
    if (this.#rejecting() && this.queued > 0) {
      this.#shedUnavailable += this.queued;
      this.clearQueue(new StoreUnavailableError(this.name, this.#o.refreshMs));
    }
  }

  /** Sets the rate share this process sends at, from Redis's answer, its lease and the store policy. */
  #applyRate(now: number): void {
    const rate = this.#rate!;
    let share: number;
    // A share from Redis is sent at until the lease ends, and while a refresh is on its way
    // until a command timeout after it left: Redis holds what it reports only that long.
    let until = this.#validUntil;
    if (this.#refused !== undefined || this.#closed) share = 0;
    else if (now < this.#validUntil) {
      share = this.#rateUnsure ? 0 : this.#rateShare;
      if (this.#inflight !== undefined)
        until = Math.min(until, this.#lastSent + this.#store.options.commandTimeoutMs);
    } else {
      share = this.#down && this.#store.options.onStoreError === 'local' ? this.#rateFallback() : 0;
      until = Number.POSITIVE_INFINITY;
    }
    const burst = rateShareOf(rate, share);
    const same = share === this.#rateApplied && burst === this.#rateBurst;
    if (same && rate === this.#rateOf && until === this.#rateUntil) return;
    this.#rateOf = rate;
    this.#rateApplied = share;
    this.#rateBurst = burst;
    this.#rateUntil = until;
    this.shareRate({ rate, limit: share, burst, until });
  }

  /**
   * Redis unreachable past the lease, under `onStoreError: 'local'`: a share of the rate as the
   * FIFO mode's, `limit / processes` (at least one call), so with every process cut off the
   * shares add up to the rate.
   */
  #rateFallback(): number {
    return Math.max(1, Math.floor(this.#rate!.limit / this.#processes));
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
    return this.#store.options.localLimit ?? this.#block;
  }

  /** The store is closing: waiters are shed, the block goes back (held reported as 0). */
  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    clearInterval(this.#timer);
    this.#apply();
    this.clearQueue(new StoreUnavailableError(this.name, this.#o.refreshMs, 'the store is closed'));
    const last = this.#inflight ?? Promise.resolve();
    return last.then(() => {
      if (this.#refused !== undefined) return;
      // The entry goes; on a gate with a rate, what was sent in the last window stays counted
      // until it is a window old (issue 32, item 6: a clean close gives its share back at once).
      const now = performance.now();
      const tail =
        this.#rateUse === undefined ? [] : this.#rateUse.sentByAge(this.shareRate().taken, now);
      const rate = this.#rateArgs(0, '');
      if (this.#rate !== undefined) {
        rate[1] = Math.min(this.#rate.limit, Math.ceil(tail.reduce((a, b) => a + b, 0)));
      }
      const args = [
        this.#requested,
        this.#o.leaseMs,
        1,
        this.#store.processId,
        0,
        0,
        0,
        0,
        this.#o.refreshMs,
        ...rate,
        ...this.#faultArgs(now, 0, true),
        tail.map((units) => Math.ceil(units)).join(' '),
        1,
      ];
      return this.#store.refreshLeased(this.keys, args, this.name ?? '', this.#layout).then(
        () => undefined,
        () => undefined,
      );
    });
  }
}
