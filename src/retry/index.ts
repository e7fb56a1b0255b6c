export { PartnerCooldownError } from '../common/errors.js';
export { parseRetryAfter } from '../common/retry-after.js';
export type { RetryStats } from './partner-state.js';
export {
  type CooldownOptions,
  DEFAULT_BASE_DELAY_MS,
  DEFAULT_BUDGET_PERCENT,
  DEFAULT_IDEMPOTENCY_KEY_HEADER,
  DEFAULT_MAX_COOLDOWN_MS,
  DEFAULT_MAX_DELAY_MS,
  DEFAULT_MAX_RETRY_AFTER_MS,
  DEFAULT_MAX_RETRY_TIME_MS,
  DEFAULT_MIN_RETRY_CONCURRENCY,
  DEFAULT_RETRIES,
  DEFAULT_RETRY_METHODS,
  DEFAULT_RETRY_STATUSES,
  type RetryPolicy,
  type RetryPolicyOptions,
} from './policy.js';
export { createRetrier, Retrier, retry, withRetry } from './retrier.js';
export type { FetchLike, ResponseLike, RetrierOptions, RetryEvent, RetryRequest } from './types.js';
