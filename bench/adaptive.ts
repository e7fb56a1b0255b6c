/**
 * Adaptive limits benchmark (issue 13), against the seed's partner: 40 requests at a time,
 * 40 ms each (1,000/s), queueing the rest inside itself; a 500 ms call timeout armed at dispatch.
 *
 *   npm run bench:adaptive                # full run (~3.5 min), writes docs/benchmarks.md + docs/adaptive.svg
 *   npx tsx bench/adaptive.ts --no-write  # full run, print only
 *   npx tsx bench/adaptive.ts --smoke     # a few seconds: checks that it runs, never speed
 *
 * (a) told a contract of 500 and nothing else, 10,000 callers at once;
 * (b) contract 40, 60 callers in a closed loop, the partner's capacity 40 → 10 → 40;
 * side by side: a fixed limit, hostgate AIMD and gradient, ports of Netflix Gradient2 and Vegas;
 * (c) queue discipline at 2× overload: FIFO vs adaptive LIFO, callers with a 250 ms budget.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { renderTimeChart, type TimeSeries } from './adaptive/chart.js';
import {
  goodputSeries,
  type LoopResult,
  recoveryMs,
  runClosedLoop,
  window,
} from './adaptive/closed-loop.js';
import { ADAPTIVE_LABEL, type AdaptiveKind, makeAdaptiveContender } from './adaptive/contenders.js';
import { runDeadlineLoop } from './adaptive/deadline-loop.js';
import { writeSection } from './lib/section.js';
import { formatMs } from './lib/stats.js';
import { markdownTable } from './lib/table.js';
import { runBurst } from './overload/driver.js';
import { forkPartner, type PartnerConfig } from './overload/partner.js';
import { type Summary, summarize } from './overload/report.js';

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    'no-write': { type: 'boolean', default: false },
    tasks: { type: 'string', default: '10000' },
    only: { type: 'string', default: 'a,b,c' },
    out: { type: 'string', default: 'docs' },
  },
  strict: true,
});
const smoke = args.smoke === true;
const write = !smoke && args['no-write'] !== true;
const only = new Set(args.only!.split(','));
const tasks = smoke ? 120 : Number(args.tasks);
const log = (line = '') => process.stdout.write(`${line}\n`);
const failures: string[] = [];

const PARTNER: PartnerConfig = {
  capacity: 40,
  serviceMs: 40,
  extraMs: 3,
  queueMax: 100_000,
  serveAbandoned: true,
};
const TIMEOUT_MS = 500;
/** Fixed limits run in (a) beside the contract of 500 (the best is this machine's ceiling). */
const FIXED_PROBES = smoke ? [40] : [40, 48, 64];
const KINDS: AdaptiveKind[] = ['fixed', 'aimd', 'gradient', 'gradient2', 'vegas'];
const COLORS: Record<AdaptiveKind, string> = {
  fixed: '#888888',
  aimd: '#1b6ac9',
  gradient: '#0a8a4a',
  gradient2: '#d9731a',
  vegas: '#8e44ad',
};

const pct = (x: number) => `${Math.round(x * 100)}%`;
const rate = (x: number) => (Number.isFinite(x) ? `${Math.round(x)}/s` : 'n/a');

async function main(): Promise<void> {
  const partner = await forkPartner(PARTNER);
  const sections: string[] = [];
  const load = os.loadavg()[0]!.toFixed(2);
  try {
    if (only.has('a')) sections.push(await contract500(partner));
    if (only.has('b')) sections.push(await capacityDrop(partner));
    if (only.has('c')) sections.push(await queueDiscipline(partner));
  } finally {
    await partner.close();
  }
  const header = [
    `Node ${process.version}, ${os.cpus()[0]?.model.trim()}, ${os.cpus().length} cores, load ${load} at start; partner in its own process.`,
  ];
  const report = [...header, '', ...sections].join('\n');
  log(`\n${report}`);
  if (write) {
    const outDir = join(dirname(fileURLToPath(import.meta.url)), '..', args.out!);
    await mkdir(outDir, { recursive: true });
    await writeSection(join(outDir, 'benchmarks.md'), SECTION, report);
    log(`wrote ${join(args.out!, 'benchmarks.md')} and ${join(args.out!, 'adaptive.svg')}`);
  }
}

