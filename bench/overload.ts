/**
 * Overload benchmark (issue 6): reproduces the first seed's table "10,000 tasks, N permits"
 * with real HTTP on loopback, side by side with p-limit and undici's own connection cap, then
 * shows what a bounded queue with a wait deadline changes (burst and open loop).
 *
 *   npm run bench:overload                       # full run, writes docs/benchmarks.md + docs/overload.svg
 *   npx tsx bench/overload.ts --no-write         # full run, print only
 *   npx tsx bench/overload.ts --smoke            # a hundred tasks, two rows: checks, never speed
 *   npx tsx bench/overload.ts --scale 1 --row-seconds 10   # the seed's own time base (slow)
 *
 * The model (seed time base): a partner serving at most 40 requests at a time, 40 ms each
 * (1,000/s), queueing the rest inside itself; a 500 ms timeout on each call, armed at dispatch;
 * about 3 ms of client/network overhead per call. `--scale s` runs every simulated duration
 * ×s (default 0.25: 10 ms service, 125 ms timeout) and reports in the seed's time base.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { writeSection } from './lib/section.js';
import { markdownTable } from './lib/table.js';
import { renderChart } from './overload/chart.js';
import {
  CONTENDER_LABEL,
  CONTENDERS,
  type ContenderKind,
  makeContender,
  measureBytesPerWaiter,
  measureCallOverhead,
  measureShed,
  runBurst,
  runOpenLoop,
} from './overload/driver.js';
import { forkPartner, type PartnerConfig, startPartnerHere } from './overload/partner.js';
import {
  burstTable,
  checkAgainstSeed,
  contenderTable,
  int,
  openLoopTable,
  quantile,
  SEED_ROWS,
  SEED_TASKS,
  type Summary,
  seedCheckTable,
  shortLabel,
  summarize,
  TOLERANCE,
  us,
} from './overload/report.js';

// --- the model, in the seed's time base -----------------------------------------------------
const CAPACITY = 40;
const SERVICE_MS = 40;
const TIMEOUT_MS = 500;
const OVERHEAD_MS = 3;
/**
 * An extra row past the seed's last one: 500 permits sit exactly on the edge N = throughput ×
 * timeout (1,000/s × 0.5 s), where the outcome is decided by sub-millisecond effects; 600 is
 * clearly past it.
 */
const PAST_THE_EDGE = 600;
const BURST_NOTE =
  'in chunks of 50 per event-loop turn, so responses are processed while the burst arrives ("arrived in" is how long issuing all of them took, real ms)';
/** hostgate bounded: the seed's `wait_for(acquire(), timeout=0.250)`. */
const DEADLINE_MS = 250;

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    scale: { type: 'string', default: '0.4' },
    tasks: { type: 'string', default: String(SEED_TASKS) },
    rows: { type: 'string' },
    'row-seconds': { type: 'string', default: '1.5' },
    'open-seconds': { type: 'string', default: '2' },
    contenders: { type: 'string' },
    'overhead-at': { type: 'string', default: 'client' },
    'partner-in-process': { type: 'boolean', default: false },
    'no-write': { type: 'boolean', default: false },
    json: { type: 'string' },
    'from-json': { type: 'string' },
    out: { type: 'string', default: 'docs' },
  },
  strict: true,
});

const smoke = args.smoke === true;
const scale = Number(args.scale);
const maxTasks = smoke ? 100 : Number(args.tasks);
const rows = (
  args.rows ?? (smoke ? '10,60' : [...SEED_ROWS.map((r) => r.permits), PAST_THE_EDGE].join(','))
)
  .split(',')
  .map(Number);
const rowSeconds = Number(args['row-seconds']);
const openSeconds = smoke ? 0.08 : Number(args['open-seconds']);
const kinds = (args.contenders?.split(',') ?? CONTENDERS) as ContenderKind[];
const write = !smoke && args['no-write'] !== true;
const overheadAt = args['overhead-at'];
if (overheadAt !== 'client' && overheadAt !== 'partner') {
  throw new TypeError(`--overhead-at must be client or partner, got ${overheadAt}`);
}
for (const [name, value] of Object.entries({ scale, maxTasks, rowSeconds, openSeconds })) {
  if (!(value > 0)) throw new TypeError(`--${name} must be a positive number, got ${value}`);
}
for (const n of rows) {
  if (!Number.isInteger(n) || n < 1) throw new TypeError(`--rows: bad permit count ${n}`);
}
for (const kind of kinds) {
  if (!CONTENDERS.includes(kind)) throw new TypeError(`--contenders: unknown ${kind}`);
}

