/**
 * What became of a permit's request, as the request path reports it: first to the handlers a
 * layer above set on the permit's gate (outcome-handler.ts), by a direct call; then, only while
 * someone subscribed, to observers on `hostgate:response` and `hostgate:request-error`. hostgate
 * subscribes to none of its own channels: nobody listening, nothing is built or published.
 */
import { coreEntry } from './counting-gate.js';
import { channels } from './gate-events.js';
import type { OutcomeHandler } from './outcome-handler.js';
import type { Permit, Semaphore } from './semaphore.js';

/** Sets `handler` on `gate`, after those already set; told of each of its permits' outcomes. */
export function handleOutcomes(gate: Semaphore, handler: OutcomeHandler<Permit>): void {
  const parts = coreEntry.parts(gate);
  parts.outcomes = [...(parts.outcomes ?? []), handler as OutcomeHandler];
}

/**
 * The HTTP layers' one call at response start: the outcome adaptive limits, a partner's guard
 * and a rate's `settleCost` learn from.
 */
export function reportResponse(
  permit: Permit | undefined,
  statusCode: number,
  headers: unknown,
  heldAtGrant: number,
): void {
  if (permit === undefined) return;
  const { gate } = permit;
  const handlers = coreEntry.parts(gate).outcomes;
  if (handlers !== undefined) {
    for (const handler of handlers) handler.onResponse?.(permit, statusCode, headers, heldAtGrant);
  }
  if (!channels.response.hasSubscribers) return;
  channels.response.publish({ gate, partner: gate.name, permit, statusCode, headers, heldAtGrant });
}

/** The HTTP layers' one call when a request fails, before its permit goes back. */
export function reportRequestError(
  permit: Permit | undefined,
  error: unknown,
  aborted: boolean,
): void {
  if (permit === undefined) return;
  const { gate } = permit;
  const handlers = coreEntry.parts(gate).outcomes;
  if (handlers !== undefined) {
    for (const handler of handlers) handler.onError?.(permit, error, aborted);
  }
  if (!channels.requestError.hasSubscribers) return;
  channels.requestError.publish({ gate, partner: gate.name, permit, error, aborted });
}
