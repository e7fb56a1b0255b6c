/**
 * The fleet's steady phase (issue 35, "the cap filled"): every process busy, demand above the
 * cap, calls of a fixed length; how much of the cap the partner sees in use, beside baselines of
 * the same fleet in the same run, so that the ratio says what the gate costs and not what this
 * machine's CPU does:
 *
 * - `leased`: hostgate's leased gate, `callers` per process, one cap over the fleet;
 * - `local`: a local gate of cap / processes permits in each process (a static split: what the
 *   leased fleet's equal blocks can do at best, with no Redis at all);
 * - `none-cap`: no gate, cap / processes callers per process (exactly `cap` callers in the fleet:
 *   how busy this machine keeps the partner with that many);
 * - `none`: no gate, `callers` per process (the fleet's demand, unbounded).
 *
 *   npm run bench:fleet -- --steady [--processes 50 --callers 4 --cap 100 --delay-ms 30]
 *
 * Partner busy / cap is the partner's own count of requests in progress, sampled every 5 ms over
 * the window; held / cap the processes' own count; refreshes are Redis's count of script calls
 * (HOSTGATE_BENCH_STATS=1 prints its INFO commandstats of the window).
 */

import { startPartner } from '../../test/helpers/partner.js';
import { forkWorker, killAllWorkers } from '../lib/fleet.js';
import { startRedis } from '../lib/redis-server.js';
import { markdownTable } from '../lib/table.js';
import type { ReplicaConfig, ReplicaResult } from './replica.js';

export interface SteadySizes {
  processes: number;
  callers: number;
  cap: number;
  delayMs: number;
  warmS: number;
  steadyS: number;
  leaseMs: number;
  refreshMs: number;
  modes: SteadyMode[];
}

export type SteadyMode = 'leased' | 'local' | 'none-cap' | 'none';

export const STEADY: SteadySizes = {
  processes: 50,
  callers: 4,
  cap: 100,
  delayMs: 30,
  warmS: 3,
  steadyS: 6,
  leaseMs: 3000,
  refreshMs: 1000,
  modes: ['none-cap', 'local', 'leased', 'none'],
};

/** The flags of `--steady` (`--refresh-ms`, `--lease-ms` and `--only` are shared with the full run). */
export const STEADY_FLAGS = ['processes', 'callers', 'cap', 'delay-ms', 'steady-s'] as const;

/** The sizes `--steady` runs: STEADY with the flags given. */
export function steadySizes(
  values: Record<string, unknown>,
  positive: (name: string, text: string | undefined, fallback: number) => number,
): SteadySizes {
  const t = { ...STEADY };
  const num = (f: string, fallback: number) =>
    positive(f, values[f] as string | undefined, fallback);
  t.processes = num('processes', t.processes);
  t.callers = num('callers', t.callers);
  t.cap = num('cap', t.cap);
  t.delayMs = num('delay-ms', t.delayMs);
  t.steadyS = num('steady-s', t.steadyS);
  t.refreshMs = num('refresh-ms', t.refreshMs);
  t.leaseMs = num('lease-ms', t.leaseMs);
  if (typeof values.only === 'string') t.modes = values.only.split(',') as SteadyMode[];
  return t;
}

export interface SteadyResult {
  mode: SteadyMode;
  busy: number;
  held: number;
  grantsPerS: number;
  peak: number;
  /** Script calls (EVALSHA/EVAL) per process per second over the window. */
  refreshesPerProcessS: number;
  errors: number;
}

function scriptCalls(text: string): number {
  let n = 0;
  for (const m of text.matchAll(/^cmdstat_(?:evalsha|eval|evalsha_ro|eval_ro):calls=(\d+)/gm)) {
    n += Number(m[1]);
  }
  return n;
}

const until = (t: number) => new Promise((r) => setTimeout(r, Math.max(0, t - Date.now())));

