import { expect } from 'vitest';
import { forkWorker, type Worker } from '../../bench/lib/fleet.js';
import { connectResp, type RespValue } from '../../bench/lib/resp.js';
import type { RedisServer } from '../helpers/redis-server.js';
import type { TestWorkerConfig } from './worker.js';

const WORKER = new URL('./worker.ts', import.meta.url);

/** Short leases so a dead process's permits come back within the test's time. */
export const TEST_LEASE_MS = 1000;
export const TEST_HEARTBEAT_MS = 200;

/**
 * Forks `count` replicas (test/redis/worker.ts), alternating node-redis and ioredis, and waits
 * until each has its store and limiter (bounded).
 */
export async function startReplicas(
  count: number,
  config: Omit<TestWorkerConfig, 'client' | 'leaseMs' | 'heartbeatMs'> &
    Partial<Pick<TestWorkerConfig, 'client' | 'leaseMs' | 'heartbeatMs'>>,
): Promise<Worker[]> {
  const workers = Array.from({ length: count }, (_, i) =>
    forkWorker(WORKER, {
      leaseMs: TEST_LEASE_MS,
      heartbeatMs: TEST_HEARTBEAT_MS,
      client: i % 2 === 0 ? 'node-redis' : 'ioredis',
      ...config,
    } satisfies TestWorkerConfig),
  );
  await Promise.all(workers.map((w) => w.next('ready', 30_000)));
  return workers;
}

/** Closes every replica (limiter.close()) and checks each exited cleanly, nothing unhandled. */
export async function closeReplicas(workers: readonly Worker[]): Promise<void> {
  for (const w of workers) w.send({ type: 'close' });
  const closed = await Promise.all(
    workers.map((w) => w.next<{ unhandled: number }>('closed', 15_000)),
  );
  const exits = await Promise.all(workers.map((w) => w.exited));
  expect(closed.map((c) => c.unhandled)).toEqual(workers.map(() => 0));
  expect(exits.map((e) => e.code)).toEqual(workers.map(() => 0));
}

function asStrings(value: RespValue): string[] {
  return Array.isArray(value) ? value.map(String) : [];
}

/** Leases (holder entries) and tickets left in Redis under `prefix`, over every gate. */
export async function leftInRedis(
  redis: RedisServer,
  prefix: string,
): Promise<{ leases: number; tickets: number }> {
  const keys = asStrings(await redis.command('KEYS', `${prefix}*`));
  let leases = 0;
  let tickets = 0;
  for (const key of keys) {
    if (/\}:?h$/.test(key)) leases += Number(await redis.command('ZCARD', key));
    if (/\}:?q$/.test(key)) tickets += Number(await redis.command('ZCARD', key));
  }
  return { leases, tickets };
}

/**
 * Resolves once `check()` holds, re-evaluated on every change to a sorted set in Redis (keyspace
 * notifications: an event, not a poll); rejects after `timeoutMs`.
 */
export async function untilRedis(
  redis: RedisServer,
  check: () => Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  await redis.command('CONFIG', 'SET', 'notify-keyspace-events', 'Kz');
  const events = await connectResp(redis.port);
  try {
    await new Promise<void>((resolve, reject) => {
      let checking = false;
      let again = false;
      const timer = setTimeout(
        () => reject(new Error(`Redis state not reached in ${timeoutMs} ms`)),
        timeoutMs,
      );
      const evaluate = async () => {
        if (checking) {
          again = true;
          return;
        }
        checking = true;
        do {
          again = false;
          if (await check()) {
            clearTimeout(timer);
            resolve();
            return;
          }
        } while (again);
        checking = false;
      };
      events.onPush(() => void evaluate().catch(reject));
      void events.command('PSUBSCRIBE', '__keyspace@0__:*').then(evaluate).catch(reject);
    });
  } finally {
    events.close();
  }
}
