/**
 * The partner's own word on its budget, read from a response's headers: how long until it takes
 * calls again, when it says the budget is spent. Pure functions: src/partners/partner-guard.ts
 * acts on them, and adaptive limits tell a 429 that is a spent budget from one that is overload.
 *
 * Read, in this order of trust (the longest hold of every spent budget wins):
 * - `Retry-After` on a 429 or 503 (RFC 9110), when asked to (`retryAfter`): delta-seconds or
 *   an HTTP-date.
 * - `RateLimit` of the IETF httpapi draft: the structured-field list of draft 08 and later
 *   (`"default";r=0;t=2`: remaining `r`, seconds to reset `t`, per policy), and the dictionary of
 *   drafts 03–07 (`limit=100, remaining=0, reset=2`).
 * - `RateLimit-Remaining` / `RateLimit-Reset` (drafts 00–02): reset in delta seconds.
 * - `X-RateLimit-Remaining` / `X-RateLimit-Reset` (GitHub, Twitter, Shopify's REST admin, …),
 *   with `X-RateLimit-Reset-After` (Discord) preferred when present.
 * - OpenAI's `x-ratelimit-remaining-requests` / `-tokens` with `x-ratelimit-reset-requests` /
 *   `-tokens` as Go durations (`1s`, `6m0s`, `20ms`).
 *
 * A reset is seconds unless it is a Go duration (`6m0s`). A plain number is delta seconds below
 * 1e9, epoch seconds from 1e9 (2001-09-09: no partner asks for a 31-year wait, and GitHub sends
 * epoch seconds), epoch milliseconds from 1e12. `RateLimit-Policy` (quota and window) says
 * nothing about when the current window ends, so it is not needed to act.
 */
import { parseRetryAfter } from './retry-after.js';

/** What a response said about the partner's budget. */
export type RateLimitSignal =
  /** Nothing to act on: no header, budget left, or a reset already past. */
  | { readonly kind: 'none' }
  /** The budget is spent (or the call was refused with `Retry-After`): no calls for `holdMs`. */
  | { readonly kind: 'hold'; readonly holdMs: number; readonly source: string }
  /** A header said the budget is spent but its reset is unreadable: ignored, worth a warning. */
  | { readonly kind: 'malformed'; readonly header: string; readonly value: string };

