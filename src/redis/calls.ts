import { SharedLayoutError } from '../common/errors.js';
import type { StoreClient } from './client.js';
import { LAYOUT, LAYOUT_REFUSED, type Script, scripts } from './scripts.js';
import { type WakeupEvents, Wakeups } from './wakeups.js';

/** A timer later than this fired after a stall of the process, not after Redis's silence. */
const lateMs = (timeoutMs: number): number => Math.max(20, timeoutMs / 10);
/** Re-arms per call after a late timer: each needs another stall, a dead Redis still fails. */
const MAX_REARMS = 2;

/**
 * The store's Redis calls: scripts by SHA with an EVAL fallback, a timeout on every call, the
 * wake-up subscription on a connection of the store's own, and WAIT for strict mode.
 */
export class RedisCalls {
  /** Calls that failed or timed out, ever (and errors of the store's own connection). */
  errors = 0;
  /** The wake-up subscription, on a connection of the store's own. */
  readonly wakeups: Wakeups;
  #ready: Promise<void> | undefined = undefined;
  #evictionChecked = false;

  constructor(
    readonly client: StoreClient,
    readonly timeoutMs: number,
    wakeEvents: WakeupEvents,
    /** A call failed or timed out: the store degrades. */
    readonly onFailure: (error: unknown) => void,
  ) {
    // The store's own connection: its errors are the store's (counted), never unhandled.
    this.wakeups = new Wakeups(client, wakeEvents, () => {
      this.errors++;
    });
  }

  /** Subscribed to our wake-up channels (or refused them) and scripts loaded: before the first script runs. */
  whenReady(): Promise<void> {
    if (this.#ready !== undefined) return this.#ready;
    this.#checkEviction();
    // A user without `script|load` (an ACL) still runs every script: EVALSHA, then EVAL.
    const loads = Object.values(scripts).map((s) =>
      Promise.resolve(this.client.command(['SCRIPT', 'LOAD', s.source])).catch((error: unknown) => {
        if (!messageOf(error).startsWith('NOPERM')) throw error;
      }),
    );
    const ready = Promise.all([this.wakeups.ensure(), ...loads]).then(() => undefined);
    this.#ready = ready;
    ready.catch(() => {
      if (this.#ready === ready) this.#ready = undefined;
    });
    return ready;
  }

  /**
   * EVALSHA, and EVAL when Redis lost its script cache (SCRIPT FLUSH, restart, failover). A
   * gate kept in another layout rejects with {@link SharedLayoutError} (`gate` names it,
   * `layout` is this process's: the FIFO mode's unless a leased gate's script says otherwise).
   */
  eval(
    script: Script,
    keys: readonly string[],
    args: readonly (string | number)[],
    gate?: string,
    layout: string = LAYOUT,
  ): Promise<unknown> {
    const tail = [keys.length, ...keys, ...args];
    return this.client
      .command(['EVALSHA', script.sha, ...tail])
      .catch((error: unknown) => {
        if (!messageOf(error).startsWith('NOSCRIPT')) throw error;
        return this.client.command(['EVAL', script.source, ...tail]);
      })
      .catch((error: unknown) => {
        const message = messageOf(error);
        if (!message.startsWith(LAYOUT_REFUSED)) throw error;
        throw new SharedLayoutError(gate, message.slice(LAYOUT_REFUSED.length), layout);
      });
  }

  /** Strict mode: the grant is on `replicas` replicas before anyone uses it. */
  async replicate(replicas: number): Promise<void> {
    // Half the command timeout: a WAIT that runs out is an answer (too few replicas), not an outage.
    const waitMs = Math.max(1, Math.floor(this.timeoutMs / 2));
    const acked = await this.timed(this.client.command(['WAIT', replicas, waitMs]));
    if (Number(acked) < replicas) {
      throw new Error(`WAIT: ${acked} of ${replicas} replicas acknowledged the grant in time`);
    }
  }

  /**
   * Every Redis call has its own timeout; a failure or a timeout degrades the store. A stall of
   * this process is not an outage of Redis: after a synchronous stall Node runs expired timers
   * before it reads sockets, so an expired timer first lets the poll phase read a reply that
   * may already be buffered (`setImmediate`), and a timer that fired late (the event loop was
   * blocked, Redis had no fair chance to answer) is armed again for a full timeout, up to twice.
   */
  timed<T>(call: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      let rearms = 0;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const fail = (error: unknown) => {
        settled = true;
        this.errors++;
        this.onFailure(error);
        reject(error);
      };
      const arm = () => {
        const due = performance.now() + this.timeoutMs;
        timer = setTimeout(() => {
          const late = performance.now() - due > lateMs(this.timeoutMs);
          setImmediate(() => {
            if (settled) return;
            if (late && rearms < MAX_REARMS) {
              rearms++;
              arm();
            } else fail(new Error(`Redis did not answer within ${this.timeoutMs} ms`));
          });
        }, this.timeoutMs);
      };
      arm();
      call.then(
        (value) => {
          settled = true;
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          if (settled) return;
          clearTimeout(timer);
          if (error instanceof SharedLayoutError) {
            // Redis answered, and refused: a misconfiguration, not an outage.
            settled = true;
            reject(error);
          } else fail(error);
        },
      );
    });
  }

  /**
   * Warns once when Redis's eviction policy can drop the gate's keys (`INFO memory` carries it;
   * no CONFIG permission needed). Never delays or fails the store: a user without INFO
   * permission simply gets no check.
   */
  #checkEviction(): void {
    if (this.#evictionChecked) return;
    this.#evictionChecked = true;
    Promise.resolve()
      .then(() => this.client.command(['INFO', 'memory']))
      .then(
        (reply) => {
          const policy = /maxmemory_policy:(\S+)/.exec(String(reply))?.[1];
          if (policy === undefined || policy === 'noeviction') return;
          const what = policy.startsWith('allkeys')
            ? 'any key, leases included: evicted leases let the gate grant past its cap'
            : "the keys with a TTL: the gate's meta, process and sequence keys (a recovery window without grants, or tickets re-queued), never its leases or tickets";
          process.emitWarning(
            `Redis maxmemory-policy is ${policy}, which can evict ${what}; use noeviction (or a Redis of its own) for shared gates`,
            { code: 'HOSTGATE_REDIS_EVICTION' },
          );
        },
        () => undefined,
      );
  }

  /**
   * Closes the connection the store opened (never the caller's client), or drops it while it
   * is still connecting: a paused or dead Redis must not keep it (or the process) alive.
   */
  async closeSubscriber(): Promise<void> {
    // Never subscribe again: a release that trails the close needs no wake-ups.
    this.#ready = Promise.resolve();
    await this.wakeups.close();
  }
}

function messageOf(error: unknown): string {
  return String((error as Error)?.message ?? error);
}

/** `promise`, or nothing once `ms` have passed (never rejects). */
export function within(promise: Promise<unknown>, ms: number): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, ms));
  });
  return Promise.race([promise.catch(() => undefined), bound]).finally(() => clearTimeout(timer));
}
