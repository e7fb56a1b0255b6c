/**
 * `hostgate/redis`: gates whose cap is shared by every process on one Redis (node-redis 6 or
 * ioredis 6), with leases, fair FIFO waiting across processes and pushed wake-ups.
 *
 * @packageDocumentation
 * @module hostgate/redis
 */

export { LeaseLostError, SharedLayoutError, StoreUnavailableError } from '../common/errors.js';
export {
  type LeaseLostMessage,
  type StoreErrorMessage,
  storeChannels,
  type WakeupsDownMessage,
} from './channels.js';
export type { StoreClient, Subscriber } from './client.js';
export {
  type LeasedGateView,
  type LeasedRateView,
  LeasedSemaphore,
  type LeasedSemaphoreStats,
} from './leased-gate.js';
export { LEASED_LAYOUT, LEASED_RATE_LAYOUT } from './leased-scripts.js';
export {
  ASK_DIVISOR,
  DEFAULT_REFRESH_MS,
  type LeasedGateOptions,
  type LeasedSemaphoreOptions,
  type ShareMode,
} from './leased-share.js';
export {
  DEFAULT_COMMAND_TIMEOUT_MS,
  DEFAULT_FIRST_USE_WAIT_MS,
  DEFAULT_HEARTBEAT_DIVISOR,
  DEFAULT_LEASE_MS,
  DEFAULT_PREFIX,
  type LeaseLostPolicy,
  MAX_GATE_NAME_BYTES,
  POLL_DIVISOR,
  type RedisStoreOptions,
  type ResolvedStoreOptions,
  type StoreErrorPolicy,
} from './options.js';
export type { AcquireAnswer, ClaimAnswer, GrantAnswer } from './shared-semaphore.js';
export {
  type SharedGateView,
  SharedSemaphore,
  type SharedSemaphoreOptions,
  type SharedSemaphoreStats,
} from './shared-semaphore.js';
export { type ClusterCounts, RedisStore, redisStore } from './store.js';
export { NO_WAKEUPS, type WakeupMode } from './wakeups.js';
export { STORE_UNAVAILABLE } from './warnings.js';
