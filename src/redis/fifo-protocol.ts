/**
 * The FIFO mode's side of the store: each script a gate runs (commands/*.lua: ACQUIRE, CLAIM,
 * HEARTBEAT, RELEASE, SETCAP, SETRATE, SETTLE) with the arguments every script starts with, its
 * answer handed to the gate, and the order the protocol needs between calls: a release of an id
 * waits for that id's acquire or claim to be answered (never overtakes it), and releases are
 * batched per gate to the end of the tick, kept through an outage and sent again after it.
 */
import { SharedLayoutError } from '../common/errors.js';
import { type RedisCalls, within } from './calls.js';
import type { ResolvedStoreOptions } from './options.js';
import { LAYOUT, RATE_LAYOUT, type Script, scripts } from './scripts.js';
import { rateTail } from './shared-rate.js';
import type { SharedSemaphore } from './shared-semaphore.js';
import type { AcquireAnswer, ClaimAnswer, ClusterCounts, GrantAnswer } from './shared-store.js';
import { STORE_CLOSE_UNFINISHED } from './warnings.js';

/** Ids per RELEASE script. */
const RELEASE_CHUNK = 1000;

/** What the protocol uses of its store (a `RedisStore`), declared here: store.ts builds it. */
export interface FifoHost {
  readonly options: ResolvedStoreOptions;
  readonly processId: string;
  readonly degraded: boolean;
  readonly closed: boolean;
}

export class FifoProtocol {
  /** Ticket id -> its gate, for routing wake-ups. */
  readonly #tickets = new Map<string, SharedSemaphore>();
  /** This process's wake-up channel of each gate -> the gate. */
  readonly #byWake = new Map<string, SharedSemaphore>();
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
  /**
   * Gates whose heartbeat has recorded this process as live (in `P`): its acquires skip that
   * write. Forgotten on an outage, after which Redis may have lost it.
   */
  #registered = new WeakSet<SharedSemaphore>();
  /** Each gate's wake-up channels, `<prefix>{<name>}:wake:` + the owner's process id. */
  readonly #wakePrefix = new Map<SharedSemaphore, string>();
  /** Resolves once a gate's wake-up channel is subscribed (or wake-ups are polled instead). */
  readonly #subscribed = new Map<SharedSemaphore, Promise<void>>();

  constructor(
    readonly host: FifoHost,
    readonly calls: RedisCalls,
    /** Redis answered a script: the outage warning's clock restarts. */
    readonly reached: () => void,
  ) {}

  /** A new gate: its wake-up channels (`wakePrefix` + process id), subscribed by `subscribed`. */
  addGate(gate: SharedSemaphore, wakePrefix: string, subscribed: Promise<void>): void {
    this.#wakePrefix.set(gate, wakePrefix);
    this.#byWake.set(`${wakePrefix}${this.host.processId}`, gate);
    this.#subscribed.set(gate, subscribed);
  }

  /**
   * A wake-up message: a granted ticket's id (its owner claims it), `<id>@<ms>`, the head of
   * the queue told when its rate slot comes (its owner claims it then), or `<id>@<ms>@<ours>`,
   * our ticket the backup of another process's head (SharedTickets.slotHint).
   */
  wake(message: string, channel = ''): void {
    const parts = message.split('@');
    const id = parts[2] ?? parts[0]!;
    const gate = this.#tickets.get(id);
    if (gate !== undefined) {
      if (parts.length === 1) gate.wake(message);
      else gate.slotHint(message);
    } else if (parts.length <= 2 && id.startsWith(`${this.host.processId}:`)) {
      // Our grant, or our head's slot, for a ticket we no longer have (SharedLeases.stray).
      this.#byWake.get(channel)?.wake(id, true);
    }
  }

