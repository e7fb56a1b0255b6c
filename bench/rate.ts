/**
 * Rate benchmark: N calls, all asked at once, at a rate of R per second, against one partner
 * on 127.0.0.1 that logs its own arrival times; hostgate's `rate` side by side with Bottleneck
 * (`minTime`, `reservoir`, and `minTime` in its Redis mode on a private redis-server) and
 * p-throttle (default and `strict`), in one run.
 *
 *   npm run bench:rate                  2,000 calls at 100/s per peer (about 20 s each)
 *   npm run bench:rate -- --smoke       60 calls at 40/s, three peers: checks, not speed
 *   npm run bench:rate -- --calls 500 --only hostgate,p-throttle
 *   npm run bench:rate -- --processes 6 --only none   the shared part alone
 *   npm run bench:rate -- --only none --fleet 'hostgate leased'   one shared peer
 *
 * Per peer, from the partner's log: the most arrivals in any window of 1 s against what the peer
 * promises (R; hostgate `limit + burst`, run with burst 0 and 10), and goodput (arrivals per second from the first
 * to the last, against R). From the process: CPU µs per call beyond the same calls made with no
 * limiter (the HTTP itself). From Redis (`INFO commandstats`, commands inside scripts counted):
 * Redis commands per call.
 *
 * Then the same rate shared by `--processes` forked processes (6; 2 in the smoke run) on one
 * private redis-server, `calls` in all split between them and asked at once: hostgate's FIFO
 * shared gate (`shared: true` with `rate`, clients alternating node-redis and ioredis), its
 * leased gate (`mode: 'leased'`: each process sends at its leased share of the rate), and
 * Bottleneck clustered on the same Redis (one `id`, `minTime`, its `ioredis` datastore). The
 * same measures, from the partner's one log of every process's calls.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import Bottleneck from 'bottleneck';
import pThrottle from 'p-throttle';
import { Pool } from 'undici';
import { Semaphore } from '../src/index.js';
import { maxInWindow } from '../test/helpers/windows.js';
import { forkWorker, killAllWorkers } from './lib/fleet.js';
import { redisMissing, startRedis, stopAllRedis } from './lib/redis-server.js';
import { markdownTable } from './lib/table.js';
import type { RateWorkerConfig } from './rate/worker.js';

const PEERS = [
  'hostgate',
  'hostgate burst 10',
  'bottleneck minTime',
  'bottleneck reservoir',
  'bottleneck minTime (Redis)',
  'p-throttle',
  'p-throttle strict',
] as const;
type Peer = (typeof PEERS)[number];
/** What each peer promises in any window of 1 s: hostgate `limit + burst`, the others `limit`. */
const burstOf = (peer: Peer): number => (peer === 'hostgate burst 10' ? 10 : 0);

const args = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    calls: { type: 'string' },
    rate: { type: 'string' },
    only: { type: 'string' },
    processes: { type: 'string' },
    fleet: { type: 'string' },
  },
}).values;
const smoke = args.smoke === true;
const calls = Number(args.calls ?? (smoke ? 60 : 2000));
const perSecond = Number(args.rate ?? (smoke ? 40 : 100));
/** Concurrency: far above what the rate needs, so the rate is what binds. */
const CONCURRENCY = 50;
/** The smoke runs one peer of each library's code path (each at 1.5 s): npm test's time. */
const SMOKE_PEERS: readonly Peer[] = [
  'hostgate',
  'bottleneck minTime (Redis)',
  'p-throttle strict',
];
const peers = ((args.only?.split(',') ?? (smoke ? SMOKE_PEERS : PEERS)) as Peer[]).filter((p) =>
  PEERS.includes(p),
);
const processes = Number(args.processes ?? (smoke ? 2 : 6));
const FLEET_PEERS = [
  { peer: 'hostgate', burst: 20 },
  { peer: 'hostgate', burst: 0 },
  { peer: 'hostgate leased', burst: 20 },
  { peer: 'hostgate leased', burst: 0 },
  { peer: 'bottleneck', burst: 0 },
] as const;
/** The smoke run: hostgate's shared path only (two forks through tsx cost seconds). */
const fleetPeers = (smoke ? FLEET_PEERS.slice(0, 1) : FLEET_PEERS).filter(
  ({ peer }) => args.fleet === undefined || args.fleet.split(',').includes(peer),
);

