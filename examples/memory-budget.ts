/**
 * `npx tsx examples/memory-budget.ts`: jobs of known memory size under a memory budget, as
 * weighted permits. The budget (4 GB) is the gate's limit in MB, each job acquires its size
 * in MB before it allocates, so the work outside the semaphore can never hold more than the
 * budget — the second seed text's 4 GB, bounded.
 *
 * Memory is counted by an allocator that every job goes through (the budget check does not
 * depend on the GC's timing); with `--real` each job also allocates a real buffer, 1 KB per
 * MB, and the run checks `process.memoryUsage().arrayBuffers` against the scaled budget.
 * Exits non-zero if the budget was ever exceeded or a free MB sat idle while a job waited.
 */
import { performance } from 'node:perf_hooks';
import { Semaphore } from '../src/index.js';

export interface MemoryBudgetOptions {
  /** Budget, MB (default 4096). */
  budgetMb?: number;
  /** Job sizes, MB, in arrival order (default 200 jobs of 200 MB). */
  jobsMb?: number[];
  /** How long a job holds its memory, ms (default 20). */
  jobMs?: number;
  /** Also allocate a real buffer per job (1 KB per MB). */
  real?: boolean;
}

export interface MemoryBudgetReport {
  budgetMb: number;
  jobs: number;
  /** Most MB allocated at once, by the counting allocator. */
  peakMb: number;
  /** Mean MB in use over the run (time-weighted). */
  meanMb: number;
  /** Times a waiting job found enough free MB and still waited (0: work-conserving). */
  idleWhileWaiting: number;
  /** Real bytes in ArrayBuffers at the peak, with `real` (else 0). */
  peakArrayBufferBytes: number;
  elapsedMs: number;
}

/** Counts what jobs allocate: the oracle for "the budget is never exceeded". */
class CountingAllocator {
  inUseMb = 0;
  peakMb = 0;
  #since = performance.now();
  #mbMs = 0;
  readonly #started = this.#since;

  allocate(mb: number): void {
    this.#account();
    this.inUseMb += mb;
    if (this.inUseMb > this.peakMb) this.peakMb = this.inUseMb;
  }

  free(mb: number): void {
    this.#account();
    this.inUseMb -= mb;
  }

  meanMb(): number {
    this.#account();
    const elapsed = this.#since - this.#started;
    return elapsed > 0 ? this.#mbMs / elapsed : 0;
  }

  #account(): void {
    const now = performance.now();
    this.#mbMs += this.inUseMb * (now - this.#since);
    this.#since = now;
  }
}

const DEFAULT_JOBS: number[] = Array.from({ length: 200 }, () => 200);
/** `--mixed`: every 10th job needs 1500 MB; FIFO makes the small ones behind it wait. */
const MIXED_JOBS: number[] = Array.from({ length: 200 }, (_, i) => (i % 10 === 9 ? 1500 : 200));

export async function runMemoryBudget(
  options: MemoryBudgetOptions = {},
): Promise<MemoryBudgetReport> {
  const budgetMb = options.budgetMb ?? 4096;
  const jobsMb = options.jobsMb ?? DEFAULT_JOBS;
  const jobMs = options.jobMs ?? 20;
  // Every job is admitted (the queue is as long as the batch, the deadline generous): the
  // budget shapes when a job runs, never whether it runs.
  const gate = new Semaphore({
    limit: budgetMb,
    maxQueue: jobsMb.length,
    queueTimeout: 600_000,
    name: 'memory',
  });
  const memory = new CountingAllocator();
  let idleWhileWaiting = 0;
  let peakArrayBufferBytes = 0;
  const started = performance.now();

  const job = async (mb: number): Promise<void> => {
    memory.allocate(mb);
    const buffer = options.real ? Buffer.alloc(mb * 1024) : undefined;
    if (options.real) {
      peakArrayBufferBytes = Math.max(peakArrayBufferBytes, process.memoryUsage().arrayBuffers);
    }
    await new Promise((resolve) => setTimeout(resolve, jobMs));
    buffer?.fill(0);
    memory.free(mb);
  };

  await Promise.all(
    jobsMb.map((mb) =>
      gate
        .run(() => job(mb), { weight: mb })
        .finally(() => {
          // Work-conserving: right after a release, a waiter that fits must have been served.
          const s = gate.stats();
          if (s.queued > 0 && s.available >= Math.max(...jobsMb)) idleWhileWaiting++;
        }),
    ),
  );
  return {
    budgetMb,
    jobs: jobsMb.length,
    peakMb: memory.peakMb,
    meanMb: memory.meanMb(),
    idleWhileWaiting,
    peakArrayBufferBytes,
    elapsedMs: performance.now() - started,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const real = process.argv.includes('--real');
  const jobsMb = process.argv.includes('--mixed') ? MIXED_JOBS : DEFAULT_JOBS;
  const report = await runMemoryBudget({ real, jobsMb });
  const ok =
    report.peakMb <= report.budgetMb &&
    report.idleWhileWaiting === 0 &&
    (!real || report.peakArrayBufferBytes <= report.budgetMb * 1024 + 64 * 1024 * 1024);
  console.log(
    `${report.jobs} jobs under a ${report.budgetMb} MB budget in ${Math.round(report.elapsedMs)} ms: ` +
      `peak ${report.peakMb} MB, mean ${Math.round(report.meanMb)} MB in use ` +
      `(${Math.round((report.meanMb / report.budgetMb) * 100)}% of the budget)` +
      (real ? `, peak ArrayBuffers ${(report.peakArrayBufferBytes / 2 ** 20).toFixed(1)} MiB` : ''),
  );
  console.log(ok ? 'BUDGET HELD' : 'BUDGET EXCEEDED OR IDLE WHILE WAITING');
  process.exitCode = ok ? 0 : 1;
}
