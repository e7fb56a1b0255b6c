/**
 * `acquire()` of a shared gate as a promise over its `wait()`: the same checks and the same
 * cancel-versus-grant rule as a local gate's, with every grant a Redis answer.
 */
import { checkKnownKeys, checkObject, durationMs, optionalSignal } from '../common/options.js';
import type { ResolvedRate } from '../gate/rate.js';
import type {
  AcquireOptions,
  Permit,
  WaitOptions,
  WaitTarget,
  WaitTicket,
} from '../gate/semaphore.js';
import { sharedCall } from './shared-waiter.js';

const ACQUIRE_KEYS = ['signal', 'timeout', 'weight', 'priority', 'cost'] as const;

type Wait = (target: WaitTarget, call: WaitOptions) => WaitTicket | undefined;

export function acquireShared(
  wait: Wait,
  options: AcquireOptions | undefined,
  rate: ResolvedRate | undefined,
  gate: string | undefined,
): Promise<Permit> {
  let signal: AbortSignal | undefined;
  let call: WaitOptions = {};
  if (options !== undefined) {
    checkObject('acquire options', options);
    checkKnownKeys('acquire', options, ACQUIRE_KEYS);
    signal = optionalSignal('signal', options.signal);
    const checked = sharedCall(options, rate, gate);
    call = { weight: checked.weight };
    if (checked.timeout !== undefined) call.timeout = durationMs('timeout', checked.timeout);
    if (options.cost !== undefined) call.cost = checked.cost;
    if (signal?.aborted) return Promise.reject(signal.reason);
  }
  return new Promise<Permit>((resolve, reject) => {
    let ticket: WaitTicket | undefined;
    const onAbort = (): void => ticket?.cancel(signal?.reason);
    ticket = wait(
      {
        granted(permit) {
          signal?.removeEventListener('abort', onAbort);
          // Cancel vs grant in one tick: the permit goes straight back, the caller sees the abort.
          if (signal?.aborted) {
            permit.release();
            reject(signal.reason);
          } else resolve(permit);
        },
        rejected(reason) {
          signal?.removeEventListener('abort', onAbort);
          reject(reason);
        },
      },
      call,
    );
    if (ticket !== undefined) signal?.addEventListener('abort', onAbort, { once: true });
  });
}
