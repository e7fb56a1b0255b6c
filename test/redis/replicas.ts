import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { forkWorker, killAllWorkers, type Worker } from '../../bench/lib/fleet.js';
import { connectResp, type RespValue } from '../../bench/lib/resp.js';
import { bundled } from '../helpers/bundled.js';
import type { Partner } from '../helpers/partner.js';
import { type RedisServer, startRedis, stopAllRedis } from '../helpers/redis-server.js';
import type { TestGate } from './worker.js';

const WORKER = new URL('./worker.ts', import.meta.url);

/** Short leases so a dead process's permits come back within the test's time. */
export const TEST_LEASE_MS = 1000;
export const TEST_HEARTBEAT_MS = 200;

/** Forks `count` replicas (test/redis/worker.ts) and waits until each is up (bounded). */
export async function startReplicas(count: number): Promise<Worker[]> {
  const script = await bundled(WORKER);
  const workers = Array.from({ length: count }, () => forkWorker(script, {}, { execArgv: [] }));
  await Promise.all(workers.map((w) => w.next('ready', 60_000)));
  return workers;
}

type GateOptions = Omit<TestGate, 'client' | 'leaseMs' | 'heartbeatMs'> &
  Partial<Pick<TestGate, 'leaseMs' | 'heartbeatMs'>>;

/**
 * Gives each replica a fresh client, store and limiter for one scenario: half on node-redis,
 * half on ioredis (alternating), short leases.
 */
export async function openGates(workers: readonly Worker[], gate: GateOptions): Promise<void> {
  workers.forEach((w, i) => {
    w.send({
      type: 'gate',
      leaseMs: TEST_LEASE_MS,
      heartbeatMs: TEST_HEARTBEAT_MS,
      client: i % 2 === 0 ? 'node-redis' : 'ioredis',
      ...gate,
    } satisfies TestGate & { type: string });
  });
  await Promise.all(workers.map((w) => w.next('gate-ready', 15_000)));
}

/** `limiter.close()` and the client closed in every replica (bounded). */
export async function dropGates(workers: readonly Worker[]): Promise<void> {
  for (const w of workers) w.send({ type: 'drop' });
  await Promise.all(workers.map((w) => w.next('dropped', 15_000)));
}

/**
 * Ends the replicas still running: each must report no unhandled rejection and then exit by
 * itself, code 0, once its channel is gone (a handle a closed store left open would keep it).
 */
export async function exitReplicas(workers: readonly Worker[]): Promise<void> {
  const running = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
  for (const w of running) w.send({ type: 'exit' });
  const reports = await Promise.all(
    running.map((w) => w.next<{ unhandled: number }>('exiting', 15_000)),
  );
  expect(reports.map((r) => r.unhandled)).toEqual(running.map(() => 0));
  const exits = await Promise.race([
    Promise.all(running.map((w) => w.exited)),
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000).unref()),
  ]);
  expect(
    exits?.map((e) => e.code),
    'every replica exits by itself',
  ).toEqual(running.map(() => 0));
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

export interface ReplicaFleet {
  /** The private redis-server of the file. */
  redis: RedisServer;
  replicas: Worker[];
  /** The current test's partner; closed after each test. */
  partner: Partner | undefined;
}

/**
 * Registers the hooks of a file of multi-process tests (call inside `describeRedis`): one
 * private Redis and `count` replicas for the whole file, the partner closed after each test,
 * and in the end every replica must exit cleanly.
 */
export function useReplicaFleet(count: number): ReplicaFleet {
  const fleet = { partner: undefined } as ReplicaFleet;
  beforeAll(async () => {
    fleet.redis = await startRedis();
    fleet.replicas = await startReplicas(count);
  }, 90_000);
  afterEach(async () => {
    fleet.redis?.resume();
    await fleet.partner?.close();
    fleet.partner = undefined;
  });
  afterAll(async () => {
    try {
      if (fleet.replicas) await exitReplicas(fleet.replicas);
    } finally {
      await killAllWorkers();
      await stopAllRedis();
    }
  }, 30_000);
  return fleet;
}

/**
 * `holder` takes every permit with requests parked at the partner, then `waiter` asks for
 * `waiting` more: resolves once all of them are tickets in Redis.
 */
export async function queueBehindHolder(
  fleet: ReplicaFleet & { partner: Partner },
  holder: Worker,
  waiter: Worker,
  options: { cap: number; prefix: string; waiting: number; path: string },
): Promise<void> {
  const { redis, partner } = fleet;
  await openGates([holder, waiter], {
    redisPort: redis.port,
    partnerOrigin: partner.origin,
    limit: options.cap,
    prefix: options.prefix,
  });
  holder.send({ type: 'hold', count: options.cap });
  await partner.waitForActive(options.cap);
  waiter.send({ type: 'request', count: options.waiting, path: options.path });
  await untilRedis(
    redis,
    async () => (await leftInRedis(redis, options.prefix)).tickets === options.waiting,
  );
}
