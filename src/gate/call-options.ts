/**
 * One call's options (`acquire`, `run`, `wait`, `tryAcquire`) checked against its gate: the
 * priority class it waits in, the units it takes, and its wait deadline.
 */
import { checkKnownKeys, checkObject, durationMs, positiveInteger } from '../common/options.js';
import type { WaitOptions } from './semaphore-options.js';
import type { QueueClass, QueueNode, WaitQueue } from './wait-queue.js';

export interface Call<N = unknown> {
  readonly cls: QueueClass<N>;
  readonly weight: number;
  /** Wait deadline, ms. */
  readonly timeout: number;
  /** A deadline other than the gate's own `queueTimeout`: the waiter gets a timer of its own. */
  readonly ownDeadline: boolean;
}

/** A TypeError for bad options, a RangeError for a weight the gate could never grant. */
export function checkCall<N extends QueueNode<N>>(
  gate: { readonly name: string | undefined; readonly limit: number },
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
  const timeout = options.timeout ?? cls.queueTimeout;
  const ownDeadline = timeout !== undefined && timeout !== queueTimeout;
  return {
    cls,
    weight,
    ownDeadline,
    timeout: ownDeadline ? durationMs('timeout', timeout) : queueTimeout,
  };
}

export function tooHeavy(weight: number, limit: number, name: string | undefined): RangeError {
  return new RangeError(
    `weight ${weight} exceeds the limit ${limit} of ${name ?? 'this gate'}: it could never be granted`,
  );
}
