import { randomBytes } from 'node:crypto';
import { checkKnownKeys, checkObject, describe } from '../common/options.js';
import { RedisCalls, within } from './calls.js';
import { storeChannels } from './channels.js';
import { storeClient } from './client.js';
import { FifoProtocol } from './fifo-protocol.js';
import { LeasedSemaphore } from './leased-gate.js';
import { LEASED_KEY_SUFFIXES, leasedScripts } from './leased-scripts.js';
import type { LeasedSemaphoreOptions } from './leased-share.js';
import { LeasedSignals } from './leased-signals.js';
import {
  MAX_GATE_NAME_BYTES,
  type RedisStoreOptions,
  type ResolvedStoreOptions,
  resolveStoreOptions,
} from './options.js';
import { KEY_SUFFIXES, LOST } from './scripts.js';
import {
  type AcquireAnswer,
  type ClaimAnswer,
  type ClusterCounts,
  SharedSemaphore,
  type SharedSemaphoreOptions,
} from './shared-semaphore.js';
import { WakeupPoll } from './wakeup-poll.js';
import type { WakeupMode } from './wakeups.js';
import { OutageWarning } from './warnings.js';

export type { ClusterCounts } from './shared-semaphore.js';

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
  /** The leased gates' signal channels (issue 35). */
  readonly #signals: LeasedSignals;
  /** The FIFO gates' scripts, and the order between them. */
  readonly #fifo: FifoProtocol;
  #seq = 0;
  #timer: ReturnType<typeof setInterval> | undefined = undefined;
  #beating = false;
  /** A gate by its channel for "Redis lost this gate's state". */
  readonly #byLostChannel = new Map<string, SharedSemaphore>();
  #degraded = false;
  readonly #outage: OutageWarning;
  /** Looks up queued tickets while wake-ups are not pushed. */
  readonly #poll: WakeupPoll;
  #closed = false;
  /** close() began: nothing new is admitted, held permits are waited for (`drainMs`). */
  #draining = false;
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
      (gate) => this.#fifo.beatGate(gate),
      () => this.#degraded || this.#closed,
    );
    this.#calls = new RedisCalls(
      client,
      this.options.commandTimeoutMs,
      {
        wake: (message, channel) => {
          if (this.#signals.wake(message, channel)) return;
          if (message === LOST) this.#lostHeard(channel);
          else this.#fifo.wake(message, channel);
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
    this.#fifo = new FifoProtocol(this, this.#calls, () => this.#outage.reached());
    this.#signals = new LeasedSignals(this.#calls.wakeups);
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
  /** close() was called: nothing new is admitted (the held permits may still be draining). */
  get closed(): boolean {
    return this.#closed || this.#draining;
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
    if (this.closed) throw new TypeError('the store is closed');
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
    const wakeups = this.#calls.wakeups;
    this.#fifo.addGate(
      gate,
      `${base}wake:`,
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
      // Redis answers: the signal subscription is opened again if it was lost (no heartbeat here).
      void this.#calls.wakeups.ensure().catch(() => undefined);
      if (this.#degraded && !this.#closed) {
        this.#recovered();
        if (this.#gates.size > 0) void this.#beat();
      }
      return reply as unknown[];
    });
  }

  /** @internal A leased gate's signal channel: subscribed, its messages handed to `heard`. */
  listenLeased(channel: string, heard: (message: string) => void): void {
    this.#signals.listen(channel, heard);
  }

  /** @internal The signal subscription's epoch while `channel` can be heard, else -1. */
  leasedSignals(channel: string): number {
    return this.#signals.epoch(channel);
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
   * One round trip: a lease now, or a ticket in the queue. Rejects on error or timeout (the
   * store is then degraded); a late answer is still awaited by a release of the same id.
   */
  acquire(gate: SharedSemaphore, id: string, deadlineMs: number): Promise<AcquireAnswer> {
    return this.#fifo.acquire(gate, id, deadlineMs);
  }

  /**
   * A wake-up is a hint: asks Redis whether ticket `id` was granted, and turns the grant's
   * claim window into a full lease. Strict mode waits for the replicas too. A release of the
   * same id waits for the answer.
   */
  claim(gate: SharedSemaphore, id: string, late: 0 | 1 | 2 = 0): Promise<ClaimAnswer> {
    return this.#fifo.claim(gate, id, late);
  }

  /** Strict mode: resolves once the replicas have every write of ours so far (`WAIT`). */
  replicate(): Promise<void> {
    return this.#fifo.replicate();
  }

  /** Sets the cap in Redis for every process of the gate. */
  setCap(gate: SharedSemaphore, cap: number): Promise<{ cap: number } & ClusterCounts> {
    return this.#fifo.small(gate, 'setCap', cap);
  }

  /** Sets the rate (`limit:per:burst`) in Redis for every process of the gate. */
  setRate(gate: SharedSemaphore, rate: string): Promise<{ cap: number } & ClusterCounts> {
    return this.#fifo.small(gate, 'setRate', rate);
  }

  /**
   * Settles costs: `units` more (or, negative, fewer) than charged. Fails quietly while Redis is
   * unreachable (the rate is the local share's then, and nothing in Redis to correct).
   */
  settle(gate: SharedSemaphore, units: number): void {
    this.#fifo.settle(gate, units);
  }

  /**
   * Gives back leases and withdraws tickets, batched per gate until the end of the tick. An id
   * whose acquire is still unanswered is released after that answer, never before it. While
   * degraded they wait for the heartbeat that probes Redis; once the store is closed they are
   * sent at once (an answer that came after close(): a late grant, a lease a heartbeat
   * registered again).
   */
  release(gate: SharedSemaphore, ids: readonly string[]): void {
    this.#fifo.release(gate, ids);
  }

  /**
   * Resolves once every release, withdrawal and settled cost issued so far has been answered by Redis (or
   * has failed): for tests and orderly shutdowns. That includes the releases a heartbeat's
   * answer sends again: a heartbeat on its way when one of its leases was released can reach
   * Redis after that release (Redis had lost the heartbeat script and runs it as the EVAL sent
   * after NOSCRIPT; a client may resend it after a reconnect), register the lease again, and
   * report it lost. Heartbeats are waited for at most one command timeout.
   */
  settled(): Promise<void> {
    return this.#fifo.settled();
  }

  forget(id: string): void {
    this.#fifo.forget(id);
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
      const flushed = this.#fifo.flush();
      const beats = [...this.#gates.values()].map((gate) => this.#fifo.beatGate(gate));
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

  #recovered(): void {
    if (!this.#degraded) return;
    this.#degraded = false;
    this.#outage.recovered();
    // What the fallback released meanwhile goes ahead of the acquires storeUp() sends.
    if (this.#fifo.pending) void this.#fifo.flush();
    if (storeChannels.storeUp.hasSubscribers) storeChannels.storeUp.publish({ store: this });
    for (const gate of this.#gates.values()) gate.storeUp();
  }

  #failed(error: unknown): void {
    if (this.#closed) return;
    this.#outage.failed(error);
    if (this.#degraded) return;
    this.#degraded = true;
    this.#fifo.forgetRegistered();
    if (storeChannels.storeError.hasSubscribers) {
      storeChannels.storeError.publish({ store: this, error, policy: this.options.onStoreError });
    }
    for (const gate of this.#gates.values()) gate.storeDown();
  }

  /**
   * Closes the store: sheds every waiter, admits nothing new, waits up to `drainMs` for held
   * permits (leases renewed meanwhile), then gives back the rest of this process's leases,
   * blocks and tickets, stops the heartbeat and closes its own connection (idempotent; your
   * client stays open). A held permit goes back only when released, never while its call may
   * run (9 at cap 8 before: leased schedule seed 32001); those held past `drainMs` stay counted
   * until their lease ends. Releases go even while degraded, once more on failure: two command
   * timeouts after the drain at most; a later grant goes back when its answer comes.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#draining = true;
    const drained = performance.now() + this.options.drainMs;
    const leased = Promise.all([...this.#leased.values()].map((gate) => gate.close(drained)));
    this.#fifo.shedGates(this.#gates.values());
    // Nothing held: closed at once (no heartbeat starts in between).
    const held = [...this.#gates.values(), ...this.#leased.values()].filter((g) => g.held > 0);
    const left = drained - performance.now();
    if (held.length > 0) await within(Promise.all(held.map((g) => g.onIdle())), left);
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#poll.close();
    // No wake-up is needed now, and the releases below must not wait to subscribe again.
    const unsubscribed = this.#calls.closeSubscriber();
    this.#fifo.closeGates(this.#gates.values());
    const deadline = performance.now() + 2 * this.options.commandTimeoutMs;
    await this.#fifo.drain(deadline);
    await this.#fifo.bye(this.#gates.values(), deadline);
    await within(leased, deadline - performance.now());
    await within(unsubscribed, deadline - performance.now());
  }
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
