/**
 * A gate's waiters by priority class: FIFO within a class, and between classes stride
 * scheduling on the units granted, so every class with waiters gets its guaranteed share.
 *
 * Bound: while a class waits, of any `n` consecutive units granted it receives at least
 * `floor(share × n) − maxWeight` (its pass never trails the others' by more than one stride ×
 * weight), whatever the other classes queue. A batch backlog cannot starve interactive calls,
 * and interactive traffic cannot starve batch. A gate without classes has one, `default`.
 */

import type { DurationHistogram, DurationSummary } from '../common/histogram.js';
import {
  checkKnownKeys,
  checkObject,
  describe,
  durationMs,
  nonNegativeInteger,
} from '../common/options.js';

/** What the queue needs of a waiter: its links and its class (a GatePermit, permit.ts). */
export interface QueueNode<N extends QueueNode<N>> {
  prev: N | undefined;
  next: N | undefined;
  readonly cls: QueueClass<N>;
  /** Units it asks for. */
  readonly weight: number;
}

export interface PriorityClassOptions {
  /** The name callers pass as `priority` (and the metrics label). */
  name: string;
  /** Guaranteed minimum share of the permits while this class waits, in (0, 1]. */
  share: number;
  /** Waiters of this class at most (default: the gate's `maxQueue`). */
  maxQueue?: number;
  /** Wait deadline of this class, ms (default: the gate's `queueTimeout`). */
  queueTimeout?: number;
}

const CLASS_KEYS = ['name', 'share', 'maxQueue', 'queueTimeout'] as const;

/** A queue bound: a non-negative integer, or `Infinity` for a queue without bound (batch work). */
export function queueBound(name: string, value: unknown): number {
  return value === Number.POSITIVE_INFINITY ? value : nonNegativeInteger(name, value);
}
export const DEFAULT_CLASS = 'default';

/** One class's queue and counters. */
export class QueueClass<N = unknown> {
  head: N | undefined = undefined;
  tail: N | undefined = undefined;
  queued = 0;
  /** Stride scheduling: units granted so far, each weighted by 1 / share. */
  pass = 0;
  acquired = 0;
  shedQueueFull = 0;
  shedQueueTimeout = 0;
  abortedWaiting = 0;
  readonly stride: number;
  constructor(
    /** The gate whose queue this is: its waiters reach it through their class. */
    readonly gate: unknown,
    readonly name: string,
    readonly share: number,
    readonly index: number,
    readonly maxQueue: number,
    readonly queueTimeout: number | undefined,
  ) {
    this.stride = 1 / share;
  }
}

export interface PriorityClassStats {
  queued: number;
  acquired: number;
  shedQueueFull: number;
  shedQueueTimeout: number;
  abortedWaiting: number;
  /** Time from asking to grant of this class's permits, since the gate was first observed. */
  wait: DurationSummary;
}

export class WaitQueue<N extends QueueNode<N>> {
  readonly classes: readonly QueueClass<N>[];
  readonly #byName = new Map<string, QueueClass<N>>();
  /** Waiters in every class. */
  size = 0;
  /** Units they ask for, summed (a leased gate's demand). */
  weight = 0;
  /** The pass of the class served last: a class that starts waiting joins from here. */
  #virtualTime = 0;

