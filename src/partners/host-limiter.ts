import { AdaptiveController, type AdaptiveStats } from '../adaptive/controller.js';
import { type AdaptiveOptions, parseAdaptive } from '../adaptive/options.js';
import { attachController, controllerOf } from '../adaptive/signals.js';
import { UnknownHostError } from '../common/errors.js';
import {
  checkKnownKeys,
  checkObject,
  describe,
  nonNegativeInteger,
  positiveInteger,
} from '../common/options.js';
import { partnerRate } from '../gate/rate.js';
import {
  type LocalRateOptions,
  type RateOptions,
  Semaphore,
  type SemaphoreStats,
} from '../gate/semaphore.js';
import type { PriorityClassOptions } from '../gate/wait-queue.js';
import { OVERFLOW_ORIGINS } from '../observe/collector.js';
import { type LeakSuspect, leakSuspects } from '../observe/leaks.js';
import { Breaker, type BreakerOptions, type BreakerStats, parseBreaker } from './breaker.js';
import { setHoldAfterAbort } from './gate-layers.js';
import {
  aliasFamily,
  type HostPattern,
  hostKey,
  originKey,
  parseHostPattern,
  parseTarget,
} from './origin.js';
import {
  attachGuard,
  guardOf,
  PartnerGuard,
  type PartnerHoldStats,
  parseRateLimitHeaders,
  type RateLimitHeadersOptions,
} from './partner-guard.js';
import { type RequestCost, type SettleCost, setRateRules } from './rate-rules.js';
import { guardSharedWait } from './shared-door.js';

/**
 * Default `maxHold`: 60 s without response progress. Every response chunk resets it, so a
 * long download or an event stream keeps its permit while bytes flow; an unread body (or a
 * partner that went silent) returns its permit within a minute.
 */
export const DEFAULT_MAX_HOLD_MS = 60_000;
/**
 * Default gate for hosts no partner rule names: Envoy's default circuit breaker per cluster,
 * 1,024 concurrent requests and 1,024 waiting (1 s). A limiter guards the partners it is told
 * about: adding a partner rule must not start failing traffic to other hosts (an internal
 * service, a metadata endpoint), so this is a ceiling for runaways, not a partner's cap. Each
 * unnamed origin still gets its own gate, listed by origin in stats, metrics and the status
 * page, so the missing rule is visible. To cap unnamed hosts, pass `unknownHosts: { limit }`.
 */
export const DEFAULT_UNKNOWN_HOST_GATE = Object.freeze({
  limit: 1024,
  maxQueue: 1024,
  queueTimeout: 1000,
});
/**
 * Default `maxHosts`: 256 per-origin gates. Far more distinct unknown origins than a service
 * with named partners talks to at once; past it, new origins share the overflow gate.
 */
export const DEFAULT_MAX_HOSTS = 256;
/**
 * Default `evictIdleAfter`: a per-origin gate keeps its place while its host was called within
 * the last 60 s (or has requests in flight or waiting). Only a place idle that long goes to a
 * new origin, so a burst of new (attacker-chosen) origins cannot push out the hosts a service
 * really calls.
 */
export const DEFAULT_EVICT_IDLE_AFTER_MS = 60_000;
/**
 * The stats key and gate name of the overflow gate: origins that found every per-origin place
 * taken share it (with the `unknownHosts` gate options), queued rather than refused.
 */
export { OVERFLOW_ORIGINS };

/** Bound on the origins warned about (HOSTGATE_RULE_NEAR_MISS): a warning each, no more. */
const MAX_NEAR_MISS_WARNINGS = 64;

