/** A shared gate's options and stats: this process's view beside the whole cluster's. */
import type { RateOptions } from '../gate/rate.js';
import type { SemaphoreStats } from '../gate/semaphore.js';

export interface SharedSemaphoreOptions {
  /** The gate's name: every process using this name on the same Redis and prefix shares it. */
  name: string;
  /**
   * The cap, shared by every process. The first process's number is stored in Redis; a process
   * asking for another one gates by the stored cap (warning `HOSTGATE_SHARED_CAP_MISMATCH`);
   * `setSharedLimit(n)` changes it for all.
   */
  limit: number;
  /** Waiters in this process beyond its immediate grants (default 10 × limit); local, no Redis call. */
  maxQueue?: number;
  /** Wait deadline in ms (default 1000), Redis round trips included. */
  queueTimeout?: number;
  /** Longest a permit may be held, in ms (the HTTP layers always set one). */
  maxHold?: number;
  leakWarnAfter?: number;
  /**
   * A request rate for every process together, GCRA in Redis beside the cap: at most
   * `limit + burst` calls (cost units) in any window of `per` ms across the fleet. A call takes
   * its permit and its rate slot at the same point of the one shared queue, in one script; a
   * caller whose slot would come after its wait deadline is shed at once with
   * `RateLimitedError` and the exact `retryAfterMs`. Like the cap, the rate lives in Redis: the
   * first process's is stored, `setSharedRate` changes it. FIFO mode only.
   *
   * @example
   * store.semaphore({ name: 'billing', limit: 20, rate: { limit: 100, per: 1000, burst: 20 } });
   */
  rate?: RateOptions;
}

/** The cluster-wide view of a shared gate, as of the last Redis reply. */
export interface SharedGateView {
  /** Leases held across every process. */
  held: number;
  /** Tickets waiting across every process. */
  queued: number;
  /** Processes that used this gate within a lease. */
  processes: number;
  /** `'redis'`, or while Redis is unreachable `'local'` (a local share) or `'reject'`. */
  mode: 'redis' | 'local' | 'reject';
  /**
   * `'push'`: grants reach waiters at once on this process's wake-up subscription; `'poll'`: it
   * is down (or forbidden by an ACL) and queued tickets are re-checked every `heartbeatMs / 8`.
   */
  wakeups: 'push' | 'poll';
  /** Leases Redis lost while this process held them (stalls, a Redis restart). */
  leasesLost: number;
  /** Callers shed with `StoreUnavailableError`. */
  shedStoreUnavailable: number;
}

export interface SharedSemaphoreStats extends SemaphoreStats {
  /** This process's `held`/`queued` are the fields above; this is the whole cluster. */
  shared: SharedGateView;
}
