/**
 * One replica for the multi-process tests: a HostLimiter whose `billing` partner is a shared
 * gate on the test's private Redis, driven by the parent over IPC (bench/lib/fleet.ts).
 *
 * Commands (→ the reply):
 * - `load` { requests, concurrency, seed } → `loaded` { ok, failed, aborted, shed, other }:
 *   seeded mixed traffic through `limitHosts`: fast and slow answers, 500s, resets, aborts.
 * - `hold` { count } → nothing: `count` requests to `/held` (the parent watches the partner).
 * - `request` { count, path } → one `answered` { i, status | error } per request, as each ends.
 * - `contend` { callers } → `contended` { grants } after `stop`: callers loop on `/ok?delay=2`.
 * - `stats` → `stats` { stats }: the gate's stats (local and cluster view).
 * - `close` → `closed` { unhandled }: `limiter.close()`, the client closed, then exit.
 * Unasked: `store-error` and `store-up` when the store loses Redis and when it answers again.
 */

import { subscribe } from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Agent, request } from 'undici';
import {
  fromParent,
  leaveParent,
  onParent,
  toParent,
  workerConfig,
} from '../../bench/lib/fleet.js';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { redisStore } from '../../src/redis/index.js';
import { prng } from '../helpers/prng.js';

export interface TestWorkerConfig {
  redisPort: number;
  partnerOrigin: string;
  client: 'node-redis' | 'ioredis';
  limit: number;
  leaseMs: number;
  heartbeatMs: number;
  onStoreError?: 'local' | 'reject';
  maxQueue?: number;
  queueTimeout?: number;
  prefix?: string;
}

const config = workerConfig<TestWorkerConfig>();
let unhandled = 0;
process.on('unhandledRejection', (reason) => {
  unhandled++;
  console.error('unhandled rejection in worker:', reason);
});

// The store's own events, for the parent to wait on (no polling): Redis lost and Redis back.
subscribe('hostgate:store-error', () => void toParent({ type: 'store-error' }).catch(() => {}));
subscribe('hostgate:store-up', () => void toParent({ type: 'store-up' }).catch(() => {}));

async function connect() {
  const url = `redis://127.0.0.1:${config.redisPort}`;
  if (config.client === 'ioredis') {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    client.on('error', () => {}); // the store reports its own errors; reconnects are automatic
    await client.connect();
    return {
      client,
      close: () =>
        client.quit().then(
          () => undefined,
          () => client.disconnect(),
        ),
    };
  }
  const client = createClient({ url, socket: { reconnectStrategy: () => 100 } });
  client.on('error', () => {});
  await client.connect();
  return { client, close: () => client.close().catch(() => client.destroy()) };
}

const connection = await connect();
const store = redisStore({
  client: connection.client,
  prefix: config.prefix ?? 'test:',
  leaseMs: config.leaseMs,
  heartbeatMs: config.heartbeatMs,
  onStoreError: config.onStoreError ?? 'local',
});
const limiter = new HostLimiter({
  store,
  partners: [
    {
      name: 'billing',
      hosts: [config.partnerOrigin],
      limit: config.limit,
      shared: true,
      maxQueue: config.maxQueue ?? 1000,
      queueTimeout: config.queueTimeout ?? 15_000,
    },
  ],
});
const agent = new Agent({ connections: 200 });
const dispatcher = agent.compose(limitHosts(limiter));
const origin = config.partnerOrigin;

async function call(path: string, signal?: AbortSignal): Promise<number> {
  const response = await request(`${origin}${path}`, { dispatcher, signal });
  await response.body.dump();
  return response.statusCode;
}

async function load(requests: number, concurrency: number, seed: number) {
  const random = prng(seed);
  const counts = { ok: 0, failed: 0, aborted: 0, shed: 0, other: 0 };
  let next = 0;
  const one = async () => {
    const roll = random();
    const controller = new AbortController();
    let path = `/ok?delay=${Math.floor(random() * 8)}`;
    if (roll < 0.1) path = '/status?code=500';
    else if (roll < 0.15) path = '/reset';
    else if (roll < 0.3) {
      path = `/ok?delay=${20 + Math.floor(random() * 20)}`;
      setTimeout(() => controller.abort(), Math.floor(random() * 25));
    }
    try {
      const status = await call(path, controller.signal);
      if (status === 200) counts.ok++;
      else counts.failed++;
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (controller.signal.aborted) counts.aborted++;
      else if (path === '/reset') counts.failed++;
      else if (code?.startsWith('HOSTGATE_')) counts.shed++;
      else {
        counts.other++;
        console.error('unexpected failure:', error);
      }
    }
  };
  const lane = async () => {
    while (next < requests) {
      next++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return counts;
}

onParent<{ type: 'load'; requests: number; concurrency: number; seed: number }>('load', (m) => {
  void load(m.requests, m.concurrency, m.seed).then((counts) =>
    toParent({ type: 'loaded', ...counts }),
  );
});

onParent<{ type: 'hold'; count: number }>('hold', (m) => {
  for (let i = 0; i < m.count; i++) void call('/held').catch(() => {});
});

onParent<{ type: 'request'; count: number; path: string }>('request', (m) => {
  for (let i = 0; i < m.count; i++) {
    call(m.path).then(
      (status) => toParent({ type: 'answered', i, status }),
      (error) =>
        toParent({
          type: 'answered',
          i,
          code: (error as { code?: string }).code,
          error: String((error as Error).message ?? error),
        }),
    );
  }
});

onParent<{ type: 'contend'; callers: number }>('contend', (m) => {
  let grants = 0;
  let stopped = false;
  void fromParent('stop').then(() => {
    stopped = true;
  });
  const lane = async () => {
    while (!stopped) {
      const status = await call('/ok?delay=2').catch(() => 0);
      if (status === 200) grants++;
    }
  };
  void Promise.all(Array.from({ length: m.callers }, lane)).then(() =>
    toParent({ type: 'contended', grants }),
  );
});

onParent('stats', () => {
  void toParent({ type: 'stats', stats: JSON.parse(JSON.stringify(limiter.stats())) });
});

const closing = fromParent('close');
await toParent({ type: 'ready' });
await closing;
await limiter.close();
await agent.close();
await connection.close();
await toParent({ type: 'closed', unhandled });
leaveParent();
