/** The Redis store's options and defaults, each number with its reason. */
import {
  checkKnownKeys,
  checkObject,
  describe,
  durationMs,
  positiveInteger,
} from '../common/options.js';

/**
 * Default lease: 10 s. A process killed with SIGKILL keeps its permits this long (plus up to one
 * heartbeat): 10 s of a partner's capacity lost once per crash. A live process renews every
 * heartbeat, so only an event-loop stall (or a Redis outage) longer than `leaseMs − heartbeatMs`
 * = 8 s loses a lease; healthy Node processes stall for milliseconds, a full GC for well under 1 s.
 */
export const DEFAULT_LEASE_MS = 10_000;
/**
 * Default heartbeat: a fifth of the lease (2 s): four renewals may fail in a row before a lease
 * lapses. The heartbeat is also the safety re-check for a lost wake-up, so a wake-up lost to a
 * reconnect costs at most 2 s of waiting (bounded anyway by the waiter's own deadline).
 */
export const DEFAULT_HEARTBEAT_DIVISOR = 5;
/**
 * Default per-command timeout: 1 s. Neither client has one by default; Redis on a LAN answers
 * in well under a millisecond, so a second of silence means it is paused, gone, or swamped.
 */
export const DEFAULT_COMMAND_TIMEOUT_MS = 1000;
/** Default key prefix. */
export const DEFAULT_PREFIX = 'hostgate:';

/** What a shared gate does when Redis fails or is too slow. */
export type StoreErrorPolicy = 'local' | 'reject';
/** What happens to a request whose lease Redis lost (a long stall, a Redis restart). */
export type LeaseLostPolicy = 'continue' | 'abort';

export interface RedisStoreOptions {
  /** A connected node-redis 6 or ioredis 6 client. The store never closes it. */
  client: unknown;
  /** Key and channel prefix (default `'hostgate:'`); no `{` or `}` (the hash tag is ours). */
  prefix?: string;
  /** Lease length in ms (default 10 000). A dead process's permits return after at most this. */
  leaseMs?: number;
  /** Renewal period in ms (default `leaseMs / 5`); must be under `leaseMs / 2`. */
  heartbeatMs?: number;
  /** Timeout of every Redis call the store makes, in ms (default 1000). */
  commandTimeoutMs?: number;
  /**
   * Redis unreachable or too slow: `'local'` (default) admits up to a local share of each cap,
   * `localLimit`, else what the process held plus its part of the cap that was free, never more
   * than the larger of its holdings and `ceil(limit / processes last seen)` (1 for a process
   * that never reached Redis); `'reject'` sheds with
   * `StoreUnavailableError` (503 through `shed()`).
   */
  onStoreError?: StoreErrorPolicy;
  /** This process's share of every shared cap while Redis is unreachable (default: computed). */
  localLimit?: number;
  /** A lost lease is always counted and published; `'abort'` also aborts its request. */
  onLeaseLost?: LeaseLostPolicy;
  /**
   * Strict mode: after granting, wait until this many replicas have the grant (`WAIT`), so a
   * failover cannot lose it; a grant not replicated in time is given back and shed.
   */
  replicas?: number;
}

export interface ResolvedStoreOptions {
  prefix: string;
  leaseMs: number;
  heartbeatMs: number;
  commandTimeoutMs: number;
  onStoreError: StoreErrorPolicy;
  localLimit: number | undefined;
  onLeaseLost: LeaseLostPolicy;
  replicas: number;
}

const STORE_KEYS = [
  'client',
  'prefix',
  'leaseMs',
  'heartbeatMs',
  'commandTimeoutMs',
  'onStoreError',
  'localLimit',
  'onLeaseLost',
  'replicas',
] as const;

export function resolveStoreOptions(options: RedisStoreOptions): ResolvedStoreOptions {
  checkObject('redisStore options', options);
  checkKnownKeys('redisStore', options, STORE_KEYS);
  const prefix = options.prefix ?? DEFAULT_PREFIX;
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) {
    throw new TypeError(`prefix must be a string without { or }, got ${describe(prefix)}`);
  }
  const leaseMs = options.leaseMs === undefined ? DEFAULT_LEASE_MS : ms('leaseMs', options.leaseMs);
  const heartbeatMs =
    options.heartbeatMs === undefined
      ? Math.max(1, Math.floor(leaseMs / DEFAULT_HEARTBEAT_DIVISOR))
      : ms('heartbeatMs', options.heartbeatMs);
  if (heartbeatMs * 2 > leaseMs) {
    throw new TypeError(
      `heartbeatMs must be at most half of leaseMs (${leaseMs}), got ${describe(heartbeatMs)}`,
    );
  }
  const onStoreError = options.onStoreError ?? 'local';
  if (onStoreError !== 'local' && onStoreError !== 'reject') {
    throw new TypeError(`onStoreError must be 'local' or 'reject', got ${describe(onStoreError)}`);
  }
  const onLeaseLost = options.onLeaseLost ?? 'continue';
  if (onLeaseLost !== 'continue' && onLeaseLost !== 'abort') {
    throw new TypeError(`onLeaseLost must be 'continue' or 'abort', got ${describe(onLeaseLost)}`);
  }
  return {
    prefix,
    leaseMs,
    heartbeatMs,
    commandTimeoutMs:
      options.commandTimeoutMs === undefined
        ? DEFAULT_COMMAND_TIMEOUT_MS
        : ms('commandTimeoutMs', options.commandTimeoutMs),
    onStoreError,
    localLimit:
      options.localLimit === undefined
        ? undefined
        : positiveInteger('localLimit', options.localLimit),
    onLeaseLost,
    replicas: options.replicas === undefined ? 0 : positiveInteger('replicas', options.replicas),
  };
}

function ms(name: string, value: unknown): number {
  return Math.ceil(durationMs(name, value));
}
