import { PartnerCooldownError } from '../common/errors.js';
import { checkObject, describe } from '../common/options.js';
import { platformNow } from '../gate/clock.js';
import type { Semaphore } from '../gate/semaphore.js';
import { type HostLimiter, OVERFLOW_ORIGINS } from '../partners/host-limiter.js';
import { originKey, parseTarget } from '../partners/origin.js';
import { noteAnswer, type RetryEnv, retryAttempts } from './attempts.js';
import { PartnerState, type RetryStats } from './partner-state.js';
import { checkPolicyKeys, type RetryPolicy, resolvePolicy } from './policy.js';
import { type CallFacts, describeFetchCall, hasHeader } from './request.js';
import { abortableSleep } from './sleep.js';
import type { FetchLike, ResponseLike, RetrierOptions, RetryRequest } from './types.js';

const EXTRA_KEYS = ['limiter', 'partners', 'onRetry', 'now', 'sleep', 'random'] as const;
/**
 * Bound on the states of origins without a partner gate (URLs may be attacker-influenced).
 * Past it, a new origin takes the place of one with nothing running, else of one whose only
 * state is a cooldown (dropped: that origin is just no longer held back); never a shared state,
 * whose cooldown would shed calls to origins that never answered 429 (issue 36 item 3).
 */
const MAX_UNGATED = 256;

/**
 * Retries that respect partners: each attempt goes through the limited fetch afresh (its own
 * permit), the failed attempt's body is cancelled before the backoff (no permit or connection
 * is held while sleeping), and each partner has an Envoy-style retry budget and an optional
 * cooldown. Share one `Retrier` per limiter: budgets and counters live in it.
 *
 * @example
 * const retrier = new Retrier({ limiter, partners: { billing: { cooldown: true } } });
 * const fetchWithRetry = retrier.wrap(limitFetch(fetch, limiter));
 * const res = await fetchWithRetry('https://api.billing.example/invoices/42', { signal });
 * retrier.stats().billing; // { attempts, retries, budgetExhausted, cooldowns, ... }
 */
export class Retrier {
  readonly #limiter: HostLimiter | undefined;
  readonly #policy: RetryPolicy;
  readonly #partnerPolicies = new Map<string, RetryPolicy>();
  readonly #byGate = new WeakMap<Semaphore, PartnerState>();
  readonly #byOrigin = new Map<string, PartnerState>();
  readonly #env: RetryEnv;