export interface GateOptions {
  /** The partner's real concurrency cap. */
  limit: number;
  /** Waiters beyond the held permits (default 10 × limit). */
  maxQueue?: number;
  /** Wait deadline in ms (default 1000). */
  queueTimeout?: number;
  /** Longest a request may go without response progress, in ms (default 60 000). */
  maxHold?: number;
  /** Longest a request may hold its permit at all, in ms, progress or not (default unset). */
  maxHoldTotal?: number;
  /**
   * `'fifo'` (default) or `'adaptive-lifo'`: newest first while the oldest waiter has waited
   * `lifoAfter` ms (default 100), so under a standing queue the callers served are the ones
   * that can still use the answer. See queue-order.ts.
   */
  queueOrder?: 'fifo' | 'adaptive-lifo';
  lifoAfter?: number;
  /**
   * Priority classes, highest first, each with a guaranteed minimum share (see the Semaphore's
   * `priorities`). Requests pick theirs with the `priorityClass` request option, `withPriority`,
   * or `outbound({ priority })`; unnamed, the first. Local gates only (not with `shared`).
   */
  priorities?: PriorityClassOptions[];
  /**
   * The partner's request rate beside its concurrency cap: at most `limit + burst` requests
   * (cost units) in any window of `per` ms, taken at the head of the same queue as the permit,
   * and held where they arrive for latencies up to `slack` ms apart (default 100 on a local
   * rule). See docs/rates.md. With `shared: true` it is one rate for every process, kept in Redis
   * beside the cap and taken by the script that grants the permit; with
   * `shared: { mode: 'leased' }` each process leases a share of it (a whole `limit` then).
   *
   * @example
   * rate: { limit: 100, per: 1000, burst: 20 }
   */
  rate?: LocalRateOptions;
}

export interface PartnerRule extends GateOptions {
  /** Partner name: the stats key and the `partner` field of errors. */
  name: string;
  /** Origins (`https://api.x.com:8443`), hostnames (`api.x.com`) or wildcards (`*.x.com`). */
  hosts: string[];
  /**
   * One cap for every process: the gate lives in the limiter's `store` (`hostgate/redis`), and
   * every process with the same store prefix and partner name shares `limit`. `true` (or
   * `{ mode: 'fifo' }`): every grant is a Redis round trip, one FIFO queue for all processes.
   * `{ mode: 'leased' }`: each process grants from a block of the cap sized by its demand, with
   * no Redis call per request (see docs/shared-gates.md); `priorities` work in this mode.
   */
  shared?: boolean | SharedRule;
  /**
   * Adapt the limit to the partner's real capacity, within [`min`, `limit`]: `limit` stays the
   * hard ceiling. `true` takes every default (loss-based AIMD from 20). See {@link AdaptiveOptions}.
   * With `shared: true`, each process adapts its own share (how many of the shared permits it
   * may hold); the shared cap in Redis stays `limit` for every process.
   */
  adaptive?: AdaptiveOptions | boolean;
  /**
   * Keep an aborted in-flight request's permit this many ms after its connection is closed
   * (default 0: returned right after), or `'typical'`: the gate's median hold time. For partners
   * that keep working on a request after the client has gone: their real load outlives our
   * cancellation by about one request's duration.
   */
  holdAfterAbort?: number | 'typical';
  /**
   * Units of `rate` each request takes (default 1): a number, or a function of the request
   * (`{ method, url }`) for budgets in tokens or credits. Needs `rate`.
   */
  cost?: RequestCost;
  /**
   * The request's real cost, read from its response head (a usage header), or `undefined` to
   * keep the charge: the rate is corrected by the difference (`permit.settleCost`). Needs `rate`.
   *
   * @example
   * settleCost: (res) => Number(res.header('x-usage-tokens') ?? Number.NaN) || undefined
   */
  settleCost?: SettleCost;
  /**
   * Obey the partner's own rate-limit headers (`RateLimit`, `X-RateLimit-*`, OpenAI's
   * `x-ratelimit-*-requests`/`-tokens`) and a 429/503's `Retry-After`: when the partner says its
   * budget is spent, new calls wait in the gate's queue until its reset (within their wait
   * deadline) instead of being spent on 429s. On by default; `false` turns it off;
   * `{ maxResetMs }` caps the hold a header may ask for (default 60 000: a reset further away is
   * ignored with a process warning). On a shared gate each process reads its own responses and
   * holds its own calls. See docs/contracts.md.
   */
  rateLimitHeaders?: boolean | RateLimitHeadersOptions;
  /**
   * A breaker for a partner that is down: after `failures` consecutive failures (connection
   * errors, timeouts, 5xx) or a failure ratio over a window, new calls are shed at once with
   * `PartnerOpenError` until `halfOpenAfterMs` has passed; then `probes` calls go through, and the
   * first outcome closes it or opens it again. `true`: every default (5 in a row, 5 s). A 429 and
   * a call its caller aborted are never failures. On a shared gate each process keeps its own.
   */
  breaker?: BreakerOptions | boolean;
}

