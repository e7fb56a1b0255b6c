/**
 * `HostLimiter`: partner rules to gates, one per partner, and the lookup from a URL to its gate.
 * Beside it: the options and their checks (limiter-options.ts), the rules' host patterns and near
 * misses (host-rules.ts), and the gates of hosts no rule names (origin-gates.ts).
 */

import { AdaptiveController } from '../adaptive/controller.js';
import { parseAdaptive } from '../adaptive/options.js';
import { attachController, controllerOf } from '../adaptive/signals.js';
import {
  checkKnownKeys,
  checkObject,
  describe,
  nonNegativeInteger,
  positiveInteger,
} from '../common/options.js';
import { Semaphore } from '../gate/semaphore.js';
import { type LeakSuspect, leakSuspects } from '../observe/leaks.js';
import { OVERFLOW_ORIGINS } from '../observe/origin-labels.js';
import { Breaker, parseBreaker } from './breaker.js';
import { setHoldAfterAbort } from './gate-layers.js';
import { HostRules } from './host-rules.js';
import {
  DEFAULT_EVICT_IDLE_AFTER_MS,
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_MAX_HOSTS,
  type GateStats,
  type GateStore,
  type HostLimiterOptions,
  LIMITER_KEYS,
  makeGate,
  type PartnerRule,
  parseHoldAfterAbort,
  parseShared,
  parseStore,
  parseUnknownHosts,
  RULE_KEYS,
  type SharedRule,
} from './limiter-options.js';
import { hostKey, originKey, parseTarget } from './origin.js';
import { OriginGates } from './origin-gates.js';
import { attachGuard, guardOf, PartnerGuard, parseRateLimitHeaders } from './partner-guard.js';
import { setRateRules } from './rate-rules.js';
import { guardSharedWait } from './shared-door.js';

export {
  DEFAULT_EVICT_IDLE_AFTER_MS,
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_MAX_HOSTS,
  DEFAULT_UNKNOWN_HOST_GATE,
  type GateOptions,
  type GateStats,
  type GateStore,
  type HostLimiterOptions,
  type PartnerRule,
  type SharedRule,
} from './limiter-options.js';
/**
 * The stats key and gate name of the overflow gate: origins that found every per-origin place
 * taken share it (with the `unknownHosts` gate options), queued rather than refused.
 */
export { OVERFLOW_ORIGINS };

/** Resolved-origin cache bound: lookups by origin string stay O(1) without growing forever. */
const RESOLVED_CACHE_MAX = 4096;

type Resolution = Semaphore | string; // a partner gate, or the origin key of an unknown host

/**
 * Maps outbound URLs to one gate per partner (or per unknown origin).
 *
 * @example
 * const limiter = new HostLimiter({
 *   partners: [{ name: 'billing', hosts: ['api.billing.example', '*.billing.example'], limit: 20 }],
 *   unknownHosts: 'reject',
 * });
 */
export class HostLimiter {
  readonly #partners = new Map<string, Semaphore>();
  /** The rules' host patterns: origin to partner gate, and near misses. */
  readonly #rules = new HostRules();
  /** Hosts no rule names: per-origin gates and the overflow gate. */
  readonly #unknown: OriginGates;
  readonly #strictOrigins: boolean;
  readonly #resolved = new Map<string, Resolution>();
  /**
   * The last origin string resolved to a partner's gate, and that gate: undici builds a new
   * origin string per request, and comparing it with the last one costs less than hashing it
   * for the map (a partner gate lives as long as the limiter, so this never goes stale).
   */
  #lastTarget: string | undefined = undefined;
  #lastGate: Semaphore | undefined = undefined;
  readonly #store: GateStore | undefined;
  #closing: Promise<void> | undefined = undefined;