  /** One of `gate`'s scripts; a gate kept in another layout rejects with `SharedLayoutError`. */
  #eval(script: Script, gate: SharedSemaphore, args: (string | number)[]): Promise<unknown> {
    const layout = gate.rateArg === '' ? LAYOUT : RATE_LAYOUT;
    return this.calls.eval(script, gate.keys, args, gate.name, layout);
  }

  /** Script arguments every script starts with. */
  #common(gate: SharedSemaphore): (string | number)[] {
    const { leaseMs, heartbeatMs, commandTimeoutMs } = this.host.options;
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
      this.host.options.firstUseWaitMs,
      // Claim window of a grant made by a release: a live owner claims it on its wake-up, or
      // its next heartbeat finds it; an owner that died hands it back this soon.
      heartbeatMs + commandTimeoutMs,
      gate.rateArg,
    ];
  }

  /** ACQUIRE: see `RedisStore.acquire`. */
  acquire(gate: SharedSemaphore, id: string, deadlineMs: number): Promise<AcquireAnswer> {
    this.#tickets.set(id, gate);
    const raw = this.calls
      .whenReady()
      .then(() => this.#subscribed.get(gate))
      .then(() =>
        this.#eval(scripts.acquire, gate, [
          ...this.#common(gate),
          this.host.processId,
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
    return this.calls.timed(raw).then(async (reply) => {
      this.reached();
      const [granted, held, queued, processes, cap, recoveryMs, retryMs] = reply as number[];
      gate.rateAnswer(rateTail(reply, 7));
      const { replicas } = this.host.options;
      if (granted === 1 && replicas > 0) await this.calls.replicate(replicas);
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

  /** CLAIM: see `RedisStore.claim`. */
  claim(gate: SharedSemaphore, id: string, late: 0 | 1 | 2 = 0): Promise<ClaimAnswer> {
    const raw = this.calls
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
    return this.calls.timed(raw).then(async (reply) => {
      const [granted, held, queued, cap] = reply as number[];
      gate.rateAnswer(rateTail(reply, 4));
      if (granted === 1 && this.host.options.replicas > 0) await this.replicate();
      return {
        granted: granted === 1,
        held: Number(held),
        queued: Number(queued),
        cap: Number(cap),
        // Ms since Redis made the grant, as of this claim (0: made by it); after the rate tail.
        sinceMs: Number((reply as unknown[])[8] ?? 0) || 0,
      };
    });
  }

  /** Strict mode: resolves once the replicas have every write of ours so far (`WAIT`). */
  replicate(): Promise<void> {
    return this.calls.replicate(this.host.options.replicas);
  }

  /** SETCAP, SETRATE and SETTLE: a script whose answer is `{held, queued, cap, ...rate}`. */
  small(
    gate: SharedSemaphore,
    command: 'setCap' | 'setRate' | 'settle',
    arg: string | number,
  ): Promise<{ cap: number } & ClusterCounts> {
    const raw = this.calls
      .whenReady()
      .then(() => this.#eval(scripts[command], gate, [...this.#common(gate), arg]));
    return this.calls.timed(raw).then((reply) => {
      const [held, queued, stored] = reply as number[];
      gate.rateAnswer(rateTail(reply, 3));
      return { held: Number(held), queued: Number(queued), cap: Number(stored) };
    });
  }

  /** SETTLE: see `RedisStore.settle`. */
  settle(gate: SharedSemaphore, units: number): void {
    if (this.host.degraded || this.host.closed) return;
    const sent = this.small(gate, 'settle', units).then(
      ({ held, queued, cap }) => gate.cluster(held, queued, cap),
      (error: unknown) => {
        if (error instanceof SharedLayoutError) gate.layoutRefused(error);
      },
    );
    this.#settling.add(sent);
    void sent.then(() => this.#settling.delete(sent));
  }

  /** RELEASE, batched: see `RedisStore.release`. */
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
    const { degraded, closed } = this.host;
    if (!this.#flushQueued && (!degraded || closed)) {
      this.#flushQueued = true;
      queueMicrotask(() => {
        this.#flushQueued = false;
        if (!this.host.degraded || this.host.closed) void this.flush();
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

  /** Releases kept (an outage, or sent and failed) wait to be sent. */
  get pending(): boolean {
    return this.#toRelease.size > 0;
  }

  /** Sends every batched release, one script per gate; failed ones stay for the next try. */
  flush(): Promise<unknown> {
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
    const sent = this.calls
      .timed(this.calls.whenReady().then(() => this.#eval(scripts.release, gate, args)))
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

  /** See `RedisStore.settled`. */
  async settled(): Promise<void> {
    const timeout = this.host.options.commandTimeoutMs;
    await within(Promise.allSettled([...this.#inflight.values()]), timeout);
    await within(Promise.allSettled([...this.#beats]), timeout);
    await new Promise<void>((resolve) => queueMicrotask(resolve));
    await this.#lastFlush;
    await within(Promise.allSettled([...this.#settling]), timeout);
  }

  /** Every release script on its way has been answered (or has failed), or `deadline` passed. */
  async #sent(deadline: number): Promise<void> {
    while (this.#sending.size > 0 && performance.now() < deadline) {
      await within(Promise.allSettled([...this.#sending]), deadline - performance.now());
    }
  }

  forget(id: string): void {
    this.#tickets.delete(id);
  }

  /** An outage: Redis may have lost the processes it had recorded. */
  forgetRegistered(): void {
    this.#registered = new WeakSet();
  }

  /**
   * HEARTBEAT of one gate: renews this process's leases and tickets, and is the safety re-check
   * for lost wake-ups. Rejects when Redis fails or times out (a layout refusal is the gate's).
   */
  async beatGate(gate: SharedSemaphore): Promise<void> {
    const leases = gate.leaseIds();
    const tickets = gate.ticketIds();
    const raw = this.#eval(scripts.heartbeat, gate, [
      ...this.#common(gate),
      this.host.processId,
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
        this.reached();
      },
      () => undefined,
    );
    this.#beats.add(handled);
    void handled.then(() => this.#beats.delete(handled));
    await this.calls.timed(raw).catch((error: unknown) => {
      // A gate kept in another layout is refused, not an outage: the other gates beat on.
      if (!(error instanceof SharedLayoutError)) throw error;
      gate.layoutRefused(error);
    });
  }

  /** The store begins to close: each gate's waiters are shed, their tickets given back. */
  shedGates(gates: Iterable<SharedSemaphore>): void {
    for (const gate of gates) {
      const ids = gate.storeDraining();
      if (ids.length > 0) this.release(gate, ids);
    }
  }

  /** The store closes: every id the gates give back is sent, even while degraded. */
  closeGates(gates: Iterable<SharedSemaphore>): void {
    // No stray given back from here: a closed gate forgets the leases its requests still hold.
    this.#byWake.clear();
    for (const gate of gates) {
      const ids = gate.storeClosed();
      if (ids.length > 0) this.release(gate, ids);
    }
  }

  /**
   * After `drain`: this process leaves each gate it used (BYE), so the last one to close takes
   * what no live process owns with it (a lease a snapshot brought back, a dead process's ticket)
   * and no key without a TTL stays behind. Best effort: bounded by `deadline` (a command timeout
   * at least); a gate it could not leave is named in a process warning.
   */
  async bye(gates: Iterable<SharedSemaphore>, deadline: number): Promise<void> {
    const left = new Set<SharedSemaphore>();
    const known = [...gates].filter((gate) => gate.known);
    const sent = known.map((gate) =>
      this.calls
        .timed(this.#eval(scripts.bye, gate, [...this.#common(gate), this.host.processId]))
        .then(
          () => left.add(gate),
          () => undefined,
        ),
    );
    // A command timeout at least: a drain that used the deadline (Redis back from an outage a
    // moment before, answers slow) left it none, and every gate was left without its BYE.
    const bound = Math.max(deadline - performance.now(), this.host.options.commandTimeoutMs);
    await within(Promise.allSettled(sent), bound);
    const missed = known.filter((gate) => !left.has(gate));
    if (missed.length > 0) {
      // Loud: the last process to leave a gate is what gives its queue and lease set a TTL.
      const names = missed.map((gate) => JSON.stringify(gate.name ?? '')).join(', ');
      process.emitWarning(
        `hostgate: close() could not leave shared gate(s) ${names} (Redis did not answer within ${Math.round(this.host.options.commandTimeoutMs)} ms): if no other process uses them again, their queue and lease set keep no TTL; the next process that uses a gate takes care of them`,
        { code: STORE_CLOSE_UNFINISHED },
      );
    }
  }

  /**
   * After `closeGates`: the answers still due (at most one command timeout), the releases on
   * their way, and a release that failed once more, until `deadline`.
   */
  async drain(deadline: number): Promise<void> {
    const timeout = this.host.options.commandTimeoutMs;
    // Answers still due can add ids to give back: a late grant (its release waits for it), and
    // leases a heartbeat registered again (a client may resend a heartbeat after a reconnect).
    await within(Promise.allSettled([...this.#inflight.values(), ...this.#beats]), timeout);
    await this.#sent(deadline);
    if (this.#toRelease.size > 0 && performance.now() < deadline) {
      // Some failed (their ids are back): sent once more (ZREM is idempotent).
      void this.flush();
      await this.#sent(deadline);
    }
    this.#toRelease.clear();
    this.#tickets.clear();
  }
}
