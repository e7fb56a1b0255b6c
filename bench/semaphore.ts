/**
 * Semaphore micro-benchmark: hostgate against the usual limiters, side by side, 20 permits.
 *
 *   npm run bench                     full run (median of 5 runs per cell)
 *   npm run bench -- --smoke          tiny sizes, 1 run: for CI (exit code ≠ 0 on any error)
 *   npm run bench -- --json out.json  also write every run's numbers to a file
 *   npm run bench -- --runs 3 --only hostgate,async-sema --cases burst,steady
 *
 * Every (library, case, run) is a fresh process (bench/semaphore-case.ts, `--expose-gc`), so
 * no JIT state, heap or timer carries over. A throughput run is the best of up to 3 rounds in
 * its process (other load on the machine only adds time); a cell is the median over runs.
 * Heap is deterministic to ~1% and gets at most 3 runs. Cases:
 *   burst   100,000 tasks submitted at once, each holding its permit for one microtask: ops/s.
 *   heap    the same burst with the first tasks blocked: heap after GC, per parked waiter.
 *   steady  1,000 workers × 100 acquire/release cycles: ops/s.
 *   cancel  10,000 and 100,000 waiters, each with its own AbortSignal, all aborted in random
 *           order: time until every waiter has rejected; 100k/10k shows the cost per cancel.
 */
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { runChild } from './lib/child.js';
import { formatBytes, formatMs, formatOps, formatRatio, ratio, summarize } from './lib/stats.js';
import { markdownTable } from './lib/table.js';
import {
  type CaseKind,
  type CaseParams,
  type CaseResult,
  HOSTGATE_MIN_MAX_QUEUE,
  HOSTGATE_QUEUE_TIMEOUT_MS,
  LIBS,
  type LibInfo,
} from './semaphore-libs.js';

const CASE_SCRIPT = new URL('./semaphore-case.ts', import.meta.url);
const PERMITS = 20;
/** Heap per waiter varies by ~1% between runs: more runs buy nothing. */
const HEAP_RUNS = 3;

/** The issue's targets. */
const TARGET_CANCEL_RATIO = 12;

interface Sizes {
  burst: number;
  steadyWorkers: number;
  steadyCycles: number;
  cancel: readonly [small: number, large: number];
}

const FULL: Sizes = {
  burst: 100_000,
  steadyWorkers: 1000,
  steadyCycles: 100,
  cancel: [10_000, 100_000],
};
const SMOKE: Sizes = { burst: 500, steadyWorkers: 20, steadyCycles: 5, cancel: [100, 1000] };

type Column = 'burst' | 'heap' | 'steady' | 'cancelSmall' | 'cancelLarge';

interface Job {
  lib: LibInfo;
  column: Column;
  params: CaseParams;
}

interface Cell {
  params: CaseParams;
  /** One value per successful run: ops/s, bytes per waiter or ms. */
  values: number[];
  /** The same values by run number, to pair the two cancel sizes of one run. */
  byRun: Map<number, number>;
  failure?: string;
  /** Trouble the runtime reported on stderr although the case finished (e.g. stack overflow). */
  warnings: string[];
  errors: string[];
}

/** V8 messages on a child's stderr worth a footnote. */
const STDERR_WARNINGS: readonly [pattern: RegExp, text: string][] = [
  [/Maximum call stack size exceeded/, 'V8 reported "Maximum call stack size exceeded"'],
];

