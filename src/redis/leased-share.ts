/**
 * A leased gate's options, and the demand it reports to Redis: what this process wants of the
 * cap (held + queued, smoothed), and when that is worth a refresh before the next interval.
 */
import { describe, durationMs } from '../common/options.js';
import type { PriorityClassOptions } from '../gate/semaphore.js';
import type { SharedSemaphoreOptions } from './shared-stats.js';

/**
 * Default refresh interval of a leased gate: 1 s. Free permits move from idle processes to busy
 * ones within about this long; each process runs one script per gate per interval while busy
 * (one per half lease while idle), whatever its request rate.
 */
export const DEFAULT_REFRESH_MS = 1000;
/**
 * An early refresh (a process wants more than its block, or holds a block it no longer needs)
 * comes at most every `refreshMs / 10` (at least 5 ms): a burst asks once, not per request.
 */
export const ASK_DIVISOR = 10;

/** How the processes of a shared gate share its cap. */
export type ShareMode = 'fifo' | 'leased';

export interface LeasedGateOptions {
  /**
   * `'fifo'` (default): every grant is a Redis round trip, and waiters of every process are
   * served in one FIFO queue. `'leased'`: each process holds a block of the cap sized by its
   * demand and grants from it with no Redis call (see docs/shared-gates.md).
   */
  mode?: ShareMode;
  /** Leased mode: how often a process renews its block, in ms (default 1000, at most `leaseMs / 2`). */
  refreshMs?: number;
  /**
   * Leased mode: how long a block stays valid without a refresh, in ms (default: the store's
   * `leaseMs`). A dead process's block returns to the others after at most this.
   */
  leaseMs?: number;
  /** Leased mode: priority classes, as a local gate's (each process orders its own queue). */
  priorities?: PriorityClassOptions[];
}

/** Options of `store.semaphore({ mode: 'leased', ... })`. */
export interface LeasedSemaphoreOptions extends SharedSemaphoreOptions, LeasedGateOptions {
  mode: 'leased';
}

export interface ResolvedLeasedOptions {
  refreshMs: number;
  leaseMs: number;
  /** Early refreshes at most this often. */
  askMs: number;
}

export function resolveLeasedOptions(
  options: LeasedGateOptions,
  storeLeaseMs: number,
): ResolvedLeasedOptions {
  const leaseMs =
    options.leaseMs === undefined
      ? storeLeaseMs
      : Math.ceil(durationMs('leaseMs', options.leaseMs));
  const refreshMs =
    options.refreshMs === undefined
      ? Math.min(DEFAULT_REFRESH_MS, Math.floor(leaseMs / 2))
      : Math.ceil(durationMs('refreshMs', options.refreshMs));
  if (refreshMs < 1 || refreshMs * 2 > leaseMs) {
    throw new RangeError(
      `refreshMs must be at least 1 and at most half of leaseMs (${leaseMs}), got ${describe(options.refreshMs ?? refreshMs)}`,
    );
  }
  return { refreshMs, leaseMs, askMs: Math.max(5, Math.floor(refreshMs / ASK_DIVISOR)) };
}

/**
 * This process's demand: held + queued units, as a peak that decays by half every eighth of a
 * refresh once the load is gone (a burst is remembered briefly, an idle process lets go of most
 * of its block within a third of an interval).
 */
export class Demand {
  #value = 0;
  #at = 0;
  readonly #halfLifeMs: number;

  constructor(refreshMs: number) {
    this.#halfLifeMs = Math.max(1, refreshMs / 8);
  }

  /** Takes in the units held and queued now; returns the smoothed demand. */
  observe(units: number, now: number): number {
    const decayed = this.#value * 2 ** (-(now - this.#at) / this.#halfLifeMs);
    this.#value = Math.max(decayed, units);
    this.#at = now;
    return this.#value;
  }

  /** Whole units to ask Redis for (a demand under half a unit is none). */
  wants(units: number, now: number, max: number): number {
    return Math.min(max, Math.max(0, Math.ceil(this.observe(units, now) - 0.5)));
  }
}
