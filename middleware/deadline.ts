import type { IncomingMessage } from 'node:http';
import type { Dispatcher, Headers, RequestInit } from 'undici';
import { checkKnownKeys, checkObject, describe } from '../src/common/options.js';
import {
  formatDuration,
  formatGrpcTimeout,
  MAX_BUDGET_MS,
  parseDuration,
  parseGrpcTimeout,
} from '../src/gate/deadline.js';
import { loadUndici } from '../src/http/undici.js';

/** How a deadline header's value is written. */
export type DeadlineHeaderFormat =
  /** Milliseconds (`250`, `1.5`) or a number with a unit `ms`, `s`, `m`, `h` (`300ms`, `2s`). */
  | 'duration'
  /** gRPC's `grpc-timeout`: up to 8 digits and a unit `n`, `u`, `m`, `S`, `M`, `H` (`100m`, `2S`). */
  | 'grpc';

export interface DeadlineHeader {
  /** Header name (any case). */
  name: string;
  /** Default: `grpc` for `grpc-timeout`, `duration` for every other name. */
  format?: DeadlineHeaderFormat;
}

/**
 * A budget in ms from the request, or `undefined` for none. `Req` is the request the framework
 * hands over: Express's (`req.path`, `req.query`, ...) from `hostgate/express`, Node's
 * `IncomingMessage` (Fastify's `request.raw`) from `hostgate/fastify`. Written without Express's
 * types, so that `hostgate/fastify` compiles without them.
 */
export type BudgetFunction<Req extends IncomingMessage = IncomingMessage> = (
  req: Req,
) => number | undefined;

/**
 * Where a request's deadline budget comes from, and the rule for bad values.
 *
 * The budget is: the first listed header present with a valid value, capped by `max`; else
 * `default` (capped by `max`); else `max`; else none. A header present with a bad value is
 * treated as absent (`invalid: 'ignore'`) or answered with 400 (`invalid: 'reject'`): it can
 * never lift the cap, and with a `default` or `max` it can never leave the request unbounded.
 */
export interface DeadlineOptions<Req extends IncomingMessage = IncomingMessage> {
  /** Header(s) carrying the client's budget, first present wins; e.g. `['x-request-timeout', 'grpc-timeout']`. */
  header?: string | DeadlineHeader | readonly (string | DeadlineHeader)[];
  /** Budget (ms, or a function of the request) when no header gives one. */
  default?: number | BudgetFunction<Req>;
  /** Upper bound (ms) on every budget, whatever its source. */
  max?: number;
  /** A header present with a bad value: `'ignore'` (default) treats it as absent; `'reject'` answers 400. */
  invalid?: 'ignore' | 'reject';
  /**
   * Refuse an outbound call at once (`DeadlineShedError`, 503) when the budget left is shorter
   * than its partner's expected wait plus p50 hold time (default `true`; needs `limiter`).
   */
  shedEarly?: boolean;
  /**
   * Send the budget left to every partner in this header (e.g. `grpc-timeout`), rounded down,
   * so a partner that honours it stops when the caller stops waiting. A header the call sets
   * itself is left as it is. Default: not sent (a third party need not learn your timeouts).
   */
  propagate?: string | DeadlineHeader;
}

/** `outbound({ deadline })`: ms, a function of the request, or {@link DeadlineOptions}. */
export type DeadlineOption<Req extends IncomingMessage = IncomingMessage> =
  | number
  | BudgetFunction<Req>
  | DeadlineOptions<Req>;

interface HeaderRule {
  name: string;
  parse: (value: string) => number | undefined;
  format: (ms: number) => string;
}

/** Where outbound calls carry the budget left, and how it is written. */
export interface Propagation {
  name: string;
  format: (ms: number) => string;
}

export interface ResolvedDeadline {
  /** One request's budget in ms (`undefined`: none), or the bad header under `invalid: 'reject'`. */
  budgetFor(req: IncomingMessage): number | undefined | InvalidHeader;
  shedEarly: boolean;
  propagate: Propagation | undefined;
}

export class InvalidHeader {
  constructor(readonly header: string) {}
}

const DEADLINE_KEYS = ['header', 'default', 'max', 'invalid', 'shedEarly', 'propagate'] as const;

