/**
 * The partner guard at a shared FIFO gate's door. That gate's grants are Redis's answers
 * (src/redis/shared-semaphore.ts overrides `wait`): its calls never pass the counting gate's
 * `#take`/`#join`/`#drain`, where Admission asks the guard. So the guard is asked at the same
 * three points in front of it: before a call goes (a breaker not closed screens every arrival),
 * when it would wait (a refusal takes no ticket in Redis), and when Redis grants it during a
 * hold (the permit goes straight back, so nothing reaches the partner before its reset, and the
 * call waits here, holding no ticket, until the hold ends).
 */
import type { ShedError } from '../common/errors.js';
import { coreEntry } from '../gate/counting-gate.js';
import { channels, publishShed } from '../gate/gate-events.js';
import type { Permit, Semaphore, WaitOptions, WaitTarget, WaitTicket } from '../gate/semaphore.js';
import { DEFAULT_CLASS } from '../gate/wait-queue.js';
import type { PartnerGuard } from './partner-guard.js';

/**
 * Puts `guard` in front of `gate.wait` (which `acquire` and `run` of a shared gate call too).
 * The gate's own `wait` still checks every option and does all the queueing, in Redis.
 */
export function guardSharedWait(gate: Semaphore, guard: PartnerGuard): void {
  const door = new SharedDoor(gate, guard, gate.wait.bind(gate));
  gate.wait = (target, options) => door.wait(target, options);
}

type Wait = (target: WaitTarget, options?: number | WaitOptions) => WaitTicket | undefined;

class SharedDoor {
  readonly #queueTimeout: number;

  constructor(
    readonly gate: Semaphore,
    readonly guard: PartnerGuard,
    readonly inner: Wait,
  ) {
    this.#queueTimeout = coreEntry.parts(gate).queueTimeout;
  }

  wait(target: WaitTarget, options: number | WaitOptions | undefined): WaitTicket | undefined {
    const timeout =
      typeof options === 'number' ? options : (options?.timeout ?? this.#queueTimeout);
    // A bad timeout: the gate's own wait throws its usual TypeError.
    if (typeof timeout !== 'number' || !(timeout > 0)) return this.inner(target, options);
    const call = new GuardedCall(this, target, this.gate.now() + timeout, options);
    this.enter(call, true);
    return call.settled ? undefined : call;
  }

  /**
   * Asks the guard, then waits here for a hold, or takes the call to Redis's queue. Bad options
   * throw from the gate's `wait` as ever (`first`), or reject a call held here before.
   */
  enter(call: GuardedCall, first = false): void {
    const guard = this.guard;
    const now = this.gate.now();
    if (guard.screening || guard.notBefore > now) {
      const refusal = guard.refuse(now, call.deadline);
      if (refusal !== undefined) {
        this.#shed(refusal);
        call.settle().rejected(refusal);
        return;
      }
      if (guard.notBefore > now) {
        call.hold(guard.notBefore - now);
        return;
      }
    }
    const options = call.options;
    const timeout = Math.max(1, call.deadline - now);
    try {
      call.ticket = this.inner(
        call,
        typeof options === 'object' ? { ...options, timeout } : { timeout },
      );
    } catch (error) {
      if (first) throw error;
      call.settle().rejected(error);
    }
  }

  #shed(refusal: ShedError): void {
    if (!channels.shed.hasSubscribers) return;
    const reason = refusal.code === 'HOSTGATE_PARTNER_OPEN' ? 'breaker_open' : 'partner_hold';
    publishShed(this.gate, reason, refusal, this.gate.queued, DEFAULT_CLASS);
  }
}

/** One call through the door: the caller's target and ticket, over its turns in Redis. */
class GuardedCall implements WaitTarget, WaitTicket {
  /** Its ticket in Redis, while it has one. */
  ticket: WaitTicket | undefined = undefined;
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  settled = false;

  constructor(
    readonly door: SharedDoor,
    readonly target: WaitTarget,
    /** When its wait ends (the gate's clock): every turn in Redis gets what is left. */
    readonly deadline: number,
    readonly options: number | WaitOptions | undefined,
  ) {}

  /** Waits here (no ticket, no permit) until the partner's hold ends, then enters again. */
  hold(ms: number): void {
    this.door.guard.waiting++;
    this.#timer = setTimeout(this.#reenter, Math.ceil(ms));
  }

  readonly #reenter = (): void => {
    this.#timer = undefined;
    this.door.guard.waiting--;
    this.door.enter(this);
  };

  /** Marks it settled and returns the caller's target, to be told once. */
  settle(): WaitTarget {
    this.settled = true;
    return this.target;
  }

  granted(permit: Permit): void {
    this.ticket = undefined;
    const guard = this.door.guard;
    if (guard.notBefore > this.door.gate.now()) {
      // Granted during a hold that began after it queued: back to Redis at once (the next
      // ticket gets it), and this call waits out the hold here, or is shed if it cannot.
      permit.release();
      this.door.enter(this);
      return;
    }
    this.settle().granted(permit);
  }

  rejected(reason: unknown): void {
    this.ticket = undefined;
    this.settle().rejected(reason);
  }

  cancel(reason: unknown): void {
    if (this.settled) return;
    if (this.ticket !== undefined) {
      this.ticket.cancel(reason); // Redis's queue rejects it: `rejected` tells the caller
      return;
    }
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.door.guard.waiting--;
    }
    this.settle().rejected(reason);
  }
}
