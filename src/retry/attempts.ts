/** One call's attempts under p-retry: judging each failure, the budget slot, the backoff. */

import pRetry from 'p-retry';
import { parseRetryAfter } from '../common/retry-after.js';
import { isRetryableError } from './classify.js';
import type { PartnerState } from './partner-state.js';
import { backoffDelay } from './policy.js';
import type { CallFacts } from './request.js';
import type { ResponseLike, RetryEvent } from './types.js';

/** The retrier's clock, sleep, jitter source and hook. */
export interface RetryEnv {
  /** Wall clock (epoch ms): only to read an HTTP-date `Retry-After` as a wait. */
  now: () => number;
  /**
   * The clock cooldowns and `maxRetryTime` run on: monotonic unless the user gave `now` (a
   * fake clock drives both). On the wall clock, an NTP step back during a cooldown shed every
   * call to its partner for as long as the step.
   */
  clock: () => number;
  sleep: (ms: number, signal: AbortSignal | undefined) => Promise<void>;
  random: () => number;
  onRetry: ((event: RetryEvent) => void) | undefined;
}

/** An attempt's failure, as p-retry sees it: a retryable answer or any error, unwrapped at the end. */
class AttemptFailure extends Error {
  constructor(
    readonly response: ResponseLike | undefined,
    readonly error: unknown,
    readonly retryAfterMs: number | undefined,
  ) {
    super('attempt failed');
  }
}

/**
 * Runs `attempt` until it succeeds, its failure is not worth retrying, or the policy, the time
 * bound or the partner's budget says stop; then resolves with the last answer (its body
 * unread) or rejects with the last error, as the attempt produced it.
 *
 * p-retry counts the retries; the waiting is ours (Retry-After, full jitter, abortable), done
 * inside `shouldRetry` — which p-retry calls only while retries remain — with its own backoff
 * set to 0 so that the two never add up.
 */
export async function retryAttempts<R extends ResponseLike>(
  state: PartnerState,
  call: CallFacts,
  attempt: (attemptNumber: number) => Promise<R>,
  env: RetryEnv,
): Promise<R> {
  const policy = state.policy;
  const { signal } = call;
  const start = env.clock();
  // The budget slot of the retry about to run: taken on the decision to retry, held through
  // the backoff and until that attempt settles.
  let slot = false;
  try {
    return await pRetry(
      async (attemptNumber) => {
        const ownsSlot = slot;
        slot = false;
        try {
          state.attempts++;
          if (attemptNumber > 1) state.retries++;
          let response: R;
          try {
            response = await attempt(attemptNumber);
          } catch (error) {
            // Wrapped, so p-retry neither rewrites it (non-Errors) nor pre-judges it (TypeErrors).
            throw new AttemptFailure(undefined, error, undefined);
          }
          const retryAfterMs = noteAnswer(state, response, env);
          if (policy.statuses.has(response.status)) {
            throw new AttemptFailure(response, undefined, retryAfterMs);
          }
          return response;
        } finally {
          if (ownsSlot) state.endRetry();
        }
      },
      {
        retries: policy.retries,
        minTimeout: 0,
        maxTimeout: 0,
        randomize: false,
        // No `signal` for p-retry: it would drop a response that arrived as the signal fired,
        // unread. The caller's signal is checked here, and ends our sleep.
        shouldRetry: async ({ error, attemptNumber }) => {
          if (!(error instanceof AttemptFailure)) return false;
          if (signal?.aborted) {
            if (error.response !== undefined) await discard(error.response);
            throw signal.reason;
          }
          const delayMs = retryDelay(state, env, start, error, attemptNumber);
          if (delayMs === undefined || !state.tryStartRetry()) return false;
          slot = true;
          // An unread body pins the failed attempt's permit and connection: let both go first.
          if (error.response !== undefined) await discard(error.response);
          env.onRetry?.({
            partner: state.name,
            url: call.url,
            method: call.method,
            attempt: attemptNumber,
            delayMs,
            status: error.response?.status,
            error: error.error,
            retryAfterMs: error.retryAfterMs,
            gate: state.gate,
          });
          await env.sleep(delayMs, signal);
          return true;
        },
      },
    );
  } catch (error) {
    if (!(error instanceof AttemptFailure)) throw error;
    if (error.response !== undefined) return error.response as R;
    throw error.error;
  } finally {
    if (slot) state.endRetry();
  }
}

/** Reads a 429/503's (or another retryable answer's) Retry-After; a 429/503 may start a cooldown. */
export function noteAnswer(
  state: PartnerState,
  response: ResponseLike,
  env: Pick<RetryEnv, 'now' | 'clock'>,
): number | undefined {
  const status = response.status;
  const cools = status === 429 || status === 503;
  if (!cools && !state.policy.statuses.has(status)) return undefined;
  const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'), env.now());
  if (cools && retryAfterMs !== undefined) state.noteRetryAfter(env.clock(), retryAfterMs);
  return retryAfterMs;
}

/** The wait before the next attempt, or `undefined` when this failure must not be retried. */
function retryDelay(
  state: PartnerState,
  env: RetryEnv,
  start: number,
  failure: AttemptFailure,
  attemptNumber: number,
): number | undefined {
  const policy = state.policy;
  if (failure.response === undefined && !isRetryableError(failure.error)) return undefined;
  const now = env.clock();
  // A running cooldown is the partner's Retry-After too: never come back before it ends.
  const partnerAsked = Math.max(failure.retryAfterMs ?? 0, state.cooldownRemaining(now));
  if (partnerAsked > policy.maxRetryAfter) return undefined;
  const delayMs =
    failure.retryAfterMs !== undefined
      ? partnerAsked
      : Math.max(partnerAsked, backoffDelay(policy, attemptNumber, env.random));
  if (now + delayMs - start > policy.maxRetryTime) return undefined;
  return delayMs;
}

async function discard(response: ResponseLike): Promise<void> {
  if (response.body === null || response.bodyUsed) return;
  try {
    await response.body.cancel();
  } catch {
    // Already locked or errored: nothing more to let go of.
  }
}
