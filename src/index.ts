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
export type { DurationSummary } from './histogram.js';
export {
  type AcquireOptions,
  DEFAULT_QUEUE_PER_PERMIT,
  DEFAULT_QUEUE_TIMEOUT_MS,
  MAX_RETRY_AFTER_MS,
  Permit,
  Semaphore,
  type SemaphoreOptions,
  type SemaphoreStats,
} from './semaphore.js';