const NONE: RateLimitSignal = Object.freeze({ kind: 'none' });
const EPOCH_SECONDS = 1e9;
const EPOCH_MS = 1e12;
const NUMBER = /^\d+(\.\d+)?$/;
const GO_DURATION = /^(\d+(\.\d+)?(h|m|s|ms|us|µs|ns))+$/;
const DURATION_PART = /(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/g;
const UNIT_MS: Record<string, number> = {
  h: 3_600_000,
  m: 60_000,
  s: 1000,
  ms: 1,
  us: 1e-3,
  µs: 1e-3,
  ns: 1e-6,
};

/** Reads one header by its lower-case name (undici objects, raw pairs, `Headers`, node's). */
export type HeaderReader = (name: string) => string | undefined;

/**
 * What `headers` say about the partner's budget at wall-clock `nowMs` (epoch ms).
 *
 * @example
 * readRateLimit((n) => ({ ratelimit: '"default";r=0;t=2' })[n], 200, Date.now());
 * // { kind: 'hold', holdMs: 2000, source: 'RateLimit' }
 */
export function readRateLimit(
  header: HeaderReader,
  statusCode: number,
  nowMs: number,
  retryAfter = false,
): RateLimitSignal {
  let best: RateLimitSignal = NONE;
  const consider = (signal: RateLimitSignal): void => {
    if (signal.kind === 'malformed') {
      if (best.kind === 'none') best = signal;
    } else if (signal.kind === 'hold' && (best.kind !== 'hold' || signal.holdMs > best.holdMs)) {
      best = signal;
    }
  };
  if (retryAfter && (statusCode === 429 || statusCode === 503)) {
    const value = header('retry-after');
    if (value !== undefined) {
      const ms = parseRetryAfter(value, nowMs);
      if (ms === undefined) consider({ kind: 'malformed', header: 'Retry-After', value });
      else if (ms > 0) consider({ kind: 'hold', holdMs: ms, source: 'Retry-After' });
    }
  }
  const structured = header('ratelimit');
  if (structured !== undefined) consider(readRateLimitField(structured, nowMs));
  consider(readPair(header, 'ratelimit-remaining', 'ratelimit-reset', 'RateLimit', nowMs));
  const resetAfter = header('x-ratelimit-reset-after');
  consider(
    resetAfter !== undefined && header('x-ratelimit-remaining') !== undefined
      ? readPair(
          header,
          'x-ratelimit-remaining',
          'x-ratelimit-reset-after',
          'X-RateLimit',
          nowMs,
          true,
        )
      : readPair(header, 'x-ratelimit-remaining', 'x-ratelimit-reset', 'X-RateLimit', nowMs),
  );
  for (const budget of ['requests', 'tokens']) {
    const remaining = `x-ratelimit-remaining-${budget}`;
    consider(readPair(header, remaining, `x-ratelimit-reset-${budget}`, remaining, nowMs));
  }
  return best;
}

/**
 * `RateLimit`: the structured-field list (`"a";r=0;t=2, "b";r=5;t=60`) or the older dictionary
 * (`limit=100, remaining=0, reset=2`).
 */
function readRateLimitField(value: string, nowMs: number): RateLimitSignal {
  const members = splitList(value);
  if (members.some((m) => /^\s*remaining\s*=/i.test(m))) {
    const dict = new Map<string, string>();
    for (const m of members) {
      const eq = m.indexOf('=');
      if (eq > 0) dict.set(m.slice(0, eq).trim().toLowerCase(), m.slice(eq + 1).trim());
    }
    const [remaining, reset] = [dict.get('remaining'), dict.get('reset')];
    return spent(remaining, 'RateLimit', reset, 'RateLimit', 'RateLimit', nowMs, true);
  }
  let best: RateLimitSignal = NONE;
  for (const member of members) {
    const params = new Map<string, string>();
    for (const part of member.split(';').slice(1)) {
      const eq = part.indexOf('=');
      if (eq > 0) params.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
    }
    const r = params.get('r');
    if (r === undefined) continue;
    const signal = spent(r, 'RateLimit', params.get('t'), 'RateLimit', 'RateLimit', nowMs, true);
    if (signal.kind === 'hold' && (best.kind !== 'hold' || signal.holdMs > best.holdMs))
      best = signal;
    else if (signal.kind === 'malformed' && best.kind === 'none') best = signal;
  }
  return best;
}

function readPair(
  header: HeaderReader,
  remainingName: string,
  resetName: string,
  source: string,
  nowMs: number,
  deltaOnly = false,
): RateLimitSignal {
  const remaining = header(remainingName);
  if (remaining === undefined) return NONE;
  const reset = header(resetName);
  return spent(remaining, remainingName, reset, resetName, source, nowMs, deltaOnly);
}

/** A hold when `remaining` is 0 and `reset` is readable; the header names are for warnings. */
function spent(
  remaining: string | undefined,
  remainingHeader: string,
  reset: string | undefined,
  resetHeader: string,
  source: string,
  nowMs: number,
  deltaOnly: boolean,
): RateLimitSignal {
  if (remaining === undefined) return NONE;
  const left = remaining.trim();
  if (!NUMBER.test(left)) return { kind: 'malformed', header: remainingHeader, value: remaining };
  if (Number(left) > 0) return NONE;
  if (reset === undefined) return NONE; // spent, but no word on when: nothing to wait for
  const ms = resetDelayMs(reset, nowMs, deltaOnly);
  if (ms === undefined) return { kind: 'malformed', header: resetHeader, value: reset };
  return ms > 0 ? { kind: 'hold', holdMs: ms, source } : NONE;
}

/**
 * A reset value as a delay from `nowMs`: a Go duration, delta seconds (< 1e9), epoch seconds
 * (≥ 1e9) or epoch ms (≥ 1e12); `deltaOnly` for headers that are delta seconds by definition.
 */
export function resetDelayMs(value: string, nowMs: number, deltaOnly = false): number | undefined {
  const text = value.trim();
  if (NUMBER.test(text)) {
    const n = Number(text);
    if (!Number.isFinite(n)) return undefined;
    if (deltaOnly || n < EPOCH_SECONDS) return Math.ceil(n * 1000);
    return Math.max(0, Math.ceil((n < EPOCH_MS ? n * 1000 : n) - nowMs));
  }
  if (!GO_DURATION.test(text)) return undefined;
  let ms = 0;
  for (const [, amount, unit] of text.matchAll(DURATION_PART))
    ms += Number(amount) * UNIT_MS[unit!]!;
  return Math.ceil(ms);
}

/** Top-level comma split of a structured-field list, keeping quoted strings whole. */
function splitList(value: string): string[] {
  const out: string[] = [];
  let start = 0;
  let quoted = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i];
    if (c === '"' && value[i - 1] !== '\\') quoted = !quoted;
    else if (c === ',' && !quoted) {
      out.push(value.slice(start, i));
      start = i + 1;
    }
  }
  out.push(value.slice(start));
  return out.map((m) => m.trim()).filter((m) => m !== '');
}
