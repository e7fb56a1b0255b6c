import type { StoreClient } from './client.js';
import { type Script, scripts } from './scripts.js';
import { type WakeupEvents, Wakeups } from './wakeups.js';

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

  constructor(
    readonly client: StoreClient,
    readonly timeoutMs: number,
    wakeChannel: string,
    wakeEvents: WakeupEvents,
    /** A call failed or timed out: the store degrades. */
    readonly onFailure: (error: unknown) => void,
  ) {
    // The store's own connection: its errors are the store's (counted), never unhandled.
    this.wakeups = new Wakeups(client, wakeChannel, wakeEvents, () => {
      this.errors++;
    });
  }

  /** Subscribed to our wake-up channel (or refused it) and scripts loaded: before the first script runs. */
  whenReady(): Promise<void> {
    if (this.#ready !== undefined) return this.#ready;
    // A user without `script|load` (an ACL) still runs every script: EVALSHA, then EVAL.
    const loads = Object.values(scripts).map((s) =>
      Promise.resolve(this.client.command(['SCRIPT', 'LOAD', s.source])).catch((error: unknown) => {
        if (!String((error as Error)?.message ?? error).startsWith('NOPERM')) throw error;
      }),
    );
    const ready = Promise.all([this.wakeups.ensure(), ...loads]).then(() => undefined);
    this.#ready = ready;
    ready.catch(() => {
      if (this.#ready === ready) this.#ready = undefined;
    });
    return ready;
  }

  /** EVALSHA, and EVAL when Redis lost its script cache (SCRIPT FLUSH, restart, failover). */
  eval(
    script: Script,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<unknown> {
    const tail = [keys.length, ...keys, ...args];
    return this.client.command(['EVALSHA', script.sha, ...tail]).catch((error: unknown) => {
      if (!String((error as Error)?.message ?? error).startsWith('NOSCRIPT')) throw error;
      return this.client.command(['EVAL', script.source, ...tail]);
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

  /** Every Redis call has its own timeout; a failure or a timeout degrades the store. */
  timed<T>(call: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const fail = (error: unknown) => {
        this.errors++;
        this.onFailure(error);
        reject(error);
      };
      const timer = setTimeout(
        () => fail(new Error(`Redis did not answer within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      call.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          fail(error);
        },
      );
    });
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
