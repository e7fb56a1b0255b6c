/**
 * What a shared gate and its parts (its tickets, its fallback, its leases) use of the store and
 * of each other, declared below them: the store's calls (with the gate bound, for the parts),
 * the cluster as Redis last described it, and the gate's public face. shared-semaphore.ts
 * builds the parts, so a part importing it back would close an import circle.
 */
import type { SharedLayoutError, StoreUnavailableError } from '../common/errors.js';
import type { ResolvedStoreOptions } from './options.js';
import type { SharedWaiter } from './shared-waiter.js';
import type { WakeupMode } from './wakeups.js';

/** A Redis reply of a gate's script: cluster-wide holders and tickets (and live processes). */
export interface ClusterCounts {
  held: number;
  queued: number;
}

/**
 * ACQUIRE's answer: 1 granted, 0 queued, -1 refused (heavier than the cap Redis holds), -2
 * refused (its rate slot comes after its deadline), -3 refused (costlier than burst + 1).
 */
export type GrantAnswer = 1 | 0 | -1 | -2 | -3;

/** ACQUIRE's whole answer; `retryMs` for -2 and -3 (see {@link GrantAnswer}). */
export interface AcquireAnswer extends ClusterCounts {
  granted: GrantAnswer;
  processes: number;
  cap: number;
  recoveryMs: number;
  retryMs: number;
}

/** CLAIM's answer: `sinceMs`, on a gate with a rate, ms since Redis made the grant (0: now). */
export interface ClaimAnswer extends ClusterCounts {
  granted: boolean;
  cap: number;
  sinceMs: number;
}

/**
 * What a shared gate uses of its store (a `RedisStore`), declared here rather than imported:
 * store.ts builds the gates, so importing it back would close an import circle. `Gate` is the
 * gate (shared-semaphore.ts names it `SharedGateStore`, with its own type).
 */
export interface StoreOfGates<Gate> {
  readonly options: ResolvedStoreOptions;
  readonly closed: boolean;
  readonly degraded: boolean;
  nextId(weight?: number, cost?: number): string;
  acquire(gate: Gate, id: string, deadlineMs: number): Promise<AcquireAnswer>;
  claim(
    gate: Gate,
    id: string,
    /** A rated grant: 1 read late (take it again), 2 taken again before (never again), 0 check. */
    late?: 0 | 1 | 2,
  ): Promise<ClaimAnswer>;
  replicate(): Promise<void>;
  setCap(gate: Gate, cap: number): Promise<{ cap: number } & ClusterCounts>;
  setRate(gate: Gate, rate: string): Promise<{ cap: number } & ClusterCounts>;
  settle(gate: Gate, units: number): void;
  release(gate: Gate, ids: readonly string[]): void;
  forget(id: string): void;
  readonly wakeups: WakeupMode;
  readonly wakeupEpoch: number;
  wakeupsUnreliableSince(epoch: number): boolean;
  recheck(gate: Gate): void;
}

/** The store's calls for one gate, the gate bound: what the gate's parts use. */
export interface GateStore {
  readonly options: ResolvedStoreOptions;
  readonly closed: boolean;
  readonly degraded: boolean;
  readonly wakeups: WakeupMode;
  readonly wakeupEpoch: number;
  nextId(weight?: number, cost?: number): string;
  acquire(id: string, deadlineMs: number): Promise<AcquireAnswer>;
  claim(id: string, late: 0 | 1 | 2): Promise<ClaimAnswer>;
  replicate(): Promise<void>;
  release(ids: readonly string[]): void;
  forget(id: string): void;
  recheck(): void;
  wakeupsUnreliableSince(epoch: number): boolean;
}

/** `store`'s calls with `gate` bound. */
export function bindStore<Gate>(store: StoreOfGates<Gate>, gate: Gate): GateStore {
  return {
    get options() {
      return store.options;
    },
    get closed() {
      return store.closed;
    },
    get degraded() {
      return store.degraded;
    },
    get wakeups() {
      return store.wakeups;
    },
    get wakeupEpoch() {
      return store.wakeupEpoch;
    },
    nextId: (weight, cost) => store.nextId(weight, cost),
    acquire: (id, deadlineMs) => store.acquire(gate, id, deadlineMs),
    claim: (id, late) => store.claim(gate, id, late),
    replicate: () => store.replicate(),
    release: (ids) => store.release(gate, ids),
    forget: (id) => store.forget(id),
    recheck: () => store.recheck(gate),
    wakeupsUnreliableSince: (epoch) => store.wakeupsUnreliableSince(epoch),
  };
}

/** The whole cluster as of Redis's last answer, and this process's part of it. */
export interface ClusterView {
  /** The cap every process shares: Redis's (the first process set it). */
  cap: number;
  /** Units held across every process. */
  held: number;
  /** This process's units when Redis last answered: the rest of `held` is others'. */
  ownHeld: number;
  /** Tickets waiting across every process. */
  queued: number;
  /** Processes that used the gate within a lease (1 until Redis says). */
  processes: number;
  /** Redis has answered this process about this gate before (so a missing state means a loss). */
  known: boolean;
}

/** What the parts read and call of the gate itself (its public face). */
export interface PartsGate {
  readonly name: string | undefined;
  readonly held: number;
  readonly limit: number;
  readonly sharedLimit: number;
  now(): number;
  /** A Redis answer: the cluster's holders and tickets, and the cap Redis holds. */
  cluster(held: number, queued: number, cap: number): void;
  layoutRefused(error: SharedLayoutError): void;
}

/** How a waiter leaves the queue (shared-tickets.ts), as the fallback calls it. */
export interface WaiterExits {
  /** `waiter` gets its permit (`inRedis` false: granted by the local fallback). */
  grant(waiter: SharedWaiter, inRedis: boolean): void;
  /** `waiter` leaves with `QueueFullError` (its ticket, if any, withdrawn). */
  shedFull(waiter: SharedWaiter): void;
  /** Counts and publishes a caller shed because Redis is unavailable under `'reject'`. */
  shedUnavailable(): StoreUnavailableError;
}
