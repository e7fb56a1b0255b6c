import { readRateLimit } from '../common/rate-limit-headers.js';
import { parseRetryAfter } from '../common/retry-after.js';
import type { Permit, Semaphore } from '../gate/semaphore.js';
import { AimdLimit } from './aimd.js';
import type { LimitAlgorithm } from './algorithm.js';
import { GradientLimit } from './gradient.js';
import type { ResolvedAdaptive } from './options.js';

/** What stats(), metrics and the status page show of an adaptive gate. */
export interface AdaptiveStats {
  algorithm: string;
  /** The partner's contract: the hard ceiling. */
  contractLimit: number;
  /** The limit in force now (the gate's `limit`), in [min, contractLimit]. */
  effectiveLimit: number;
  min: number;
  /** The baseline RTT in use (ms), once measured or when pinned. */
  minRttMs: number | undefined;
  /** Times the effective limit changed. */
  limitChanges: number;
  /** Samples that were drops (429, 503, timeouts, maxHold take-backs). */
  drops: number;
  /** Samples with an RTT. */
  samples: number;
  /** ms left of a partner's `Retry-After` during which the limit may not grow (0: none). */
  holdDownMs: number;
}

/** Statuses that mean "the partner is overloaded": the drop signal. */
const DROP_STATUSES = new Set([429, 503]);
/** Errors that mean the partner did not answer in time. */
const TIMEOUT_CODES = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);
/** A Retry-After past a minute is a guess, not an instruction (as `MAX_RETRY_AFTER_MS`). */
const MAX_HOLD_DOWN_MS = 60_000;

/**
 * Drives one gate's limit from its requests' outcomes. The algorithm proposes; this applies
 * with `gate.setLimit`, inside [min, contract], so the gate's own invariant holds throughout.
 */
export class AdaptiveController {
  readonly gate: Semaphore;
  readonly #algorithm: LimitAlgorithm;
  readonly #options: ResolvedAdaptive;
  /** Permits whose request was already sampled: one sample per request. */
  readonly #sampled = new WeakSet<Permit>();
  #changes = 0;
  #drops = 0;
  #samples = 0;
  #holdUntil = Number.NEGATIVE_INFINITY;

  /** `algorithm` replaces the one `options` names (benchmarks plug in other algorithms). */
  constructor(gate: Semaphore, options: ResolvedAdaptive, algorithm?: LimitAlgorithm) {
    this.gate = gate;
    this.#options = options;
    this.#algorithm = algorithm ?? makeAlgorithm(options);
    gate.setLimit(this.#algorithm.limit);
  }

  /**
   * The response head arrived: an RTT sample, or a drop for 429/503 (+ `Retry-After`).
   * `heldAtGrant`: what the gate held when the permit was granted, the permit included.
   */
  onResponse(permit: Permit, statusCode: number, headers: unknown, heldAtGrant = 0): void {
    const dropped = DROP_STATUSES.has(statusCode);
    if (dropped) {
      const ms = parseRetryAfter(headerValue(headers, 'retry-after'), Date.now());
      if (ms !== undefined && ms > 0) this.#holdDown(ms);
      // A 429 whose rate-limit headers say the budget is spent is the partner's rate, not its
      // concurrency: no drop (the gate holds calls until the reset), and no growth until then.
      if (statusCode === 429) {
        const rate = readRateLimit((name) => headerValue(headers, name), 429, Date.now());
        if (rate.kind === 'hold') {
          this.#holdDown(rate.holdMs);
          this.#sampled.add(permit);
          return;
        }
      }
    }
    // The load the request saw is the larger of the two readings: through a burst of responses
    // the gate's count falls as each permit goes back (4, 3, 2, 1), and requests sent one by one
    // after a burst see it rise (1, 2, 3, 4); read at one end only, half of a full gate's
    // samples looked app-limited and AIMD grew at half its rate.
    this.#sample(permit, dropped, Math.max(heldAtGrant, this.gate.held));
  }

  /** No growth for `ms` (at most a minute): the partner asked for calls to wait. */
  #holdDown(ms: number): void {
    const until = this.gate.now() + Math.min(ms, MAX_HOLD_DOWN_MS);
    if (until > this.#holdUntil) this.#holdUntil = until;
  }

  /** The request failed: a timeout is a drop; an abort by the caller or a reset says nothing. */
  onError(permit: Permit, error: unknown): void {
    if (isTimeout(error)) this.#sample(permit, true);
    else this.#sampled.add(permit);
  }

  /** `maxHold` passed: the partner kept a permit far too long. */
  onHoldTimeout(permit: Permit): void {
    this.#sample(permit, true);
  }

  stats(): AdaptiveStats {
    return {
      algorithm: this.#algorithm.name,
      contractLimit: this.#options.max,
      effectiveLimit: this.gate.limit,
      min: this.#options.min,
      minRttMs: this.#algorithm.minRttMs,
      limitChanges: this.#changes,
      drops: this.#drops,
      samples: this.#samples,
      holdDownMs: Math.max(0, this.#holdUntil - this.gate.now()),
    };
  }

  #sample(permit: Permit, dropped: boolean, inflight = this.gate.held): void {
    if (this.#sampled.has(permit)) return;
    this.#sampled.add(permit);
    const now = this.gate.now();
    this.#samples++;
    if (dropped) this.#drops++;
    const limit = this.#algorithm.update({
      now,
      rttMs: now - permit.acquiredAt,
      inflight,
      dropped,
      holdDown: now < this.#holdUntil,
    });
    if (limit !== this.gate.limit) {
      this.#changes++;
      this.gate.setLimit(limit);
    }
  }
}

function makeAlgorithm(o: ResolvedAdaptive): LimitAlgorithm {
  const common = {
    min: o.min,
    max: o.max,
    initial: o.initial,
    minRttMs: o.minRttMs,
    ...(o.minRttDecayMs === undefined ? {} : { minRttDecayMs: o.minRttDecayMs }),
    ...(o.backoff === undefined ? {} : { backoff: o.backoff }),
    ...(o.tolerance === undefined ? {} : { tolerance: o.tolerance }),
  };
  return o.algorithm === 'gradient' ? new GradientLimit(common) : new AimdLimit(common);
}

/** A timeout of the connect, the response head or the body, or the caller's own deadline. */
export function isTimeout(error: unknown): boolean {
  for (let e = error, depth = 0; depth < 3 && typeof e === 'object' && e !== null; depth++) {
    const { name, code, cause } = e as { name?: unknown; code?: unknown; cause?: unknown };
    if (name === 'TimeoutError' || (typeof code === 'string' && TIMEOUT_CODES.has(code))) {
      return true;
    }
    e = cause;
  }
  return false;
}

/** One header from an undici header object, undici's raw pairs, or a WHATWG `Headers`. */
export function headerValue(headers: unknown, name: string): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  if (typeof (headers as Headers).get === 'function') {
    return (headers as Headers).get(name) ?? undefined;
  }
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === name) return String(headers[i + 1]);
    }
    return undefined;
  }
  const value = (headers as Record<string, unknown>)[name];
  if (Array.isArray(value)) return value.length > 0 ? String(value[0]) : undefined;
  return value === undefined ? undefined : String(value);
}
