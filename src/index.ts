/**
 * `hostgate`: per-partner concurrency caps for outbound HTTP from Node.js. Gates
 * (`Semaphore`), partner rules (`HostLimiter`), undici interceptors (`limitHosts`, `limitGate`,
 * `LimitedAgent`), fetch wrappers (`limitFetch`, `withDispatcher`), retries (`Retrier`), errors
 * and observability. Guides: README.md and docs/.
 *
 * @packageDocumentation
 * @module hostgate
 */
export { AimdLimit, type AimdOptions } from './adaptive/aimd.js';
export type { LimitAlgorithm, LimitBounds, LimitSample } from './adaptive/algorithm.js';
export type { AdaptiveStats } from './adaptive/controller.js';
export { GradientLimit, type GradientOptions } from './adaptive/gradient.js';
export type { AdaptiveAlgorithmName, AdaptiveOptions } from './adaptive/options.js';
export {
  ClientDisconnectedError,
  DeadlineExceededError,
  DeadlineShedError,
  findShedError,
  HostgateError,
  type HostgateErrorCode,
  isHostgateError,
  isShedError,
  LeaseLostError,
  PartnerOpenError,
  PermitHoldTimeoutError,
  QueueClearedError,
  QueueFullError,
  QueueTimeoutError,
  RateLimitedError,
  ResponseSentError,
  SharedLayoutError,
  ShedError,
  StoreUnavailableError,
  TooManyHostsError,
  UnknownHostError,
} from './common/errors.js';
export type { DurationHistogram, DurationSummary } from './common/histogram.js';
export {
  type HeaderReader,
  type RateLimitSignal,
  readRateLimit,
} from './common/rate-limit-headers.js';
export {
  deadlineShedCount,
  expectedWaitMs,
  formatDuration,
  formatGrpcTimeout,
  type GateLoad,
  MAX_BUDGET_MS,
  parseDuration,
  parseGrpcTimeout,
  shedForDeadline,
} from './gate/deadline.js';
export {
  type AcquireMessage,
  type AcquireSite,
  channels,
  type DoubleReleaseMessage,
  type HoldTimeoutMessage,
  type PermitRequestInfo,
  type ReleaseMessage,
  type ReleaseReason,
  type RequestErrorMessage,
  type ResponseMessage,
  type ShedMessage,
  type ShedReason,
  type WaitAbortedMessage,
} from './gate/diagnostics.js';
export { DEFAULT_PARTNER_RATE_SLACK_MS } from './gate/rate.js';
export {
  type AcquireOptions,
  DEFAULT_QUEUE_PER_PERMIT,
  DEFAULT_QUEUE_TIMEOUT_MS,
  type DurationHistogramView,
  type LocalRateOptions,
  MAX_RETRY_AFTER_MS,
  type Permit,
  type PermitTarget,
  type PriorityClassOptions,
  type PriorityClassStats,
  type RateOptions,
  type RateStats,
  Semaphore,
  type SemaphoreOptions,
  type SemaphoreStats,
  type TryAcquireOptions,
  type WaitOptions,
  type WaitTarget,
  type WaitTicket,
} from './gate/semaphore.js';
export { type FetchFunction, type LimitedFetch, limitFetch } from './http/fetch.js';
export { withDispatcher } from './http/global-fetch.js';
export type { AnyDispatch, AnyDispatcher, DispatchInterceptor } from './http/interceptor.js';
export { limitGate, limitHosts } from './http/limit-hosts.js';
export { LimitedAgent, type WrappedDispatcher } from './http/limited-agent.js';
export { type PriorityClassOption, withPriority } from './http/priority.js';
export { LimitedHttpAgent, type WrappedHttpAgent } from './node-http/limited-http-agent.js';
export {
  BREAKER_STATE_VALUES,
  type BucketCounts,
  DEFAULT_MAX_ORIGIN_LABELS,
  DEFAULT_STALL_AFTER_MS,
  HOLD_BUCKETS_SECONDS,
  MetricsCollector,
  type MetricsCollectorOptions,
  OTHER_ORIGINS,
  type PartnerMetrics,
  type PriorityClassMetrics,
  type RetryStatsSource,
  type SharedPartnerMetrics,
  WAIT_BUCKETS_SECONDS,
} from './observe/collector.js';
export {
  detectLeaks,
  type GateSource,
  LeakDetector,
  type LeakDetectorOptions,
  type LeakMessage,
  type LeakSuspect,
  leakSuspects,
} from './observe/leaks.js';
export {
  type BreakerOptions,
  type BreakerStats,
  DEFAULT_BREAKER_FAILURES,
  DEFAULT_BREAKER_MIN_CALLS,
  DEFAULT_BREAKER_WINDOW_MS,
  DEFAULT_HALF_OPEN_AFTER_MS,
} from './partners/breaker.js';
export {
  DEFAULT_EVICT_IDLE_AFTER_MS,
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_MAX_HOSTS,
  DEFAULT_UNKNOWN_HOST_GATE,
  type GateOptions,
  type GateStats,
  type GateStore,
  HostLimiter,
  type HostLimiterOptions,
  OVERFLOW_ORIGINS,
  type PartnerRule,
  type SharedRule,
} from './partners/host-limiter.js';
export {
  DEFAULT_MAX_RESET_MS,
  type PartnerHoldStats,
  type RateLimitHeadersOptions,
} from './partners/partner-guard.js';
export type {
  CostRequest,
  CostResponse,
  RequestCost,
  SettleCost,
} from './partners/rate-rules.js';
export * from './retry/index.js';
