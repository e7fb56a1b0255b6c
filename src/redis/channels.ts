/**
 * Diagnostics channels of shared gates, published only when someone subscribed.
 *
 * | channel                 | message                                                          |
 * | ----------------------- | ---------------------------------------------------------------- |
 * | `hostgate:lease-lost`   | {@link LeaseLostMessage}: Redis no longer had a lease we held    |
 * | `hostgate:store-error`  | {@link StoreErrorMessage}: a Redis call failed or timed out      |
 * | `hostgate:store-up`     | `{ store }`: Redis answered again after an error; gating resumed |
 * | `hostgate:wakeups-down` | {@link WakeupsDownMessage}: wake-ups are not pushed; waiters poll |
 * | `hostgate:wakeups-up`   | `{ store }`: subscribed again; wake-ups are pushed               |
 */
import { channel } from 'node:diagnostics_channel';
import type { Semaphore } from '../gate/semaphore.js';

export interface LeaseLostMessage {
  gate: Semaphore;
  partner: string | undefined;
  /** How long the permit had been held when the loss was found (ms). */
  heldMs: number;
  /** What happens to its request: `'continue'` (counted again in Redis) or `'abort'`. */
  policy: 'continue' | 'abort';
}

export interface StoreErrorMessage {
  store: object;
  /** The failure: a timeout, a connection error, or a Redis error reply. */
  error: unknown;
  /** What shared gates do until Redis answers again. */
  policy: 'local' | 'reject';
}

export interface WakeupsDownMessage {
  store: object;
  /** Why: the connection dropped, or (`forbidden`) Redis refused the subscription (an ACL). */
  error: unknown;
  /** The Redis user may not subscribe: waiters poll for as long as the store lives. */
  forbidden: boolean;
  /** How often queued tickets are re-checked meanwhile (ms): the added latency of a grant. */
  pollMs: number;
}

export const storeChannels = Object.freeze({
  leaseLost: channel('hostgate:lease-lost'),
  storeError: channel('hostgate:store-error'),
  storeUp: channel('hostgate:store-up'),
  wakeupsDown: channel('hostgate:wakeups-down'),
  wakeupsUp: channel('hostgate:wakeups-up'),
});
