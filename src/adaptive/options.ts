/** The per-partner `adaptive` option: its shape, defaults and validation. */
import {
  checkKnownKeys,
  checkObject,
  describe,
  durationMs,
  positiveInteger,
} from '../common/options.js';

export type AdaptiveAlgorithmName = 'aimd' | 'gradient';

/**
 * A partner's adaptive limit: the effective limit moves within [`min`, the partner's `limit`]
 * and never above the contract.
 *
 * @example
 * { name: 'billing', hosts: ['api.billing.example'], limit: 50,
 *   adaptive: { min: 2, initial: 10 } }              // loss-based AIMD
 * { ..., adaptive: { algorithm: 'gradient', minRtt: 40 } } // latency gradient, pinned baseline
 */
export interface AdaptiveOptions {
  /** `'aimd'` (default: loss-based, Netflix's advice for clients) or `'gradient'` (latency). */
  algorithm?: AdaptiveAlgorithmName;
  /** Lowest effective limit (default 1). */
  min?: number;
  /** Starting limit (default `min(limit, max(min, 20))`, Netflix's initial limit). */
  initial?: number;
  /** Pins the partner's unloaded RTT in ms instead of measuring it as a decaying minimum. */
  minRtt?: number;
  /** Time constant, ms, of the decaying minimum RTT (default 60 000). */
  minRttDecay?: number;
  /** Multiplier applied on a drop, in (0, 1) (default 0.9). */
  backoff?: number;
  /** Accepted RTT inflation over the minimum, >= 1 (AIMD default 1.2, gradient 1.05). */
  tolerance?: number;
}

/** Validated options with the contract filled in. */
export interface ResolvedAdaptive {
  algorithm: AdaptiveAlgorithmName;
  min: number;
  initial: number;
  max: number;
  minRttMs: number | undefined;
  minRttDecayMs: number | undefined;
  backoff: number | undefined;
  tolerance: number | undefined;
}

const KEYS = [
  'algorithm',
  'min',
  'initial',
  'minRtt',
  'minRttDecay',
  'backoff',
  'tolerance',
] as const;

/** Netflix's concurrency-limits starts every algorithm at 20. */
const DEFAULT_INITIAL = 20;

/** `true` means every default; `undefined`/`false` means a fixed limit. */
export function parseAdaptive(
  where: string,
  value: unknown,
  contract: number,
): ResolvedAdaptive | undefined {
  if (value === undefined || value === false) return undefined;
  const options = (value === true ? {} : value) as AdaptiveOptions;
  const at = `${where}: adaptive`;
  checkObject(at, options);
  checkKnownKeys(at, options, KEYS);
  const { algorithm = 'aimd' } = options;
  if (algorithm !== 'aimd' && algorithm !== 'gradient') {
    throw new TypeError(`${at}.algorithm must be 'aimd' or 'gradient', got ${describe(algorithm)}`);
  }
  const min = options.min === undefined ? 1 : positiveInteger(`${at}.min`, options.min);
  if (min > contract) {
    throw new TypeError(`${at}.min must be at most limit (${contract}), got ${min}`);
  }
  const initial =
    options.initial === undefined
      ? Math.min(contract, Math.max(min, DEFAULT_INITIAL))
      : positiveInteger(`${at}.initial`, options.initial);
  if (initial < min || initial > contract) {
    throw new TypeError(
      `${at}.initial must be in [min, limit] = [${min}, ${contract}], got ${initial}`,
    );
  }
  const backoff = options.backoff;
  if (backoff !== undefined && !(typeof backoff === 'number' && backoff > 0 && backoff < 1)) {
    throw new TypeError(`${at}.backoff must be a number in (0, 1), got ${describe(backoff)}`);
  }
  const tolerance = options.tolerance;
  if (
    tolerance !== undefined &&
    !(typeof tolerance === 'number' && Number.isFinite(tolerance) && tolerance >= 1)
  ) {
    throw new TypeError(`${at}.tolerance must be a finite number >= 1, got ${describe(tolerance)}`);
  }
  return {
    algorithm,
    min,
    initial,
    max: contract,
    minRttMs: options.minRtt === undefined ? undefined : durationMs(`${at}.minRtt`, options.minRtt),
    minRttDecayMs:
      options.minRttDecay === undefined
        ? undefined
        : durationMs(`${at}.minRttDecay`, options.minRttDecay),
    backoff,
    tolerance,
  };
}
