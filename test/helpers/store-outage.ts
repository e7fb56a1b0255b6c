import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { RedisStore } from '../../src/redis/index.js';
import { until } from './until.js';

/**
 * Resolves once `store` is degraded: on its `hostgate:store-error`, or by its state when it is
 * degraded already. Call it before the fault the test makes. The message is published once,
 * when the store degrades, and on a loaded machine a short heartbeat can time out before the
 * fault: the store is then degraded with no message to come for the fault (CI's Node 24 leg
 * waited 20 s for one).
 */
export function storeOutage(store: RedisStore): Promise<void> {
  let listener: ((message: unknown) => void) | undefined;
  const message = new Promise<void>((resolve) => {
    listener = (m: unknown) => {
      if ((m as { store?: unknown }).store === store) resolve();
    };
    subscribe('hostgate:store-error', listener);
  });
  const state = until(() => store.degraded, 'degraded');
  return Promise.race([message, state]).finally(() => {
    unsubscribe('hostgate:store-error', listener!);
  });
}
