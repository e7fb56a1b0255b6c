import type { Semaphore } from '../gate/semaphore.js';
import { holdPartner } from '../partners/partner-guard.js';
import type { RetryPolicy } from './policy.js';

/** Per-partner retry counters, from `Retrier.stats()`. */
export interface RetryStats {
  /** Attempts dispatched: first attempts and retries. */
  attempts: number;
  /** Retry attempts dispatched. */
  retries: number;
  /** Retries refused because the partner's retry budget was spent (Envoy: `upstream_rq_retry_overflow`). */
  budgetExhausted: number;
  /** Cooldowns started by a 429/503 with `Retry-After` (extensions of a running one not counted). */
  cooldowns: number;
  /** Calls shed with `PartnerCooldownError` while a cooldown ran. */
  shedCooldown: number;
  /** Retries in backoff or in flight now: what the budget counts. */
  activeRetries: number;
  /** Ms until the partner's cooldown ends; 0 when none runs. */
  cooldownRemainingMs: number;
}

/**
 * One partner's retry budget, cooldown and counters, keyed by its gate.
 *
 * Budget (Envoy's `retry_budget`): concurrent retries — in backoff or in flight — stay below
 * max(minRetryConcurrency, budgetPercent % of the gate's held + queued requests). Counting the
 * gate, not this retrier's calls, sizes the budget by the partner's real load.
 */
export class PartnerState {
  readonly name: string;
  /** The gate whose load sizes the budget: a partner's, or an unnamed origin's current one. */
  gate: Semaphore | undefined;
  readonly policy: RetryPolicy;
  attempts = 0;
  retries = 0;
  budgetExhausted = 0;
  cooldowns = 0;
  shedCooldown = 0;
  activeRetries = 0;
  /** Clock reading (retrier's `now`) when the cooldown ends. */
  cooldownUntil = 0;

  constructor(name: string, gate: Semaphore | undefined, policy: RetryPolicy) {
    this.name = name;
    this.gate = gate;
    this.policy = policy;
  }

  /** The number of retries that may run at once right now. */
  retryCapacity(): number {
    const gate = this.gate;
    const load = gate === undefined ? 0 : gate.held + gate.queued;
    return Math.max(
      this.policy.minRetryConcurrency,
      Math.floor((load * this.policy.budgetPercent) / 100),
    );
  }

  /** Takes a slot of the budget for one retry, or counts the refusal. Pair with `endRetry()`. */
  tryStartRetry(): boolean {
    if (this.activeRetries >= this.retryCapacity()) {
      this.budgetExhausted++;
      return false;
    }
    this.activeRetries++;
    return true;
  }

  endRetry(): void {
    this.activeRetries--;
  }

  /** Ms left of the cooldown at `now`; 0 when none runs. */
  cooldownRemaining(now: number): number {
    return this.cooldownUntil > now ? this.cooldownUntil - now : 0;
  }

  /** A 429/503 asked for `retryAfterMs`; a running cooldown is only ever extended. */
  noteRetryAfter(now: number, retryAfterMs: number): void {
    const maxCooldown = this.policy.maxCooldown;
    if (maxCooldown === undefined || retryAfterMs <= 0) return;
    // The gate's hold is the partner's one "not before": callers outside this retrier wait too.
    if (this.gate !== undefined) {
      holdPartner(this.gate, Math.min(retryAfterMs, maxCooldown), 'Retry-After');
    }
    const until = now + Math.min(retryAfterMs, maxCooldown);
    if (until <= this.cooldownUntil) return;
    if (this.cooldownUntil <= now) this.cooldowns++;
    this.cooldownUntil = until;
  }

  stats(now: number): RetryStats {
    return {
      attempts: this.attempts,
      retries: this.retries,
      budgetExhausted: this.budgetExhausted,
      cooldowns: this.cooldowns,
      shedCooldown: this.shedCooldown,
      activeRetries: this.activeRetries,
      cooldownRemainingMs: this.cooldownRemaining(now),
    };
  }
}