/** (a): the client is told 500 and nothing else; 10,000 callers arrive at once. */
async function contract500(partner: Awaited<ReturnType<typeof forkPartner>>): Promise<string> {
  const model = { timeoutMs: TIMEOUT_MS, clientWorkMs: 0 };
  const unloadedRun = await runBurst(
    makeAdaptiveContender('fixed', partner.origin, {
      contract: 10,
      maxQueue: 1000,
      queueTimeout: 600_000,
    }),
    partner,
    partner.origin,
    smoke ? 30 : 400,
    model,
    60_000,
  );
  const unloaded = summarize(unloadedRun, 1).callMean;
  log(`(a) unloaded call (10 at a time): ${formatMs(unloaded)}`);
  const measured: { kind: AdaptiveKind; contract: number; limit: number; s: Summary }[] = [];
  // Fixed limits at and above the partner's capacity: the best of them is what this machine's
  // client can drive at all (its event loop, not the partner, is then the bottleneck).
  const runs: [AdaptiveKind, number][] = [
    ...FIXED_PROBES.map((n): [AdaptiveKind, number] => ['fixed', n]),
    ...KINDS.map((k): [AdaptiveKind, number] => [k, 500]),
  ];
  for (const [kind, contract] of runs) {
    const contender = makeAdaptiveContender(kind, partner.origin, {
      contract,
      maxQueue: tasks + 10,
      queueTimeout: 600_000,
    });
    const gate = contender.gate;
    const result = await runBurst(contender, partner, partner.origin, tasks, model, 180_000);
    const s = summarize(result, 1);
    measured.push({ kind, contract, limit: gate.limit, s });
    log(
      `(a) ${kind} ${contract}: ${rate(s.goodput)}, mean call ${formatMs(s.callMean)}, ${s.timeouts} timeouts, limit ${gate.limit}`,
    );
    failures.push(...s.problems.map((p) => `(a) ${kind}: ${p}`));
    if (!s.complete) failures.push(`(a) ${kind}: run did not complete`);
  }
  const fixedBelow500 = measured.filter((m) => m.kind === 'fixed' && m.contract < 500);
  const best = fixedBelow500.reduce((a, b) => (b.s.goodput > a.s.goodput ? b : a));
  const truth = fixedBelow500.find((m) => m.contract === 40)!;
  const rows = measured.map(({ kind, contract, limit, s }) => {
    const share = s.goodput / 1000;
    const ratio = s.callMean / unloaded;
    const pass = kind === 'fixed' ? '' : share >= 0.9 && ratio <= 1.3 ? 'yes' : 'no';
    const label =
      kind === 'fixed'
        ? `fixed ${contract}${contract === 40 ? ' (told the truth)' : ''}${best.contract === contract ? ' (best fixed)' : ''}`
        : ADAPTIVE_LABEL[kind];
    return [
      label,
      rate(s.goodput),
      pct(share),
      pct(s.goodput / truth.s.goodput),
      pct(s.goodput / best.s.goodput),
      formatMs(s.callMean),
      `${ratio.toFixed(2)}×`,
      String(s.timeouts),
      String(limit),
      String(s.partnerPeakOpen),
      pass,
    ];
  });
  return [
    '### (a) Told a contract of 500, nothing else',
    '',
    `${tasks.toLocaleString('en-US')} callers at once; the partner serves 40 at a time, 40 ms each (1,000/s), queueing the rest inside itself; each call times out 500 ms after dispatch. Unloaded call: ${formatMs(unloaded)} (10 at a time). Target: ≥ 90% of 1,000/s with mean call latency ≤ 1.3× the unloaded call. "Fixed 40" is the limit a client would set if it knew the partner's capacity; the fixed limits ${FIXED_PROBES.join(', ')} in the same run show what this machine's client can drive at all — the best of them (${best.contract}: ${rate(best.s.goodput)}) is the ceiling here (the event loop's turn between a response and the next dispatch costs goodput that no limiter gets back), and each limiter's goodput is given as a share of 1,000/s, of fixed 40 and of that best fixed limit.`,
    '',
    markdownTable(
      [
        'limiter',
        'goodput',
        'of 1,000/s',
        'of fixed 40',
        'of best fixed',
        'mean call',
        'vs unloaded',
        'timeouts',
        'final limit',
        'partner peak',
        'meets target',
      ],
      rows,
      [
        'left',
        'right',
        'right',
        'right',
        'right',
        'right',
        'right',
        'right',
        'right',
        'right',
        'left',
      ],
    ),
  ].join('\n');
}

