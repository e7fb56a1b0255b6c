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
/**
 * Longest gate name (UTF-8 bytes): the name is in all six keys of every script call, so a name
 * of this length already adds 1.2 KB to each; a name is an identifier, not data.
 */
export const MAX_GATE_NAME_BYTES = 200;
/**
 * While wake-ups cannot be pushed (the subscription is down, or the ACL user may not use
 * pub/sub), waiters are polled every `heartbeatMs / 8` (250 ms at defaults, at least 5 ms):
 * a grant is then noticed that much later, at one script per gate per poll while this process
 * has tickets queued, none when it has none.
 */
export const POLL_DIVISOR = 8;
/**
 * Default first-use wait: 100 ms. A process that finds no state in Redis for a gate it never
 * used cannot tell a first use from an empty restart or a flush, so nobody is granted for this
 * long while every live holder, told at once by a wake-up message, registers its leases again
 * (a healthy process does it in a round trip). The price: the first call of a gate that is
 * really new waits this long, once per gate (Redis keeps a gate's state 30 days past its use).
 */
export const DEFAULT_FIRST_USE_WAIT_MS = 100;
/** Default key prefix. */
export const DEFAULT_PREFIX = 'hostgate:';
/**
 * How long `close()` waits, by default, for the permits still held (calls still at the partner)
 * to come back before it gives back the rest: those held past it stay counted in Redis until
 * their lease runs out, never given back while their calls may still run.
 */
export const DEFAULT_DRAIN_MS = 5_000;

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
  /**
   * How long a gate Redis knows nothing of grants nothing, in ms (default 100; 0 grants at
   * once), when the caller never used it either: an empty restart or a flush looks exactly like
   * a first use to such a process, and this is the time live holders get to register their
   * leases again (they are told at once). See {@link DEFAULT_FIRST_USE_WAIT_MS}.
   */
  firstUseWaitMs?: number;
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
  /**
   * How long `close()` waits for the permits still held (default 5 000 ms, 0 not at all). A call
   * still at the partner holds its permit: close() sheds the waiters and grants nothing new at
   * once, but gives back a held permit only once it is released, so no other process takes it
   * while the call may still run. Permits still held when this passes stay counted in Redis
   * until their lease runs out.
   */
  drainMs?: number;
}

export interface ResolvedStoreOptions {
  prefix: string;
  leaseMs: number;
  heartbeatMs: number;
  firstUseWaitMs: number;
  /** How often queued tickets are re-checked while wake-ups are not pushed ({@link POLL_DIVISOR}). */
  pollMs: number;
  commandTimeoutMs: number;
  onStoreError: StoreErrorPolicy;
  localLimit: number | undefined;
  onLeaseLost: LeaseLostPolicy;
  replicas: number;
  drainMs: number;
}

const STORE_KEYS = [
  'client',
  'prefix',
  'leaseMs',
  'heartbeatMs',
  'firstUseWaitMs',
  'commandTimeoutMs',
  'onStoreError',
  'localLimit',
  'onLeaseLost',
  'replicas',
  'drainMs',
] as const;

export function resolveStoreOptions(options: RedisStoreOptions): ResolvedStoreOptions {
  checkObject('redisStore options', options);
  checkKnownKeys('redisStore', options, STORE_KEYS);
  const prefix = options.prefix ?? DEFAULT_PREFIX;
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) {
    throw new TypeError(`prefix must be a string without { or }, got ${describe(prefix)}`);
  }
  if (Buffer.byteLength(prefix) > MAX_GATE_NAME_BYTES) {
    throw new TypeError(
      `prefix must be at most ${MAX_GATE_NAME_BYTES} bytes (it is sent in every Redis key of every call), got ${Buffer.byteLength(prefix)} bytes`,
    );
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
  const firstUseWaitMs =
    options.firstUseWaitMs === undefined
      ? Math.min(DEFAULT_FIRST_USE_WAIT_MS, leaseMs)
      : options.firstUseWaitMs === 0
        ? 0
        : ms('firstUseWaitMs', options.firstUseWaitMs);
  if (firstUseWaitMs > leaseMs) {
    throw new RangeError(
      `firstUseWaitMs must be at most leaseMs (${leaseMs}): no lease outlives that, got ${firstUseWaitMs}`,
    );
  }
  return {
    prefix,
    leaseMs,
    heartbeatMs,
    firstUseWaitMs,
    pollMs: Math.max(5, Math.floor(heartbeatMs / POLL_DIVISOR)),
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
    drainMs:
      options.drainMs === undefined
        ? DEFAULT_DRAIN_MS
        : options.drainMs === 0
          ? 0
          : ms('drainMs', options.drainMs),
  };
}

function ms(name: string, value: unknown): number {
  return Math.ceil(durationMs(name, value));
}
