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
 * | `hostgate:leak`           | {@link LeakMessage}: a leak detector's first report of a permit |
 * | `hostgate:response`       | {@link ResponseMessage}: a permit's request got its response head |
 * | `hostgate:request-error`  | {@link RequestErrorMessage}: a permit's request failed           |
 *
 * Subscribers run synchronously inside the gate: keep them short, and do not acquire or
 * release on the gate that published.
 *
 * @example
 * import { subscribe } from 'node:diagnostics_channel';
 * subscribe('hostgate:shed', (message) => {
 *   const { partner, reason, queued } = message as ShedMessage;
 *   log.warn({ partner, reason, queued }, 'shed');
 * });
 */

import { channel } from 'node:diagnostics_channel';
import type { PermitHoldTimeoutError, ShedError } from '../common/errors.js';
import type { LeakSuspect } from '../observe/leaks.js';
import type { Permit, Semaphore } from './semaphore.js';

/** What a permit was taken for: the HTTP layers attach it (`permit.request`) for leak reports. */
export interface PermitRequestInfo {
  /** HTTP method; `GET` when absent. */
  readonly method?: string | undefined;
  /** An origin (`https://api.x.com`) or a whole URL; the query is never reported. */
  readonly origin?: string | URL | null | undefined;
  /** Path (and query) under `origin`, when `origin` is only an origin (undici's dispatch options). */
  readonly path?: string | null | undefined;
}

/** How a permit went back to its gate. */
export type ReleaseReason =
  /** Its holder released it: the request ended (or failed) on its own. */
  | 'released'
  /** Its holder released it because the request was aborted by the caller (client disconnect). */
  | 'aborted'
  /** The gate took it back after `maxHold`. */
  | 'hold_timeout';

/** Why a caller was shed: the `reason` label of `hostgate_shed_total`. */
export type ShedReason =
  | 'queue_full'
  | 'queue_timeout'
  /** Refused before queueing: the request's deadline budget was shorter than wait + p50 hold. */
  | 'deadline'
  /** A shared gate's Redis is unavailable and its `onStoreError` is `'reject'`. */
  | 'store_unavailable';

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

export interface LeakMessage {
  suspect: LeakSuspect;
}

/** Published by the HTTP layers when the partner's response head arrives (adaptive limits). */
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
}

/** The channels, for subscribing by object rather than by name. */
export const channels = Object.freeze({
  acquire: channel('hostgate:acquire'),
  release: channel('hostgate:release'),
  shed: channel('hostgate:shed'),
  waitAborted: channel('hostgate:wait-aborted'),
  holdTimeout: channel('hostgate:hold-timeout'),
  doubleRelease: channel('hostgate:double-release'),
  leak: channel('hostgate:leak'),
  response: channel('hostgate:response'),
  requestError: channel('hostgate:request-error'),
});

/**
 * The HTTP layers' one call at response start: the outcome signal adaptive limits learn from.
 * Costs one property check while nobody subscribed.
 */
export function publishResponse(
  permit: Permit | undefined,
  statusCode: number,
  headers: unknown,
  heldAtGrant: number,
): void {
  if (permit === undefined || !channels.response.hasSubscribers) return;
  const { gate } = permit;
  channels.response.publish({ gate, partner: gate.name, permit, statusCode, headers, heldAtGrant });
}

/** The HTTP layers' one call when a request fails, before its permit goes back. */
export function publishRequestError(permit: Permit | undefined, error: unknown): void {
  if (permit === undefined || !channels.requestError.hasSubscribers) return;
  const { gate } = permit;
  channels.requestError.publish({ gate, partner: gate.name, permit, error });
}

/** Where a permit was asked for: a stack captured only while a leak detector watches the gate. */
export interface AcquireSite {
  /** Formatted lazily by V8 on first read. */
  readonly stack?: string;
}

/**
 * Frames kept: enough to get past undici's dispatch chain (about 10 frames for `request()`) to
 * the caller's own. Each frame costs about 0.3 µs to capture, the capture itself about 1.5 µs.
 */
const SITE_FRAMES = 16;

/**
 * Captures the caller's stack without building an `Error` or formatting anything: V8 keeps the
 * raw frames and formats them only if `stack` is read (a leak report).
 */
export function captureAcquireSite(): AcquireSite {
  const site: { stack?: string } = {};
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = SITE_FRAMES;
  Error.captureStackTrace(site, captureAcquireSite);
  Error.stackTraceLimit = limit;
  return site;
}
