/**
 * Fleet benchmark (issue 25): one cap of 100 shared by 50 processes through one private
 * redis-server, against a partner on 127.0.0.1 that counts its own concurrency (the oracle) and
 * answers in 20–50 ms. hostgate's leased mode and FIFO mode, redis-semaphore and Bottleneck's
 * Redis mode, in one run, each on a fresh Redis and partner.
 *
 *   npm run bench:fleet                 full run (about two minutes)
 *   npm run bench:fleet -- --smoke      3 processes, a few seconds: checks, not numbers
 *   npm run bench:fleet -- --only hostgate-leased --refresh-ms 2000 --lease-ms 6000
 *                                       one mode at another refresh (docs/scale.md's trade)
 *   npm run bench:fleet -- --steady     the steady phase beside no-gate baselines (fleet/steady.ts)
 *
 * The replicas are child processes (bench/fleet/replica.ts bundled once with esbuild, plain
 * node with a 48 MB heap: the tsx loader costs a second of CPU per process), each with its own
 * client, store and process id. Per mode: Redis calls per grant at steady load (INFO
 * commandstats, calls inside scripts included), wait p50/p99, partner peak, bytes per grant;
 * for hostgate's modes also utilization while demand moves between the two halves of the
 * fleet every 5 s (docs/fleet.svg), how long a SIGKILLed process's permits stay lost, and the
 * idle Redis load per process. Then the grant latency of a free leased permit beside a local
 * gate's (same process, same run), and one refresh's cost in Redis by fleet size.
 */
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startPartner } from '../test/helpers/partner.js';
import { utilizationChart } from './fleet/chart.js';
import { freeLatency } from './fleet/latency.js';
import type { Phase, ReplicaConfig, ReplicaResult } from './fleet/replica.js';
import { scriptCost } from './fleet/script-cost.js';
import { STEADY_FLAGS, steadyBench, steadySizes } from './fleet/steady.js';
import { bundleForNode } from './lib/bundle.js';
import { forkWorker, killAllWorkers, type Worker } from './lib/fleet.js';
import { type RedisServer, redisMissing, startRedis, stopAllRedis } from './lib/redis-server.js';
import { markdownTable } from './lib/table.js';
import type { LibName } from './shared/gates.js';

interface Sizes {
  processes: number;
  callers: number;
  cap: number;
  warmS: number;
  steadyS: number;
  shiftS: number;
  shifts: number;
  idleS: number;
  leaseMs: number;
  refreshMs: number;
  latencyRounds: number;
  costSizes: number[];
  libs: LibName[];
}

const FULL: Sizes = {
  processes: 50,
  callers: 6,
  cap: 100,
  warmS: 2,
  steadyS: 5,
  shiftS: 5,
  shifts: 4,
  idleS: 3,
  leaseMs: 3000,
  refreshMs: 1000,
  latencyRounds: 10,
  costSizes: [50, 200, 1000, 5000],
  libs: ['hostgate-leased', 'hostgate', 'redis-semaphore', 'bottleneck'],
};
/** npm test runs this (test/bench-smoke.test.ts): kept to a few seconds of CPU. */
const SMOKE: Sizes = {
  processes: 3,
  callers: 3,
  cap: 6,
  warmS: 0.5,
  steadyS: 0.6,
  shiftS: 0.6,
  shifts: 2,
  idleS: 0.6,
  leaseMs: 1200,
  refreshMs: 200,
  latencyRounds: 1,
  costSizes: [50],
  libs: ['hostgate-leased', 'hostgate'],
};

interface ModeResult {
  lib: LibName;
  grants: number;
  callsPerGrant: number;
  bytesPerGrant: number;
  waitP50: number;
  waitP99: number;
  peak: number;
  errors: number;
  /** Partner busy / cap while demand shifts (end to end: includes a CPU-starved client). */
  utilization?: number;
  /** Permits held / cap while demand shifts, from every replica's own count. */
  heldUtilization?: number;
  series?: [number, number][];
  heldSeries?: [number, number][];
  killReturnMs?: number;
  idleCallsPerProcessPerS?: number;
  firstError?: string;
}

const BUNDLE = new URL('../node_modules/.cache/hostgate-bench/replica.mjs', import.meta.url);

async function bundle(): Promise<void> {
  await bundleForNode(new URL('./fleet/replica.ts', import.meta.url).pathname, BUNDLE.pathname);
}

function pct(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
}

async function info(redis: RedisServer, section: string): Promise<string> {
  return String(await redis.command('INFO', section));
}

