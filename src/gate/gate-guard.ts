/**
 * What a layer above may set on a gate to hold or refuse arrivals on the partner's word (src/partners:
 * the partner's rate-limit headers and `Retry-After`, and its breaker). The gate asks it on the
 * way in and before each grant; it never imports what implements it.
 */
import type { ShedError } from '../common/errors.js';

export interface GateGuard {
  /**
   * Clock reading (the gate's clock, ms) before which the gate grants nothing: waiters stay
   * queued and a timer wakes the queue at that instant. 0 (or any past reading): no hold. Only
   * ever moves later while a hold runs, so one timer armed at an earlier reading is never late.
   */
  readonly notBefore: number;
  /** Every arrival must be asked about (`refuse`), with no fast path: a breaker not closed. */
  readonly screening: boolean;
  /**
   * An arrival's refusal, or `undefined` to let it queue. `now` and `deadline` (when its wait
   * would end) are gate clock readings. Asked once per arrival that did not get a permit at once.
   */
  refuse(now: number, deadline: number): ShedError | undefined;
  /** What observers read (src/observe): sheds by cause, the hold left, the breaker's state. */
  counters(): GuardCounters;
}

/** A guard's counters and state, as metrics and the status page show them. */
export interface GuardCounters {
  /** Calls shed because the partner's hold outlasted their wait deadline. */
  shedHold: number;
  /** Calls shed by an open (or half-open, probes out) breaker. */
  shedOpen: number;
  /** Ms left of the partner's hold; 0 when none runs. */
  holdRemainingMs: number;
  /** The breaker's state; `undefined` without a breaker. */
  breakerState: 'closed' | 'open' | 'half-open' | undefined;
  /** Times the breaker opened. */
  breakerOpened: number;
}
