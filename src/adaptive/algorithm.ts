/** What every limit algorithm sees and returns; see aimd.ts and gradient.ts. */

/** One finished request, as the controller hands it to an algorithm. */
export interface LimitSample {
  /** When the sample was taken (ms, the gate's clock). */
  readonly now: number;
  /** From permit grant to the partner's answer (ms); for a drop, until the drop was seen. */
  readonly rttMs: number;
  /**
   * The load the sampled request saw: the larger of the permits held at its grant (its own
   * included) and when the sample was taken (for a drop without a response, only the latter):
   * "is the gate actually using its limit?".
   */
  readonly inflight: number;
  /** The partner refused or timed out (429, 503, connect/response timeout, maxHold). */
  readonly dropped: boolean;
  /** Growth is forbidden now (a `Retry-After` is still running); cuts still apply. */
  readonly holdDown?: boolean;
}

/**
 * A limit algorithm: a pure, deterministic state machine. It reads no clock (time comes in
 * the sample) and arms no timer, so a test drives it with a scripted sequence of samples.
 */
export interface LimitAlgorithm {
  /** The algorithm's name, as in stats and metrics. */
  readonly name: string;
  /** The current limit, an integer in [min, max]. */
  readonly limit: number;
  /** The baseline RTT the algorithm believes in (ms), if it keeps one. */
  readonly minRttMs: number | undefined;
  /** Feeds one sample; returns the (possibly unchanged) limit. */
  update(sample: LimitSample): number;
}

/** Bounds shared by every algorithm: the effective limit stays in [min, max]. */
export interface LimitBounds {
  /** Lowest limit (>= 1). */
  min: number;
  /** Highest limit: the partner's contract `limit`, a hard ceiling. */
  max: number;
  /** Where to start (default: `max`... see each algorithm). */
  initial: number;
}

export function clampLimit(value: number, bounds: LimitBounds): number {
  return Math.min(bounds.max, Math.max(bounds.min, value));
}