/** (b): contract 40; the partner's capacity 40 → 10 → 40; 60 callers in a closed loop. */
async function capacityDrop(partner: Awaited<ReturnType<typeof forkPartner>>): Promise<string> {
  const phaseMs = smoke ? 150 : 5000;
  const durationMs = phaseMs * 3;
  const phases = [
    { atMs: 0, capacity: 40 },
    { atMs: phaseMs, capacity: 10 },
    { atMs: 2 * phaseMs, capacity: 40 },
  ];
  const results = new Map<AdaptiveKind, LoopResult>();
  const rows: string[][] = [];
  for (const kind of KINDS) {
    const contender = makeAdaptiveContender(kind, partner.origin, {
      contract: 40,
      maxQueue: 1000,
      queueTimeout: 600_000,
    });
    const r = await runClosedLoop(contender, partner, PARTNER, {
      workers: 60,
      durationMs,
      timeoutMs: TIMEOUT_MS,
      phases,
    });
    results.set(kind, r);
    failures.push(...r.problems.map((p) => `(b) ${kind}: ${p}`));
    const low = window(r, phaseMs, 2 * phaseMs);
    const high = window(r, 2 * phaseMs, durationMs);
    const first = window(r, 500, phaseMs);
    // "The new goodput": what the fixed 40 (first in the run) served in that phase.
    const fixed = results.get('fixed')!;
    const down = recoveryMs(r, phaseMs, 2 * phaseMs, window(fixed, phaseMs, 2 * phaseMs).goodput);
    const up = recoveryMs(
      r,
      2 * phaseMs,
      durationMs,
      window(fixed, 2 * phaseMs, durationMs).goodput,
    );
    const limitAt = (t: number) => r.limits.filter((p) => p.t <= t).at(-1)?.limit ?? Number.NaN;
    rows.push([
      kind === 'fixed' ? 'fixed 40' : ADAPTIVE_LABEL[kind],
      `${rate(first.goodput)}, ${formatMs(first.meanMs)}`,
      `${rate(low.goodput)}, ${formatMs(low.meanMs)}`,
      String(low.timeouts),
      down === undefined ? 'never' : formatMs(down),
      up === undefined ? 'never' : formatMs(up),
      `${limitAt(phaseMs)} → ${limitAt(2 * phaseMs)} → ${limitAt(durationMs)}`,
      `${rate(high.goodput)}, ${formatMs(high.meanMs)}`,
      String(r.partnerPeakOpen),
    ]);
    log(`(b) ${kind}: ${rows.at(-1)!.join(' | ')}`);
  }
  if (write) {
    const limitSeries: TimeSeries[] = KINDS.map((k) => ({
      label: ADAPTIVE_LABEL[k],
      color: COLORS[k],
      points: results.get(k)!.limits.map((p) => ({ x: p.t, y: p.limit })),
    }));
    const capacity: TimeSeries = {
      label: 'partner capacity',
      color: '#000',
      dashed: true,
      points: [
        { x: 0, y: 40 },
        { x: phaseMs, y: 40 },
        { x: phaseMs, y: 10 },
        { x: 2 * phaseMs, y: 10 },
        { x: 2 * phaseMs, y: 40 },
        { x: durationMs, y: 40 },
      ],
    };
    const goodput: TimeSeries[] = KINDS.map((k) => ({
      label: ADAPTIVE_LABEL[k],
      color: COLORS[k],
      points: goodputSeries(results.get(k)!, 250, durationMs).map((y, i) => ({
        x: i * 250 + 125,
        y,
      })),
    }));
    const svg = renderTimeChart(
      'Partner capacity 40 → 10 → 40 (contract 40, 60 callers, 500 ms timeout)',
      durationMs,
      [...limitSeries, capacity],
      50,
      goodput,
      1200,
    );
    const outDir = join(dirname(fileURLToPath(import.meta.url)), '..', args.out!);
    await mkdir(outDir, { recursive: true });
    await writeFile(join(outDir, 'adaptive.svg'), svg);
  }
  return [
    '### (b) The partner loses capacity, then gets it back',
    '',
    `Contract 40 for every limiter; 60 callers in a closed loop; the partner's capacity is 40 for ${phaseMs / 1000} s, then 10 (250/s), then 40 again. "Recovery" is the time from the change until the goodput over the next 500 ms first reaches 90% of the new goodput — what the fixed 40 served in that phase in the same run (the partner's 250/s, then as much of its 1,000/s as this machine's client reaches). Goodput and mean call latency (from dispatch) per phase.`,
    '',
    markdownTable(
      [
        'limiter',
        'capacity 40',
        'capacity 10',
        'timeouts at 10',
        'recovery ↓',
        'recovery ↑',
        'limit at phase ends',
        'capacity 40 again',
        'partner peak',
      ],
      rows,
      ['left', 'right', 'right', 'right', 'right', 'right', 'left', 'right', 'right'],
    ),
    '',
    '![Effective limit and goodput over time, capacity 40 → 10 → 40](adaptive.svg)',
  ].join('\n');
}