  constructor(
    gate: unknown,
    options: readonly PriorityClassOptions[] | undefined,
    gateMaxQueue: number,
  ) {
    if (options === undefined) {
      this.classes = [new QueueClass<N>(gate, DEFAULT_CLASS, 1, 0, gateMaxQueue, undefined)];
    } else {
      if (!Array.isArray(options) || options.length === 0) {
        throw new TypeError(
          `priorities must be a non-empty array of classes, got ${describe(options)}`,
        );
      }
      let total = 0;
      this.classes = options.map((o: PriorityClassOptions, index) => {
        checkObject('priorities[]', o as unknown);
        checkKnownKeys(`priorities[${index}]`, o, CLASS_KEYS);
        if (typeof o.name !== 'string' || o.name === '' || this.#byName.has(o.name)) {
          throw new TypeError(
            `priorities[${index}].name must be a unique non-empty string, got ${describe(o.name)}`,
          );
        }
        if (typeof o.share !== 'number' || !(o.share > 0 && o.share <= 1)) {
          throw new TypeError(
            `priorities[${index}].share must be in (0, 1], got ${describe(o.share)}`,
          );
        }
        total += o.share;
        const maxQueue =
          o.maxQueue === undefined
            ? gateMaxQueue
            : queueBound(`priorities[${index}].maxQueue`, o.maxQueue);
        const timeout =
          o.queueTimeout === undefined
            ? undefined
            : durationMs(`priorities[${index}].queueTimeout`, o.queueTimeout);
        const cls = new QueueClass<N>(gate, o.name, o.share, index, maxQueue, timeout);
        this.#byName.set(o.name, cls);
        return cls;
      });
      if (total > 1 + 1e-9) {
        throw new TypeError(
          `priorities: the shares add up to ${total}; at most 1 can be guaranteed`,
        );
      }
    }
    if (options === undefined) this.#byName.set(DEFAULT_CLASS, this.classes[0]!);
  }

  /** The class named `priority`; the first (highest) when unnamed. */
  classOf(priority: unknown): QueueClass<N> {
    if (priority === undefined) return this.classes[0]!;
    const cls = typeof priority === 'string' ? this.#byName.get(priority) : undefined;
    if (cls === undefined) {
      const known = this.classes.map((c) => c.name).join(', ');
      throw new TypeError(`priority must be one of ${known}, got ${describe(priority)}`);
    }
    return cls;
  }

  push(waiter: N): void {
    const cls = waiter.cls;
    // Rejoining after an idle spell: no credit for the time away, or it would starve the rest.
    if (cls.queued === 0 && cls.pass < this.#virtualTime) cls.pass = this.#virtualTime;
    cls.queued++;
    this.size++;
    this.weight += waiter.weight;
    const tail = cls.tail;
    if (tail === undefined) cls.head = waiter;
    else {
      tail.next = waiter;
      waiter.prev = tail;
    }
    cls.tail = waiter;
  }

  remove(waiter: N): void {
    const cls = waiter.cls;
    cls.queued--;
    this.size--;
    this.weight -= waiter.weight;
    const { prev, next } = waiter;
    if (prev === undefined) cls.head = next;
    else prev.next = next;
    if (next === undefined) cls.tail = prev;
    else next.prev = prev;
    waiter.prev = waiter.next = undefined;
  }

  /** The class to serve next: the waiting one furthest behind its share (ties: higher first). */
  next(): QueueClass<N> | undefined {
    const classes = this.classes;
    if (classes.length === 1) return this.size > 0 ? classes[0] : undefined;
    let best: QueueClass<N> | undefined;
    for (const cls of classes) {
      if (cls.queued > 0 && (best === undefined || cls.pass < best.pass)) best = cls;
    }
    return best;
  }

  /** A grant of `weight` units went to a waiter of `cls`. */
  charge(cls: QueueClass<N>, weight: number): void {
    this.#virtualTime = cls.pass;
    cls.pass += cls.stride * weight;
  }

  /** The waiters asking for more than `limit` units, to be refused after a `setLimit`. */
  heavierThan(limit: number): N[] {
    const out: N[] = [];
    for (const cls of this.classes) {
      for (let w = cls.head; w !== undefined; w = w.next) if (w.weight > limit) out.push(w);
    }
    return out;
  }

  /** When the queue is full: the newest waiter of the lowest class below `cls`, if any. */
  victimFor(cls: QueueClass<N>): N | undefined {
    for (let i = this.classes.length - 1; i > cls.index; i--) {
      const lower = this.classes[i]!;
      if (lower.tail !== undefined) return lower.tail;
    }
    return undefined;
  }

  stats(waits: readonly DurationHistogram[]): Record<string, PriorityClassStats> {
    const out: Record<string, PriorityClassStats> = {};
    for (const c of this.classes) {
      out[c.name] = {
        queued: c.queued,
        acquired: c.acquired,
        shedQueueFull: c.shedQueueFull,
        shedQueueTimeout: c.shedQueueTimeout,
        abortedWaiting: c.abortedWaiting,
        wait: waits[c.index]!.summary(),
      };
    }
    return out;
  }
}
