/**
 * `acquire()` of a shared gate as a promise over its `wait()`: the same checks and the same
 * cancel-versus-grant rule as a local gate's, with every grant a Redis answer.
 */
import { checkKnownKeys, checkObject, durationMs, optionalSignal } from '../common/options.js';
import type { AcquireOptions, Permit, WaitTarget, WaitTicket } from '../gate/semaphore.js';
import { type SharedCall, sharedCall } from './shared-waiter.js';

const ACQUIRE_KEYS = ['signal', 'timeout', 'weight', 'priority'] as const;

type Wait = (target: WaitTarget, call: SharedCall) => WaitTicket | undefined;

export function acquireShared(wait: Wait, options?: AcquireOptions): Promise<Permit> {
  let signal: AbortSignal | undefined;
  let call: SharedCall = { timeout: undefined, weight: 1 };
  if (options !== undefined) {
    checkObject('acquire options', options);
    checkKnownKeys('acquire', options, ACQUIRE_KEYS);
    signal = optionalSignal('signal', options.signal);
    call = sharedCall(options);
    if (call.timeout !== undefined) call.timeout = durationMs('timeout', call.timeout);
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
