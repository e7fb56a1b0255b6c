/**
 * A partner rule's `cost` and `settleCost`: what each request weighs against the partner's
 * `rate`, and its real cost read from the response. The HTTP layers ask {@link callFor} when
 * they take a permit; settling is the gate's outcome handler (gate/outcomes.ts), which every
 * layer (undici, fetch, node:http) calls at the response head, set only on gates whose rule has
 * a `settleCost`.
 */
import { describe } from '../common/options.js';
import { handleOutcomes } from '../gate/outcomes.js';
import type { PermitRequestInfo } from '../gate/permit-target.js';
import type { Permit, Semaphore, WaitOptions } from '../gate/semaphore.js';

/** What a partner rule's `cost` function sees of a request, the same from every HTTP layer. */
export interface CostRequest {
  /** Upper case; `GET` when the request named none. */
  readonly method: string;
  /** The whole URL, query included. */
  readonly url: URL;
}

/** What a partner rule's `settleCost` hook sees of a response: its status and headers. */
export interface CostResponse {
  readonly statusCode: number;
  /** A response header by name (case-insensitive), comma-joined when repeated. */
  header(name: string): string | undefined;
}

/** A partner rule's `cost`: units of its `rate` per request, fixed or from the request. */
export type RequestCost = number | ((request: CostRequest) => number);
/**
 * A partner rule's `settleCost`: the request's real cost, read from the response head (a usage
 * header), or `undefined` to keep what was charged.
 */
export type SettleCost = (response: CostResponse) => number | undefined;

interface Rules {
  readonly cost: RequestCost | undefined;
  readonly settle: SettleCost | undefined;
}
const rules = new WeakMap<Semaphore, Rules>();

/** Checks a rule's `cost` and `settleCost` and binds them to its gate (which has a `rate`). */
export function setRateRules(where: string, gate: Semaphore, cost: unknown, settle: unknown): void {
  if (cost === undefined && settle === undefined) return;
  if (gate.rate === undefined) {
    throw new TypeError(`${where}: cost and settleCost count against a rate; set rate too`);
  }
  if (cost !== undefined && typeof cost !== 'function') {
    // A fixed cost is checked now, like the gate checks one per call.
    if (typeof cost !== 'number' || !(cost >= 0) || cost > gate.rate.burst + 1) {
      throw new TypeError(
        `${where}: cost must be a function or a number in [0, rate.burst + 1 = ${gate.rate.burst + 1}], got ${describe(cost)}`,
      );
    }
  }
  if (settle !== undefined && typeof settle !== 'function') {
    throw new TypeError(`${where}: settleCost must be a function, got ${describe(settle)}`);
  }
  rules.set(gate, { cost: cost as RequestCost | undefined, settle: settle as SettleCost });
  if (settle !== undefined) {
    const fn = settle as SettleCost;
    handleOutcomes(gate, {
      onResponse: (permit, statusCode, headers) => settled(fn, permit, statusCode, headers),
    });
  }
}

/**
 * Whether a request's permit is asked with options (a priority class, a cost): then through
 * `wait(target, callFor(...))`, which grants at once when free, else the plain `tryAcquire()`.
 */
export function asksWith(gate: Semaphore, priority: string | undefined): boolean {
  // A gate without a rate has no cost rule: no map lookup on its requests.
  return priority !== undefined || (gate.rate !== undefined && rules.get(gate)?.cost !== undefined);
}

/**
 * The options a request's permit is asked with: its priority class and its cost. Call it
 * where a throw is the request's rejection: a cost function that throws (or returns a bad
 * number, which the gate refuses with a TypeError) fails the request before it is sent.
 */
export function callFor(
  gate: Semaphore,
  priority: string | undefined,
  request: PermitRequestInfo,
): WaitOptions | undefined {
  const cost = rules.get(gate)?.cost;
  if (cost === undefined) return priority === undefined ? undefined : { priority };
  return { priority, cost: typeof cost === 'number' ? cost : cost(costRequest(request)) };
}

/** undici's `{ origin, path }`, fetch's whole URL, node:http's parts: one shape. */
function costRequest(info: PermitRequestInfo): CostRequest {
  const method = typeof info.method === 'string' && info.method !== '' ? info.method : 'GET';
  const origin = String(info.origin ?? '');
  const url = typeof info.path === 'string' ? new URL(info.path, origin) : new URL(origin);
  return { method: method.toUpperCase(), url };
}

/** The response head of a call on a gate with a `settleCost`: its real cost, if it says one. */
function settled(settle: SettleCost, permit: Permit, statusCode: number, headers: unknown): void {
  try {
    const actual = settle({ statusCode, header: (name) => headerOf(headers, name) });
    if (actual !== undefined) permit.settleCost(actual);
  } catch (error) {
    // A throwing settleCost must not fail the response: the charged cost stands.
    process.emitWarning(
      `settleCost of ${permit.gate.name ?? 'a partner'} failed, the charged cost stands: ${String((error as Error)?.message ?? error)}`,
      { code: 'HOSTGATE_SETTLE_COST' },
    );
  }
}

/** One header from whichever form the layer has: `Headers`, raw pairs, or a plain object. */
function headerOf(headers: unknown, name: string): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  const key = name.toLowerCase();
  if (typeof (headers as Headers).get === 'function') {
    return (headers as Headers).get(key) ?? undefined;
  }
  if (Array.isArray(headers)) {
    const values: string[] = [];
    for (let i = 0; i + 1 < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === key) values.push(String(headers[i + 1]));
    }
    return values.length === 0 ? undefined : values.join(', ');
  }
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() === key) return Array.isArray(v) ? v.join(', ') : String(v);
  }
  return undefined;
}