const real = (seedMs: number) => seedMs * scale;
const serviceMs = real(SERVICE_MS);
const timeoutMs = real(TIMEOUT_MS);
const deadlineMs = real(DEADLINE_MS);
const overheadTargetMs = real(OVERHEAD_MS);
const log = (line = '') => process.stdout.write(`${line}\n`);
const failures: string[] = [];

function machine() {
  const cpus = os.cpus();
  return {
    node: process.version,
    cpu: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    load: os.loadavg().map((x) => x.toFixed(2)),
    platform: `${os.type()} ${os.release()} ${os.arch()}`,
  };
}

/**
 * Where the partner is not the bottleneck (N below its capacity) a row would take up to
 * 10,000 × 40 ms at one permit; those rows run about `rowSeconds` worth of callers instead
 * (marked * in the tables). Rows at or past the partner's capacity run every caller.
 */
function tasksFor(permits: number): number {
  if (permits >= CAPACITY) return maxTasks;
  const perSec = (permits / serviceMs) * 1000;
  return Math.min(maxTasks, Math.max(100, Math.floor(perSec * rowSeconds)));
}

async function main(): Promise<void> {
  const started = Date.now();
  const m = machine();
  log(`hostgate overload benchmark${smoke ? ' (smoke)' : ''}`);
  log(`${m.node} on ${m.cpu}, ${m.cores} cores, load ${m.load.join(' ')}`);
  log(
    `model: partner ${CAPACITY} at a time × ${SERVICE_MS} ms, call timeout ${TIMEOUT_MS} ms, overhead ${OVERHEAD_MS} ms; time scale ${scale} (service ${serviceMs} ms, timeout ${timeoutMs} ms real)`,
  );

  const partnerConfig: PartnerConfig = {
    capacity: CAPACITY,
    serviceMs,
    extraMs: 0,
    queueMax: 1_000_000,
    serveAbandoned: true,
  };
  const partner = args['partner-in-process']
    ? await startPartnerHere(partnerConfig)
    : await forkPartner(partnerConfig);
  const origin = partner.origin;
  try {
    // Warm-up: JIT for every contender, discarded (the smoke run measures nothing).
    for (const kind of smoke ? [] : kinds) {
      const warm = makeContender(kind, CAPACITY, {
        origin,
        deadlineMs,
        unboundedQueue: 10_000,
      });
      await runBurst(warm, partner, origin, 1000, { timeoutMs, clientWorkMs: 0 }, 30_000);
    }

    // Overhead: what this machine adds by itself (loopback, HTTP, timer resolution); the rest
    // of the model's 3 ms is simulated, by default as client-side work after the response.
    const calibrationCalls = smoke ? 8 : 300;
    const natural = await measureCallOverhead(partner, origin, calibrationCalls, serviceMs, 0);
    const extraMs = Math.max(0, overheadTargetMs - natural.meanMs);
    const model = { timeoutMs, clientWorkMs: overheadAt === 'client' ? extraMs : 0 };
    await partner.configure({ ...partnerConfig, extraMs: overheadAt === 'partner' ? extraMs : 0 });
    const withExtra = await measureCallOverhead(
      partner,
      origin,
      calibrationCalls,
      serviceMs,
      model.clientWorkMs,
    );
    log(
      `overhead per call, one permit: machine ${natural.meanMs.toFixed(3)} ms real, simulated +${extraMs.toFixed(3)} ms (${overheadAt}) → ${withExtra.meanMs.toFixed(3)} ms real = ${(withExtra.meanMs / scale).toFixed(2)} ms seed (model: ${OVERHEAD_MS} ms)`,
    );

    // Closed burst: the seed's table, every contender at every N.
    const burst: Summary[] = [];
    for (const permits of rows) {
      const tasks = tasksFor(permits);
      for (const kind of kinds) {
        const contender = makeContender(kind, permits, {
          origin,
          deadlineMs,
          unboundedQueue: tasks,
        });
        const expectedMs = (tasks / Math.min(permits, CAPACITY)) * (serviceMs + 1);
        const result = await runBurst(
          contender,
          partner,
          origin,
          tasks,
          model,
          Math.max(20_000, expectedMs * 4),
        );
        const s = summarize(result, scale);
        burst.push(s);
        log(
          `N=${String(permits).padStart(3)} ${shortLabel(kind).padEnd(16)} ${int(s.goodput).padStart(5)}/s  mean ${s.callMean.toFixed(1).padStart(6)} ms  p99 ${s.callP99.toFixed(0).padStart(4)} ms  e2e p99 ${s.e2eP99.toFixed(0).padStart(6)} ms  t/o ${int(s.timeouts).padStart(5)}  shed ${int(s.shedFull + s.shedTimeout).padStart(5)}  err ${s.errors}  partner peak ${s.partnerPeakOpen} conns ${s.partnerConnections} (peak ${s.partnerPeakConnections}) wasted ${s.partnerWasted}  client ELU ${(s.clientElu * 100).toFixed(0)}% CPU ${(s.clientCpu * 100).toFixed(0)}%  (${tasks} tasks arrived in ${s.arrivalMs.toFixed(0)} ms, ${(s.wallMs / 1000).toFixed(1)} s)`,
        );
        checkRun(s);
      }
    }

    // Time to shed and memory per waiter: calibrations, real units.
    const probes = smoke ? 50 : 1000;
    const shed = await measureShed(partner, origin, CAPACITY, CAPACITY * 10, probes);
    const shedSorted = Float64Array.from(shed.times).sort();
    log(
      `time to shed (queue full, ${probes} sequential callers): p50 ${us(quantile(shedSorted, 0.5))}, p99 ${us(quantile(shedSorted, 0.99))}, max ${us(shedSorted[shedSorted.length - 1]!)}; ${shed.shed}/${probes} shed`,
    );
    if (shed.shed !== probes) failures.push(`shed probe: only ${shed.shed} of ${probes} shed`);
    failures.push(...shed.problems.map((p) => `shed probe: ${p}`));

    const bytes = new Map<ContenderKind, number>();
    for (const kind of kinds) {
      // Median of three: a single heap delta moves by a few hundred bytes per waiter.
      const rounds: number[] = [];
      for (let round = 0; round < (smoke ? 1 : 3); round++) {
        rounds.push(
          await measureBytesPerWaiter(kind, partner, origin, CAPACITY, smoke ? 200 : 2000),
        );
      }
      const b = rounds.sort((x, y) => x - y)[rounds.length >> 1]!;
      bytes.set(kind, b);
      log(`bytes per waiting caller, ${shortLabel(kind)}: ${Math.round(b)}`);
    }

    // Open loop: arrivals at twice the partner's capacity, N = the partner's real limit.
    const rate = ((2 * CAPACITY) / serviceMs) * 1000;
    const open: Summary[] = [];
    for (const kind of kinds) {
      const contender = makeContender(kind, CAPACITY, {
        origin,
        deadlineMs,
        unboundedQueue: Math.ceil(rate * openSeconds) + 1,
      });
      const result = await runOpenLoop(
        contender,
        partner,
        origin,
        rate,
        openSeconds * 1000,
        model,
        Math.max(30_000, openSeconds * 8000),
      );
      const s = summarize(result, scale);
      open.push(s);
      log(
        `open loop ${shortLabel(kind).padEnd(16)} arrivals ${int(s.tasks)}  served ${int(s.ok)}  ${int(s.goodput)}/s  e2e p99 ${s.e2eP99.toFixed(0)} ms  shed ${int(s.shedFull + s.shedTimeout)}  t/o ${s.timeouts}  peak queued ${int(s.peakLimiterQueued)}`,
      );
      checkRun(s);
    }

    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    const end = machine();
    log(`done in ${seconds} s; load at end ${end.load.join(' ')}`);

    const input: ReportInput = {
      run: {
        smoke,
        argv: process.argv.slice(2),
        scale,
        kinds,
        rowSeconds,
        openSeconds,
        waiterSample: smoke ? 200 : 2000,
      },
      machine: m,
      loadEnd: end.load,
      seconds,
      natural: natural.meanMs,
      extraMs,
      overheadAt,
      measuredOverhead: withExtra.meanMs,
      burst,
      open,
      bytes: Object.fromEntries(bytes),
      shedTimes: [...shedSorted],
      shedCount: shed.shed,
      probes,
      rate,
    };
    if (args.json !== undefined) await writeFile(args.json, JSON.stringify(input));
    await publish(input);
  } finally {
    await partner.close();
  }
}