/** How a partner's gate is shared (`shared: { ... }`). */
export interface SharedRule {
  /** `'fifo'` (default, as `shared: true`) or `'leased'`. */
  mode?: 'fifo' | 'leased';
  /** Leased mode: block refresh interval in ms (default 1000). */
  refreshMs?: number;
  /** Leased mode: a block's lease in ms (default: the store's `leaseMs`). */
  leaseMs?: number;
}

const SHARED_KEYS = ['mode', 'refreshMs', 'leaseMs'] as const;

/** A gate's stats, with its adaptive limit's when it has one (`limit` is then the effective one). */
export interface GateStats extends SemaphoreStats {
  adaptive?: AdaptiveStats;
  /** The partner's own hold on calls (rate-limit headers, Retry-After), when its rule reads them. */
  partnerHold?: PartnerHoldStats;
  /** The partner's breaker, when its rule has one. */
  breaker?: BreakerStats;
}

/**
 * Where shared gates live (`redisStore()` from `hostgate/redis`). The limiter asks it for one
 * gate per `shared: true` partner and closes it in `limiter.close()`.
 */
export interface GateStore {
  semaphore(options: {
    name: string;
    limit: number;
    maxQueue?: number | undefined;
    queueTimeout?: number | undefined;
    maxHold?: number | undefined;
    mode?: 'fifo' | 'leased';
    refreshMs?: number | undefined;
    leaseMs?: number | undefined;
    priorities?: PriorityClassOptions[] | undefined;
    rate?: RateOptions;
  }): Semaphore;
  close(): Promise<void>;
}

export interface HostLimiterOptions {
  partners?: PartnerRule[];
  /**
   * Hosts that match no rule: a per-origin gate with these options (default
   * {@link DEFAULT_UNKNOWN_HOST_GATE}: 1,024 at once, counted and listed by origin, but no cap
   * that unrelated traffic would hit), `'reject'` (an allow-list) or `'unlimited'` (no gate, not
   * counted). Pass gate options (`{ limit: 10 }`) to cap every unnamed origin.
   */
  unknownHosts?: GateOptions | 'reject' | 'unlimited';
  /**
   * Bound on per-origin gates for unknown hosts (default 256). Past it, a new origin takes the
   * place of one idle for `evictIdleAfter`, or else shares the overflow gate
   * ({@link OVERFLOW_ORIGINS}, the `unknownHosts` options): queued, never refused for the
   * number of other hosts. Memory stays bounded either way.
   */
  maxHosts?: number;
  /**
   * How long (ms) a per-origin gate keeps its place after its host was last called (default
   * 60 000). A new origin never evicts a gate in use or used more recently. 0: any idle gate.
   */
  evictIdleAfter?: number;
  /**
   * Setup aid: `true` makes a near miss an error instead of a warning. A near miss is an origin
   * that matches no rule although a rule names its hostname with another scheme or port
   * (`http://127.0.0.1:1` while calls go to `:37473`), or a loopback alias (`localhost` when a
   * rule names `127.0.0.1`). Off (default): a process warning, code `HOSTGATE_RULE_NEAR_MISS`,
   * once per origin, and the call goes on under the unknown-host gate.
   */
  strictOrigins?: boolean;
  /** Store of the `shared: true` partners' gates; `limiter.close()` closes it. */
  store?: GateStore;
}

