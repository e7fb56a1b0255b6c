/**
 * `node:diagnostics_channel` events, in the style of undici's own (`undici:request:create`, …):
 * every gate publishes to these named channels, and only when someone subscribed
 * (`channel.hasSubscribers`), so an unobserved gate pays one property check per event and
 * allocates nothing. Channels are global by name: two copies of hostgate publish to the same ones.
 *
 * | channel                   | message                                                        |
 * | ------------------------- | -------------------------------------------------------------- |
 * | `hostgate:acquire`        | {@link AcquireMessage}: a permit was granted                   |
 * | `hostgate:release`        | {@link ReleaseMessage}: a permit went back (reason says how)   |
 * | `hostgate:shed`           | {@link ShedMessage}: a caller was refused (`reason`: as `hostgate_shed_total`) |
 * | `hostgate:wait-aborted`   | {@link WaitAbortedMessage}: a waiter's signal fired            |
 * | `hostgate:hold-timeout`   | {@link HoldTimeoutMessage}: `maxHold` passed, permit taken back |
 * | `hostgate:double-release` | {@link DoubleReleaseMessage}: `release()` on a released permit |
 * | `hostgate:leak`           | `LeakMessage` (observe/leaks.ts): a leak detector's first report |
 * | `hostgate:response`       | {@link ResponseMessage}: a permit's request got its response head |
 * | `hostgate:request-error`  | {@link RequestErrorMessage}: a permit's request failed           |
 *
 * Subscribers run synchronously inside the gate: keep them short, and do not acquire or
 * release on the gate that published. The channels are for observers: hostgate subscribes to
 * none of them itself (its guards and adaptive controllers are called directly: outcomes.ts).
 *
 * @example
 * import { subscribe } from 'node:diagnostics_channel';
 * subscribe('hostgate:shed', (message) => {
 *   const { partner, reason, queued } = message as ShedMessage;
 *   log.warn({ partner, reason, queued }, 'shed');
 * });
 */

import type { PermitHoldTimeoutError, ShedError } from '../common/errors.js';
import type { ReleaseReason, ShedReason } from './gate-events.js';
import type { Permit, Semaphore } from './semaphore.js';

export {
  type AcquireSite,
  captureAcquireSite,
  channels,
  type ReleaseReason,
  type ShedReason,
} from './gate-events.js';
export type { PermitRequestInfo } from './permit-target.js';

interface GateMessage {
  /** The gate that published. */
  gate: Semaphore;
  /** Its name: the partner, or the origin key of a per-origin gate. */
  partner: string | undefined;
}

export interface AcquireMessage extends GateMessage {
  permit: Permit;
  /** Time spent queued, ms (0 for an immediate grant). */
  waitedMs: number;
  /** The priority class it was granted in (`default` on a gate without classes). */
  priority?: string;
}

export interface ReleaseMessage extends GateMessage {
  permit: Permit;
  /** Grant to release, ms; `NaN` for a permit granted while nothing measured the gate. */
  heldMs: number;
  reason: ReleaseReason;
}

export interface ShedMessage extends GateMessage {
  reason: ShedReason;
  /** The `QueueFullError`, `QueueTimeoutError`, `DeadlineShedError` or `StoreUnavailableError` the caller receives. */
  error: ShedError;
  /** Waiters still queued after this one left. */
  queued: number;
  /** The priority class of the caller refused (`default` on a gate without classes). */
  priority: string;
}

export interface WaitAbortedMessage extends GateMessage {
  /** The abort reason the waiter is rejected with. */
  reason: unknown;
}

export interface HoldTimeoutMessage extends GateMessage {
  permit: Permit;
  heldMs: number;
  error: PermitHoldTimeoutError;
}

export interface DoubleReleaseMessage extends GateMessage {
  permit: Permit;
}

/** Published by the HTTP layers when the partner's response head arrives. */
export interface ResponseMessage extends GateMessage {
  permit: Permit;
  statusCode: number;
  /** The response headers as the layer has them: an undici header object, raw pairs, or `Headers`. */
  headers: unknown;
  /**
   * Permits the gate held when this request's permit was granted, its own included. Adaptive
   * limits take the larger of it and the gate's `held` at the response as the load the request
   * saw ("is the gate using its limit?"; Netflix's concurrency-limits reads the count at the
   * start): either one alone falls or rises through a burst as permits go back or are granted
   * one by one.
   */
  heldAtGrant: number;
}

/** Published by the HTTP layers when a permit's request fails (timeouts, resets, aborts). */
export interface RequestErrorMessage extends GateMessage {
  permit: Permit;
  error: unknown;
  /**
   * The caller cancelled the request (its signal, a client disconnect, `maxHold`'s take-back):
   * the partner did not fail it. Breakers count only the others.
   */
  aborted: boolean;
}