export function parseDeadline<Req extends IncomingMessage>(
  value: DeadlineOption<Req> | undefined,
): ResolvedDeadline | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'number') {
    const ms = budgetMs('outbound deadline', value);
    return { budgetFor: () => ms, shedEarly: true, propagate: undefined };
  }
  if (typeof value === 'function') {
    // Under Express the request is Express's (the type the user's function is given).
    const budgetFor = (req: IncomingMessage) => checkedBudget(value(req as Req));
    return { budgetFor, shedEarly: true, propagate: undefined };
  }
  checkObject('outbound deadline', value);
  checkKnownKeys('outbound deadline', value, DEADLINE_KEYS);
  const headers = parseHeaders('outbound deadline.header', value.header);
  const propagate =
    value.propagate === undefined
      ? undefined
      : parseHeaders('outbound deadline.propagate', value.propagate, false)[0];
  const max = value.max === undefined ? undefined : budgetMs('outbound deadline.max', value.max);
  const fallback = value.default;
  if (fallback !== undefined && typeof fallback !== 'function') {
    budgetMs('outbound deadline.default', fallback);
  }
  if (headers.length === 0 && fallback === undefined && max === undefined) {
    throw new TypeError('outbound deadline: give at least one of header, default, max');
  }
  const invalid = value.invalid ?? 'ignore';
  if (invalid !== 'ignore' && invalid !== 'reject') {
    throw new TypeError(
      `outbound deadline.invalid must be 'ignore' or 'reject', got ${describe(invalid)}`,
    );
  }
  const shedEarly = value.shedEarly ?? true;
  if (typeof shedEarly !== 'boolean') {
    throw new TypeError(
      `outbound deadline.shedEarly must be a boolean, got ${describe(shedEarly)}`,
    );
  }
  const cap = (ms: number | undefined) =>
    ms === undefined || max === undefined ? ms : Math.min(ms, max);
  return {
    shedEarly,
    propagate,
    budgetFor(req) {
      for (const rule of headers) {
        const raw = req.headers[rule.name];
        if (raw === undefined) continue;
        const ms = typeof raw === 'string' ? rule.parse(raw) : undefined;
        if (ms !== undefined) return cap(ms);
        if (invalid === 'reject') return new InvalidHeader(rule.name);
      }
      const ms = typeof fallback === 'function' ? checkedBudget(fallback(req as Req)) : fallback;
      return cap(ms) ?? max;
    },
  };
}

function parseHeaders(what: string, value: DeadlineOptions['header'], many = true): HeaderRule[] {
  if (value === undefined) return [];
  if (!many && Array.isArray(value)) {
    throw new TypeError(`${what} must be one header (a name or { name, format }), got an array`);
  }
  const list = (Array.isArray(value) ? value : [value]) as (string | DeadlineHeader)[];
  return list.map((entry, i) => {
    const where = `${what}${Array.isArray(value) ? `[${i}]` : ''}`;
    const header = typeof entry === 'string' ? { name: entry } : entry;
    checkObject(where, header);
    if (typeof header.name !== 'string' || !/^[!#$%&'*+.^`|~\w-]+$/.test(header.name)) {
      throw new TypeError(
        `${where}: name must be an HTTP header name, got ${describe(header.name)}`,
      );
    }
    const name = header.name.toLowerCase();
    const format = header.format ?? (name === 'grpc-timeout' ? 'grpc' : 'duration');
    if (format !== 'duration' && format !== 'grpc') {
      throw new TypeError(`${where}: format must be 'duration' or 'grpc', got ${describe(format)}`);
    }
    return format === 'grpc'
      ? { name, parse: parseGrpcTimeout, format: formatGrpcTimeout }
      : { name, parse: parseDuration, format: formatDuration };
  });
}

function budgetMs(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_BUDGET_MS) {
    throw new TypeError(
      `${name} must be a budget in ms from 0 to ${MAX_BUDGET_MS}, got ${describe(value)}`,
    );
  }
  return value;
}

/** A budget function's answer: `undefined` (no deadline) or a valid budget; anything else throws. */
function checkedBudget(value: unknown): number | undefined {
  return value === undefined ? undefined : budgetMs('outbound deadline function result', value);
}

/** fetch's `headers` with `header` (the budget left) added, unless the call sets it itself. */
export function fetchHeaders(
  header: [string, string] | undefined,
  init: RequestInit | undefined,
  input: unknown,
): { headers?: Headers } {
  if (header === undefined) return {};
  const own =
    init?.headers ??
    (typeof input === 'object' && input !== null && 'headers' in input
      ? (input.headers as Headers) // a Request: init.headers would replace its own
      : undefined);
  const headers = new (loadUndici().Headers)(own);
  if (headers.has(header[0])) return {};
  headers.set(header[0], header[1]);
  return { headers };
}

type RequestHeaders = Dispatcher.RequestOptions['headers'];

/** request's `headers` (a record, flat array or iterable of pairs) with `header` added. */
export function requestHeaders(
  header: [string, string] | undefined,
  given: RequestHeaders,
): { headers?: RequestHeaders } {
  if (header === undefined) return {};
  const [name, value] = header;
  if (Array.isArray(given)) {
    // undici's flat [name, value, name, value, ...] form.
    for (let i = 0; i < given.length; i += 2) {
      if (String(given[i]).toLowerCase() === name) return {};
    }
    return { headers: [...given, name, value] };
  }
  const out: Record<string, string | string[]> = {};
  const entries: Iterable<[string, unknown]> =
    given == null
      ? []
      : Symbol.iterator in given
        ? (given as Iterable<[string, unknown]>)
        : Object.entries(given);
  for (const [key, v] of entries) {
    if (key.toLowerCase() === name) return {};
    if (v !== undefined) out[key] = v as string | string[];
  }
  out[name] = value;
  return { headers: out };
}
