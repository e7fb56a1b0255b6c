/**
 * What the partner-contract guard costs on the hot path (docs/contracts.md): limitHosts over
 * loopback with the same partner rule four ways, rounds interleaved in one process, the partner
 * in another (bench/dispatcher/server.ts, no rate-limit headers: the common case).
 * `npm run bench:contract [-- --runs 5] [-- --smoke]`.
 *
 * - `off`: `rateLimitHeaders: false`, no breaker: no guard on the gate (the gate as before).
 * - `headers`: the default rule: the guard reads every response for rate-limit headers.
 * - `breaker`: headers and `breaker: { failures: 5 }`: every outcome also feeds the breaker.
 * - `open`: the breaker open: every call shed at the gate (how fast a shed is, not a ratio).
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { Agent, request } from 'undici';
import { HostLimiter, limitHosts, type PartnerRule } from '../src/index.js';
import { formatOps, formatRatio, median } from './lib/stats.js';

const args = process.argv.slice(2);
const smoke = args.includes('--smoke');
const runsIndex = args.indexOf('--runs');
const runs = smoke ? 1 : runsIndex >= 0 ? Number(args[runsIndex + 1]) : 3;
if (!Number.isSafeInteger(runs) || runs < 1 || runs > 20) {
  throw new TypeError(`--runs must be an integer from 1 to 20, got ${args[runsIndex + 1]}`);
}
const REQUESTS = smoke ? 500 : 4000;
const CONCURRENCY = 32;
const LIMIT = 16;

const server = fork(new URL('./dispatcher/server.ts', import.meta.url), [], {
  execArgv: ['--import', import.meta.resolve('tsx')],
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const [{ port }] = (await once(server, 'message')) as [{ port: number }];
const origin = `http://127.0.0.1:${port}`;

const cases: Record<string, Partial<PartnerRule>> = {
  off: { rateLimitHeaders: false },
  headers: {},
  breaker: { breaker: { failures: 5 } },
};

async function round(extra: Partial<PartnerRule>): Promise<number> {
  const limiter = new HostLimiter({
    partners: [{ name: 'p', hosts: [origin], limit: LIMIT, maxQueue: 1000, ...extra }],
  });
  const agent = new Agent({ keepAliveTimeout: 60_000, connections: LIMIT });
  const dispatcher = agent.compose(limitHosts(limiter));
  let next = 0;
  const worker = async () => {
    while (next++ < REQUESTS) {
      const res = await request(`${origin}/`, { dispatcher });
      await res.body.text();
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const seconds = (performance.now() - started) / 1000;
  await agent.close();
  return REQUESTS / seconds;
}

/** Calls shed by an open breaker: the gate's refusal alone (beside a full queue's), then through limitHosts. */
async function openShed(): Promise<{ gateNs: number; fullNs: number; requestUs: number }> {
  const limiter = new HostLimiter({
    partners: [{ name: 'p', hosts: ['http://127.0.0.1:1'], limit: 4, breaker: { failures: 1 } }],
  });
  const gate = limiter.gate('p')!;
  const agent = new Agent();
  const dispatcher = agent.compose(limitHosts(limiter));
  await request('http://127.0.0.1:1/', { dispatcher }).catch(() => {}); // refused: opens it
  if (limiter.stats().p!.breaker!.state !== 'open') throw new Error('the breaker did not open');
  const target = { granted: () => {}, rejected: () => {} };
  const n = smoke ? 10_000 : 100_000;
  let started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) gate.wait(target);
  const gateNs = Number(process.hrtime.bigint() - started) / n;
  // The peer: the gate's oldest refusal, a full queue (QueueFullError), on a plain gate.
  const full = new HostLimiter({
    partners: [{ name: 'full', hosts: ['full.example'], limit: 1, maxQueue: 0 }],
  }).gate('full')!;
  const holder = full.tryAcquire()!;
  started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) full.wait(target);
  const fullNs = Number(process.hrtime.bigint() - started) / n;
  holder.release();
  const m = smoke ? 500 : 5000;
  started = process.hrtime.bigint();
  for (let i = 0; i < m; i++) await request('http://127.0.0.1:1/', { dispatcher }).catch(() => {});
  const requestUs = Number(process.hrtime.bigint() - started) / m / 1000;
  await agent.close();
  return { gateNs, fullNs, requestUs };
}

const results: Record<string, number[]> = { off: [], headers: [], breaker: [] };
await round({}); // warm-up
for (let r = 0; r < runs; r++) {
  for (const [name, extra] of Object.entries(cases)) results[name]!.push(await round(extra));
}
const base = median(results.off!)!;
console.log(
  `limitHosts, ${REQUESTS} requests, ${CONCURRENCY} callers, limit ${LIMIT}, ${runs} run(s), median:`,
);
console.log('| rule | req/s | vs off |');
console.log('| --- | ---: | ---: |');
for (const name of Object.keys(cases)) {
  const ops = median(results[name]!)!;
  console.log(`| ${name} | ${formatOps(ops)} | ${formatRatio(ops / base)} |`);
}
const shed = await openShed();
console.log(
  `open breaker: the gate's refusal ${shed.gateNs.toFixed(0)} ns a call (a full queue's: ${shed.fullNs.toFixed(0)} ns, ${formatRatio(shed.gateNs / shed.fullNs)}); undici.request shed through limitHosts ${shed.requestUs.toFixed(1)} µs a call`,
);
server.disconnect();
if (smoke) console.log('smoke: OK');