const LIMITER_KEYS = [
  'partners',
  'unknownHosts',
  'maxHosts',
  'evictIdleAfter',
  'strictOrigins',
  'store',
] as const;
const GATE_KEYS = [
  'limit',
  'maxQueue',
  'queueTimeout',
  'maxHold',
  'maxHoldTotal',
  'queueOrder',
  'lifoAfter',
  'priorities',
  'rate',
] as const;
const RULE_KEYS = [
  'name',
  'hosts',
  'shared',
  'adaptive',
  'holdAfterAbort',
  'cost',
  'settleCost',
  ...GATE_KEYS,
  // docs/contracts.md: the partner's own signals and its breaker
  'rateLimitHeaders',
  'breaker',
] as const;
/** Resolved-origin cache bound: lookups by origin string stay O(1) without growing forever. */
const RESOLVED_CACHE_MAX = 4096;

type UnknownPolicy = GateOptions | 'reject' | 'unlimited';
type Resolution = Semaphore | string; // a partner gate, or the origin key of an unknown host

/** A per-origin gate and when (limiter clock, ms) its host was last called. */
interface OriginPlace {
  readonly gate: Semaphore;
  usedAt: number;
}

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
  readonly #origins = new Map<string, Semaphore>();
  readonly #hosts = new Map<string, Semaphore>();
  readonly #wildcards: { suffix: string; gate: Semaphore }[] = [];
  readonly #unknown: UnknownPolicy;
  readonly #maxHosts: number;
  readonly #evictIdleAfter: number;
  readonly #perOrigin = new Map<string, OriginPlace>();
  /** The shared gate of origins that found no place; made on first need. */
  #overflow: Semaphore | undefined = undefined;
  /** No place can be evicted before this (limiter clock): skips futile scans. */
  #noEvictionBefore = 0;
  /** Rule hostnames by origin rules (`http://h:1`), and loopback families: near-miss checks. */
  readonly #ruleHosts = new Map<string, string>();
  readonly #ruleFamilies = new Map<string, string>();
  readonly #strictOrigins: boolean;
  readonly #nearMissWarned = new Set<string>();
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
    const seen = new Map<string, string>(); // pattern key -> partner name
    for (const [index, rule] of partners.entries()) this.#addRule(rule, index, seen);
    this.#wildcards.sort((a, b) => b.suffix.length - a.suffix.length);
    this.#unknown = parseUnknownHosts(options.unknownHosts);
    this.#maxHosts =
      options.maxHosts === undefined
        ? DEFAULT_MAX_HOSTS
        : positiveInteger('maxHosts', options.maxHosts);
    this.#evictIdleAfter =
      options.evictIdleAfter === undefined
        ? DEFAULT_EVICT_IDLE_AFTER_MS
        : nonNegativeInteger('evictIdleAfter', options.evictIdleAfter);
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
    if (cached !== undefined) return this.#originGate(cached);
    const url = parseTarget(target);
    const key = originKey(url);
    const host = hostKey(url.hostname);
    const resolution = this.#match(key, host) ?? key;
    if (typeof resolution === 'string') this.#nearMiss(key, host);
    if (typeof target === 'string' && target.length <= 512 && isOriginOnly(target, url)) {
      if (this.#resolved.size >= RESOLVED_CACHE_MAX) this.#resolved.clear();
      this.#resolved.set(target, resolution);
    }
    return resolution instanceof Semaphore ? resolution : this.#originGate(resolution);
  }

  /** A partner's gate by name (for `setLimit`, dashboards). */
  gate(partner: string): Semaphore | undefined {
    return this.#partners.get(partner);
  }

  /** Every live gate: partners by name, then per-origin gates by origin, then the overflow gate. */
  gates(): Map<string, Semaphore> {
    const out = new Map(this.#partners);
    for (const [key, place] of this.#perOrigin) out.set(key, place.gate);
    if (this.#overflow !== undefined) out.set(OVERFLOW_ORIGINS, this.#overflow);
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

  #addRule(rule: PartnerRule, index: number, seen: Map<string, string>): void {
    checkObject(`partners[${index}]`, rule);
    const where =
      typeof rule.name === 'string' && rule.name !== ''
        ? `partner ${JSON.stringify(rule.name)}`
        : `partners[${index}]`;
    if (typeof rule.name !== 'string' || rule.name === '') {
      throw new TypeError(`${where}: name must be a non-empty string, got ${describe(rule.name)}`);
    }
    checkKnownKeys(where, rule, RULE_KEYS);
    const holdAfterAbort = rule.holdAfterAbort ?? 0;
    if (
      holdAfterAbort !== 'typical' &&
      (typeof holdAfterAbort !== 'number' ||
        !Number.isSafeInteger(holdAfterAbort) ||
        holdAfterAbort < 0)
    ) {
      throw new TypeError(
        `${where}: holdAfterAbort must be a non-negative integer (ms) or 'typical', got ${describe(holdAfterAbort)}`,
      );
    }
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
    for (const text of rule.hosts) {
      const pattern = parseHostPattern(where, text);
      const key = patternKey(pattern);
      const other = seen.get(key);
      if (other !== undefined) {
        throw new TypeError(
          `${where}: host ${JSON.stringify(pattern.text)} is already claimed by partner ${JSON.stringify(other)}`,
        );
      }
      seen.set(key, rule.name);
      if (pattern.kind === 'origin') {
        this.#origins.set(pattern.key, gate);
        if (!this.#ruleHosts.has(pattern.host)) this.#ruleHosts.set(pattern.host, rule.name);
      } else if (pattern.kind === 'host') this.#hosts.set(pattern.host, gate);
      else this.#wildcards.push({ suffix: pattern.suffix, gate });
      const family = pattern.kind === 'wildcard' ? undefined : aliasFamily(pattern.host);
      if (family !== undefined && !this.#ruleFamilies.has(family)) {
        this.#ruleFamilies.set(family, rule.name);
      }
    }
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

  /** Most specific first: exact origin, then hostname, then the longest wildcard suffix. */
  #match(key: string, host: string): Semaphore | undefined {
    const byOrigin = this.#origins.get(key);
    if (byOrigin !== undefined) return byOrigin;
    const byHost = this.#hosts.get(host);
    if (byHost !== undefined) return byHost;
    for (const { suffix, gate } of this.#wildcards) {
      if (host.endsWith(suffix)) return gate;
    }
    return undefined;
  }

  /**
   * An origin no rule matched, although a rule names its host on another scheme or port, or a
   * loopback alias of it: most likely a rule that was meant to cap it (issue 33). Warned once
   * per origin (a bounded number of origins), or an error under `strictOrigins`.
   */
  #nearMiss(key: string, host: string): void {
    if (this.#ruleHosts.size === 0 && this.#ruleFamilies.size === 0) return;
    let rule = this.#ruleHosts.get(host);
    let why = 'names its host with another scheme or port';
    if (rule === undefined && !this.#hosts.has(host)) {
      const family = aliasFamily(host);
      rule = family === undefined ? undefined : this.#ruleFamilies.get(family);
      why = 'names a loopback alias of it (names are not resolved: list this host too)';
    }
    if (rule === undefined) return;
    const message = `${key} matches no partner rule, but partner ${JSON.stringify(rule)} ${why}: it is not capped by that rule`;
    if (this.#strictOrigins) {
      throw new TypeError(
        `${message}. Fix the rule's hosts (scheme, port, or add this host), or set strictOrigins: false to let it through under the unknown-host gate`,
      );
    }
    if (this.#nearMissWarned.has(key) || this.#nearMissWarned.size >= MAX_NEAR_MISS_WARNINGS) {
      return;
    }
    this.#nearMissWarned.add(key);
    process.emitWarning(
      `${message}; it runs under the unknown-host gate. Fix the rule's hosts, or set strictOrigins: true while setting up to make this an error`,
      { code: 'HOSTGATE_RULE_NEAR_MISS' },
    );
  }

  #originGate(key: string): Semaphore | undefined {
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

function patternKey(pattern: HostPattern): string {
  if (pattern.kind === 'origin') return pattern.key;
  if (pattern.kind === 'host') return pattern.host;
  return `*${pattern.suffix}`;
}

function isOriginOnly(text: string, url: URL): boolean {
  return url.pathname === '/' && !url.search && !url.hash && !text.endsWith('/');
}

function makeGate(where: string, options: GateOptions, name: string): Semaphore {
  try {
    return new Semaphore({
      limit: options.limit,
      maxQueue: options.maxQueue,
      queueTimeout: options.queueTimeout,
      maxHold: options.maxHold ?? DEFAULT_MAX_HOLD_MS,
      maxHoldTotal: options.maxHoldTotal,
      queueOrder: options.queueOrder,
      lifoAfter: options.lifoAfter,
      priorities: options.priorities,
      rate: partnerRate(options.rate, (options as PartnerRule).cost !== undefined),
      name,
    });
  } catch (error) {
    throw new TypeError(`${where}: ${(error as Error).message}`);
  }
}

/** `shared`: absent or false (a local gate), `true` (FIFO), or `{ mode, refreshMs, leaseMs }`. */
function parseShared(
  where: string,
  shared: unknown,
): (Required<Pick<SharedRule, 'mode'>> & SharedRule) | undefined {
  if (shared === undefined || shared === false) return undefined;
  if (shared === true) return { mode: 'fifo' };
  if (shared === null || typeof shared !== 'object' || Array.isArray(shared)) {
    throw new TypeError(
      `${where}: shared must be a boolean or { mode: 'fifo' | 'leased' }, got ${describe(shared)}`,
    );
  }
  checkKnownKeys(`${where}: shared`, shared, SHARED_KEYS);
  const rule = shared as SharedRule;
  const mode = rule.mode ?? 'fifo';
  if (mode !== 'fifo' && mode !== 'leased') {
    throw new TypeError(
      `${where}: shared.mode must be 'fifo' or 'leased', got ${describe(rule.mode)}`,
    );
  }
  if (mode === 'fifo' && (rule.refreshMs !== undefined || rule.leaseMs !== undefined)) {
    throw new TypeError(
      `${where}: shared.refreshMs and shared.leaseMs are options of mode 'leased', got mode 'fifo'`,
    );
  }
  return { ...rule, mode };
}

function parseStore(store: unknown): GateStore | undefined {
  if (store === undefined) return undefined;
  const s = store as Partial<GateStore> | null;
  if (
    s === null ||
    typeof s !== 'object' ||
    typeof s.semaphore !== 'function' ||
    typeof s.close !== 'function'
  ) {
    throw new TypeError(`store must be a gate store (redisStore()), got ${describe(store)}`);
  }
  return s as GateStore;
}

function parseUnknownHosts(value: HostLimiterOptions['unknownHosts']): UnknownPolicy {
  if (value === 'reject' || value === 'unlimited') return value;
  if (value === undefined) return DEFAULT_UNKNOWN_HOST_GATE;
  if (typeof value === 'string') {
    throw new TypeError(
      `unknownHosts must be gate options, 'reject' or 'unlimited', got ${describe(value)}`,
    );
  }
  checkObject('unknownHosts', value);
  checkKnownKeys('unknownHosts', value, GATE_KEYS);
  makeGate('unknownHosts', value, 'unknownHosts'); // fail at construction, not on first use
  const { limit, maxQueue, queueTimeout, maxHold, maxHoldTotal, queueOrder, lifoAfter, rate } =
    value;
  return { limit, maxQueue, queueTimeout, maxHold, maxHoldTotal, queueOrder, lifoAfter, rate };
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
