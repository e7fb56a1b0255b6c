/**
 * The gate's refusals of a caller its queue cannot take or keep: a full queue (after shedding
 * the newest waiter of a lower priority class, when there is one) and a wait deadline that
 * passed. Each is counted for the gate and the class, makes the gate measured from then on,
 * gets the gate's Retry-After estimate, and is published on the shed channel. It keeps no state
 * of its own: the counting gate calls it with its queue and counters.
 */
import { QueueFullError, QueueTimeoutError } from '../common/errors.js';
import type { GateCounts } from './gate-counts.js';
import { channels, type Publisher, publishShed } from './gate-events.js';
import type { GatePermit } from './permit.js';
import type { QueueClass, WaitQueue } from './wait-queue.js';

/** The gate's queue and counters (its GateParts), fixed at construction. */
export interface ShedParts<G> {
  readonly queue: WaitQueue<GatePermit<G>>;
  readonly counts: GateCounts;
  readonly maxQueue: number;
}

/** What the sheds ask of their gate. */
export interface ShedHooks<G> {
  /** Attaches the gate's observer, if it has none yet. */ observe(): void;
  /** The Retry-After estimate (ms) for a caller at `position` in the queue. */
  retryAfter(position: number): number;
  /** Takes a waiter out of the queue without settling it. */
  dequeue(waiter: GatePermit<G>): void;
  /** The gate's clock (ms). */
  clock(): number;
}

export class QueueSheds<G> {
  constructor(
    private readonly gate: Publisher,
    private readonly parts: ShedParts<G>,
    private readonly host: ShedHooks<G>,
  ) {}

  /** Waiters in the gate's queue now. */
  get queued(): number {
    return this.parts.queue.size;
  }

  /**
   * Room in the queue for a waiter of `cls`: `undefined` when there is (after shedding the
   * newest waiter of a lower class if the gate's queue is full), else the error to refuse with.
   */
  admit(cls: QueueClass<GatePermit<G>>): QueueFullError | undefined {
    const { queue, maxQueue } = this.parts;
    if (cls.queued >= cls.maxQueue) return this.#full(cls, cls.maxQueue);
    if (queue.size < maxQueue) return undefined;
    const victim = queue.victimFor(cls);
    if (victim === undefined) return this.#full(cls, maxQueue);
    this.host.dequeue(victim);
    victim.rejected(this.#full(victim.cls, maxQueue));
    return undefined;
  }

  /** A waiter whose deadline passed, already out of the queue: counted, told, published. */
  expired(waiter: GatePermit<G>): void {
    const { host, parts } = this;
    parts.counts.shedQueueTimeout++;
    waiter.cls.shedQueueTimeout++;
    host.observe();
    const waited = host.clock() - waiter.enqueuedAt;
    const queued = parts.queue.size;
    const error = new QueueTimeoutError(this.gate.name, waited, host.retryAfter(queued + 1));
    if (channels.shed.hasSubscribers)
      publishShed(this.gate, 'queue_timeout', error, queued, waiter.cls.name);
    waiter.rejected(error);
  }

  /** `bound`: the gate's `maxQueue` or a class's own. */
  #full(cls: QueueClass<GatePermit<G>>, bound: number): QueueFullError {
    const { host, parts } = this;
    parts.counts.shedQueueFull++;
    cls.shedQueueFull++;
    host.observe();
    const queued = parts.queue.size;
    const option = bound === parts.maxQueue ? 'maxQueue' : `priorities[${cls.index}].maxQueue`;
    const retryAfterMs = host.retryAfter(queued + 1);
    const error = new QueueFullError(this.gate.name, queued, retryAfterMs, {
      option,
      value: bound,
    });
    if (channels.shed.hasSubscribers) publishShed(this.gate, 'queue_full', error, queued, cls.name);
    return error;
  }
}
