/**
 * What, besides a free permit, decides when a call may go: the gate's request `rate` (rate.ts)
 * and a guard set from above (gate-guard.ts: the partner's hold and its breaker). The gate asks
 * it at the same three points for both — the fast path, a call joining the queue, the head
 * before each grant — so a rate slot and a partner's "not before" are taken at the same point
 * of the same queue as the permit. A gate with neither has no Admission and pays nothing.
 */
import type { ShedError } from '../common/errors.js';
import { channels, type Publisher, publishShed, type ShedReason } from './gate-events.js';
import type { GateGuard } from './gate-guard.js';
import type { GatePermit } from './permit.js';
import type { QueueSheds } from './queue-sheds.js';
import { checkSettled, GateRate, type ResolvedRate } from './rate.js';
import type { QueueClass } from './wait-queue.js';

export class Admission<W extends object> {
  guard: GateGuard | undefined = undefined;
  readonly rate: GateRate | undefined;
  /** Wakes the queue when the guard's hold ends (0: a microtask is queued). */
  #holdTimer: ReturnType<typeof setTimeout> | 0 | undefined = undefined;

  constructor(
    readonly gate: Publisher,
    rate: ResolvedRate | undefined,
    private readonly now: () => number,
    /** The cached clock, for the fast path. */
    private readonly clock: () => number,
    /** Serves the gate's queue (a slot came, a hold ended). */
    readonly serve: () => void,
  ) {
    this.rate = rate && new GateRate(rate, now, serve);
  }

  /** The fast path: may a call of `cost` go now? Takes its rate slot when it may. */
  takeNow(cost: number): boolean {
    const guard = this.guard;
    if (guard !== undefined && (guard.screening || guard.notBefore > this.clock())) return false;
    return this.rate === undefined || this.rate.take(cost);
  }

  /** A permit granted on the fast path, charged `cost` against the rate. */
  charged(permit: object, cost: number): void {
    this.rate?.charge(permit, cost);
  }

  /**
   * A call joining the queue: the guard's refusal (a breaker open, a hold past its deadline),
   * else the rate's (its slot past its deadline), else the queue's (`sheds.admit`: full).
   */
  refuse<G>(
    cost: number,
    timeout: number,
    cls: QueueClass<GatePermit<G>>,
    sheds: QueueSheds<G>,
  ): ShedError | undefined {
    const guard = this.guard;
    const now = this.now();
    let refusal: ShedError | undefined;
    let reason: ShedReason = 'rate_limited';
    if (guard !== undefined) {
      refusal = guard.refuse(now, now + timeout);
      if (refusal !== undefined)
        reason = refusal.code === 'HOSTGATE_PARTNER_OPEN' ? 'breaker_open' : 'partner_hold';
    }
    refusal ??= this.rate?.refuse(this.gate.name, cost, timeout);
    if (refusal === undefined) return sheds.admit(cls);
    if (channels.shed.hasSubscribers)
      publishShed(this.gate, reason, refusal, sheds.queued, cls.name);
    return refusal;
  }

  /** A waiter of `cost` joined; `room`: a permit is free, so the queue is served (not on this stack). */
  queued(waiter: W, cost: number, room: boolean): void {
    this.rate?.queued(waiter, cost);
    if (room && this.guard !== undefined) this.#wake(0);
  }

  /** The queue has waiters: false while the guard's hold runs (a timer serves it at the end). */
  open(): boolean {
    const guard = this.guard;
    if (guard === undefined || guard.notBefore === 0) return true;
    const wait = guard.notBefore - this.now();
    if (wait <= 0) return true;
    this.#wake(wait);
    return false;
  }

  /** The head may go: its rate slot has come (taken now), or the rate's timer serves it then. */
  takeHead(waiter: W): boolean {
    const rate = this.rate;
    return rate === undefined || rate.take(rate.costOf(waiter));
  }

  /** A waiter left the queue (granted, aborted, expired); `empty`: nobody waits now. */
  left(waiter: W, empty: boolean): void {
    const rate = this.rate;
    if (rate === undefined) return;
    rate.backlog -= rate.costOf(waiter);
    if (empty) rate.idle();
  }

  /** Nobody is served before this many ms: the partner's hold, the rate's next slot. */
  waitFloorMs(): number {
    const now = this.now();
    const held = this.guard === undefined ? 0 : Math.ceil(this.guard.notBefore - now);
    const rate = this.rate;
    return Math.max(held, rate === undefined ? 0 : Math.ceil(rate.waitMs(1, rate.backlog, now)));
  }

  /**
   * Serves the queue in `ms` (0: the next microtask), unless a wake-up is already armed: the
   * guard's hold only moves later, so an earlier wake-up finds it running and arms the next.
   */
  #wake(ms: number): void {
    if (this.#holdTimer !== undefined) return;
    if (ms <= 0) {
      this.#holdTimer = 0;
      queueMicrotask(this.#woken);
    } else {
      // Unref'd: the waiters' own deadline timers keep the process alive while anyone waits.
      this.#holdTimer = setTimeout(this.#woken, Math.ceil(ms));
      this.#holdTimer.unref();
    }
  }

  readonly #woken = (): void => {
    this.#holdTimer = undefined;
    this.serve();
  };
}

/**
 * `permit.settleCost(actual)` on a gate: checked (a gate without a rate throws), then settled;
 * true when the head's slot may have come sooner.
 */
export function settleCost(
  admission: Admission<object> | undefined,
  gate: string | undefined,
  permit: object,
  actual: number,
): void {
  const rate = admission?.rate;
  checkSettled(rate, gate, actual);
  if (rate!.settle(permit, actual)) admission!.serve(); // a refund: the head's slot may be now
}
