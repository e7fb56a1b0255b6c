/**
 * The gates of hosts no partner rule names (`unknownHosts`): one per origin, `maxHosts` places
 * kept while used, then one overflow gate that the origins without a place share. Memory stays
 * bounded whatever origins the callers (or an attacker choosing URLs) bring (issue 36).
 */

import { UnknownHostError } from '../common/errors.js';
import type { Semaphore } from '../gate/semaphore.js';
import { OVERFLOW_ORIGINS } from '../observe/origin-labels.js';
import { type GateOptions, makeGate, type UnknownPolicy } from './limiter-options.js';

/** A per-origin gate and when (limiter clock, ms) its host was last called. */
interface OriginPlace {
  readonly gate: Semaphore;
  usedAt: number;
}

/** The per-origin gates of one limiter, and its overflow gate. */
export class OriginGates {
  readonly #unknown: UnknownPolicy;
  readonly #maxHosts: number;
  readonly #evictIdleAfter: number;
  readonly #perOrigin = new Map<string, OriginPlace>();
  /** The shared gate of origins that found no place; made on first need. */
  #overflow: Semaphore | undefined = undefined;
  /** No place can be evicted before this (limiter clock): skips futile scans. */
  #noEvictionBefore = 0;

  constructor(unknown: UnknownPolicy, maxHosts: number, evictIdleAfter: number) {
    this.#unknown = unknown;
    this.#maxHosts = maxHosts;
    this.#evictIdleAfter = evictIdleAfter;
  }

  /**
   * The gate of an origin (its key) no rule matched: `undefined` under `'unlimited'`,
   * `UnknownHostError` under `'reject'`, else its own gate, or the overflow gate when every
   * place is taken and in use.
   */
  gateFor(key: string): Semaphore | undefined {
    const unknown = this.#unknown;
    if (unknown === 'unlimited') return undefined;
    if (unknown === 'reject') throw new UnknownHostError(key);
    const now = performance.now();
    const place = this.#perOrigin.get(key);
    if (place !== undefined) {
      place.usedAt = now;
      return place.gate;
    }
    if (this.#perOrigin.size >= this.#maxHosts && !this.#evictIdle(now)) {
      return this.#overflowGate(unknown, key);
    }
    const gate = makeGate('unknownHosts', unknown, key);
    this.#perOrigin.set(key, { gate, usedAt: now });
    return gate;
  }

  /** Every live gate: per-origin gates by origin, then the overflow gate. */
  *entries(): Generator<[string, Semaphore]> {
    for (const [key, place] of this.#perOrigin) yield [key, place.gate];
    if (this.#overflow !== undefined) yield [OVERFLOW_ORIGINS, this.#overflow];
  }

  /**
   * Drops a per-origin gate idle for `evictIdleAfter` (no permit held, none waiting, its host
   * not called since); false when none is. A busy gate counts as called now.
   */
  #evictIdle(now: number): boolean {
    if (now < this.#noEvictionBefore) return false;
    const keep = this.#evictIdleAfter;
    let soonest = Number.POSITIVE_INFINITY;
    for (const [key, place] of this.#perOrigin) {
      const gate = place.gate;
      if (gate.held !== 0 || gate.queued !== 0) place.usedAt = now;
      else if (place.usedAt + keep <= now) {
        this.#perOrigin.delete(key);
        this.#noEvictionBefore = 0;
        return true;
      }
      soonest = Math.min(soonest, place.usedAt + keep);
    }
    this.#noEvictionBefore = soonest;
    return false;
  }

  /**
   * Every place is taken and in use: the new origin shares the overflow gate, which queues
   * (its `maxQueue`, `queueTimeout`) instead of refusing, and holds every caller to the
   * `unknownHosts` cap, so a per-origin cap still caps each origin in it. Warned once.
   */
  #overflowGate(unknown: GateOptions, key: string): Semaphore {
    if (this.#overflow === undefined) {
      this.#overflow = makeGate('unknownHosts', unknown, OVERFLOW_ORIGINS);
      process.emitWarning(
        `all ${this.#maxHosts} per-origin gates (maxHosts) are in use or were used in the last ${this.#evictIdleAfter} ms (evictIdleAfter): ${key} and further new origins share the gate ${JSON.stringify(OVERFLOW_ORIGINS)} until a place frees up. Name the partners you call often, or raise maxHosts`,
        { code: 'HOSTGATE_HOSTS_OVERFLOW' },
      );
    }
    return this.#overflow;
  }
}