function parseOptions() {
  const { values } = parseArgs({
    options: {
      smoke: { type: 'boolean', default: false },
      json: { type: 'string' },
      runs: { type: 'string' },
      only: { type: 'string' },
      cases: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(
      'usage: tsx bench/semaphore.ts [--smoke] [--json FILE] [--runs N] [--only lib,...] [--cases burst,heap,steady,cancel]',
    );
    console.log(`libraries: ${LIBS.map((l) => l.id).join(', ')}`);
    process.exit(0);
  }
  const runs = values.runs === undefined ? (values.smoke ? 1 : 5) : Number(values.runs);
  if (!Number.isSafeInteger(runs) || runs < 1)
    throw new Error(`--runs must be ≥ 1, got ${values.runs}`);
  const only = values.only?.split(',').map((s) => s.trim());
  for (const id of only ?? []) {
    if (!LIBS.some((l) => l.id === id)) throw new Error(`--only: unknown library ${id}`);
  }
  const kinds = ['burst', 'heap', 'steady', 'cancel'];
  const cases = values.cases?.split(',').map((s) => s.trim()) ?? kinds;
  for (const c of cases) if (!kinds.includes(c)) throw new Error(`--cases: unknown case ${c}`);
  return { smoke: values.smoke, json: values.json, runs, only, cases };
}

function plan(
  sizes: Sizes,
  libs: readonly LibInfo[],
  cases: readonly string[],
  smoke: boolean,
): Job[] {
  const jobs: Job[] = [];
  for (const lib of libs) {
    const cap = (lib.maxTasks ?? Number.POSITIVE_INFINITY) / (smoke ? 20 : 1);
    const takes = (kind: CaseKind) => lib.kinds === undefined || lib.kinds.includes(kind);
    const add = (column: Column, kind: CaseKind, n: number, cycles = 0) =>
      jobs.push({
        lib,
        column,
        params: smoke
          ? { lib: lib.id, kind, permits: PERMITS, n, cycles, warmup: false, rounds: 1 }
          : { lib: lib.id, kind, permits: PERMITS, n, cycles, warmup: true },
      });
    if (cases.includes('burst') && takes('burst'))
      add('burst', 'burst', Math.min(sizes.burst, cap));
    // Heap needs the waiters parked, not run: full size for everyone (the smoke run only
    // checks that each case completes, so it keeps a timer-paced library to its cap).
    if (cases.includes('heap') && takes('burst-heap'))
      add('heap', 'burst-heap', smoke ? Math.min(sizes.burst, cap) : sizes.burst);
    if (cases.includes('steady') && takes('steady')) {
      let workers = sizes.steadyWorkers;
      let cycles = sizes.steadyCycles;
      if (workers * cycles > cap) {
        workers = Math.min(workers, Math.max(1, Math.floor(cap / 10)));
        cycles = Math.max(1, Math.floor(cap / workers));
      }
      add('steady', 'steady', workers, cycles);
    }
    if (cases.includes('cancel') && takes('cancel') && lib.cancel !== 'n/a') {
      add('cancelSmall', 'cancel', sizes.cancel[0]);
      add('cancelLarge', 'cancel', sizes.cancel[1]);
    }
  }
  return jobs;
}

function measuredValue(column: Column, result: CaseResult): number | undefined {
  switch (column) {
    case 'burst':
    case 'steady':
      return result.opsPerSec;
    case 'heap':
      return result.heapBytesPerWaiter;
    default:
      return result.elapsedMs;
  }
}

function describeJob(job: Job): string {
  const { kind, n, cycles } = job.params;
  const size = kind === 'steady' ? `${n}×${cycles}` : `n=${n}`;
  return `${job.lib.id} ${kind} ${size}`;
}

async function main(): Promise<void> {
  const options = parseOptions();
  const sizes = options.smoke ? SMOKE : FULL;
  const libs = LIBS.filter((l) => options.only === undefined || options.only.includes(l.id));
  const jobs = plan(sizes, libs, options.cases, options.smoke);
  const cells = new Map<Job, Cell>(
    jobs.map((j) => [
      j,
      { params: j.params, values: [], byRun: new Map(), warnings: [], errors: [] },
    ]),
  );
  const started = performance.now();
  let done = 0;
  const runsOf = (job: Job) =>
    job.column === 'heap' ? Math.min(HEAP_RUNS, options.runs) : options.runs;
  const total = jobs.reduce((sum, job) => sum + runsOf(job), 0);

  // Smoke: every case in one child, so the check takes seconds, not a process start-up each.
  const batch = options.smoke
    ? await runChild<CaseResult[]>(CASE_SCRIPT, [JSON.stringify(jobs.map((j) => j.params))], {
        onStderr: (text) => process.stderr.write(text),
      })
    : undefined;
  // Runs interleaved (every case once, then again) so slow drift spreads over all libraries.
  for (let run = 1; run <= options.runs; run++) {
    for (const job of jobs) {
      const cell = cells.get(job)!;
      if (run > runsOf(job)) continue;
      done++;
      const label = `[${done}/${total}] run ${run} ${describeJob(job)}`;
      if (cell.failure !== undefined) continue; // a library that stalls once stalls again
      const jobStarted = performance.now();
      try {
        const result =
          batch?.[jobs.indexOf(job)] ??
          (await runChild<CaseResult>(CASE_SCRIPT, [JSON.stringify(job.params)], {
            onStderr(text) {
              for (const [pattern, warning] of STDERR_WARNINGS) {
                if (pattern.test(text) && !cell.warnings.includes(warning))
                  cell.warnings.push(warning);
              }
            },
          }));
        if (result.failure !== undefined) {
          cell.failure = result.failure;
          process.stderr.write(`${label}: ${result.failure}\n`);
          continue;
        }
        const value = measuredValue(job.column, result);
        if (value === undefined || !Number.isFinite(value)) throw new Error('no value measured');
        cell.values.push(value);
        cell.byRun.set(run, value);
        const wall = ((performance.now() - jobStarted) / 1000).toFixed(1);
        process.stderr.write(`${label}: ${formatCell(job.column, value)} (${wall} s)\n`);
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        cell.errors.push(message);
        process.stderr.write(`${label}: ERROR ${message}\n`);
      }
    }
  }
  const elapsedS = (performance.now() - started) / 1000;

  const report = render(options, sizes, libs, jobs, cells, elapsedS);
  console.log(report.markdown);

  if (options.json !== undefined) {
    await writeFile(options.json, `${JSON.stringify(report.json, null, 2)}\n`);
    process.stderr.write(`wrote ${options.json}\n`);
  }
  // Errors of the harness, or hostgate failing its own case, fail the run; a peer that stalls
  // is a finding and is reported in the table.
  const errors = [...cells.values()].flatMap((c) => c.errors);
  const hostgateFailures = [...cells.entries()].filter(
    ([job, cell]) => job.lib.id.startsWith('hostgate') && cell.failure !== undefined,
  );
  if (errors.length > 0 || hostgateFailures.length > 0) {
    process.stderr.write(
      `${errors.length} error(s), ${hostgateFailures.length} hostgate failure(s)\n`,
    );
    process.exitCode = 1;
  }
}

function formatCell(column: Column, value: number | undefined): string {
  if (column === 'burst' || column === 'steady') return formatOps(value);
  if (column === 'heap') return formatBytes(value);
  return formatMs(value);
}

function render(
  options: ReturnType<typeof parseOptions>,
  sizes: Sizes,
  libs: readonly LibInfo[],
  jobs: readonly Job[],
  cells: Map<Job, Cell>,
  elapsedS: number,
) {
  const cellOf = (lib: LibInfo, column: Column) => {
    const job = jobs.find((j) => j.lib === lib && j.column === column);
    return job === undefined ? undefined : cells.get(job);
  };
  const medianOf = (lib: LibInfo, column: Column) => {
    const cell = cellOf(lib, column);
    if (cell === undefined || cell.failure !== undefined || cell.errors.length > 0)
      return undefined;
    return summarize(cell.values).median;
  };
  const hostgate = libs.find((l) => l.id === 'hostgate');
  const hg = (column: Column) => (hostgate === undefined ? undefined : medianOf(hostgate, column));
  const footnotes: string[] = [];

  const footnote = (text: string): string => {
    let i = footnotes.indexOf(text);
    if (i < 0) i = footnotes.push(text) - 1;
    return ` [${i + 1}]`;
  };
  const columnName: Record<Column, string> = {
    burst: 'burst',
    heap: 'heap',
    steady: 'steady',
    cancelSmall: `cancel ${sizes.cancel[0]}`,
    cancelLarge: `cancel ${sizes.cancel[1]}`,
  };
  const show = (lib: LibInfo, column: Column): string => {
    const cell = cellOf(lib, column);
    if (cell === undefined) {
      if (column.startsWith('cancel') && lib.cancel === 'n/a') return 'n/a';
      return '';
    }
    const where = `${lib.label}, ${columnName[column]}`;
    const warned =
      cell.warnings.length > 0 ? footnote(`${where}: ${cell.warnings.join('; ')}.`) : '';
    if (cell.errors.length > 0) return `error${footnote(`${where}: ${cell.errors[0]}`)}`;
    if (cell.failure !== undefined)
      return `fails${footnote(`${where}: ${cell.failure}.`)}${warned}`;
    const s = summarize(cell.values);
    let text = formatCell(column, s.median);
    if (
      (column === 'burst' || column === 'steady') &&
      s.spread !== undefined &&
      s.runs.length > 1
    ) {
      text += ` ±${Math.round((s.spread * 100) / 2)}%`;
    }
    const { kind, n, cycles } = cell.params;
    const full =
      (column === 'burst' && n === sizes.burst) ||
      (column === 'steady' && n === sizes.steadyWorkers && cycles === sizes.steadyCycles) ||
      !(column === 'burst' || column === 'steady');
    if (!full) {
      const size = kind === 'steady' ? `${n} workers × ${cycles} cycles` : `${n} tasks`;
      text += footnote(`${where}: measured with ${size}; ${lib.note.split('; ').at(-1)}.`);
    }
    return text + warned;
  };
  /** Median of per-run ratios: the two sizes of one run ran back to back, under the same load. */
  const cancelRatio = (lib: LibInfo) => {
    const smallCell = cellOf(lib, 'cancelSmall');
    const largeCell = cellOf(lib, 'cancelLarge');
    if (medianOf(lib, 'cancelSmall') === undefined || medianOf(lib, 'cancelLarge') === undefined) {
      return undefined;
    }
    const ratios: number[] = [];
    for (const [run, smallMs] of smallCell!.byRun) {
      const r = ratio(largeCell!.byRun.get(run), smallMs);
      if (r !== undefined) ratios.push(r);
    }
    return summarize(ratios).median;
  };
  const vs = (lib: LibInfo, column: Column) =>
    lib.id === 'hostgate'
      ? medianOf(lib, column) === undefined
        ? 'n/a'
        : '1.00×'
      : formatRatio(ratio(medianOf(lib, column), hg(column)));

  const [small, large] = sizes.cancel;
  const k = (n: number) => (n >= 1000 ? `${n / 1000}k` : String(n));
  const headers = [
    'library',
    'burst ops/s',
    'vs hg',
    'steady ops/s',
    'vs hg',
    'heap B/waiter',
    'vs hg',
    `cancel ${k(small)}`,
    `cancel ${k(large)}`,
    `${k(large)}/${k(small)}`,
    `vs hg (${k(large)})`,
  ];
  const rows = libs.map((lib) => [
    lib.label,
    show(lib, 'burst'),
    lib.kinds?.includes('burst') === false ? '' : vs(lib, 'burst'),
    show(lib, 'steady'),
    lib.kinds?.includes('steady') === false ? '' : vs(lib, 'steady'),
    show(lib, 'heap'),
    lib.kinds?.includes('burst-heap') === false ? '' : vs(lib, 'heap'),
    show(lib, 'cancelSmall'),
    show(lib, 'cancelLarge'),
    formatRatio(cancelRatio(lib)),
    lib.cancel === 'n/a' ? 'n/a' : vs(lib, 'cancelLarge'),
  ]);
  const align = headers.map((_, i) => (i === 0 ? ('left' as const) : ('right' as const)));
  const table = markdownTable(headers, rows, align);

  // Targets.
  const peers = libs.filter((l) => !l.id.startsWith('hostgate') && l.id !== 'floor');
  const best = (column: Column, better: (a: number, b: number) => boolean) => {
    let top: { lib: LibInfo; value: number } | undefined;
    for (const lib of peers) {
      const value = medianOf(lib, column);
      if (value !== undefined && (top === undefined || better(value, top.value)))
        top = { lib, value };
    }
    return top;
  };
  const targets: string[] = [];
  const verdict = (ok: boolean | undefined) => (ok === undefined ? 'n/a' : ok ? 'MET' : 'NOT MET');
  for (const column of ['burst', 'steady'] as const) {
    const top = best(column, (a, b) => a > b);
    const mine = hg(column);
    const ok = top === undefined || mine === undefined ? undefined : mine >= top.value;
    targets.push(
      `- ${column}: hostgate ${formatOps(mine)} vs best peer ${top ? `${top.lib.label} ${formatOps(top.value)}` : 'n/a'} (${formatRatio(ratio(mine, top?.value))} of it) → ${verdict(ok)}`,
    );
  }
  {
    const top = best('heap', (a, b) => a < b);
    const mine = hg('heap');
    const ok = top === undefined || mine === undefined ? undefined : mine <= top.value;
    targets.push(
      `- heap per waiter: hostgate ${formatBytes(mine)} vs leanest peer ${top ? `${top.lib.label} ${formatBytes(top.value)}` : 'n/a'} → ${verdict(ok)}`,
    );
  }
  if (hostgate !== undefined) {
    const r = cancelRatio(hostgate);
    targets.push(
      `- cancel ${k(large)}/${k(small)}: hostgate ${formatRatio(r)} (target ≤ ${TARGET_CANCEL_RATIO}× for ${large / small}× the waiters) → ${verdict(r === undefined ? undefined : r <= TARGET_CANCEL_RATIO)}`,
    );
  }

  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const env = {
    node: process.version,
    v8: process.versions.v8,
    cpu,
    cores: os.cpus().length,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    date: new Date().toISOString(),
  };
  const lines = [
    `## Semaphore benchmark${options.smoke ? ' (smoke: tiny sizes, not representative)' : ''}`,
    '',
    `Node ${env.node} (V8 ${env.v8}) · ${cpu} × ${env.cores} · ${env.platform} · ${env.date}`,
    '',
    `${PERMITS} permits. Median of ${options.runs} run${options.runs > 1 ? 's' : ''} (heap: ${Math.min(HEAP_RUNS, options.runs)}), each in a fresh process; a throughput run is the best of up to 3 rounds in its process (±: half the run-to-run spread). ` +
      `burst: ${sizes.burst.toLocaleString('en-US')} tasks at once, one microtask each; heap: the same ${sizes.burst.toLocaleString('en-US')} parked, heap after GC minus baseline per waiter; ` +
      `steady: ${sizes.steadyWorkers.toLocaleString('en-US')} workers × ${sizes.steadyCycles} cycles; cancel: waiters with one AbortSignal each, all aborted in random order, time until all rejected (ratio: median of per-run ratios). ` +
      `hostgate: queueTimeout ${HOSTGATE_QUEUE_TIMEOUT_MS.toLocaleString('en-US')} ms, maxQueue ≥ ${HOSTGATE_MIN_MAX_QUEUE.toLocaleString('en-US')}.`,
    '',
    'vs hg = peer / hostgate: above 1× the peer is faster (ops/s) or costlier (bytes, ms).',
    '',
    table,
    '',
    ...footnotes.map((text, i) => `[${i + 1}] ${text}`),
    ...(footnotes.length > 0 ? [''] : []),
    'Notes:',
    ...libs.map(
      (l) =>
        `- ${l.label}: ${l.note}${l.cancel === 'lazy' ? ' (lazy cancel: rejects only when dequeued)' : ''}`,
    ),
    '',
    'Targets:',
    ...targets,
    '',
    `Total ${elapsedS.toFixed(0)} s.`,
  ];

  const json = {
    env,
    options: { smoke: options.smoke, runs: options.runs, permits: PERMITS, sizes },
    results: jobs.map((job) => {
      const cell = cells.get(job)!;
      return {
        lib: job.lib.id,
        column: job.column,
        params: job.params,
        ...summarize(cell.values),
        failure: cell.failure,
        warnings: cell.warnings,
        errors: cell.errors,
      };
    }),
    targets,
  };
  return { markdown: lines.join('\n'), json };
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
