/**
 * The options of a `HostLimiter` and its partner rules, as users see them in their editor: their
 * types, their defaults, and the checks that turn them into gates (each failure a `TypeError`
 * naming the rule, at construction).
 */

import type { AdaptiveStats } from '../adaptive/controller.js';
import type { AdaptiveOptions } from '../adaptive/options.js';
import { checkKnownKeys, checkObject, describe } from '../common/options.js';
import { partnerRate } from '../gate/rate.js';
import {
  type LocalRateOptions,
  type RateOptions,
  Semaphore,
  type SemaphoreStats,
} from '../gate/semaphore.js';
import type { PriorityClassOptions } from '../gate/wait-queue.js';
import type { OVERFLOW_ORIGINS } from '../observe/origin-labels.js';
import type { BreakerOptions, BreakerStats } from './breaker.js';
import type { HoldAfterAbort } from './gate-layers.js';
import type { PartnerHoldStats, RateLimitHeadersOptions } from './partner-guard.js';
import type { RequestCost, SettleCost } from './rate-rules.js';

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

/** The option names each object accepts: any other is a `TypeError` (a typo caught early). */
export const LIMITER_KEYS = [
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
export const RULE_KEYS = [
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
const SHARED_KEYS = ['mode', 'refreshMs', 'leaseMs'] as const;

/** Hosts no rule names: gate options for a per-origin gate each, or a policy without gates. */
export type UnknownPolicy = GateOptions | 'reject' | 'unlimited';

/** `holdAfterAbort`: a non-negative integer (ms, default 0) or `'typical'`. */
export function parseHoldAfterAbort(where: string, value: unknown): HoldAfterAbort {
  const holdAfterAbort = value ?? 0;
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
  return holdAfterAbort;
}

/** A local gate of `options` named `name`; a bad option is a `TypeError` naming `where`. */
export function makeGate(where: string, options: GateOptions, name: string): Semaphore {
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
export function parseShared(
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

/** The limiter's `store`: anything with `semaphore()` and `close()` (`redisStore()`). */
export function parseStore(store: unknown): GateStore | undefined {
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

/** `unknownHosts`, its gate options checked now (default {@link DEFAULT_UNKNOWN_HOST_GATE}). */
export function parseUnknownHosts(value: HostLimiterOptions['unknownHosts']): UnknownPolicy {
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