function checkRun(s: Summary): void {
  const where = `N=${s.permits} ${shortLabel(s.kind)}`;
  if (!s.complete) failures.push(`${where}: did not complete`);
  for (const p of s.problems) failures.push(`${where}: invariant: ${p}`);
  if (s.errors > 0) failures.push(`${where}: ${s.errors} unexpected errors (${s.errorSample})`);
  // hostgate's invariant only: p-limit frees its slot when a timed-out call rejects, before the
  // connection is down, so on a loaded machine the partner can see more than N from it.
  if (s.kind.startsWith('hostgate') && s.permits <= CAPACITY && s.partnerPeakOpen > s.permits) {
    failures.push(`${where}: partner saw ${s.partnerPeakOpen} at once with ${s.permits} permits`);
  }
}

/** Everything the report needs, serializable (`--json` writes it, `--from-json` reads it). */
interface ReportInput {
  run: {
    smoke: boolean;
    argv: string[];
    scale: number;
    kinds: ContenderKind[];
    rowSeconds: number;
    openSeconds: number;
    waiterSample: number;
  };
  machine: ReturnType<typeof machine>;
  loadEnd: string[];
  seconds: string;
  natural: number;
  extraMs: number;
  overheadAt: string;
  measuredOverhead: number;
  burst: Summary[];
  open: Summary[];
  bytes: Partial<Record<ContenderKind, number>>;
  shedTimes: number[];
  shedCount: number;
  probes: number;
  rate: number;
}

