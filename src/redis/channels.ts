/**
 * Diagnostics channels of shared gates, published only when someone subscribed.
 *
 * | channel                 | message                                                          |
 * | ----------------------- | ---------------------------------------------------------------- |
 * | `hostgate:lease-lost`   | {@link LeaseLostMessage}: Redis no longer had a lease we held    |
 * | `hostgate:store-error`  | {@link StoreErrorMessage}: a Redis call failed or timed out      |
 * | `hostgate:store-up`     | `{ store }`: Redis answered again after an error; gating resumed |
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

export const storeChannels = Object.freeze({
  leaseLost: channel('hostgate:lease-lost'),
  storeError: channel('hostgate:store-error'),
  storeUp: channel('hostgate:store-up'),
});
