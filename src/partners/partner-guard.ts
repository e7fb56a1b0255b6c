/**
 * A partner gate's guard (src/gate/gate-guard.ts): the one place the partner's "not before T"
 * lives, and its breaker. Fed by every response of every entry point (the HTTP layers report it
 * to the gate's outcome handlers: gate/outcomes.ts) and by a retrier's Retry-After cooldown
 * ({@link holdPartner}). The gate does the holding: waiters stay queued until T, and an arrival
 * whose wait deadline ends before T is shed at once with `PartnerCooldownError` (`retryAfterMs`:
 * the time left until T).
 */
import { headerValue } from '../adaptive/controller.js';
import { PartnerCooldownError, type ShedError } from '../common/errors.js';
import { checkKnownKeys, checkObject, describe, durationMs } from '../common/options.js';
import { readRateLimit } from '../common/rate-limit-headers.js';
import { coreEntry } from '../gate/counting-gate.js';
import type { GateGuard, GuardCounters } from '../gate/gate-guard.js';
import { handleOutcomes } from '../gate/outcomes.js';
import type { Semaphore } from '../gate/semaphore.js';
import type { Breaker, BreakerStats } from './breaker.js';

/** A partner rule's `rateLimitHeaders` option, when not just `true`/`false`. */
export interface RateLimitHeadersOptions {
  /**
   * Longest hold a header may ask for, ms (default 60 000, as `Retry-After`'s clamp): a reset
   * further away is ignored with a process warning (`HOSTGATE_RATELIMIT_HEADER`), never obeyed.
   */
  maxResetMs?: number;
  /**
   * Also hold on a 429/503's `Retry-After` (default `false`: a `Retrier` with `cooldown` reads
   * it, and holds this gate too). The same cap applies.
   */
  retryAfter?: boolean;
}

/** The partner's own hold on calls, in a partner's stats. */
export interface PartnerHoldStats {
  /** Ms until calls go again; 0 when none is held. */
  remainingMs: number;
  /** Holds started (extensions of a running one not counted). */
  holds: number;
  /** Calls shed because their wait deadline ended before the hold. */
  shed: number;
  /** The header that started the latest hold (`RateLimit`, `X-RateLimit`, `Retry-After`, …). */
  source: string | undefined;
  /**
   * Calls waiting for the hold's end outside the gate's queue: a shared FIFO gate's, which hold
   * no ticket in Redis meanwhile (shared-door.ts). Always 0 on other gates: theirs are `queued`.
   */
  waiting: number;
}

/** Default `rateLimitHeaders.maxResetMs`: a minute, as `Retry-After`'s clamp. */
export const DEFAULT_MAX_RESET_MS = 60_000;
const HEADER_KEYS = ['maxResetMs', 'retryAfter'] as const;

/** What a rule's `rateLimitHeaders` resolves to. */
export interface ResolvedHeaders {
  maxResetMs: number;
  retryAfter: boolean;
}

const guards = new WeakMap<Semaphore, PartnerGuard>();

export class PartnerGuard implements GateGuard {
  readonly #gate: Semaphore;
  readonly #name: string;
  /** `undefined`: the partner's headers are not read. */
  readonly #headers: ResolvedHeaders | undefined;
  readonly #breaker: Breaker | undefined;
  notBefore = 0;
  /** Calls held at a shared FIFO gate's door (shared-door.ts). */
  waiting = 0;
  #holds = 0;
  #shed = 0;
  #source: string | undefined = undefined;
  #warned = false;

  constructor(
    gate: Semaphore,
    name: string,
    headers: ResolvedHeaders | undefined,
    breaker?: Breaker,
  ) {
    this.#gate = gate;
    this.#name = name;
    this.#headers = headers;
    this.#breaker = breaker;
  }

  /** Whether it reads the partner's headers (`rateLimitHeaders` not `false`). */
  get reads(): boolean {
    return this.#headers !== undefined;
  }

  get screening(): boolean {
    return this.#breaker?.screening === true;
  }

