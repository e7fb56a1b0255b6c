/**
 * Shared-gate benchmark: P processes × C callers against one partner whose cap is shared
 * through one Redis, hostgate side by side with redis-semaphore and Bottleneck's Redis mode,
 * at the same cap, in one run, each on a fresh private redis-server.
 *
 *   npm run bench:shared                  full run (3 runs per library, median)
 *   npm run bench:shared -- --smoke       2 processes, 0.3 s per library: checks, not speed
 *   npm run bench:shared -- --runs 5 --seconds 8 --only hostgate,bottleneck
 *   npm run bench:shared -- --only hostgate --rate 500/1000/20
 *                                         hostgate's gate with a rate beside the cap (limit /
 *                                         per ms / burst; the peers here have none)
 *
 * Per library: grants per second, wait p99 (asking → holding), the partner's peak concurrency
 * (the oracle: it must not pass the cap), and Redis commands per grant from `INFO commandstats`
 * (reset before the callers start, read once they stop; it counts commands run inside scripts
 * too, so a Lua script of five calls counts six). One more 2 s run per library under MONITOR
 * (which slows Redis, so none of its other numbers are used) counts what the clients themselves
 * send per grant: script calls count once there.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startPartner } from '../test/helpers/partner.js';
import { forkWorker, killAllWorkers } from './lib/fleet.js';
import { redisMissing, startRedis, stopAllRedis } from './lib/redis-server.js';
import { connectResp, respCommand } from './lib/resp.js';
import { formatMs, formatOps, formatRatio, median, ratio } from './lib/stats.js';
import { markdownTable } from './lib/table.js';
import type { LibName } from './shared/gates.js';
import type { WorkerConfig, WorkerResult } from './shared/worker.js';

const WORKER = new URL('./shared/worker.ts', import.meta.url);
const LIBS: readonly LibName[] = ['hostgate', 'redis-semaphore', 'bottleneck'];

interface Sizes {
  processes: number;
  callers: number;
  cap: number;
  holdMs: number;
  seconds: number;
  runs: number;
  /** hostgate only: a rate beside the cap. */
  rate?: { limit: number; per: number; burst: number };
}

const FULL: Sizes = { processes: 6, callers: 20, cap: 20, holdMs: 10, seconds: 5, runs: 3 };
const SMOKE: Sizes = { processes: 2, callers: 8, cap: 4, holdMs: 5, seconds: 0.3, runs: 1 };

export interface RunResult {
  grants: number;
  errors: number;
  seconds: number;
  waitP99: number;
  partnerPeak: number;
  commands: number;
  /** Commands the clients sent (MONITOR, without those run inside scripts); monitored runs only. */
  clientCommands?: number;
  firstError?: string;
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
}

/** Sum of `calls=` over every `cmdstat_*` line of `INFO commandstats`. */
export function totalCalls(info: string): number {
  let total = 0;
  for (const match of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) total += Number(match[1]);
  return total;
}

/** Counts the commands clients send from now on (MONITOR shows script-internal ones as `lua`). */
async function monitorClients(port: number): Promise<{ count: () => number; stop: () => void }> {
  const monitor = await connectResp(port);
  let count = 0;
  monitor.onPush((line) => {
    if (typeof line === 'string' && !line.includes(' lua]')) count++;
  });
  await monitor.command('MONITOR');
  return { count: () => count, stop: () => monitor.close() };
}

