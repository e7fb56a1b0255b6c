export { limitHosts } from './dispatcher/limit-hosts.js';
export {
  ClientDisconnectedError,
  findShedError,
  HostgateError,
  type HostgateErrorCode,
  isHostgateError,
  isShedError,
  PermitHoldTimeoutError,
  QueueFullError,
  QueueTimeoutError,
  ShedError,
  TooManyHostsError,
  UnknownHostError,
} from './errors.js';
export { type FetchFunction, limitFetch } from './fetch.js';
export type { DurationSummary } from './histogram.js';
export {
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_MAX_HOSTS,
  DEFAULT_UNKNOWN_HOST_GATE,
  type GateOptions,
  HostLimiter,
  type HostLimiterOptions,
  type PartnerRule,
} from './host-limiter.js';
export {
  type AcquireOptions,
  DEFAULT_QUEUE_PER_PERMIT,
  DEFAULT_QUEUE_TIMEOUT_MS,
  MAX_RETRY_AFTER_MS,
  Permit,
  Semaphore,
  type SemaphoreOptions,
  type SemaphoreStats,
  type WaitTarget,
  type WaitTicket,
} from './semaphore.js';