/** Prints the report and, unless --smoke or --no-write, writes it and the chart under --out. */
async function publish(input: ReportInput): Promise<void> {
  const report = renderReport(input);
  log();
  log(report);
  const { machine: m, run } = input;
  const chart = renderChart(
    input.burst,
    run.kinds,
    `Node ${m.node}, ${m.cpu} × ${m.cores}; time scale ${run.scale}, reported in the seed's time base. Dashed: the seed's table. Below ${CAPACITY} permits fewer callers ran (e2e is that of the smaller burst).`,
  );
  if (!write) return;
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  const outDir = join(root, args.out!);
  await mkdir(outDir, { recursive: true });
  await writeFile(join(outDir, 'overload.svg'), chart);
  await writeSection(join(outDir, 'benchmarks.md'), SECTION, report);
  log(`wrote ${join(args.out!, 'benchmarks.md')} and ${join(args.out!, 'overload.svg')}`);
}

function renderReport(r: ReportInput): string {
  const { scale, kinds, rowSeconds, openSeconds } = r.run;
  // --json only keeps a copy of the results; leave it out of the command shown.
  const argv = r.run.argv.filter(
    (a, i, all) => a !== '--smoke' && a !== '--json' && all[i - 1] !== '--json',
  );
  const cmd = r.run.smoke
    ? 'npx tsx bench/overload.ts --smoke'
    : `npm run bench:overload${argv.length > 0 ? ` -- ${argv.join(' ')}` : ''}`;
  const real = (seedMs: number) => seedMs * scale;
  const shedTimes = Float64Array.from(r.shedTimes);
  const bytes = new Map(Object.entries(r.bytes) as [ContenderKind, number][]);
  const reduced = r.burst.some((s) => s.tasks < SEED_TASKS);
  const unbounded: ContenderKind[] = kinds.filter((k) => k !== 'hostgate-bounded');
  const checks = r.burst
    .filter((s) => unbounded.includes(s.kind))
    .map(checkAgainstSeed)
    .filter((c) => c !== undefined);
  const passed = checks.filter((c) => c.pass).length;
  const out: string[] = [];
  out.push(
    `Run: \`${cmd}\` — ${r.seconds} s on Node ${r.machine.node}, ${r.machine.cpu}, ${r.machine.cores} cores (${r.machine.platform}); load average ${r.machine.load.join(' ')} at start, ${r.loadEnd.join(' ')} at end.`,
    '',
    markdownTable(
      ['model (seed time base)', 'value', `as run (×${scale})`],
      [
        ['partner capacity', `${CAPACITY} at a time`, `${CAPACITY}`],
        ['service time', `${SERVICE_MS} ms`, `${real(SERVICE_MS)} ms`],
        [
          'partner throughput',
          `${(CAPACITY / SERVICE_MS) * 1000}/s`,
          `${int((CAPACITY / real(SERVICE_MS)) * 1000)}/s`,
        ],
        ['call timeout (from dispatch)', `${TIMEOUT_MS} ms`, `${real(TIMEOUT_MS)} ms`],
        [
          'client/network overhead',
          `${OVERHEAD_MS} ms`,
          `${r.natural.toFixed(2)} ms measured + ${r.extraMs.toFixed(2)} ms simulated (${r.overheadAt}) = ${r.measuredOverhead.toFixed(2)} ms (${(r.measuredOverhead / scale).toFixed(1)} ms seed)`,
        ],
        ['hostgate bounded: wait deadline', `${DEADLINE_MS} ms`, `${real(DEADLINE_MS)} ms`],
        ['hostgate bounded: queue', '10 × permits (default)', '10 × permits'],
        ['callers per row', int(SEED_TASKS), reduced ? 'fewer at small N (*)' : int(SEED_TASKS)],
      ],
      ['left', 'right', 'right'],
    ),
    '',
    `Durations are measured ×${1 / scale} and rates ×${scale} to report in the seed's time base; time to shed and bytes are real.${reduced ? ` Rows marked * ran fewer than 10,000 callers so each row takes about ${rowSeconds} s: goodput and call latency do not depend on the count, "failed of 10K" is scaled to 10,000, and end-to-end latency is that of the smaller burst (10,000 callers would wait proportionally longer).` : ''}`,
    '',
    `#### The seed's table, reproduced (hostgate as the seed's semaphore: unbounded queue)`,
    '',
    contenderTable(r.burst.filter((s) => s.kind === 'hostgate')),
    '',
    `Against the seed (±${TOLERANCE * 100}% on goodput and mean call latency; at 500 permits the seed's collapse: ≥ 85% timeouts and goodput ≤ 15% of 1,000/s): **${passed} of ${checks.length} pass**.`,
    '',
    seedCheckTable(r.burst, unbounded),
    '',
  );
  for (const kind of kinds.filter((k) => k !== 'hostgate')) {
    out.push(
      `#### ${CONTENDER_LABEL[kind]}`,
      '',
      contenderTable(r.burst.filter((s) => s.kind === kind)),
      '',
    );
  }
  out.push(
    '#### The burst, end to end',
    '',
    `Rows where the partner is the bottleneck (permits ≥ its capacity of ${CAPACITY}), every one of the 10,000 callers. All callers arrive at once — as fast as the client can issue them, ${BURST_NOTE}. "served" callers got a response in time; e2e (wait + call) is over every caller that was dispatched (for hostgate bounded: the admitted ones). The bound is what hostgate promises an admitted caller: the wait deadline (${DEADLINE_MS} ms) plus the call. A queue-full shed is timed from the caller's arrival to its rejection in real time (not scaled); in a burst that includes the other arrivals issued in the same tick.`,
    '',
    burstTable(
      r.burst.filter((s) => s.permits >= CAPACITY),
      DEADLINE_MS,
    ),
    '',
    `Time to shed, one caller at a time (real time, not scaled): with all ${CAPACITY} permits held and the queue full (${CAPACITY * 10}), ${int(r.probes)} callers each awaited \`request()\` in turn; ${int(r.shedCount)} were refused with \`QueueFullError\` in p50 ${us(quantile(shedTimes, 0.5))}, p99 ${us(quantile(shedTimes, 0.99))}, max ${us(shedTimes[shedTimes.length - 1]!)}.`,
    '',
    `#### Open loop: arrivals at 2× the partner's capacity, ${CAPACITY} permits`,
    '',
    `${int(r.rate * scale)} arrivals/s (seed) for ${(openSeconds / scale).toFixed(0)} s seed time (${openSeconds} s real), whatever happens to earlier callers, through ${CAPACITY} permits — the partner's real limit. Goodput runs from the first arrival to the last settlement. "peak queued" is the limiter's own count of waiting callers (p-limit's \`pendingCount\`, the undici pool's \`pending\`, the gate's \`queued\`), sampled every 2 ms; **peak queue memory = peak queued × bytes per waiter**, where bytes per waiter is measured separately: heapUsed after a full GC with ${r.run.waiterSample} callers parked behind ${CAPACITY} held permits, minus the same without them, divided by their number (median of three). It counts everything a waiting caller costs as this driver submits it, its own pending promise and AbortController included, the same for every limiter.`,
    '',
    openLoopTable(r.open, bytes),
    '',
    '![Goodput, mean call latency and end-to-end p99 against permits](overload.svg)',
  );
  return out.join('\n');
}

const SECTION = {
  marker: 'overload',
  command: 'npm run bench:overload',
  heading: '## Overload: 10,000 tasks, N permits',
};

const entry =
  args['from-json'] !== undefined
    ? async () => publish(JSON.parse(await readFile(args['from-json']!, 'utf8')) as ReportInput)
    : main;

entry().then(
  () => {
    if (failures.length > 0) {
      log(`\nFAILED (${failures.length}):`);
      for (const f of failures) log(`  - ${f}`);
      process.exitCode = 1;
    } else if (smoke) {
      log('\nsmoke: OK — every run completed and the invariant held');
    }
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  },
);