async function netBytes(redis: RedisServer): Promise<number> {
  const text = await info(redis, 'stats');
  const read = (k: string) => Number(new RegExp(`${k}:(\\d+)`).exec(text)?.[1] ?? 0);
  return read('total_net_input_bytes') + read('total_net_output_bytes');
}

/** Sum of `calls=` over every `cmdstat_*` line of `INFO commandstats` (as bench:shared). */
function totalCalls(text: string): number {
  let total = 0;
  for (const match of text.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) total += Number(match[1]);
  return total;
}

const until = (t: number) => new Promise((r) => setTimeout(r, Math.max(0, t - Date.now())));

async function runMode(lib: LibName, s: Sizes): Promise<ModeResult> {
  const redis = await startRedis();
  const partner = await startPartner();
  const hostgate = lib.startsWith('hostgate');
  try {
    const workers: Worker[] = Array.from({ length: s.processes }, (_, i) => {
      const config: ReplicaConfig = {
        lib,
        redisPort: redis.port,
        cap: s.cap,
        client: i % 2 === 0 ? 'node-redis' : 'ioredis',
        name: 'fleet',
        leaseMs: s.leaseMs,
        refreshMs: s.refreshMs,
        partnerPort: Number(new URL(partner.origin).port),
        callers: s.callers,
        half: (i % 2) as 0 | 1,
        seed: i + 1,
      };
      return forkWorker(BUNDLE, config, { execArgv: ['--max-old-space-size=48'] });
    });
    const ready = await Promise.all(
      workers.map((w) => w.next<{ processId?: string }>('ready', 120_000)),
    );
    const t0 = Date.now() + 300;
    const phases: Phase[] = [];
    let t = t0 + s.warmS * 1000;
    phases.push({ end: t, busy: 'all' });
    const steadyStart = t;
    t += s.steadyS * 1000;
    phases.push({ end: t, busy: 'all' });
    const steadyEnd = t;
    const shiftStart = t;
    if (hostgate) {
      for (let i = 0; i < s.shifts; i++) {
        t += s.shiftS * 1000;
        phases.push({ end: t, busy: (i % 2) as 0 | 1 });
      }
      t += s.idleS * 1000;
      phases.push({ end: t, busy: 'none' });
    }
    const shiftEnd = shiftStart + s.shifts * s.shiftS * 1000;
    const end = t;
    for (const w of workers) w.send({ type: 'run', phases });
    const samples: [number, number][] = [];
    const sampler = setInterval(() => samples.push([Date.now(), partner.active]), 10);

    await until(steadyStart);
    await redis.command('CONFIG', 'RESETSTAT');
    const bytes0 = await netBytes(redis);
    await until(steadyEnd);
    const steadyCalls = totalCalls(await info(redis, 'commandstats'));
    const steadyBytes = (await netBytes(redis)) - bytes0;

    let killReturnMs: number | undefined;
    let idleCalls: number | undefined;
    const alive = [...workers];
    if (hostgate) {
      // SIGKILL one replica of the half busy first, and time how long Redis keeps its permits.
      const victim = workers[0]!;
      const id = ready[0]!.processId!;
      await until(shiftStart + 1000);
      victim.kill('SIGKILL');
      alive.splice(0, 1);
      const killedAt = Date.now();
      const gone = async () =>
        lib === 'hostgate-leased'
          ? Number(await redis.command('HEXISTS', 'bench:{fleet}:l', id)) === 0
          : ((await redis.command('ZRANGE', 'bench:{fleet}:h', 0, -1)) as string[]).every(
              (lease) => !lease.startsWith(`${id}:`),
            );
      while (!(await gone()) && Date.now() < killedAt + 4 * s.leaseMs) await until(Date.now() + 50);
      killReturnMs = Date.now() - killedAt;
      // Idle: after a second for demand to decay, calls per process per second.
      const idleFrom = shiftEnd + 1000;
      await until(idleFrom);
      const c0 = totalCalls(await info(redis, 'commandstats'));
      await until(end - 100);
      const c1 = totalCalls(await info(redis, 'commandstats'));
      const idleS = (end - 100 - idleFrom) / 1000;
      if (idleS >= 1) idleCalls = (c1 - c0 - 1) / idleS / alive.length;
    }
    const results = await Promise.all(
      alive.map((w) => w.next<ReplicaResult>('done', end - Date.now() + 60_000)),
    );
    clearInterval(sampler);
    const steadyIndex = 1;
    const grants = results.reduce((n, r) => n + r.grants[steadyIndex]!, 0);
    const waits = results.flatMap((r) => r.waits[steadyIndex]!).sort((a, b) => a - b);
    const result: ModeResult = {
      lib,
      grants,
      // INFO itself is counted once per read: not the libraries' doing.
      callsPerGrant: Math.max(0, steadyCalls - 1) / Math.max(1, grants),
      bytesPerGrant: steadyBytes / Math.max(1, grants),
      waitP50: pct(waits, 50),
      waitP99: pct(waits, 99),
      peak: partner.peak,
      errors: results.reduce((n, r) => n + r.errors, 0),
      firstError: results.find((r) => r.firstError)?.firstError,
      killReturnMs,
      idleCallsPerProcessPerS: idleCalls,
    };
    if (hostgate) {
      const inShift = samples.filter(([at]) => at >= shiftStart && at < shiftEnd);
      result.utilization = inShift.reduce((n, [, a]) => n + a, 0) / inShift.length / s.cap;
      const bucket = 250;
      const series: [number, number][] = [];
      for (let from = shiftStart; from < shiftEnd; from += bucket) {
        const inside = inShift.filter(([at]) => at >= from && at < from + bucket);
        if (inside.length === 0) continue;
        const mean = inside.reduce((n, [, a]) => n + a, 0) / inside.length;
        series.push([(from - shiftStart + bucket / 2) / 1000, mean / s.cap]);
      }
      result.series = series;
      // The gates' own permit-seconds: each replica's held, averaged per bucket, summed.
      const heldSeries: [number, number][] = [];
      let heldSum = 0;
      for (let from = shiftStart; from < shiftEnd; from += bucket) {
        let total = 0;
        for (const r of results) {
          const inside = r.held.filter(([at]) => at >= from && at < from + bucket);
          if (inside.length > 0) total += inside.reduce((n, [, h]) => n + h, 0) / inside.length;
        }
        heldSum += total;
        heldSeries.push([(from - shiftStart + bucket / 2) / 1000, total / s.cap]);
      }
      result.heldSeries = heldSeries;
      result.heldUtilization = heldSum / heldSeries.length / s.cap;
    }
    for (const w of alive) w.send({ type: 'close' });
    await Promise.all(alive.map((w) => w.next('closed', 10_000).catch(() => undefined)));
    return result;
  } finally {
    await killAllWorkers();
    await partner.close();
    await redis.close();
  }
}

