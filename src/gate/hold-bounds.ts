/**
 * A gate's bounds on holding a permit: `maxHold` (time without progress: an unread body must not
 * pin a permit forever) and `maxHoldTotal` (time held at all). Past either, the gate's
 * outcome handlers hear of it (a partner's breaker, an adaptive controller), its
 * `onHoldTimeout` hook runs (the HTTP layers abort the request there) and the gate takes the
 * permit back. Only a gate with one of the two options builds this.
 */
import { PermitHoldTimeoutError } from '../common/errors.js';
import type { GateCounts } from './gate-counts.js';
import { channels, publishHoldTimeout, type ReleaseReason } from './gate-events.js';
import type { Holders } from './holders.js';
import type { OutcomeHandlers } from './outcome-handler.js';
import { EXPIRED, permitEntry, RELEASED, type Waiter } from './permit.js';

const holdTimeoutChannel = channels.holdTimeout;

/** What the bounds need of their gate's parts. */
export interface BoundedParts {
  readonly holders: Holders;
  readonly counts: GateCounts;
  /** The gate's clock (ms), read afresh. */
  readonly now: () => number;
  /** Who hears of a take-back first (outcome-handler.ts): a partner's guard, an adaptive controller. */
  readonly outcomes: OutcomeHandlers;
}

export class HoldBounds {
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** The permit a take-back is returning: its holder's own release counts as that. */
  expiring: Waiter | undefined = undefined;

  constructor(
    readonly maxHold: number | undefined,
    readonly maxHoldTotal: number | undefined,
    /** The gate, as its messages and errors name it. */
    private readonly gate: { readonly name: string | undefined },
    private readonly parts: BoundedParts,
    /** Returns a taken-back permit to the gate (marked released here first). */
    private readonly release: (permit: Waiter) => void,
  ) {}

  /** A permit was granted (and linked as the newest holder). */
  granted(permit: Waiter): void {
    if (this.maxHold !== undefined && this.#timer === undefined) this.#arm(this.maxHold);
    if (this.maxHoldTotal !== undefined) {
      permit.totalTimer = setTimeout(this.#onTotalTimer, this.maxHoldTotal, permit);
      permit.totalTimer.unref?.();
    }
  }

  /**
   * A permit went back (and was unlinked) for `reason`; returns the reason to count. The holder
   * aborting from inside the maxHold hook is the take-back, not a client abort.
   */
  released(permit: Waiter, reason: ReleaseReason): ReleaseReason {
    if (permit.totalTimer !== undefined) clearTimeout(permit.totalTimer);
    // The last holder went: nothing can expire, so no timer stays armed. An armed timer keeps
    // its gate reachable for up to maxHold: an idle per-origin gate evicted by its limiter
    // would outlive its eviction by a minute (issue 36: 50,000 origins, +158 MB).
    if (this.#timer !== undefined && this.parts.holders.oldest === undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    return permit === this.expiring ? 'hold_timeout' : reason;
  }

  #arm(delayMs: number): void {
    // Unref'd: a held permit belongs to work that keeps the process alive by itself.
    this.#timer = setTimeout(this.#onTimer, Math.max(1, Math.ceil(delayMs)));
    this.#timer.unref?.();
  }

  readonly #onTimer = (): void => {
    this.#timer = undefined;
    const maxHold = this.maxHold!;
    const now = this.parts.now();
    let oldest = this.parts.holders.oldest;
    while (oldest !== undefined && oldest.aliveAt + maxHold <= now) {
      this.#takeBack(oldest, now - oldest.acquiredAt, now - oldest.aliveAt);
      oldest = this.parts.holders.oldest;
    }
    if (oldest !== undefined) {
      // A take-back may have granted to a waiter (or the hook acquired), arming the timer for
      // that new permit; the least recently alive holder expires first.
      if (this.#timer !== undefined) clearTimeout(this.#timer);
      this.#arm(oldest.aliveAt + maxHold - now);
    }
  };

  readonly #onTotalTimer = (permit: Waiter): void => {
    permit.totalTimer = undefined;
    if (permitEntry.isHeld(permit)) this.#takeBack(permit, this.parts.now() - permit.acquiredAt);
  };

  /** maxHold (or maxHoldTotal) passed: tell the holder to stop, then take the slot back. */
  #takeBack(permit: Waiter, heldMs: number, quietMs?: number): void {
    this.parts.counts.holdTimeouts++;
    const hook = permit.onHoldTimeout;
    permit.onHoldTimeout = undefined;
    this.expiring = permit;
    const handlers = this.parts.outcomes;
    if (handlers !== undefined) for (const handler of handlers) handler.onHoldTimeout?.(permit);
    if (hook !== undefined || holdTimeoutChannel.hasSubscribers) {
      // An HTTP layer's permit names its request, and notes progress from the response's
      // first bytes on: one never alive since its grant had no response at all.
      const request = permit.request;
      const error = new PermitHoldTimeoutError(
        this.gate.name,
        heldMs,
        quietMs,
        request === undefined
          ? undefined
          : { origin: request.origin, responded: permit.aliveAt !== permit.acquiredAt },
      );
      if (holdTimeoutChannel.hasSubscribers) publishHoldTimeout(this.gate, permit, heldMs, error);
      try {
        hook?.(error);
      } catch {
        // The permit comes back regardless; a throwing hook must not strand it.
      }
    }
    if (permitEntry.isHeld(permit)) {
      permitEntry.settle(permit, RELEASED);
      this.release(permit);
    }
    // Released by the hook or here: either way the holder's later release() is no double release.
    permitEntry.settle(permit, EXPIRED);
    this.expiring = undefined;
  }
}