/** (c): 2× the partner's capacity arrives; each caller gives up 250 ms after it arrived. */
async function queueDiscipline(partner: Awaited<ReturnType<typeof forkPartner>>): Promise<string> {
  const deadlineMs = 250;
  const durationMs = smoke ? 150 : 5000;
  const rows: string[][] = [];
  for (const order of ['fifo', 'adaptive-lifo'] as const) {
    for (const kind of ['fixed', 'aimd'] as const) {
      const contender = makeAdaptiveContender(kind, partner.origin, {
        contract: 40,
        maxQueue: 400,
        queueTimeout: 1000,
        extra: { queueOrder: order },
      });
      const r = await runDeadlineLoop(contender, partner, {
        ratePerSec: 2000,
        durationMs,
        deadlineMs,
      });
      const q = (p: number) =>
        r.servedMs.length
          ? r.servedMs[Math.min(r.servedMs.length - 1, Math.floor(p * r.servedMs.length))]!
          : Number.NaN;
      rows.push([
        `${kind === 'fixed' ? 'fixed 40' : 'AIMD ≤ 40'}, ${order === 'fifo' ? 'FIFO' : 'adaptive LIFO'}`,
        rate((r.served * 1000) / durationMs),
        pct(r.served / r.arrivals),
        formatMs(q(0.5)),
        formatMs(q(0.99)),
        String(r.expired),
        String(r.shed),
        String(r.partnerWasted),
      ]);
      log(`(c) ${rows.at(-1)!.join(' | ')}`);
      if (r.errors > 0) failures.push(`(c) ${kind} ${order}: ${r.errors} unexpected errors`);
    }
  }
  return [
    '### (c) Queue discipline at 2× overload',
    '',
    `2,000 callers/s for ${durationMs / 1000} s against the 1,000/s partner (capacity 40); each caller gives up ${deadlineMs} ms after it arrived, queued or in flight (a user-facing budget). Gate: contract 40, maxQueue 400, queueTimeout 1 s; adaptive LIFO with its default lifoAfter of 100 ms. "Served" means answered within the budget; p50/p99 are over served callers, from arrival; "wasted" is work the partner did for callers already gone.`,
    '',
    markdownTable(
      ['gate', 'goodput', 'served', 'p50', 'p99', 'gave up', 'shed', 'wasted at partner'],
      rows,
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  ].join('\n');
}

const SECTION = {
  marker: 'adaptive',
  command: 'npm run bench:adaptive',
  heading: '## Adaptive limits: finding the partner’s real capacity',
};

main().then(
  () => {
    if (failures.length > 0) {
      log(`\nFAILED (${failures.length}):`);
      for (const f of failures) log(`  - ${f}`);
      process.exitCode = 1;
    } else if (smoke) {
      log('\nsmoke: OK — every run completed and no gate went past its contract');
    }
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  },
);
