/**
 * What a shared gate refuses in this process, counted and published on `hostgate:shed` /
 * `hostgate:wait-aborted` as a local gate does, with the error each caller receives.
 */

import { QueueFullError, QueueTimeoutError, StoreUnavailableError } from '../common/errors.js';
import { channels, type ShedReason } from '../gate/diagnostics.js';
import type { Semaphore } from '../gate/semaphore.js';

export class SharedShed {
  queueFull = 0;
  queueTimeout = 0;
  abortedWaiting = 0;
  storeUnavailable = 0;

  constructor(readonly gate: Semaphore) {}

  /** The local queue bound: refused without a Redis call. */
  full(queued: number, maxQueue: number): QueueFullError {
    this.queueFull++;
    const bound = { option: 'maxQueue', value: maxQueue };
    return this.#publish(
      'queue_full',
      new QueueFullError(this.gate.name, queued, this.gate.retryAfterMs(), bound),
      queued,
    );
  }

  /** A waiter's deadline passed. */
  timedOut(waitedMs: number, queued: number): QueueTimeoutError {
    this.queueTimeout++;
    const error = new QueueTimeoutError(this.gate.name, waitedMs, this.gate.retryAfterMs());
    return this.#publish('queue_timeout', error, queued);
  }

  /** A caller whose rate slot comes after its deadline (Redis's answer at join). */
  rateLimited<E>(error: E, queued: number): E {
    return this.#publish('rate_limited', error, queued);
  }

  /** A waiter's caller aborted it. */
  aborted(reason: unknown): void {
    this.abortedWaiting++;
    if (channels.waitAborted.hasSubscribers) {
      channels.waitAborted.publish({ gate: this.gate, partner: this.gate.name, reason });
    }
  }

  /** A caller shed because Redis is unavailable under `'reject'`. */
  unavailable(retryAfterMs: number, queued: number): StoreUnavailableError {
    this.storeUnavailable++;
    return this.#publish(
      'store_unavailable',
      new StoreUnavailableError(this.gate.name, retryAfterMs),
      queued,
    );
  }

  #publish<E>(reason: ShedReason, error: E, queued: number): E {
    if (channels.shed.hasSubscribers) {
      channels.shed.publish({ gate: this.gate, partner: this.gate.name, reason, error, queued });
    }
    return error;
  }
}
