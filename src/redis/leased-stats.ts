/** A leased gate's stats: this process's view of the fleet and of its block, as of its last refresh. */
import type { SemaphoreStats } from '../gate/semaphore.js';

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
  /**
   * Every process's counted share summed (≤ the rate's `limit`), and the shares clean closes
   * parked for their replacements in the last window (these may take it up to `burst + 1` past).
   */
  counted: number;
}

export interface LeasedSemaphoreStats extends SemaphoreStats {
  shared: LeasedGateView;
}