async function runOnce(
  lib: LibName,
  sizes: Sizes,
  run: number,
  monitored = false,
): Promise<RunResult> {
  const redis = await startRedis();
  const partner = await startPartner();
  try {
    const workers = Array.from({ length: sizes.processes }, (_, i) => {
      const config: WorkerConfig = {
        lib,
        redisPort: redis.port,
        cap: sizes.cap,
        client: i % 2 === 0 ? 'node-redis' : 'ioredis',
        name: `bench-${run}`,
        callers: sizes.callers,
        partnerUrl: partner.origin,
        holdMs: sizes.holdMs,
        ...(sizes.rate === undefined ? {} : { rate: sizes.rate }),
      };
      return forkWorker(WORKER, config);
    });
    await Promise.all(workers.map((w) => w.next('ready', 120_000)));
    await redis.command('CONFIG', 'RESETSTAT');
    const monitor = monitored ? await monitorClients(redis.port) : undefined;
    const started = Date.now();
    const deadline = started + sizes.seconds * 1000;
    for (const w of workers) w.send({ type: 'go', deadline });
    const stopWithin = sizes.seconds * 1000 + 150_000;
    await Promise.all(workers.map((w) => w.next('stopped', stopWithin)));
    const seconds = (Date.now() - started) / 1000;
    const clientCommands = monitor?.count();
    monitor?.stop();
    const commands = totalCalls(String(await respCommand(redis.port, 'INFO', 'commandstats')));
    const peak = partner.peak;
    for (const w of workers) w.send({ type: 'close' });
    const results = await Promise.all(
      workers.map((w) => w.next<WorkerResult & { type: string }>('result', 30_000)),
    );
    await Promise.all(workers.map((w) => w.exited));
    const waits = results.flatMap((r) => r.waits).sort((a, b) => a - b);
    const grants = results.reduce((n, r) => n + r.grants, 0);
    return {
      grants,
      errors: results.reduce((n, r) => n + r.errors, 0),
      seconds,
      waitP99: percentile(waits, 99),
      partnerPeak: peak,
      // INFO itself and CONFIG RESETSTAT's own count are not the libraries' doing.
      commands: Math.max(0, commands - 1),
      clientCommands,
      firstError: results.find((r) => r.firstError !== undefined)?.firstError,
    };
  } finally {
    await killAllWorkers();
    await partner.close();
    await redis.close();
  }
}

interface Row {
  lib: LibName;
  runs: RunResult[];
  /** One extra run under MONITOR (which slows Redis): client commands per grant only. */
  monitored?: RunResult;
  failure?: string;
}

function summarizeRow(row: Row) {
  const ok = row.runs;
  return {
    grantsPerSec: median(ok.map((r) => r.grants / r.seconds)),
    waitP99: median(ok.map((r) => r.waitP99)),
    peak: ok.length ? Math.max(...ok.map((r) => r.partnerPeak)) : undefined,
    commandsPerGrant: median(ok.map((r) => r.commands / Math.max(1, r.grants))),
    clientCommandsPerGrant:
      row.monitored?.clientCommands === undefined
        ? undefined
        : row.monitored.clientCommands / Math.max(1, row.monitored.grants),
    errors: ok.reduce((n, r) => n + r.errors, 0),
  };
}

