import type { LimitAlgorithm } from '../../src/adaptive/algorithm.js';
import { prng } from '../helpers/prng.js';

/**
 * A partner model in virtual time, for scripted algorithm tests: it serves `capacity` requests
 * at once in `baseMs` and queues the rest inside itself, so a full gate of L requests sees an
 * RTT of baseMs × max(1, L / capacity). One round = one round trip: L samples, spread over it.
 */
export interface ModelOptions {
  rounds: number;
  baseMs: number;
  /** The partner's capacity in each round. */
  capacity: (round: number) => number;
  /** Callers that want a permit (default: always more than the limit). */
  demand?: (round: number) => number;
  /** Rounds whose every sample is a drop (429/503). */
  drops?: (round: number) => boolean;
  /** Relative RTT jitter, seeded (default 0). */
  jitter?: number;
  seed?: number;
}

/** Runs the model; returns the limit at the end of every round. */
export function drive(algorithm: LimitAlgorithm, options: ModelOptions): number[] {
  const random = prng(options.seed ?? 1);
  const limits: number[] = [];
  let now = 0;
  for (let round = 0; round < options.rounds; round++) {
    const inflight = Math.max(1, Math.min(algorithm.limit, options.demand?.(round) ?? 1e9));
    const rtt = options.baseMs * Math.max(1, inflight / options.capacity(round));
    const dropped = options.drops?.(round) ?? false;
    for (let i = 0; i < inflight; i++) {
      const noise = 1 + (options.jitter ?? 0) * random();
      algorithm.update({ now: now + (rtt * i) / inflight, rttMs: rtt * noise, inflight, dropped });
    }
    now += rtt;
    limits.push(algorithm.limit);
  }
  return limits;
}

export function mean(values: number[]): number {
  return values.reduce((a, b) => a + b, 0) / values.length;
}

/** The q-quantile (0..1) of `values`, nearest rank. */
export function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}
