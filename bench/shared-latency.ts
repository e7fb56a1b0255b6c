/**
 * What a shared gate (hostgate/redis) adds per acquire and per HTTP request, on loopback:
 * p50/p99 of an acquire when a permit is free (one round trip), sequential and with 32
 * concurrent callers, for node-redis and ioredis; and a request through limitHosts with a
 * local vs a shared gate. Redis commands per grant come from INFO commandstats.
 *
 *   npm run bench:shared-latency            (--smoke: a tiny run that only checks it works)
 */
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Agent, request } from 'undici';
import { HostLimiter, limitHosts, type Semaphore } from '../src/index.js';
import { redisStore } from '../src/redis/index.js';
import { startPartner } from '../test/helpers/partner.js';
import { redisMissing, startRedis, stopAllRedis } from './lib/redis-server.js';
import { formatMs } from './lib/stats.js';
import { markdownTable } from './lib/table.js';

const smoke = process.argv.includes('--smoke');
const N = smoke ? 200 : 20_000;
const HTTP_N = smoke ? 100 : 5000;
const CONCURRENCY = 32;

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Acquire latencies (ms) of `total` acquire/release pairs spread over `callers` loops. */
async function acquireLatencies(
  gate: Semaphore,
  total: number,
  callers: number,
): Promise<number[]> {
  const out: number[] = [];
  const perCaller = Math.ceil(total / callers);
  await Promise.all(
    Array.from({ length: callers }, async () => {
      for (let i = 0; i < perCaller; i++) {
        const started = performance.now();
        const permit = await gate.acquire();
        out.push(performance.now() - started);
        permit.release();
      }
    }),
  );
  return out.sort((a, b) => a - b);
}

/**
 * Commands clients sent (scripts and WAIT), and every command Redis ran (INFO commandstats
 * also counts the calls made inside scripts).
 */
async function commandCalls(server: {
  command(...a: string[]): Promise<unknown>;
}): Promise<{ sent: number; run: number }> {
  const info = String(await server.command('INFO', 'commandstats'));
  let sent = 0;
  let run = 0;
  for (const [, name, calls] of info.matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) {
    run += Number(calls);
    if (name === 'evalsha' || name === 'eval' || name === 'wait') sent += Number(calls);
  }
  return { sent, run };
}

if (redisMissing !== undefined) {
  console.log(`skipped: ${redisMissing}`);
  process.exit(0);
}
const server = await startRedis();
const rows: string[][] = [];
const row = (what: string, sorted: number[], extra = '') =>
  rows.push([what, formatMs(quantile(sorted, 0.5)), formatMs(quantile(sorted, 0.99)), extra]);

for (const kind of ['node-redis', 'ioredis'] as const) {
  const client =
    kind === 'node-redis'
      ? await createClient({ url: server.url }).connect()
      : new Redis(server.port, '127.0.0.1');
  // maxQueue 0: a grant that had to wait would be a flaw of the run, and so would the first
  // call's first-use wait on this new gate (firstUseWaitMs 0: granted at once).
  const store = redisStore({ client, prefix: `bench:${kind}:`, firstUseWaitMs: 0 });
  const gate = store.semaphore({ name: 'free', limit: 10_000, maxQueue: 0 });
  await acquireLatencies(gate, Math.min(N, 2000), 1); // warm-up: scripts loaded, JIT warm
  await store.settled();
  const before = await commandCalls(server);
  const sequential = await acquireLatencies(gate, N, 1);
  await store.settled();
  const after = await commandCalls(server);
  const sent = (after.sent - before.sent) / N;
  const run = (after.run - before.run - 1) / N;
  row(
    `${kind}: acquire, 1 caller`,
    sequential,
    `${sent.toFixed(2)} sent, ${run.toFixed(1)} run per grant`,
  );
  row(`${kind}: acquire, ${CONCURRENCY} callers`, await acquireLatencies(gate, N, CONCURRENCY));
  await store.close();
  if (client instanceof Redis) client.disconnect();
  else await client.close();
}

// The same request through limitHosts, local gate vs shared gate.
const partner = await startPartner();
const client = await createClient({ url: server.url }).connect();
const store = redisStore({ client, prefix: 'bench:http:' });
const rule = { name: 'p', hosts: [partner.origin], limit: 64 };
for (const [label, limiter] of [
  ['HTTP request, local gate', new HostLimiter({ partners: [rule] })],
  ['HTTP request, shared gate', new HostLimiter({ store, partners: [{ ...rule, shared: true }] })],
] as const) {
  const agent = new Agent({ keepAliveTimeout: 10_000 }).compose(limitHosts(limiter));
  const times: number[] = [];
  for (let i = 0; i < HTTP_N + 200; i++) {
    const started = performance.now();
    const res = await request(`${partner.origin}/ok`, { dispatcher: agent });
    await res.body.text();
    if (i >= 200) times.push(performance.now() - started);
  }
  row(
    label,
    times.sort((a, b) => a - b),
  );
  await agent.close();
}
await store.close();
await client.close();
await partner.close();
await stopAllRedis();

console.log(`redis-server (private, loopback), Node ${process.version}\n`);
console.log(
  markdownTable(['case', 'p50', 'p99', 'cost'], rows, ['left', 'right', 'right', 'right']),
);
if (smoke) console.log('smoke: OK');