export function report(rows: readonly Row[], sizes: Sizes): string {
  const base = rows.find((r) => r.lib === 'hostgate');
  const hg = base ? summarizeRow(base) : undefined;
  const table = rows.map((row) => {
    const s = summarizeRow(row);
    if (row.runs.length === 0) return [row.lib, `failed: ${row.failure ?? '?'}`];
    return [
      row.lib,
      formatOps(s.grantsPerSec),
      formatMs(s.waitP99),
      `${s.peak} / ${sizes.cap}`,
      s.commandsPerGrant === undefined ? 'n/a' : s.commandsPerGrant.toFixed(1),
      s.clientCommandsPerGrant === undefined ? 'n/a' : s.clientCommandsPerGrant.toFixed(2),
      String(s.errors),
      row.lib === 'hostgate' || !hg
        ? '—'
        : `${formatRatio(ratio(hg.grantsPerSec, s.grantsPerSec))} grants/s, ` +
          `${formatRatio(ratio(s.waitP99, hg.waitP99))} lower p99, ` +
          `${formatRatio(ratio(s.commandsPerGrant, hg.commandsPerGrant))} fewer commands, ` +
          `${formatRatio(ratio(s.clientCommandsPerGrant, hg.clientCommandsPerGrant))} fewer sent`,
    ];
  });
  const header = [
    'library',
    'grants/s',
    'wait p99',
    'partner peak / cap',
    'Redis commands / grant',
    'sent by clients / grant',
    'errors',
    'hostgate vs it',
  ];
  const align = ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'left'] as const;
  return markdownTable(header, table, align);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      smoke: { type: 'boolean', default: false },
      runs: { type: 'string' },
      seconds: { type: 'string' },
      only: { type: 'string' },
      rate: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(
      'usage: tsx bench/shared.ts [--smoke] [--runs N] [--seconds S] [--only lib,...] [--rate limit/per/burst]',
    );
    return 0;
  }
  if (redisMissing !== undefined) {
    console.log(`bench:shared needs a private redis-server: ${redisMissing}`);
    return values.smoke && !process.env.CI ? 0 : 1;
  }
  const sizes: Sizes = { ...(values.smoke ? SMOKE : FULL) };
  if (values.runs) sizes.runs = Number(values.runs);
  if (values.seconds) sizes.seconds = Number(values.seconds);
  const libs = values.only ? (values.only.split(',') as LibName[]) : LIBS;
  for (const lib of libs) {
    if (!LIBS.includes(lib)) throw new TypeError(`--only: unknown library ${JSON.stringify(lib)}`);
  }
  if (values.rate !== undefined) {
    const [limit, per, burst] = values.rate.split('/').map(Number);
    if (![limit, per, burst].every((v) => Number.isInteger(v) && v! >= 0) || !limit || !per) {
      throw new TypeError(`--rate: want limit/per/burst in whole numbers, got ${values.rate}`);
    }
    if (libs.some((lib) => !lib.startsWith('hostgate'))) {
      throw new TypeError('--rate: only hostgate has a rate here: pass --only hostgate');
    }
    sizes.rate = { limit: limit!, per: per!, burst: burst! };
  }

  console.log(
    `# shared gate: ${sizes.processes} processes × ${sizes.callers} callers, cap ${sizes.cap}, ` +
      `partner ${sizes.holdMs} ms/request, ${sizes.seconds} s × ${sizes.runs} run(s) per library` +
      (sizes.rate
        ? `, rate ${sizes.rate.limit}/${sizes.rate.per} ms burst ${sizes.rate.burst}`
        : ''),
  );
  console.log(`# ${os.cpus().length} CPUs, Node ${process.version}, redis-server (private)\n`);
  const rows: Row[] = libs.map((lib) => ({ lib, runs: [] }));
  let failed = false;
  // Round-robin over the libraries, run by run, so a busy spell on the machine hits them all
  // alike; each run on a fresh Redis and partner. The MONITOR runs come last.
  for (let run = 0; run < sizes.runs; run++) {
    for (const row of rows) {
      try {
        const result = await runOnce(row.lib, sizes, run);
        row.runs.push(result);
        // A peer's overshoot or errors are findings for the table; hostgate's fail the run.
        if (row.lib === 'hostgate' && (result.partnerPeak > sizes.cap || result.errors > 0)) {
          failed = true;
        }
        if (result.errors > 0) {
          console.error(`${row.lib}: ${result.errors} errors, first: ${result.firstError}`);
        }
      } catch (error) {
        row.failure = String(error).split('\n')[0];
        failed = true;
        console.error(`${row.lib} run ${run}: ${String(error)}`);
      }
    }
  }
  for (const row of values.smoke ? [] : rows) {
    try {
      const monitored = { ...sizes, seconds: Math.min(2, sizes.seconds) };
      row.monitored = await runOnce(row.lib, monitored, -1, true);
    } catch (error) {
      failed = true;
      console.error(`${row.lib} monitored run: ${String(error)}`);
    }
  }
  console.log(report(rows, sizes));
  if (values.smoke) console.log(failed ? '\nsmoke: FAILED' : '\nsmoke: OK');
  await stopAllRedis();
  return failed ? 1 : 0;
}

process.exitCode = await main();