  refuse(now: number, deadline: number): ShedError | undefined {
    const until = this.notBefore;
    if (until > now && deadline < until) {
      this.#shed++;
      return new PartnerCooldownError(this.#name, Math.ceil(until - now), this.#source);
    }
    return this.#breaker?.refuse(now);
  }

  /** No calls for `ms` from now (a hold only ever grows while it runs). */
  hold(ms: number, source: string): void {
    const now = this.#gate.now();
    const until = now + ms;
    if (until <= this.notBefore) return;
    if (this.notBefore <= now) this.#holds++;
    this.notBefore = until;
    this.#source = source;
  }

  onResponse(statusCode: number, headers: unknown): void {
    if (this.#headers !== undefined) this.#read(this.#headers, statusCode, headers);
    this.#breaker?.onResponse(statusCode, this.#gate.now());
  }

  onError(error: unknown, aborted: boolean): void {
    if (!aborted) this.#breaker?.onFailure(this.#gate.now(), describeFailure(error));
  }

  onHoldTimeout(): void {
    this.#breaker?.onFailure(this.#gate.now(), 'no response progress within maxHold');
  }

  holdStats(): PartnerHoldStats {
    const left = this.notBefore - this.#gate.now();
    return {
      remainingMs: left > 0 ? Math.ceil(left) : 0,
      holds: this.#holds,
      shed: this.#shed,
      source: this.#source,
      waiting: this.waiting,
    };
  }

  counters(): GuardCounters {
    const breaker = this.breakerStats();
    return {
      shedHold: this.#shed,
      shedOpen: breaker?.shed ?? 0,
      holdRemainingMs: this.holdStats().remainingMs,
      breakerState: breaker?.state,
      breakerOpened: breaker?.opened ?? 0,
    };
  }

  breakerStats(): BreakerStats | undefined {
    return this.#breaker?.stats(this.#gate.now());
  }

  #read(o: ResolvedHeaders, statusCode: number, headers: unknown): void {
    const header = readerOf(headers);
    if (header === undefined) return;
    const signal = readRateLimit(header, statusCode, Date.now(), o.retryAfter);
    if (signal.kind === 'none') return;
    if (signal.kind === 'malformed') {
      this.#warn(
        `${signal.header}: ${JSON.stringify(signal.value.slice(0, 80))} is not a reset this limiter can read; ignored`,
      );
    } else if (signal.holdMs > o.maxResetMs) {
      this.#warn(
        `${signal.source} asked for no calls for ${Math.round(signal.holdMs / 1000)} s, past rateLimitHeaders.maxResetMs (${o.maxResetMs} ms); ignored`,
      );
    } else this.hold(signal.holdMs, signal.source);
  }

  /** Once per partner: a header that cannot be obeyed is a misconfiguration, not traffic. */
  #warn(message: string): void {
    if (this.#warned) return;
    this.#warned = true;
    process.emitWarning(`hostgate: partner ${JSON.stringify(this.#name)}: ${message}`, {
      code: 'HOSTGATE_RATELIMIT_HEADER',
    });
  }
}

/**
 * Sets `guard` on its gate, and on the gate's outcome handlers: the request path tells it of each
 * response and failure, and the gate of each maxHold take-back, by a direct call.
 */
export function attachGuard(gate: Semaphore, guard: PartnerGuard): void {
  guards.set(gate, guard);
  coreEntry.guard(gate, guard);
  handleOutcomes(gate, {
    onResponse: (_permit, statusCode, headers) => guard.onResponse(statusCode, headers),
    onError: (_permit, error, aborted) => guard.onError(error, aborted),
    onHoldTimeout: () => guard.onHoldTimeout(),
  });
}

/** The guard of a partner's gate, if its rule reads headers or has a breaker. */
export function guardOf(gate: Semaphore): PartnerGuard | undefined {
  return guards.get(gate);
}

/**
 * The partner behind `gate` asked for no calls for `ms` (a retrier's Retry-After cooldown): the
 * gate holds its queue until then. A no-op for gates without a guard.
 */
export function holdPartner(gate: Semaphore, ms: number, source: string): void {
  guards.get(gate)?.hold(ms, source);
}

/** Checks a partner rule's `rateLimitHeaders`; `undefined` when off. */
export function parseRateLimitHeaders(where: string, value: unknown): ResolvedHeaders | undefined {
  if (value === false) return undefined;
  if (value === undefined || value === true) {
    return { maxResetMs: DEFAULT_MAX_RESET_MS, retryAfter: false };
  }
  checkObject(`${where}: rateLimitHeaders`, value);
  checkKnownKeys(`${where}: rateLimitHeaders`, value, HEADER_KEYS);
  const { maxResetMs, retryAfter } = value as RateLimitHeadersOptions;
  if (retryAfter !== undefined && typeof retryAfter !== 'boolean') {
    throw new TypeError(
      `${where}: rateLimitHeaders.retryAfter must be a boolean, got ${describe(retryAfter)}`,
    );
  }
  return {
    maxResetMs:
      maxResetMs === undefined
        ? DEFAULT_MAX_RESET_MS
        : durationMs(`${where}: rateLimitHeaders.maxResetMs`, maxResetMs),
    retryAfter: retryAfter === true,
  };
}

/**
 * A header reader for one response, or `undefined` when it carries no rate-limit header at all
 * (most responses): raw pairs (undici's callback API) are scanned once, not once per name.
 */
function readerOf(headers: unknown): ((name: string) => string | undefined) | undefined {
  if (!Array.isArray(headers)) return (name) => headerValue(headers, name);
  let found: Map<string, string> | undefined;
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const raw = headers[i] as string | Uint8Array;
    // Every name read starts with r or x (`ratelimit…`, `retry-after`, `x-ratelimit…`) and is at
    // least 9 long: the others are skipped without decoding (undici's raw names are Buffers).
    const first = (typeof raw === 'string' ? raw.charCodeAt(0) : (raw[0] ?? 0)) | 0x20;
    if (raw.length < 9 || (first !== 0x72 && first !== 0x78)) continue;
    const lower = (typeof raw === 'string' ? raw : String(raw)).toLowerCase();
    if (!lower.includes('ratelimit') && lower !== 'retry-after') continue;
    found ??= new Map();
    if (!found.has(lower)) found.set(lower, String(headers[i + 1]));
  }
  return found === undefined ? undefined : (name) => found.get(name);
}

function describeFailure(error: unknown): string {
  const e = error as { code?: unknown; name?: unknown; message?: unknown; cause?: unknown } | null;
  if (typeof e?.code === 'string') return e.code;
  const cause = e?.cause as { code?: unknown } | null | undefined;
  if (typeof cause?.code === 'string') return cause.code; // fetch's TypeError('fetch failed')
  if (typeof e?.name === 'string' && e.name !== 'Error') return e.name;
  return typeof e?.message === 'string' ? e.message.slice(0, 80) : String(error).slice(0, 80);
}
