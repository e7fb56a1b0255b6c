/**
 * What a layer above may set on a gate to hear what became of its permits' requests: a
 * partner's guard (its rate-limit headers, its breaker), an adaptive controller, a rate rule's
 * `settleCost`. The request path calls it directly (outcomes.ts: the HTTP layers at the response
 * head and on a failure; hold-bounds.ts at maxHold's take-back), as undici passes a request
 * through its chain of handlers; the diagnostics channels come after it, for observers only.
 * Generic in the permit's type so that nothing below semaphore.ts imports it.
 */
export interface OutcomeHandler<P = object> {
  /**
   * The response head arrived. `heldAtGrant`: permits the gate held when this one was granted,
   * its own included (the load the request saw, with the gate's `held` now).
   */
  onResponse?(permit: P, statusCode: number, headers: unknown, heldAtGrant: number): void;
  /** The request failed; `aborted`: its caller cancelled it (the partner did not fail it). */
  onError?(permit: P, error: unknown, aborted: boolean): void;
  /** `maxHold` (or `maxHoldTotal`) passed: the gate is taking the permit back. */
  onHoldTimeout?(permit: P): void;
}

/** A gate's handlers in the order they were set; `undefined` while none is (most gates). */
export type OutcomeHandlers = readonly OutcomeHandler[] | undefined;
