/**
 * FIFO-mode inputs of docs/scale.md: Redis calls and CPU per grant (3,000 sequential grants of
 * one process) and per heartbeat (HELD=n permits held, default 20), from INFO commandstats.
 *
 *   npx tsx bench/fleet/fifo-cost.ts; HELD=0 npx tsx bench/fleet/fifo-cost.ts
 */
import { createClient } from 'redis';
import { redisStore } from '../../src/redis/index.js';
import { startRedis } from '../lib/redis-server.js';
import { connectResp } from '../lib/resp.js';

const redis = await startRedis();
const conn = await connectResp(redis.port);
const client = await createClient({ url: redis.url }).connect();
const store = redisStore({ client, prefix: 'c:', leaseMs: 10_000 });
const gate = store.semaphore({ name: 'g', limit: 100 });
(await gate.acquire()).release();
await store.settled();
const usec = async () => {
  const info = String(await conn.command('INFO', 'commandstats'));
  let calls = 0,
    us = 0;
  for (const m of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+),usec=(\d+)/gm)) {
    calls += Number(m[2]);
    us += Number(m[3]);
  }
  let all = 0;
  for (const m of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) all += Number(m[1]);
  return { calls, us, all };
};
await conn.command('CONFIG', 'RESETSTAT');
const N = 3000;
for (let i = 0; i < N; i++) {
  (await gate.acquire()).release();
}
await store.settled();
const a = await usec();
console.log(
  'fifo per grant: scripts',
  (a.calls / N).toFixed(2),
  'µs',
  (a.us / N).toFixed(1),
  'calls',
  (a.all / N).toFixed(1),
);
// heartbeats: hold 20, idle 2 s beats
const held = await Promise.all(
  Array.from({ length: Number(process.env.HELD ?? 20) }, () => gate.acquire()),
);
await conn.command('CONFIG', 'RESETSTAT');
await new Promise((r) => setTimeout(r, 6500));
const b = await usec();
console.log(
  `fifo heartbeat (${process.env.HELD ?? 20} held): scripts`,
  b.calls,
  'µs/script',
  (b.us / Math.max(1, b.calls)).toFixed(1),
  'calls/script',
  (b.all / Math.max(1, b.calls)).toFixed(1),
);
for (const p of held) p.release();
await store.close();
await client.close();
conn.close();
await redis.close();
process.exit(0);
