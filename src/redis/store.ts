import { randomBytes } from 'node:crypto';
import { SharedLayoutError } from '../common/errors.js';
import { checkKnownKeys, checkObject, describe } from '../common/options.js';
import { RedisCalls } from './calls.js';
import { storeChannels } from './channels.js';
import { storeClient } from './client.js';
import { LeasedSemaphore } from './leased-gate.js';
import { LEASED_KEY_SUFFIXES, leasedScripts } from './leased-scripts.js';
import type { LeasedSemaphoreOptions } from './leased-share.js';
import {
  MAX_GATE_NAME_BYTES,
  type RedisStoreOptions,
  type ResolvedStoreOptions,
  resolveStoreOptions,
} from './options.js';
import { KEY_SUFFIXES, LAYOUT, LOST, RATE_LAYOUT, type Script, scripts } from './scripts.js';
import { rateTail } from './shared-rate.js';
import {
  type AcquireAnswer,
  type ClusterCounts,
  type GrantAnswer,
  SharedSemaphore,
  type SharedSemaphoreOptions,
} from './shared-semaphore.js';
import { WakeupPoll } from './wakeup-poll.js';
import type { WakeupMode } from './wakeups.js';
import { OutageWarning } from './warnings.js';

export type { ClusterCounts } from './shared-semaphore.js';

/** Ids per RELEASE script. */
const RELEASE_CHUNK = 1000;
const GATE_KEYS = [
  'name',
  'limit',
  'maxQueue',
  'queueTimeout',
  'maxHold',
  'leakWarnAfter',
  'mode',
  'rate',
] as const;
/** Options only a leased gate takes. */
const LEASED_KEYS = [...GATE_KEYS, 'refreshMs', 'leaseMs', 'priorities'] as const;

/**
 * Shared gates on one Redis: every process with the same Redis, prefix and gate name shares one
 * cap. Create it with {@link redisStore}.
 */
export class RedisStore {
  readonly options: ResolvedStoreOptions;
  /** This process's id in Redis (random; owner of its leases and tickets). */
  readonly processId = randomBytes(8).toString('hex');
  readonly #calls: RedisCalls;
  readonly #gates = new Map<string, SharedSemaphore>();
  /** Gates in leased mode (`mode: 'leased'`): no heartbeat, tickets or wake-ups of theirs here. */
  readonly #leased = new Map<string, LeasedSemaphore>();
  /** Ticket id -> its gate, for routing wake-ups. */
  readonly #tickets = new Map<string, SharedSemaphore>();
  /** Acquires not yet answered: a release of the same id waits for them (never overtakes). */
  readonly #inflight = new Map<string, Promise<unknown>>();
  /** Heartbeat answers not yet handled: one can report leases that need a release. */
  readonly #beats = new Set<Promise<void>>();
  /** Settle scripts sent and not yet answered (`settled()` waits for them). */
  readonly #settling = new Set<Promise<void>>();
  /** Release scripts sent and not yet answered (a failed one puts its ids back in `#toRelease`). */
  readonly #sending = new Set<Promise<void>>();
  /** Ids to give back, per gate: sent together at the end of the tick, or after an outage. */
  readonly #toRelease = new Map<SharedSemaphore, Set<string>>();
  #flushQueued = false;
  #lastFlush: Promise<unknown> = Promise.resolve();
  #seq = 0;
  #timer: ReturnType<typeof setInterval> | undefined = undefined;
  #beating = false;
  /**
   * Gates whose heartbeat has recorded this process as live (in `P`): its acquires skip that
   * write. Forgotten on an outage, after which Redis may have lost it.
   */
  #registered = new WeakSet<SharedSemaphore>();
  /** Each gate's wake-up channels, `<prefix>{<name>}:wake:` + the owner's process id. */
  readonly #wakePrefix = new Map<SharedSemaphore, string>();
  /** A gate by its channel for "Redis lost this gate's state". */
  readonly #byLostChannel = new Map<string, SharedSemaphore>();
  /** Resolves once a gate's wake-up channel is subscribed (or wake-ups are polled instead). */
  readonly #subscribed = new Map<SharedSemaphore, Promise<void>>();
  #degraded = false;
  readonly #outage: OutageWarning;
  /** Looks up queued tickets while wake-ups are not pushed. */
  readonly #poll: WakeupPoll;
  #closed = false;
  #closing: Promise<void> | undefined = undefined;