const fmt = (n: number | undefined, digits = 2) =>
  n === undefined || Number.isNaN(n) ? 'n/a' : n.toFixed(digits);

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      smoke: { type: 'boolean', default: false },
      // The leased mode's trade: a longer refresh costs fewer Redis calls per grant and moves
      // free permits to busy processes later (docs/scale.md).
      'refresh-ms': { type: 'string' },
      'lease-ms': { type: 'string' },
      only: { type: 'string' },
      // The steady phase alone, beside no-gate baselines (bench/fleet/steady.ts).
      steady: { type: 'boolean', default: false },
      ...Object.fromEntries(STEADY_FLAGS.map((f) => [f, { type: 'string' as const }])),
    },
    strict: true,
  });
  if (redisMissing !== undefined) {
    console.log(`bench:fleet needs a private redis-server: ${redisMissing}`);
    return values.smoke && !process.env.CI ? 0 : 1;
  }
  const s = { ...(values.smoke ? SMOKE : FULL) };
  const positive = (name: string, text: string | undefined, fallback: number): number => {
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!Number.isInteger(n) || n <= 0)
      throw new TypeError(`--${name} must be a positive integer, got ${text}`);
    return n;
  };
  if (values.steady) {
    await bundle();
    const ok = await steadyBench(steadySizes(values as Record<string, unknown>, positive), BUNDLE);
    await stopAllRedis();
    return ok ? 0 : 1;
  }
  s.refreshMs = positive('refresh-ms', values['refresh-ms'], s.refreshMs);
  s.leaseMs = positive('lease-ms', values['lease-ms'], s.leaseMs);
  if (values.only !== undefined) {
    const only = values.only.split(',');
    const unknown = only.filter((lib) => !s.libs.includes(lib as LibName));
    if (unknown.length > 0)
      throw new TypeError(`--only: unknown ${unknown.join(', ')} (${s.libs.join(', ')})`);
    s.libs = s.libs.filter((lib) => only.includes(lib));
  }
  console.log(
    `# fleet: ${s.processes} processes × ${s.callers} callers, cap ${s.cap}, partner 20–50 ms, ` +
      `leased lease ${s.leaseMs} ms / refresh ${s.refreshMs} ms (FIFO: lease ${s.leaseMs} ms)`,
  );
  console.log(
    `# ${os.cpus().length} CPUs, Node ${process.version}, child processes (48 MB heap)\n`,
  );
  await bundle();
  let failed = false;
  const rows: ModeResult[] = [];
  for (const lib of s.libs) {
    try {
      const started = Date.now();
      const r = await runMode(lib, s);
      rows.push(r);
      console.error(
        `# ${lib}: ${((Date.now() - started) / 1000).toFixed(0)} s, ${JSON.stringify({ ...r, series: undefined, heldSeries: undefined })}`,
      );
      if (lib.startsWith('hostgate') && (r.peak > s.cap || r.errors > 0)) failed = true;
      if (r.errors > 0) console.error(`${lib}: ${r.errors} errors, first: ${r.firstError}`);
    } catch (error) {
      failed = true;
      console.error(`${lib}: ${String(error)}`);
    }
  }
  console.log(
    markdownTable(
      [
        'mode',
        'grants (steady)',
        'Redis calls / grant',
        'bytes / grant',
        'wait p50',
        'wait p99',
        'partner peak / cap',
        'permits held / cap while demand shifts',
        'partner busy / cap then',
        'SIGKILLed permits back after',
        'idle calls / process / s',
      ],
      rows.map((r) => [
        r.lib,
        String(r.grants),
        fmt(r.callsPerGrant, 3),
        fmt(r.bytesPerGrant, 0),
        `${fmt(r.waitP50)} ms`,
        `${fmt(r.waitP99)} ms`,
        `${r.peak} / ${s.cap}`,
        r.heldUtilization === undefined ? '—' : `${(r.heldUtilization * 100).toFixed(1)}%`,
        r.utilization === undefined ? '—' : `${(r.utilization * 100).toFixed(1)}%`,
        r.killReturnMs === undefined ? '—' : `${r.killReturnMs} ms (lease ${s.leaseMs})`,
        fmt(r.idleCallsPerProcessPerS, 2),
      ]),
      ['left', ...Array<'right'>(10).fill('right')],
    ),
  );
  const latency = await freeLatency(s.latencyRounds);
  console.log('\n## grant latency of a free permit (one process, interleaved rounds)\n');
  console.log(
    markdownTable(
      ['gate', 'p50', 'p99', 'p50 vs local'],
      latency.map((l) => [
        l.gate,
        `${(l.p50 * 1000).toFixed(0)} ns`,
        `${(l.p99 * 1000).toFixed(0)} ns`,
        `${(l.p50 / latency[0]!.p50).toFixed(2)}×`,
      ]),
      ['left', 'right', 'right', 'right'],
    ),
  );
  const costs = await scriptCost(s.costSizes, values.smoke ? 20 : 300);
  console.log('\n## one leased refresh in Redis, by processes on the gate\n');
  console.log(
    markdownTable(
      [
        'processes',
        'µs / refresh (Redis CPU)',
        'µs / walk of the fleet',
        'block hash bytes',
        'wire bytes / refresh',
      ],
      costs.map((c) => [
        String(c.processes),
        fmt(c.usecPerRefresh, 1),
        fmt(c.usecPerWalk, 1),
        String(c.hashBytes),
        fmt(c.wireBytes, 0),
      ]),
      ['right', 'right', 'right', 'right', 'right'],
    ),
  );
  const leased = rows.find((r) => r.lib === 'hostgate-leased');
  const fifo = rows.find((r) => r.lib === 'hostgate');
  if (!values.smoke && leased?.series && fifo?.series) {
    const shifts = Array.from({ length: s.shifts - 1 }, (_, i) => (i + 1) * s.shiftS);
    const pctOf = (u: number | undefined) => `${fmt((u ?? 0) * 100, 1)}%`;
    const svg = utilizationChart(
      `Permits held / cap, ${s.processes} processes, cap ${s.cap}, demand moving every ${s.shiftS} s`,
      [
        {
          label: `leased: held ${pctOf(leased.heldUtilization)}`,
          color: '#1b6ac9',
          points: leased.heldSeries ?? [],
        },
        {
          label: `FIFO: held ${pctOf(fifo.heldUtilization)}`,
          color: '#d9731a',
          points: fifo.heldSeries ?? [],
        },
        {
          label: `leased: partner busy ${pctOf(leased.utilization)}`,
          color: '#7fb0e8',
          points: leased.series,
        },
      ],
      shifts,
      s.shifts * s.shiftS,
    );
    writeFileSync(new URL('../docs/fleet.svg', import.meta.url), svg);
    console.log('\nwrote docs/fleet.svg');
  }
  if (values.smoke) console.log(failed ? '\nsmoke: FAILED' : '\nsmoke: OK');
  await stopAllRedis();
  return failed ? 1 : 0;
}

process.exitCode = await main();
