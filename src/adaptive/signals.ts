/**
 * Wires an adaptive controller to its gate: set on the gate's outcome handlers
 * (gate/outcome-handler.ts), it hears each response and failure from the request path and each
 * maxHold take-back from the gate, by a direct call. No channel subscription: nobody listening,
 * nothing is published.
 */
import { handleOutcomes } from '../gate/outcomes.js';
import type { Semaphore } from '../gate/semaphore.js';
import type { AdaptiveController } from './controller.js';

const controllers = new WeakMap<Semaphore, AdaptiveController>();

export function attachController(controller: AdaptiveController): void {
  controllers.set(controller.gate, controller);
  handleOutcomes(controller.gate, controller);
}

/** The controller of an adaptive gate, if it is one. */
export function controllerOf(gate: Semaphore): AdaptiveController | undefined {
  return controllers.get(gate);
}