  constructor(options: RedisStoreOptions) {
    this.options = resolveStoreOptions(options);
    this.#outage = new OutageWarning(this.options.heartbeatMs, this.options.onStoreError);
    const client = storeClient(options.client);
    if (client.cluster && this.options.replicas > 0) {
      // WAIT counts the replicas of the node and connection the grant was written on; a cluster
      // client sends a keyless WAIT to any node.
      throw new TypeError(
        `redisStore: replicas (strict mode, WAIT) needs a single-node client, got a Redis Cluster client`,
      );
    }
    this.#poll = new WakeupPoll(
      this,
      this.options,
      () => this.#gates.values(),
      (gate) => this.#beatGate(gate),
      () => this.#degraded || this.#closed,
    );
    this.#calls = new RedisCalls(
      client,
      this.options.commandTimeoutMs,
      {
        wake: (message, channel) => {
          if (message === LOST) this.#lostHeard(channel);
          else this.#wake(message);
        },
        down: (error, refusal) => {
          if (this.#closed) return;
          this.#poll.down(error, refusal);
          // A fresh connection at once; if that fails too, each heartbeat tries again.
          if (refusal === undefined) void this.#calls.wakeups.ensure().catch(() => undefined);
        },
        up: () => this.#poll.up(),
      },
      (error) => this.#failed(error),
    );
  }

  /** `'push'` while the wake-up subscription is up; `'poll'` while waiters are re-checked instead. */
  get wakeups(): WakeupMode {
    return this.#calls.wakeups.mode;
  }

  /** Wake-ups may have been lost since `epoch` (a {@link wakeupEpoch} reading), or are polled. */
  wakeupsUnreliableSince(epoch: number): boolean {
    const wakeups = this.#calls.wakeups;
    return wakeups.mode === 'poll' || wakeups.epoch !== epoch;
  }

  /** Counts the losses of the wake-up subscription. */
  get wakeupEpoch(): number {
    return this.#calls.wakeups.epoch;
  }

  /**
   * Redis lost a gate's state and a script says so (a first use looks the same): our leases of
   * it are registered again now, not at the next heartbeat, while nobody is granted.
   */
  #lostHeard(channel: string): void {
    const gate = this.#byLostChannel.get(channel);
    if (gate !== undefined && (gate.held > 0 || gate.queued > 0)) this.#poll.recheck(gate);
  }

  /** Looks up this process's tickets of `gate` in Redis now, for wake-ups that may be lost. */
  recheck(gate: SharedSemaphore): void {
    this.#poll.recheck(gate);
  }

  /** Redis failed or timed out and has not answered a heartbeat since. */
  get degraded(): boolean {
    return this.#degraded;
  }
  get closed(): boolean {
    return this.#closed;
  }
  /** Redis calls that failed or timed out, ever. */
  get errors(): number {
    return this.#calls.errors;
  }

  /**
   * A gate shared by every process on this Redis and prefix, in the shape of `Semaphore`.
   *
   * @example
   * const jobs = store.semaphore({ name: 'pdf-render', limit: 8, maxQueue: 100, queueTimeout: 5000 });
   * await jobs.run(() => render(doc));
   * // leased mode: each process grants from its block of the cap, no Redis call per request
   * const bulk = store.semaphore({ name: 'bulk', limit: 200, mode: 'leased' });
   */
  semaphore(options: LeasedSemaphoreOptions): LeasedSemaphore;
  semaphore(options: SharedSemaphoreOptions & { mode?: 'fifo' }): SharedSemaphore;
  semaphore(
    options: SharedSemaphoreOptions | LeasedSemaphoreOptions,
  ): SharedSemaphore | LeasedSemaphore;
  semaphore(
    options: SharedSemaphoreOptions | LeasedSemaphoreOptions,
  ): SharedSemaphore | LeasedSemaphore {
    checkObject('semaphore options', options);
    const mode = (options as { mode?: unknown }).mode;
    if (mode !== undefined && mode !== 'fifo' && mode !== 'leased') {
      throw new TypeError(`mode must be 'fifo' or 'leased', got ${describe(mode)}`);
    }
    checkKnownKeys('store.semaphore', options, mode === 'leased' ? LEASED_KEYS : GATE_KEYS);
    const { name } = options;
    if (typeof name !== 'string' || name === '' || /[{}]/.test(name)) {
      throw new TypeError(
        `name must be a non-empty string without { or } (it is the gate's Redis hash tag), got ${describe(name)}`,
      );
    }
    if (Buffer.byteLength(name) > MAX_GATE_NAME_BYTES) {
      throw new TypeError(
        `name of a shared gate must be at most ${MAX_GATE_NAME_BYTES} bytes (it is sent in every Redis key of every call), got ${Buffer.byteLength(name)} bytes: ${describe(name.slice(0, 40))}…`,
      );
    }
    if (this.#gates.has(name) || this.#leased.has(name)) {
      throw new TypeError(`this store already has a shared gate named ${JSON.stringify(name)}`);
    }
    if (this.#closed) throw new TypeError('the store is closed');
    const base = `${this.options.prefix}{${name}}:`;
    if (mode === 'leased') {
      const keys = LEASED_KEY_SUFFIXES.map((suffix) => base + suffix);
      const gate = new LeasedSemaphore(this, keys, options as LeasedSemaphoreOptions);
      this.#leased.set(name, gate);
      return gate;
    }
    const keys = KEY_SUFFIXES.map((suffix) => base + suffix);
    const gate = new SharedSemaphore(this, keys, options);
    this.#gates.set(name, gate);
    // The gate's wake-up channel is in its hash slot: a grant's SPUBLISH stays on its shard.
    this.#wakePrefix.set(gate, `${base}wake:`);
    const wakeups = this.#calls.wakeups;
    this.#subscribed.set(
      gate,
      Promise.all([
        wakeups.add(`${base}wake:${this.processId}`),
        wakeups.add(`${base}wake:${LOST}`),
      ]).then(() => undefined),
    );
    this.#byLostChannel.set(`${base}wake:${LOST}`, gate);
    this.#startHeartbeat();
    return gate;
  }

  /**
   * @internal A leased gate's refresh: one script, timed as every call; a layout refusal
   * rejects with `SharedLayoutError` without degrading the store, and an answer ends an outage
   * as a heartbeat's does.
   */
  refreshLeased(
    keys: readonly string[],
    args: readonly (string | number)[],
    gate: string,
    layout: string,
  ): Promise<unknown[]> {
    const raw = this.#calls.eval(leasedScripts.refresh, keys, args, gate, layout);
    return this.#calls.timed(raw).then((reply) => {
      this.#outage.reached();
      if (this.#degraded && !this.#closed) {
        this.#recovered();
        if (this.#gates.size > 0) void this.#beat();
      }
      return reply as unknown[];
    });
  }

  /**
   * A fresh ticket/lease id: `<process id>:<n>`, then `~<cost>` for a rate cost other than 1,
   * then `/<weight>` for more than one unit: Redis reads both from the id.
   */
  nextId(weight = 1, cost = 1): string {
    const id = `${this.processId}:${(++this.#seq).toString(36)}`;
    const costed = cost === 1 ? id : `${id}~${cost}`;
    return weight === 1 ? costed : `${costed}/${weight}`;
  }

  /**
   * A wake-up message: a granted ticket's id (its owner claims it), or `<id>@<ms>`, the head
   * of the queue told when its rate slot comes (its owner claims it then).
   */
  #wake(message: string): void {
    const at = message.indexOf('@');
    if (at < 0) this.#tickets.get(message)?.wake(message);
    else this.#tickets.get(message.slice(0, at))?.slotHint(message);
  }

  /** One of `gate`'s scripts; a gate kept in another layout rejects with `SharedLayoutError`. */
  #eval(script: Script, gate: SharedSemaphore, args: (string | number)[]): Promise<unknown> {
    const layout = gate.rateArg === '' ? LAYOUT : RATE_LAYOUT;
    return this.#calls.eval(script, gate.keys, args, gate.name, layout);
  }

  /** Script arguments every script starts with. */
  #common(gate: SharedSemaphore): (string | number)[] {
    const { leaseMs, heartbeatMs, commandTimeoutMs } = this.options;
    const known = gate.known ? 1 : 0;
    return [
      gate.requestedLimit,
      leaseMs,
      // Liveness: a process that missed one heartbeat keeps its tickets, one that missed two
      // (and a command timeout) is taken for dead, and its tickets are never granted.
      2 * heartbeatMs + commandTimeoutMs,
      this.#wakePrefix.get(gate)!,
      known,
      // Recovery window after Redis lost a gate's state, for a caller that cannot tell the loss
      // from a first use (one that can waits a whole lease, so every holder that can still be
      // alive, stalled for up to lease − heartbeat, registers its leases again first).
      this.options.firstUseWaitMs,
      // Claim window of a grant made by a release: a live owner claims it on its wake-up, or
      // its next heartbeat finds it; an owner that died hands it back this soon.
      heartbeatMs + commandTimeoutMs,
      gate.rateArg,
    ];
  }

  /**
   * One round trip: a lease now, or a ticket in the queue. Rejects on error or timeout (the
   * store is then degraded); a late answer is still awaited by a release of the same id.
   */
  acquire(gate: SharedSemaphore, id: string, deadlineMs: number): Promise<AcquireAnswer> {
    this.#tickets.set(id, gate);
    const raw = this.#calls
      .whenReady()
      .then(() => this.#subscribed.get(gate))
      .then(() =>
        this.#eval(scripts.acquire, gate, [
          ...this.#common(gate),
          this.processId,
          id,
          this.#registered.has(gate) ? 0 : 1,
          deadlineMs,
        ]),
      );
    const settled = raw.then(
      () => undefined,
      () => undefined,
    );
    this.#inflight.set(id, settled);
    void settled.then(() => this.#inflight.delete(id));
    return this.#calls.timed(raw).then(async (reply) => {
      this.#outage.reached();
      const [granted, held, queued, processes, cap, recoveryMs, retryMs] = reply as number[];
      gate.rateAnswer(rateTail(reply, 7));
      if (granted === 1 && this.options.replicas > 0)
        await this.#calls.replicate(this.options.replicas);
      return {
        granted: Number(granted) as GrantAnswer,
        held: Number(held),
        queued: Number(queued),
        processes: Number(processes),
        cap: Number(cap),
        recoveryMs: Number(recoveryMs),
        retryMs: Number(retryMs),
      };
    });
  }

  /**
   * A wake-up is a hint: asks Redis whether ticket `id` was granted, and turns the grant's
   * claim window into a full lease. Strict mode waits for the replicas too. A release of the
   * same id waits for the answer.
   */
  claim(
    gate: SharedSemaphore,
    id: string,
    late: 0 | 1 | 2 = 0,
  ): Promise<{ granted: boolean; cap: number } & ClusterCounts> {
    const raw = this.#calls
      .whenReady()
      .then(() => this.#eval(scripts.claim, gate, [...this.#common(gate), id, late]));
    const settled = raw.then(
      () => undefined,
      () => undefined,
    );
    this.#inflight.set(id, settled);
    void settled.then(() => {
      if (this.#inflight.get(id) === settled) this.#inflight.delete(id);
    });
    return this.#calls.timed(raw).then(async (reply) => {
      const [granted, held, queued, cap] = reply as number[];
      gate.rateAnswer(rateTail(reply, 4));
      if (granted === 1 && this.options.replicas > 0) await this.replicate();
      return {
        granted: granted === 1,
        held: Number(held),
        queued: Number(queued),
        cap: Number(cap),
      };
    });
  }

  /** Strict mode: resolves once the replicas have every write of ours so far (`WAIT`). */
  replicate(): Promise<void> {
    return this.#calls.replicate(this.options.replicas);
  }

  /** Sets the cap in Redis for every process of the gate. */
  setCap(gate: SharedSemaphore, cap: number): Promise<{ cap: number } & ClusterCounts> {
    const raw = this.#calls
      .whenReady()
      .then(() => this.#eval(scripts.setCap, gate, [...this.#common(gate), cap]));
    return this.#calls.timed(raw).then((reply) => {
      const [held, queued, stored] = reply as number[];
      gate.rateAnswer(rateTail(reply, 3));
      return { held: Number(held), queued: Number(queued), cap: Number(stored) };
    });
  }

  /** Sets the rate (`limit:per:burst`) in Redis for every process of the gate. */
  setRate(gate: SharedSemaphore, rate: string): Promise<{ cap: number } & ClusterCounts> {
    return this.#small(gate, scripts.setRate, rate);
  }

  /**
   * Settles costs: `units` more (or, negative, fewer) than charged. Fails quietly while Redis is
   * unreachable (the rate is the local share's then, and nothing in Redis to correct).
   */
  settle(gate: SharedSemaphore, units: number): void {
    if (this.#degraded || this.#closed) return;
    const sent = this.#small(gate, scripts.settle, units).then(
      ({ held, queued, cap }) => gate.cluster(held, queued, cap),
      (error: unknown) => {
        if (error instanceof SharedLayoutError) gate.layoutRefused(error);
      },
    );
    this.#settling.add(sent);
    void sent.then(() => this.#settling.delete(sent));
  }

  /** A script whose answer is `{held, queued, cap, ...rate}`. */
  #small(
    gate: SharedSemaphore,
    script: Script,
    arg: string | number,
  ): Promise<{ cap: number } & ClusterCounts> {
    const raw = this.#calls
      .whenReady()
      .then(() => this.#eval(script, gate, [...this.#common(gate), arg]));
    return this.#calls.timed(raw).then((reply) => {
      const [held, queued, stored] = reply as number[];
      gate.rateAnswer(rateTail(reply, 3));
      return { held: Number(held), queued: Number(queued), cap: Number(stored) };
    });
  }

  /**
   * Gives back leases and withdraws tickets, batched per gate until the end of the tick. An id
   * whose acquire is still unanswered is released after that answer, never before it. While
   * degraded they wait for the heartbeat that probes Redis; once the store is closed they are
   * sent at once (an answer that came after close(): a late grant, a lease a heartbeat
   * registered again).
   */
  release(gate: SharedSemaphore, ids: readonly string[]): void {
    for (const id of ids) {
      this.#tickets.delete(id);
      const pending = this.#inflight.get(id);
      if (pending !== undefined) {
        void pending.then(() => this.release(gate, [id]));
        continue;
      }
      this.#releaseSet(gate).add(id);
    }
    if (!this.#flushQueued && (!this.#degraded || this.#closed)) {
      this.#flushQueued = true;
      queueMicrotask(() => {
        this.#flushQueued = false;
        if (!this.#degraded || this.#closed) void this.#flush();
      });
    }
  }

  #releaseSet(gate: SharedSemaphore): Set<string> {
    let set = this.#toRelease.get(gate);
    if (set === undefined) {
      set = new Set();
      this.#toRelease.set(gate, set);
    }
    return set;
  }

  /** Sends every batched release, one script per gate; failed ones stay for the next try. */
  #flush(): Promise<unknown> {
    const sends: Promise<unknown>[] = [];
    for (const [gate, set] of this.#toRelease) {
      this.#toRelease.delete(gate);
      const all = [...set];
      // Lua's unpack() takes a few thousand values at most: large batches go in chunks.
      for (let i = 0; i < all.length; i += RELEASE_CHUNK) {
        sends.push(this.#releaseNow(gate, all.slice(i, i + RELEASE_CHUNK)));
      }
    }
    const all = Promise.all(sends);
    this.#lastFlush = all;
    return all;
  }

  #releaseNow(gate: SharedSemaphore, ids: string[]): Promise<void> {
    const args = [...this.#common(gate), ...ids];
    const sent = this.#calls
      .timed(this.#calls.whenReady().then(() => this.#eval(scripts.release, gate, args)))
      .then(
        (reply) => {
          const [held, queued, cap] = reply as number[];
          gate.cluster(Number(held), Number(queued), Number(cap));
          gate.rateAnswer(rateTail(reply, 3));
        },
        (error: unknown) => {
          // Refused by another layout: nothing of ours is in that gate to give back.
          if (error instanceof SharedLayoutError) return gate.layoutRefused(error);
          // Kept for the next try: the heartbeat that ends the outage sends them first.
          const again = this.#releaseSet(gate);
          for (const id of ids) again.add(id);
        },
      );
    this.#sending.add(sent);
    void sent.then(() => this.#sending.delete(sent));
    return sent;
  }

  /**
   * Resolves once every release, withdrawal and settled cost issued so far has been answered by Redis (or
   * has failed): for tests and orderly shutdowns. That includes the releases a heartbeat's
   * answer sends again: a heartbeat on its way when one of its leases was released can reach
   * Redis after that release (Redis had lost the heartbeat script and runs it as the EVAL sent
   * after NOSCRIPT; a client may resend it after a reconnect), register the lease again, and
   * report it lost. Heartbeats are waited for at most one command timeout.
   */
  async settled(): Promise<void> {
    await this.#inflightSettled();
    await within(Promise.allSettled([...this.#beats]), this.options.commandTimeoutMs);
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    await this.#lastFlush;
    await within(Promise.allSettled([...this.#settling]), this.options.commandTimeoutMs);
  }

  /** Every release script on its way has been answered (or has failed), or `deadline` passed. */
  async #sent(deadline: number): Promise<void> {
    while (this.#sending.size > 0 && performance.now() < deadline) {
      await within(Promise.allSettled([...this.#sending]), deadline - performance.now());
    }
  }

  /** Unanswered acquires, waited for at most one command timeout (a paused Redis answers none). */
  #inflightSettled(): Promise<unknown> {
    return within(Promise.allSettled([...this.#inflight.values()]), this.options.commandTimeoutMs);
  }

  forget(id: string): void {
    this.#tickets.delete(id);
  }

  #startHeartbeat(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => void this.#beat(), this.options.heartbeatMs);
    this.#timer.unref?.();
    void this.#calls.whenReady().catch(() => undefined);
  }

  /**
   * Renews every lease and ticket of this process, one script per gate (pipelined), and is the
   * safety re-check for lost wake-ups. While degraded it is also the probe: its success ends
   * the outage (releases kept from it go first, on the same connection).
   */
  async #beat(): Promise<void> {
    if (this.#beating || this.#closed) return;
    this.#beating = true;
    let endedOutage = false;
    try {
      await this.#calls.timed(this.#calls.whenReady());
      if (this.#closed) return; // close() gives back everything itself
      // The wake-up connection's health check: subscribed again if it was lost.
      void this.#calls.wakeups.ensure().catch(() => undefined);
      const wasDegraded = this.#degraded;
      const flushed = this.#flush();
      const beats = [...this.#gates.values()].map((gate) => this.#beatGate(gate));
      await Promise.all([flushed, ...beats]);
      // Redis answered everything: the outage is over, even if the local fallback released
      // more during this round trip (under steady traffic it always does, and waiting for a
      // quiet round trip kept the store on its fallback for seconds after Redis was back).
      if (wasDegraded) {
        this.#recovered();
        endedOutage = true;
      }
    } catch {
      // #timed has marked the store degraded; the next beat probes again.
    } finally {
      this.#beating = false;
    }
    // At once, not a heartbeat later: Redis counts the leases the fallback granted during the
    // round trip that ended the outage.
    if (endedOutage) void this.#beat();
  }

  async #beatGate(gate: SharedSemaphore): Promise<void> {
    const leases = gate.leaseIds();
    const tickets = gate.ticketIds();
    const raw = this.#eval(scripts.heartbeat, gate, [
      ...this.#common(gate),
      this.processId,
      leases.length,
      ...leases,
      ...tickets,
    ]);
    // Its answer counts even after the timeout: a client that resends it after a reconnect
    // registers lost leases there, and only that answer says they were lost.
    const handled = raw.then(
      (reply) => {
        const [lost, granted, held, queued, processes, requeued, cap] = reply as [
          string[],
          string[],
          number,
          number,
          number,
          string[],
          number,
        ];
        gate.cluster(Number(held), Number(queued), Number(cap));
        gate.heartbeat(lost, granted, Number(processes), requeued);
        gate.rateAnswer(rateTail(reply as unknown[], 7));
        this.#registered.add(gate);
        this.#outage.reached();
      },
      () => undefined,
    );
    this.#beats.add(handled);
    void handled.then(() => this.#beats.delete(handled));
    await this.#calls.timed(raw).catch((error: unknown) => {
      // A gate kept in another layout is refused, not an outage: the other gates beat on.
      if (!(error instanceof SharedLayoutError)) throw error;
      gate.layoutRefused(error);
    });
  }

  #recovered(): void {
    if (!this.#degraded) return;
    this.#degraded = false;
    this.#outage.recovered();
    // What the fallback released meanwhile goes ahead of the acquires storeUp() sends.
    if (this.#toRelease.size > 0) void this.#flush();
    if (storeChannels.storeUp.hasSubscribers) storeChannels.storeUp.publish({ store: this });
    for (const gate of this.#gates.values()) gate.storeUp();
  }

  #failed(error: unknown): void {
    if (this.#closed) return;
    this.#outage.failed(error);
    if (this.#degraded) return;
    this.#degraded = true;
    this.#registered = new WeakSet();
    if (storeChannels.storeError.hasSubscribers) {
      storeChannels.storeError.publish({ store: this, error, policy: this.options.onStoreError });
    }
    for (const gate of this.#gates.values()) gate.storeDown();
  }

  /**
   * Gives back every lease and ticket of this process, stops the heartbeat and closes the
   * connection the store opened. Idempotent. The client passed in stays open: it is the caller's.
   *
   * The releases are sent even while the store is degraded (a timed-out call says nothing about
   * the next one), after the answers still due (acquires and heartbeats in flight, at most one
   * command timeout), and a release that fails is sent once more; in all, close() waits for
   * Redis at most two command timeouts. A grant answered after that is given back when its
   * answer comes, if the client is still open; anything else left expires with its lease.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#poll.close();
    // No wake-up is needed now, and the releases below must not wait to subscribe again.
    const unsubscribed = this.#calls.closeSubscriber();
    const leased = Promise.all([...this.#leased.values()].map((gate) => gate.close()));
    for (const gate of this.#gates.values()) {
      const ids = gate.storeClosed();
      if (ids.length > 0) this.release(gate, ids);
    }
    const timeout = this.options.commandTimeoutMs;
    const deadline = performance.now() + 2 * timeout;
    // Answers still due can add ids to give back: a late grant (its release waits for it), and
    // leases a heartbeat registered again (a client may resend a heartbeat after a reconnect).
    await within(Promise.allSettled([...this.#inflight.values(), ...this.#beats]), timeout);
    await this.#sent(deadline);
    if (this.#toRelease.size > 0 && performance.now() < deadline) {
      // Some failed (their ids are back): sent once more (ZREM is idempotent).
      void this.#flush();
      await this.#sent(deadline);
    }
    this.#toRelease.clear();
    this.#tickets.clear();
    await within(leased, deadline - performance.now());
    await within(unsubscribed, deadline - performance.now());
  }
}

/** `promise`, or nothing once `ms` have passed (never rejects). */
function within(promise: Promise<unknown>, ms: number): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, ms));
  });
  return Promise.race([promise.catch(() => undefined), bound]).finally(() => clearTimeout(timer));
}

/**
 * A store of gates shared across processes through Redis.
 *
 * @example
 * const client = await createClient({ url: 'redis://127.0.0.1:6379' }).connect();
 * const store = redisStore({ client, prefix: 'myapp:hostgate:' });
 * const limiter = new HostLimiter({
 *   store,
 *   partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 20, shared: true }],
 * });
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  return new RedisStore(options);
}