  constructor(options: HostLimiterOptions = {}) {
    checkObject('HostLimiter options', options);
    checkKnownKeys('HostLimiter', options, LIMITER_KEYS);
    this.#store = parseStore(options.store);
    const partners = options.partners ?? [];
    if (!Array.isArray(partners)) {
      throw new TypeError(`partners must be an array of rules, got ${describe(partners)}`);
    }
    for (const [index, rule] of partners.entries()) this.#addRule(rule, index);
    const unknown = parseUnknownHosts(options.unknownHosts);
    const maxHosts =
      options.maxHosts === undefined
        ? DEFAULT_MAX_HOSTS
        : positiveInteger('maxHosts', options.maxHosts);
    const evictIdleAfter =
      options.evictIdleAfter === undefined
        ? DEFAULT_EVICT_IDLE_AFTER_MS
        : nonNegativeInteger('evictIdleAfter', options.evictIdleAfter);
    this.#unknown = new OriginGates(unknown, maxHosts, evictIdleAfter);
    const strict = options.strictOrigins ?? false;
    if (typeof strict !== 'boolean') {
      throw new TypeError(`strictOrigins must be a boolean, got ${describe(strict)}`);
    }
    this.#strictOrigins = strict;
  }

  /**
   * The gate for a URL or origin: its partner's, or a per-origin gate for an unknown host;
   * `undefined` when `unknownHosts` is `'unlimited'`. Throws `TypeError` for a malformed or
   * non-http(s) URL (and for a near miss under `strictOrigins`), `UnknownHostError` under
   * `'reject'`. Past `maxHosts`, a new origin gets the overflow gate. Acquire in the same tick:
   * an idle per-origin gate may be evicted.
   */
  gateFor(target: string | URL): Semaphore | undefined {
    if (target === this.#lastTarget && this.#lastGate !== undefined) return this.#lastGate;
    const cached = typeof target === 'string' ? this.#resolved.get(target) : undefined;
    if (cached instanceof Semaphore) {
      this.#lastTarget = target as string;
      this.#lastGate = cached;
      return cached;
    }
    if (cached !== undefined) return this.#unknown.gateFor(cached);
    const url = parseTarget(target);
    const key = originKey(url);
    const host = hostKey(url.hostname);
    const resolution = this.#rules.match(key, host) ?? key;
    if (typeof resolution === 'string') this.#rules.nearMiss(key, host, this.#strictOrigins);
    if (typeof target === 'string' && target.length <= 512 && isOriginOnly(target, url)) {
      if (this.#resolved.size >= RESOLVED_CACHE_MAX) this.#resolved.clear();
      this.#resolved.set(target, resolution);
    }
    return resolution instanceof Semaphore ? resolution : this.#unknown.gateFor(resolution);
  }

  /** A partner's gate by name (for `setLimit`, dashboards). */
  gate(partner: string): Semaphore | undefined {
    return this.#partners.get(partner);
  }

  /** Every live gate: partners by name, then per-origin gates by origin, then the overflow gate. */
  gates(): Map<string, Semaphore> {
    const out = new Map(this.#partners);
    for (const [key, gate] of this.#unknown.entries()) out.set(key, gate);
    return out;
  }

  /**
   * Permits held past their gate's `leakWarnAfter` (default half of `maxHold`): each with its
   * partner, request and hold time, and where it was acquired while `detectLeaks` traces.
   */
  leaks(): LeakSuspect[] {
    return leakSuspects(this);
  }

  /**
   * Closes the store it was given (`store`): shared permits go back to Redis, heartbeats stop.
   * Idempotent. The Redis client passed to the store stays open.
   */
  close(): Promise<void> {
    this.#closing ??= this.#store?.close() ?? Promise.resolve();
    return this.#closing;
  }

  /** Every gate's stats; an adaptive partner's also carry `adaptive` (contract and effective limit). */
  stats(): Record<string, GateStats> {
    const out: Record<string, GateStats> = {};
    for (const [key, gate] of this.gates()) {
      const stats: GateStats = gate.stats();
      const adaptive = controllerOf(gate);
      if (adaptive !== undefined) stats.adaptive = adaptive.stats();
      const guard = guardOf(gate);
      if (guard !== undefined) {
        if (guard.reads) stats.partnerHold = guard.holdStats();
        const breaker = guard.breakerStats();
        if (breaker !== undefined) stats.breaker = breaker;
      }
      out[key] = stats;
    }
    return out;
  }

  #addRule(rule: PartnerRule, index: number): void {
    checkObject(`partners[${index}]`, rule);
    const where =
      typeof rule.name === 'string' && rule.name !== ''
        ? `partner ${JSON.stringify(rule.name)}`
        : `partners[${index}]`;
    if (typeof rule.name !== 'string' || rule.name === '') {
      throw new TypeError(`${where}: name must be a non-empty string, got ${describe(rule.name)}`);
    }
    checkKnownKeys(where, rule, RULE_KEYS);
    const holdAfterAbort = parseHoldAfterAbort(where, rule.holdAfterAbort);
    if (this.#partners.has(rule.name))
      throw new TypeError(`${where}: the name is used by another rule`);
    if (!Array.isArray(rule.hosts) || rule.hosts.length === 0) {
      throw new TypeError(`${where}: hosts must be a non-empty array, got ${describe(rule.hosts)}`);
    }
    const shared = parseShared(where, rule.shared);
    if (rule.priorities !== undefined && shared?.mode === 'fifo') {
      throw new TypeError(
        `${where}: priorities are not supported with shared: true yet (the FIFO mode; shared: { mode: 'leased' } has them)`,
      );
    }
    const gate =
      shared !== undefined
        ? this.#sharedGate(where, rule, shared)
        : makeGate(where, rule, rule.name);
    setRateRules(where, gate, rule.cost, rule.settleCost);
    const adaptive = parseAdaptive(where, rule.adaptive, gate.limit);
    this.#rules.add(where, rule.name, rule.hosts, gate);
    this.#partners.set(rule.name, gate);
    setHoldAfterAbort(gate, holdAfterAbort);
    if (adaptive !== undefined) attachController(new AdaptiveController(gate, adaptive));
    this.#guard(where, rule, gate);
  }

  /**
   * The partner's own signals and its breaker (partner-guard.ts), when the rule asks for them.
   * Per process on a shared gate too: each replica reads its own responses and keeps its own
   * breaker (docs/contracts.md). A FIFO shared gate's grants come from Redis, past the queue
   * where the gate asks its guard: the guard stands at its door instead (shared-door.ts).
   */
  #guard(where: string, rule: PartnerRule, gate: Semaphore): void {
    const headers = parseRateLimitHeaders(where, rule.rateLimitHeaders);
    const breaker = parseBreaker(where, rule.breaker);
    if (headers === undefined && breaker === undefined) return;
    const b = breaker === undefined ? undefined : new Breaker(rule.name, breaker);
    const guard = new PartnerGuard(gate, rule.name, headers, b);
    attachGuard(gate, guard);
    if (parseShared(where, rule.shared)?.mode === 'fifo') guardSharedWait(gate, guard);
  }

  #sharedGate(
    where: string,
    rule: PartnerRule,
    shared: Required<Pick<SharedRule, 'mode'>> & SharedRule,
  ): Semaphore {
    if (this.#store === undefined) {
      throw new TypeError(
        `${where}: shared: true needs the limiter's store option (hostgate/redis)`,
      );
    }
    try {
      return this.#store.semaphore({
        name: rule.name,
        limit: rule.limit,
        maxQueue: rule.maxQueue,
        queueTimeout: rule.queueTimeout,
        maxHold: rule.maxHold ?? DEFAULT_MAX_HOLD_MS,
        ...(rule.rate === undefined ? {} : { rate: rule.rate }),
        ...(shared.mode === 'leased'
          ? {
              mode: 'leased',
              refreshMs: shared.refreshMs,
              leaseMs: shared.leaseMs,
              priorities: rule.priorities,
            }
          : {}),
      });
    } catch (error) {
      throw new TypeError(`${where}: ${(error as Error).message}`);
    }
  }
}

function isOriginOnly(text: string, url: URL): boolean {
  return url.pathname === '/' && !url.search && !url.hash && !text.endsWith('/');
}

/**
 * The limiter an entry point (`limitHosts`, `limitFetch`, `LimitedAgent`, …) was given: a
 * `HostLimiter`, or options to build one. Anything else (`undefined` included) is a
 * `TypeError`: a missing limiter must not quietly become a default one.
 * @internal
 */
export function limiterFrom(where: string, value: unknown): HostLimiter {
  if (value instanceof HostLimiter) return value;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(
      `${where}: expected a HostLimiter or its options ({ partners: [...] }), got ${describe(value)}`,
    );
  }
  return new HostLimiter(value as HostLimiterOptions);
}