/** The partner: answers at once and logs each arrival. */
async function startPartner() {
  let arrivals: number[] = [];
  const server = http.createServer((_req, res) => {
    arrivals.push(performance.now());
    res.end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    take: () => {
      const out = arrivals;
      arrivals = [];
      return out;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

type Call = () => Promise<void>;
/** Runs `call` `calls` times, all asked at once, through one limiter. */
type Limited = { run(call: Call): Promise<void>; close(): Promise<void> };

async function limiterFor(peer: Peer, redisPort: number | undefined): Promise<Limited> {
  const per = 1000;
  switch (peer) {
    case 'hostgate':
    case 'hostgate burst 10': {
      const gate = new Semaphore({
        limit: CONCURRENCY,
        maxQueue: Number.POSITIVE_INFINITY,
        queueTimeout: 600_000,
        rate: { limit: perSecond, per, burst: burstOf(peer) },
      });
      return { run: (call) => gate.run(call), close: async () => {} };
    }
    case 'bottleneck minTime':
    case 'bottleneck reservoir':
    case 'bottleneck minTime (Redis)': {
      const reservoir = peer === 'bottleneck reservoir';
      const redis = peer === 'bottleneck minTime (Redis)';
      const limiter = new Bottleneck({
        maxConcurrent: CONCURRENCY,
        ...(reservoir
          ? {
              reservoir: perSecond,
              reservoirRefreshAmount: perSecond,
              reservoirRefreshInterval: per,
            }
          : { minTime: per / perSecond }),
        ...(redis
          ? {
              id: `rate-${Date.now()}`,
              datastore: 'ioredis',
              clearDatastore: true,
              clientOptions: { host: '127.0.0.1', port: redisPort },
            }
          : {}),
      });
      limiter.on('error', (error: unknown) => console.error(`${peer} error:`, error));
      await limiter.ready();
      return {
        run: (call) => limiter.schedule(call),
        close: async () => {
          await limiter.stop({ dropWaitingJobs: false }).catch(() => {});
          if (redis) await limiter.disconnect(true);
        },
      };
    }
    case 'p-throttle':
    case 'p-throttle strict': {
      const throttle = pThrottle({
        limit: perSecond,
        interval: per,
        strict: peer === 'p-throttle strict',
      });
      return { run: (call) => throttle(call)(), close: async () => {} };
    }
  }
}

interface Row {
  peer: Peer;
  maxInSecond: number;
  /** The same over the send times: when the limiter let each call go. */
  maxSentInSecond: number;
  goodput: number;
  cpuUsPerCall: number;
  redisPerCall: number | undefined;
  errors: number;
}

async function measure(
  partner: Awaited<ReturnType<typeof startPartner>>,
  pool: Pool,
  limited: Limited | undefined,
): Promise<{ arrivals: number[]; sends: number[]; cpuUs: number; errors: number }> {
  const sends: number[] = [];
  const call: Call = async () => {
    sends.push(performance.now());
    const res = await pool.request({ path: '/', method: 'GET' });
    await res.body.dump();
  };
  let errors = 0;
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: calls }, () =>
      (limited === undefined ? call() : limited.run(call)).catch(() => {
        errors++;
      }),
    ),
  );
  const used = process.cpuUsage(cpu);
  return { arrivals: partner.take(), sends, cpuUs: used.user + used.system, errors };
}

async function redisCommands(port: number): Promise<number> {
  const { connectResp } = await import('./lib/resp.js');
  const conn = await connectResp(port);
  const info = String(await conn.command('INFO', 'commandstats'));
  conn.close();
  let total = 0;
  for (const match of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) total += Number(match[1]);
  return total;
}

interface FleetRow {
  label: string;
  promise: number;
  maxSent: number;
  maxArrived: number;
  goodput: number;
  burst: number;
  redisPerCall: number;
  errors: number;
  firstError: string | undefined;
}

/** One rate shared by `processes` forked processes: every call's send and arrival, on one clock. */
async function fleetRun(
  redisPort: number,
  peer: RateWorkerConfig['peer'],
  burst: number,
): Promise<FleetRow> {
  const arrivals: number[] = [];
  const server = http.createServer((_req, res) => {
    arrivals.push(performance.timeOrigin + performance.now());
    res.end('ok');
  });
  server.keepAliveTimeout = 10_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const id = `rate-${peer}-${burst}-${Date.now()}`;
  const share = Math.ceil(calls / processes);
  const workers = Array.from({ length: processes }, (_, i) =>
    forkWorker(new URL('./rate/worker.ts', import.meta.url), {
      peer,
      redisPort,
      origin,
      calls: Math.min(share, calls - i * share),
      perSecond,
      burst,
      concurrency: CONCURRENCY,
      id,
      client: i % 2 === 0 ? 'node-redis' : 'ioredis',
    } satisfies RateWorkerConfig),
  );
  await Promise.all(workers.map((w) => w.next('ready', 120_000)));
  const before = await redisCommands(redisPort);
  for (const w of workers) w.send({ type: 'go' });
  const results = await Promise.all(
    workers.map((w) =>
      w.next<{ sends: number[]; errors: number; firstError?: string }>('result', 600_000),
    ),
  );
  const after = await redisCommands(redisPort);
  await Promise.all(workers.map((w) => w.exited));
  await new Promise((resolve) => server.close(resolve));
  const sends = results.flatMap((r) => r.sends).sort((a, b) => a - b);
  arrivals.sort((a, b) => a - b);
  const span = arrivals[arrivals.length - 1]! - arrivals[0]!;
  return {
    label: `${peer === 'bottleneck' ? 'bottleneck clustered' : peer.replace('hostgate', 'hostgate shared')}${burst > 0 ? ` burst ${burst}` : ''}`,
    promise: perSecond + burst,
    maxSent: maxInWindow(sends, 1000),
    maxArrived: maxInWindow(arrivals, 1000),
    goodput: ((arrivals.length - 1 - burst) / span) * 1000,
    burst,
    redisPerCall: (after - before - 1) / calls,
    errors: results.reduce((sum, r) => sum + r.errors, 0),
    firstError: results.find((r) => r.firstError !== undefined)?.firstError,
  };
}

async function fleet(): Promise<boolean> {
  if (redisMissing !== undefined) {
    console.log(`\nskipping the shared rate across processes: ${redisMissing}`);
    return true;
  }
  const redis = await startRedis();
  const rows: FleetRow[] = [];
  try {
    for (const { peer, burst } of fleetPeers) {
      rows.push(await fleetRun(redis.port, peer, burst));
      console.error(`${rows[rows.length - 1]!.label}: done`);
    }
  } finally {
    await killAllWorkers();
  }
  console.log(
    `\nThe same rate shared by ${processes} processes on one Redis: ${calls} calls in all, asked at once (${Math.ceil(calls / processes)} per process), rate ${perSecond}/s; Node ${process.version}. Sent: when each process's limiter let the call go (one clock: performance.timeOrigin); arrived: the partner's one log.\n`,
  );
  console.log(
    markdownTable(
      [
        'peer',
        'promise',
        'max sent in 1 s',
        'max arrived in 1 s',
        'goodput /s',
        'goodput vs rate',
        'Redis cmds/call',
        'errors',
      ],
      rows.map((r) => [
        r.label,
        String(r.promise),
        `${r.maxSent}${r.maxSent > r.promise ? ' (over)' : ''}`,
        `${r.maxArrived}${r.maxArrived > r.promise ? ' (over)' : ''}`,
        r.goodput.toFixed(1),
        `${((r.goodput / perSecond) * 100).toFixed(1)}%`,
        r.redisPerCall.toFixed(1),
        String(r.errors),
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  for (const r of rows) if (r.firstError !== undefined) console.log(`${r.label}: ${r.firstError}`);
  return rows.every(
    (r) => r.errors === 0 && (!r.label.startsWith('hostgate') || r.maxSent <= r.promise),
  );
}

async function main(): Promise<void> {
  const partner = await startPartner();
  const pool = new Pool(partner.origin, { connections: CONCURRENCY });
  const wantsRedis = peers.includes('bottleneck minTime (Redis)');
  const redis = wantsRedis && redisMissing === undefined ? await startRedis() : undefined;
  if (wantsRedis && redis === undefined)
    console.log(`skipping Bottleneck's Redis mode: ${redisMissing}`);
  // The HTTP alone, unlimited: its CPU is subtracted from every peer's.
  await measure(partner, pool, undefined); // warm-up: connections, JIT
  const base = await measure(partner, pool, undefined);
  const baseUs = base.cpuUs / calls;
  const rows: Row[] = [];
  for (const peer of peers) {
    if (peer === 'bottleneck minTime (Redis)' && redis === undefined) continue;
    const limited = await limiterFor(peer, redis?.port);
    const before = redis === undefined ? 0 : await redisCommands(redis.port);
    const { arrivals, sends, cpuUs, errors } = await measure(partner, pool, limited);
    const after = redis === undefined ? 0 : await redisCommands(redis.port);
    await limited.close();
    const span = arrivals[arrivals.length - 1]! - arrivals[0]!;
    rows.push({
      peer,
      maxInSecond: maxInWindow(arrivals, 1000),
      maxSentInSecond: maxInWindow(sends, 1000),
      // After the first call and its burst: the pace the rate allows from then on.
      goodput: ((arrivals.length - 1 - burstOf(peer)) / span) * 1000,
      cpuUsPerCall: cpuUs / calls - baseUs,
      redisPerCall: peer.includes('Redis') ? (after - before - 1) / calls : undefined,
      errors,
    });
    console.error(`${peer}: done`);
  }
  await pool.close();
  await partner.close();
  await stopAllRedis();

  console.log(
    `\n${calls} calls asked at once, rate ${perSecond}/s, concurrency ${CONCURRENCY}; Node ${process.version}. Sent: when the limiter let the call go; arrived: the partner's log (plus loopback jitter).\n`,
  );
  console.log(
    markdownTable(
      [
        'peer',
        'promise',
        'max sent in 1 s',
        'max arrived in 1 s',
        'goodput /s',
        'goodput vs rate',
        'CPU µs/call',
        'Redis cmds/call',
        'errors',
      ],
      rows.map((r) => [
        r.peer,
        String(perSecond + burstOf(r.peer)),
        `${r.maxSentInSecond}${r.maxSentInSecond > perSecond + burstOf(r.peer) ? ' (over)' : ''}`,
        `${r.maxInSecond}${r.maxInSecond > perSecond + burstOf(r.peer) ? ' (over)' : ''}`,
        r.goodput.toFixed(1),
        `${((r.goodput / perSecond) * 100).toFixed(1)}%`,
        r.cpuUsPerCall.toFixed(1),
        r.redisPerCall === undefined ? '—' : r.redisPerCall.toFixed(1),
        String(r.errors),
      ]),
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  const fleetOk = processes > 0 ? await fleet() : true;
  await stopAllRedis();
  if (smoke) {
    const kept = (r: Row) =>
      !r.peer.startsWith('hostgate') || r.maxSentInSecond <= perSecond + burstOf(r.peer);
    const ok = fleetOk && rows.every((r) => r.errors === 0 && kept(r));
    console.log(ok ? 'smoke: OK' : 'smoke: FAILED');
    if (!ok) process.exitCode = 1;
  }
}

await main();
