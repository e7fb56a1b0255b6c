/**
 * The contenders of the Semaphore benchmark, each behind the same two calls: run a task under
 * the limit, and (where the library supports it) run one that an AbortSignal can cancel while
 * it waits. Each adapter is written the way that library's README says to use it.
 */

import { Semaphore as MutexSemaphore } from 'async-mutex';
import { Sema } from 'async-sema';
import Bottleneck from 'bottleneck';
import { bulkhead } from 'cockatiel';
import pLimit from 'p-limit';
import PQueue from 'p-queue';
import { Semaphore } from '../src/gate/semaphore.js';

export type Task = () => Promise<void>;

/** How a library treats a waiter whose signal aborts. */
export type CancelMode =
  /** Rejects at once and frees the queue slot. */
  | 'eager'
  /** Rejects only when the aborted entry reaches the head of the queue. */
  | 'lazy';

export interface Contender {
  run(task: Task): Promise<unknown>;
  /** Absent when the library cannot cancel a single waiter. */
  runWithSignal?: (task: Task, signal: AbortSignal) => Promise<unknown>;
}

export interface LibInfo {
  id: string;
  label: string;
  /** How waiters are cancelled, or why they cannot be. */
  cancel: CancelMode | 'n/a';
  note: string;
  /** The cases this entry takes part in; all when absent. */
  kinds?: readonly CaseKind[];
  /**
   * Cap on tasks per timed round, for a library paced by timers rather than CPU: its ops/s
   * hardly depend on the size, and full-size rounds would take minutes.
   */
  maxTasks?: number;
  make(permits: number, maxWaiters: number): Contender;
}

/** hostgate as a busy user gate runs: a 30 s wait deadline and a queue bound of ≥ 100,000. */
export const HOSTGATE_QUEUE_TIMEOUT_MS = 30_000;
export const HOSTGATE_MIN_MAX_QUEUE = 100_000;

/** The run() rows' adapter: a task, with the caller's signal when the case cancels. */
const runAdapter = (gate: Semaphore) => ({
  run: (task: () => Promise<unknown>) => gate.run(task),
  runWithSignal: (task: () => Promise<unknown>, signal: AbortSignal) => gate.run(task, { signal }),
});

/** hostgate's gate as every hostgate row runs it: a busy gate's deadline and queue bound. */
function benchGate(permits: number, maxWaiters: number, observe = false): Semaphore {
  return new Semaphore({
    limit: permits,
    maxQueue: Math.max(HOSTGATE_MIN_MAX_QUEUE, maxWaiters),
    queueTimeout: HOSTGATE_QUEUE_TIMEOUT_MS,
    name: 'bench',
    observe,
  });
}