  constructor(options: RetrierOptions = {}) {
    checkObject('Retrier options', options);
    checkPolicyKeys('Retrier', options, EXTRA_KEYS);
    const { limiter, partners, onRetry, now, sleep, random } = options;
    if (limiter != null && typeof (limiter as HostLimiter).gateFor !== 'function') {
      throw new TypeError(`limiter must be a HostLimiter, got ${describe(limiter)}`);
    }
    this.#limiter = limiter ?? undefined;
    this.#policy = resolvePolicy('', options);
    if (partners !== undefined) {
      checkObject('partners', partners);
      for (const [name, overrides] of Object.entries(partners)) {
        const where = `partners[${JSON.stringify(name)}]`;
        checkObject(where, overrides);
        checkPolicyKeys(where, overrides, []);
        this.#partnerPolicies.set(name, resolvePolicy(`${where}.`, overrides, this.#policy));
      }
    }
    const wall = optionalFunction('now', now);
    this.#env = {
      onRetry: optionalFunction('onRetry', onRetry),
      now: wall ?? (() => Date.now()),
      clock: wall ?? platformNow,
      sleep: optionalFunction('sleep', sleep) ?? abortableSleep,
      random: optionalFunction('random', random) ?? Math.random,
    };
  }

  /**
   * A fetch with retries. Wrap the *limited* fetch (`limitFetch`, or a fetch over a
   * `limitHosts` dispatcher) so every attempt takes its own permit.
   */
  wrap<F extends FetchLike>(fetchFn: F): F {
    if (typeof fetchFn !== 'function') {
      throw new TypeError(`wrap expects a fetch function, got ${describe(fetchFn)}`);
    }
    const send = fetchFn as (input: unknown, init?: unknown) => Promise<ResponseLike>;
    const retryingFetch = async (input: unknown, init?: unknown): Promise<ResponseLike> => {
      const call = describeFetchCall(input, init);
      if (call === undefined) return send(input, init);
      return this.#execute(
        call,
        () => send(...call.args()),
        () => send(input, init),
      );
    };
    return retryingFetch as unknown as F;
  }

  /**
   * The low-level form: runs `attempt` (which must send a fresh request each time) under this
   * retrier's policy, budget and cooldown for `request.url`.
   */
  run<R extends ResponseLike>(
    request: RetryRequest,
    attempt: (attemptNumber: number) => Promise<R>,
  ): Promise<R> {
    checkObject('request', request);
    const headers = request.headers;
    const facts: CallFacts = {
      url: String(request.url),
      method: (request.method ?? 'GET').toUpperCase(),
      signal: request.signal ?? undefined,
      replayable: true,
      hasHeader: (name) => hasHeader(headers, name),
    };
    return this.#execute(facts, attempt, () => attempt(1));
  }

  /** Per-partner counters: every partner gate of the limiter, then origins without a partner rule. */
  stats(): Record<string, RetryStats> {
    const now = this.#env.clock();
    const out: Record<string, RetryStats> = {};
    const limiter = this.#limiter;
    for (const [key, gate] of limiter?.gates() ?? []) {
      if (limiter!.gate(key) !== gate) continue; // per-origin gates: their origins' states below
      const state = this.#byGate.get(gate) ?? new PartnerState(key, gate, this.#policy);
      out[key] = state.stats(now);
    }
    for (const [key, state] of this.#byOrigin) out[key] = state.stats(now);
    return out;
  }

  async #execute<R extends ResponseLike>(
    call: CallFacts,
    attempt: (attemptNumber: number) => Promise<R>,
    passThrough: () => Promise<R>,
  ): Promise<R> {
    const state = this.#stateFor(call.url);
    // No gate to key by (bad URL, unknown host under 'reject'): the fetch reports it itself.
    if (state === undefined) return passThrough();
    const policy = state.policy;
    const cooling = state.cooldownRemaining(this.#env.clock());
    if (cooling > 0) {
      state.shedCooldown++;
      throw new PartnerCooldownError(state.name, Math.ceil(cooling));
    }
    const retryable =
      policy.retries > 0 &&
      call.replayable &&
      (policy.methods.has(call.method) || call.hasHeader(policy.idempotencyKeyHeader));
    if (retryable) return retryAttempts(state, call, attempt, this.#env);
    state.attempts++;
    const response = await passThrough();
    noteAnswer(state, response, this.#env);
    return response;
  }

  #stateFor(url: string): PartnerState | undefined {
    let gate: Semaphore | undefined;
    let origin: string;
    try {
      gate = this.#limiter?.gateFor(url);
      // With a limiter, its key (`https://x.com:443`), so an origin keeps one state whether its
      // gate is its own or the overflow gate; without, the URL's origin.
      origin = this.#limiter === undefined ? new URL(url).origin : originKey(parseTarget(url));
    } catch {
      return undefined;
    }
    // A partner's gate keys its state: one budget and cooldown for every host of the rule. Any
    // other gate (an unnamed origin's, or the overflow gate many origins share) does not: the
    // state is that origin's own, so a cooldown holds back that origin only.
    if (gate !== undefined && gate.name !== undefined && this.#limiter!.gate(gate.name) === gate) {
      let state = this.#byGate.get(gate);
      if (state === undefined) {
        const name = gate.name ?? origin;
        state = new PartnerState(name, gate, this.#policyFor(name));
        this.#byGate.set(gate, state);
      }
      return state;
    }
    // An unnamed origin's own gate: keyed as the limiter keys it (stats, metrics); its load
    // sizes the budget. The overflow gate's load is many origins': none of this one's.
    if (gate === undefined || gate.name === OVERFLOW_ORIGINS)
      return this.#ungated(origin, undefined);
    return this.#ungated(origin, gate);
  }

  #ungated(origin: string, gate: Semaphore | undefined): PartnerState {
    const states = this.#byOrigin;
    let state = states.get(origin);
    if (state !== undefined) {
      state.gate = gate; // the origin's gate may have been evicted and made again since
      return state;
    }
    state = new PartnerState(origin, gate, this.#policyFor(origin));
    // Every state has retries running: this call's state is its own, not remembered.
    if (states.size >= MAX_UNGATED && !this.#evictUngated()) return state;
    states.set(origin, state);
    return state;
  }

  /** Frees a place: the oldest state with nothing running, else the oldest only cooling down. */
  #evictUngated(): boolean {
    const states = this.#byOrigin;
    const now = this.#env.clock();
    let cooling: string | undefined;
    for (const [key, old] of states) {
      if (old.activeRetries !== 0) continue;
      if (old.cooldownRemaining(now) === 0) {
        states.delete(key);
        return true;
      }
      cooling ??= key;
    }
    if (cooling === undefined) return false;
    states.delete(cooling);
    return true;
  }

  #policyFor(name: string): RetryPolicy {
    return this.#partnerPolicies.get(name) ?? this.#policy;
  }
}

/**
 * `new Retrier(options)`, kept as an alias: objects you hold and configure are constructed
 * with `new` (`Semaphore`, `HostLimiter`, `LimitedAgent`, `Retrier`); this name stays so code
 * written against earlier releases keeps working.
 */
export function createRetrier(options?: RetrierOptions): Retrier {
  return new Retrier(options);
}

/**
 * `fetchFn` with retries, with its own Retrier (its own budgets). For fetches created per
 * request (`req.outbound.fetch`), share one `new Retrier(...)` and `wrap` each instead.
 *
 * @example
 * const fetchWithRetry = withRetry(limitFetch(fetch, limiter), { limiter, retries: 2 });
 */
export function withRetry<F extends FetchLike>(fetchFn: F, options?: RetrierOptions): F {
  return new Retrier(options).wrap(fetchFn);
}

/**
 * Runs `attempt` with retries. `attempt` must send a fresh request each time (through the
 * limiter, so each attempt holds its own permit) and resolve with the partner's answer.
 * Pass `retrier` to share budgets and counters; otherwise the other options build a new one.
 *
 * @example
 * const res = await retry(() => limitedFetch(url, { signal }), { url, signal, retrier });
 */
export function retry<R extends ResponseLike>(
  attempt: (attemptNumber: number) => Promise<R>,
  options: RetryRequest & RetrierOptions & { retrier?: Retrier },
): Promise<R> {
  checkObject('retry options', options);
  const { url, method, headers, signal, retrier, ...policy } = options;
  if (retrier !== undefined && Object.keys(policy).length > 0) {
    throw new TypeError(
      `retry: pass policy options (${Object.keys(policy).join(', ')}) to the retrier, not beside it`,
    );
  }
  return (retrier ?? new Retrier(policy)).run({ url, method, headers, signal }, attempt);
}

function optionalFunction<T>(name: string, value: T | undefined): T | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`${name} must be a function, got ${describe(value)}`);
  }
  return value;
}
