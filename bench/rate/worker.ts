/**
 * One process of the shared-rate benchmark: its own Redis client and limiter on the one rate
 * (hostgate's FIFO shared gate, or Bottleneck clustered on the same Redis with the same id),
 * then `calls` calls asked at once, each recorded when the limiter let it go.
 *
 * Messages: → ready, ← go, → result { sends, errors, firstError }.
 */
import { performance } from 'node:perf_hooks';
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Pool } from 'undici';
import { redisStore } from '../../src/redis/index.js';
import { fromParent, leaveParent, toParent, workerConfig } from '../lib/fleet.js';

export interface RateWorkerConfig {
  peer: 'hostgate' | 'hostgate leased' | 'bottleneck';
  redisPort: number;
  origin: string;
  calls: number;
  perSecond: number;
  burst: number;
  concurrency: number;
  /** The gate's name, or Bottleneck's cluster id: one per run. */
  id: string;
  /** Alternate clients across processes (hostgate). */
  client: 'node-redis' | 'ioredis';
}

const config = workerConfig<RateWorkerConfig>();
const pool = new Pool(config.origin, { connections: config.concurrency });
const per = 1000;

type Run = (call: () => Promise<void>) => Promise<void>;
let run: Run;
let close: () => Promise<void>;
if (config.peer !== 'bottleneck') {
  const url = `redis://127.0.0.1:${config.redisPort}`;
  const client =
    config.client === 'node-redis'
      ? await createClient({ url }).connect()
      : new Redis(config.redisPort, '127.0.0.1');
  const store = redisStore({ client, prefix: 'bench-rate:' });
  const gate = store.semaphore({
    name: config.id,
    limit: config.concurrency,
    maxQueue: config.calls,
    queueTimeout: 600_000,
    rate: { limit: config.perSecond, per, burst: config.burst },
    ...(config.peer === 'hostgate leased' ? { mode: 'leased' as const } : {}),
  });
  // A leased gate's first refresh: its share of the rate comes from Redis.
  if ('ready' in gate) await gate.ready();
  run = (call) => gate.run(call);
  close = async () => {
    await store.close();
    if (client instanceof Redis) client.disconnect();
    else await client.quit();
  };
} else {
  const limiter = new Bottleneck({
    id: config.id,
    maxConcurrent: config.concurrency,
    minTime: per / config.perSecond,
    datastore: 'ioredis',
    clientOptions: { host: '127.0.0.1', port: config.redisPort },
  });
  limiter.on('error', (error: unknown) => console.error('bottleneck error:', error));
  await limiter.ready();
  run = (call) => limiter.schedule(call);
  close = async () => {
    await limiter.disconnect(true);
  };
}

const go = fromParent('go');
await toParent({ type: 'ready' });
await go;
const sends: number[] = [];
let errors = 0;
let firstError: string | undefined;
const call = async () => {
  // performance.timeOrigin + now: one clock across processes, to the microsecond.
  sends.push(performance.timeOrigin + performance.now());
  const res = await pool.request({ path: '/', method: 'GET' });
  await res.body.dump();
};
await Promise.all(
  Array.from({ length: config.calls }, () =>
    run(call).catch((error: unknown) => {
      errors++;
      firstError ??= String(error);
    }),
  ),
);
await toParent({ type: 'result', sends, errors, firstError });
await close();
await pool.close();
leaveParent();