async function runSteady(mode: SteadyMode, s: SteadySizes, bundle: URL): Promise<SteadyResult> {
  const redis = await startRedis();
  const partner = await startPartner();
  const share = Math.max(1, Math.floor(s.cap / s.processes));
  try {
    const workers = Array.from({ length: s.processes }, (_, i) => {
      const config: ReplicaConfig = {
        lib: 'hostgate-leased',
        redisPort: redis.port,
        cap: mode === 'local' ? share : s.cap,
        client: i % 2 === 0 ? 'node-redis' : 'ioredis',
        name: 'steady',
        leaseMs: s.leaseMs,
        refreshMs: s.refreshMs,
        partnerPort: Number(new URL(partner.origin).port),
        callers: mode === 'none-cap' ? share : s.callers,
        half: (i % 2) as 0 | 1,
        seed: i + 1,
        delayMs: s.delayMs,
        ...(mode === 'leased' ? {} : { baseline: mode === 'local' ? 'local' : 'none' }),
      };
      return forkWorker(bundle, config, { execArgv: ['--max-old-space-size=48'] });
    });
    await Promise.all(workers.map((w) => w.next('ready', 120_000)));
    const t0 = Date.now() + 300;
    const from = t0 + s.warmS * 1000;
    const to = from + s.steadyS * 1000;
    const phases = [
      { end: from, busy: 'all' },
      { end: to, busy: 'all' },
    ];
    for (const w of workers) w.send({ type: 'run', phases });
    const samples: number[] = [];
    const sampler = setInterval(() => {
      const now = Date.now();
      if (now >= from && now < to) samples.push(partner.active);
    }, 5);
    await until(from);
    partner.resetPeak();
    if (process.env.HOSTGATE_BENCH_STATS) await redis.command('CONFIG', 'RESETSTAT');
    const c0 = scriptCalls(String(await redis.command('INFO', 'commandstats')));
    await until(to);
    const stats1 = String(await redis.command('INFO', 'commandstats'));
    const c1 = scriptCalls(stats1);
    if (process.env.HOSTGATE_BENCH_STATS) console.error(stats1);
    clearInterval(sampler);
    const results = await Promise.all(workers.map((w) => w.next<ReplicaResult>('done', 60_000)));
    let held = 0;
    for (const r of results) {
      const inside = r.held.filter(([at]) => at >= from && at < to);
      if (inside.length > 0) held += inside.reduce((n, [, h]) => n + h, 0) / inside.length;
    }
    for (const w of workers) w.send({ type: 'close' });
    await Promise.all(workers.map((w) => w.next('closed', 10_000).catch(() => undefined)));
    return {
      mode,
      busy: samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length) / s.cap,
      held: held / s.cap,
      grantsPerS: results.reduce((n, r) => n + r.grants[1]!, 0) / s.steadyS,
      peak: partner.peak,
      refreshesPerProcessS: (c1 - c0) / s.steadyS / s.processes,
      errors: results.reduce((n, r) => n + r.errors, 0),
    };
  } finally {
    await killAllWorkers();
    await partner.close();
    await redis.close();
  }
}

/** Runs every mode of `s` in turn and prints one table; false if the leased gate went over. */
export async function steadyBench(s: SteadySizes, bundle: URL): Promise<boolean> {
  console.log(
    `# steady phase: ${s.processes} processes × ${s.callers} callers, cap ${s.cap}, ` +
      `${s.delayMs} ms calls, ${s.steadyS} s window after ${s.warmS} s; ` +
      `leased lease ${s.leaseMs} ms / refresh ${s.refreshMs} ms\n`,
  );
  const rows: SteadyResult[] = [];
  for (const mode of s.modes) {
    const r = await runSteady(mode, s, bundle);
    console.error(`# ${JSON.stringify(r)}`);
    rows.push(r);
  }
  const base = rows.find((r) => r.mode === 'none-cap');
  const fmt = (n: number, d = 2) => n.toFixed(d);
  console.log(
    markdownTable(
      [
        'mode',
        'partner busy / cap',
        'vs none-cap',
        'held / cap',
        'grants / s',
        'partner peak',
        'refreshes / process / s',
      ],
      rows.map((r) => [
        r.mode,
        fmt(r.busy, 3),
        base === undefined ? '—' : fmt(r.busy / base.busy, 3),
        r.mode.startsWith('none') ? '—' : fmt(r.held, 3),
        fmt(r.grantsPerS, 0),
        String(r.peak),
        r.mode === 'leased' ? fmt(r.refreshesPerProcessS, 3) : '—',
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  const leased = rows.find((r) => r.mode === 'leased');
  return leased === undefined || (leased.peak <= s.cap && leased.errors === 0);
}
