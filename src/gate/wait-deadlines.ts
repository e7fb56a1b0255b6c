/**
 * A gate's wait deadlines: the gate's own `queueTimeout` for most waiters, served by one timer
 * at the head of a list in deadline order, and a timer of its own for a waiter with a per-call
 * `timeout`. When a deadline passes, the gate's `expire` sheds the waiter (`QueueTimeoutError`).
 *
 * Waiters with the gate's own deadline have monotonic deadlines (enqueuedAt + queueTimeout), so
 * one timer at the earliest serves them all. A one-class gate whose waiters all have that
 * deadline keeps no list: its queue is in arrival order, hence in deadline order (two stores
 * fewer per queued call). The first waiter with a deadline of its own builds the list (a gate
 * with priority classes always keeps one); it is dropped again whenever the queue empties.
 */
import type { Call } from './call-options.js';
import { onWaiterTimer, type Waiter } from './permit.js';
import type { WaitQueue } from './wait-queue.js';

export class WaitDeadlines {
  /** Waiters with the gate's own deadline, earliest first, while `#listed`. */
  #head: Waiter | undefined = undefined;
  #tail: Waiter | undefined = undefined;
  #listed: boolean;
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;

  constructor(
    readonly queueTimeout: number,
    private readonly queue: WaitQueue<Waiter>,
    private readonly now: () => number,
    /** Sheds a waiter whose deadline passed: it leaves the queue through {@link remove}. */
    private readonly expire: (waiter: Waiter) => void,
  ) {
    this.#listed = queue.classes.length > 1;
  }

  /** `waiter` is about to join the queue (not in it yet), with its call's deadline. */
  add(waiter: Waiter, call: Call | undefined): void {
    if (call?.ownDeadline) {
      if (!this.#listed) this.#list();
      waiter.timer = setTimeout(onWaiterTimer, call.timeout, waiter);
      return;
    }
    if (this.#listed) {
      const tail = this.#tail;
      if (tail === undefined) this.#head = waiter;
      else {
        tail.dNext = waiter;
        waiter.dPrev = tail;
      }
      this.#tail = waiter;
    }
    if (this.#timer === undefined) this.#arm(this.queueTimeout);
  }

  /** `waiter` has just left the queue (granted, shed or cancelled). */
  remove(waiter: Waiter): void {
    const queue = this.queue;
    if (waiter.timer !== undefined) {
      clearTimeout(waiter.timer);
      waiter.timer = undefined;
    } else if (this.#listed) {
      const { dPrev, dNext } = waiter;
      if (dPrev === undefined) this.#head = dNext;
      else dPrev.dNext = dNext;
      if (dNext === undefined) this.#tail = dPrev;
      else dNext.dPrev = dPrev;
      waiter.dPrev = waiter.dNext = undefined;
      if (this.#head === undefined) this.#stop();
    } else if (queue.size === 0) {
      this.#stop();
    }
    // An empty one-class queue has no deadlines to list: the next waiters go without the list.
    if (queue.size === 0 && queue.classes.length === 1) this.#listed = false;
  }

  /** A waiter with a deadline of its own joins a one-class gate: list the others' deadlines. */
  #list(): void {
    this.#listed = true;
    let tail: Waiter | undefined;
    for (let waiter = this.queue.classes[0]!.head; waiter !== undefined; waiter = waiter.next) {
      if (tail === undefined) this.#head = waiter;
      else {
        tail.dNext = waiter;
        waiter.dPrev = tail;
      }
      tail = waiter;
    }
    this.#tail = tail;
  }

  #stop(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  #arm(delayMs: number): void {
    this.#timer = setTimeout(this.#onTimer, Math.max(1, Math.ceil(delayMs)));
  }

  readonly #onTimer = (): void => {
    this.#timer = undefined;
    const now = this.now();
    const timeout = this.queueTimeout;
    let head = this.#first();
    while (head !== undefined && head.enqueuedAt + timeout <= now) {
      this.expire(head);
      head = this.#first();
    }
    // A waiter queued from inside an expiry armed a timer for its own deadline: the head's
    // comes first.
    this.#stop();
    if (head !== undefined) this.#arm(head.enqueuedAt + timeout - now);
  };

  /** The waiter whose gate deadline comes first: the list's head, or a one-class queue's. */
  #first(): Waiter | undefined {
    return this.#listed ? this.#head : this.queue.classes[0]!.head;
  }
}