export const LIBS: readonly LibInfo[] = [
  {
    id: 'hostgate',
    label: 'hostgate',
    cancel: 'eager',
    note: `Semaphore.run, queueTimeout ${HOSTGATE_QUEUE_TIMEOUT_MS} ms, maxQueue ≥ ${HOSTGATE_MIN_MAX_QUEUE}`,
    make(permits, maxWaiters) {
      return runAdapter(benchGate(permits, maxWaiters));
    },
  },
  {
    // What every HostLimiter gate runs with: wait and hold histograms, a clock reading per
    // permit (README: "What observation costs"). Not a peer: hostgate's own cost of measuring.
    id: 'hostgate-observed',
    label: 'hostgate, observe: true',
    cancel: 'eager',
    note: 'as hostgate, with observe: true (histograms and a clock reading per permit)',
    make(permits, maxWaiters) {
      return runAdapter(benchGate(permits, maxWaiters, true));
    },
  },
  {
    // The shape async-sema's row is driven with (its README's): the same adapter around
    // hostgate's acquire() and release(), for a like-for-like reading of the core. Not a peer,
    // and not the headline: the hostgate row (run()) is what the targets are read on.
    id: 'hostgate-acquire',
    label: 'hostgate, acquire/release (async-sema’s shape)',
    cancel: 'n/a',
    note: 'await gate.acquire(); try { fn } finally { permit.release() }, the adapter async-sema runs with; queueTimeout and maxQueue as hostgate',
    kinds: ['burst', 'burst-heap', 'steady'],
    make(permits, maxWaiters) {
      const gate = benchGate(permits, maxWaiters);
      return {
        async run(task) {
          const permit = await gate.acquire();
          try {
            await task();
          } finally {
            permit.release();
          }
        },
      };
    },
  },
  {
    id: 'p-limit',
    label: 'p-limit 6.2.0',
    cancel: 'n/a',
    note: 'limit(fn); no per-waiter cancel (only clearQueue)',
    make(permits) {
      const limit = pLimit(permits);
      return { run: (task) => limit(task) };
    },
  },
  {
    id: 'p-queue',
    label: 'p-queue 8.1.0',
    cancel: 'lazy',
    note: 'queue.add(fn, { signal })',
    make(permits) {
      const queue = new PQueue({ concurrency: permits });
      return {
        run: (task) => queue.add(task),
        runWithSignal: (task, signal) => queue.add(task, { signal }),
      };
    },
  },
  {
    id: 'async-sema',
    label: 'async-sema 3.1.1',
    cancel: 'n/a',
    note: 'await acquire(); try { fn } finally { release() }; no cancel',
    make(permits) {
      const sema = new Sema(permits);
      return {
        async run(task) {
          await sema.acquire();
          try {
            await task();
          } finally {
            sema.release();
          }
        },
      };
    },
  },
  {
    id: 'async-mutex',
    label: 'async-mutex 0.5.0',
    cancel: 'n/a',
    note: 'Semaphore.runExclusive(fn); cancel() rejects every waiter, not one',
    make(permits) {
      const semaphore = new MutexSemaphore(permits);
      return { run: (task) => semaphore.runExclusive(task) };
    },
  },
  {
    id: 'cockatiel',
    label: 'cockatiel 3.2.1',
    cancel: 'lazy',
    note: 'bulkhead(n, Infinity).execute(fn, signal); a cancelled entry uses up the dequeue a finishing task makes, so the entries behind it wait for more traffic',
    make(permits) {
      const policy = bulkhead(permits, Number.POSITIVE_INFINITY);
      return {
        run: (task) => policy.execute(task),
        runWithSignal: (task, signal) => policy.execute(task, signal),
      };
    },
  },
  {
    id: 'bottleneck',
    label: 'bottleneck 2.19.5',
    cancel: 'n/a',
    note: 'new Bottleneck({ maxConcurrent }).schedule(fn); no per-job cancel; starts every job from a timer (about one per ms), so its timed rounds run fewer tasks',
    maxTasks: 500,
    make(permits) {
      const limiter = new Bottleneck({ maxConcurrent: permits });
      return { run: (task) => limiter.schedule(task) };
    },
  },
  {
    id: 'floor',
    label: '(floor: bare AbortSignal)',
    cancel: 'eager',
    note: 'no library: a promise rejected by an abort listener, the least any abortable waiter costs in Node',
    kinds: ['cancel'],
    make() {
      return {
        run: (task) => task(),
        runWithSignal: (_task, signal) =>
          new Promise((_resolve, reject) => {
            signal.addEventListener('abort', () => reject(signal.reason), { once: true });
          }),
      };
    },
  },
];

export function libById(id: string): LibInfo {
  const lib = LIBS.find((l) => l.id === id);
  if (lib === undefined) {
    throw new Error(`unknown library ${JSON.stringify(id)}; one of ${LIBS.map((l) => l.id)}`);
  }
  return lib;
}

export type CaseKind = 'burst' | 'burst-heap' | 'steady' | 'cancel';

export interface CaseParams {
  lib: string;
  kind: CaseKind;
  permits: number;
  /** burst, burst-heap, cancel: tasks or waiters. steady: workers. */
  n: number;
  /** steady: acquire/release cycles per worker. */
  cycles: number;
  /** Run a smaller untimed round first so the measured one runs warm code. */
  warmup: boolean;
  /** Throughput rounds at most (default 3; the smoke run: 1). */
  rounds?: number;
  /** Run exactly `rounds` rounds, however long they take (under callgrind, where time means nothing). */
  exactRounds?: boolean;
}

export interface CaseResult {
  params: CaseParams;
  /** Wall time of the measured round, ms. */
  elapsedMs: number;
  /** Tasks completed (burst, steady) per second of `elapsedMs`. */
  opsPerSec?: number;
  /** burst, steady: every measured round in this process, ms; `elapsedMs` is the fastest. */
  roundsMs?: number[];
  /** burst-heap: heap after GC with every waiter parked, minus the baseline, per waiter. */
  heapBytesPerWaiter?: number;
  /** Most tasks ever inside the critical section at once (must not exceed `permits`). */
  maxActive: number;
  /**
   * The library did not finish the case, e.g. aborted waiters that never settle. A finding
   * about that library, reported in its cell; not a harness error.
   */
  failure?: string;
}
