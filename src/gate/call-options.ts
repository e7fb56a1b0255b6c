/**
 * One call's options (`acquire`, `run`, `wait`, `tryAcquire`) checked against its gate: the
 * priority class it waits in, the units it takes, and its wait deadline.
 */
import { checkKnownKeys, checkObject, durationMs, positiveInteger } from '../common/options.js';
import { checkCost, type ResolvedRate } from './rate.js';
import type { WaitOptions } from './semaphore-options.js';
import type { QueueClass, QueueNode, WaitQueue } from './wait-queue.js';

export interface Call<N = unknown> {
  readonly cls: QueueClass<N>;
  readonly weight: number;
  /** Units of the gate's rate it takes (1 unless `cost` was given; only on a gate with a rate). */
  readonly cost: number;
  /** Wait deadline, ms. */
  readonly timeout: number;
  /** A deadline other than the gate's own `queueTimeout`: the waiter gets a timer of its own. */
  readonly ownDeadline: boolean;
}

/** A TypeError for bad options, a RangeError for a weight the gate could never grant. */
export function checkCall<N extends QueueNode<N>>(
  gate: {
    readonly name: string | undefined;
    readonly limit: number;
    readonly rate: ResolvedRate | undefined;
  },
  queue: WaitQueue<N>,
  queueTimeout: number,
  label: string,
  options: WaitOptions,
  keys: readonly string[],
): Call<N> {
  checkObject(`${label} options`, options);
  checkKnownKeys(label, options, keys);
  const cls = queue.classOf(options.priority);
  let weight = 1;
  if (options.weight !== undefined) {
    weight = positiveInteger('weight', options.weight);
    if (weight > gate.limit) throw tooHeavy(weight, gate.limit, gate.name);
  }
  const cost =
    options.cost === undefined ? 1 : checkCost(options.cost, gate.rate, gate.name ?? 'this gate');
  const timeout = options.timeout ?? cls.queueTimeout;
  const ownDeadline = timeout !== undefined && timeout !== queueTimeout;
  return {
    cls,
    weight,
    cost,
    ownDeadline,
    timeout: ownDeadline ? durationMs('timeout', timeout) : queueTimeout,
  };
}

export function tooHeavy(weight: number, limit: number, name: string | undefined): RangeError {
  return new RangeError(
    `weight ${weight} exceeds the limit ${limit} of ${name ?? 'this gate'}: it could never be granted`,
  );
}
