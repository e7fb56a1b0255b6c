/** A shared gate's options and stats: this process's view beside the whole cluster's. */
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
  /** Leases Redis lost while this process held them (stalls, a Redis restart). */
  leasesLost: number;
  /** Callers shed with `StoreUnavailableError`. */
  shedStoreUnavailable: number;
}

export interface SharedSemaphoreStats extends SemaphoreStats {
  /** This process's `held`/`queued` are the fields above; this is the whole cluster. */
  shared: SharedGateView;
}
