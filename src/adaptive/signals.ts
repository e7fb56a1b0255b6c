/**
 * Routes the HTTP layers' outcome messages (`hostgate:response`, `hostgate:request-error`,
 * `hostgate:hold-timeout`) to the controller of the gate that published them. Subscribes on the
 * first adaptive gate only, so a process without one pays nothing.
 */
import { subscribe } from 'node:diagnostics_channel';
import type {
  HoldTimeoutMessage,
  RequestErrorMessage,
  ResponseMessage,
} from '../gate/diagnostics.js';
import type { Semaphore } from '../gate/semaphore.js';
import type { AdaptiveController } from './controller.js';

const controllers = new WeakMap<Semaphore, AdaptiveController>();
let subscribed = false;

export function attachController(controller: AdaptiveController): void {
  controllers.set(controller.gate, controller);
  if (subscribed) return;
  subscribed = true;
  subscribe('hostgate:response', (message) => {
    const { gate, permit, statusCode, headers, heldAtGrant } = message as ResponseMessage;
    controllers.get(gate)?.onResponse(permit, statusCode, headers, heldAtGrant);
  });
  subscribe('hostgate:request-error', (message) => {
    const { gate, permit, error } = message as RequestErrorMessage;
    controllers.get(gate)?.onError(permit, error);
  });
  subscribe('hostgate:hold-timeout', (message) => {
    const { gate, permit } = message as HoldTimeoutMessage;
    controllers.get(gate)?.onHoldTimeout(permit);
  });
}

/** The controller of an adaptive gate, if it is one. */
export function controllerOf(gate: Semaphore): AdaptiveController | undefined {
  return controllers.get(gate);
}
