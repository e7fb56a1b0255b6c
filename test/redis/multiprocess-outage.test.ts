import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { killAllWorkers, type Worker } from '../../bench/lib/fleet.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  describeRedis,
  type RedisServer,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';
import { closeReplicas, leftInRedis, startReplicas } from './replicas.js';

const CAP = 6;

let redis: RedisServer;
let partner: Partner;

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  redis.resume();
  await killAllWorkers();
  await partner?.close();
});
afterAll(stopAllRedis);

interface Answer {
  status?: number;
  code?: string;
  error?: string;
}

async function ask(worker: Worker, path = '/ok'): Promise<Answer> {
  worker.send({ type: 'request', count: 1, path });
  return worker.next<Answer>('answered', 15_000);
}

async function mode(worker: Worker): Promise<string | undefined> {
  worker.send({ type: 'stats' });
  const { stats } = await worker.next<{ stats: Record<string, { shared?: { mode: string } }> }>(
    'stats',
  );
  return stats.billing?.shared?.mode;
}

/**
 * Waits for the store's own 'Redis is back' event (an earlier outage's may still be queued, so
 * until the gate says it gates through Redis again), then a request is served.
 */
async function servedOnceBack(worker: Worker): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await worker.next('store-up', 20_000);
    if ((await mode(worker)) === 'redis') break;
  }
  expect(await mode(worker)).toBe('redis');
  expect(await ask(worker)).toMatchObject({ status: 200 });
}

describeRedis('Redis paused, killed and restarted under a shared gate', () => {
  it("onStoreError 'reject': sheds with HOSTGATE_STORE_UNAVAILABLE while Redis is paused or gone, and gates again once it is back", async () => {
    partner = await startPartner();
    const prefix = 'reject:';
    const workers = await startReplicas(2, {
      redisPort: redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
      onStoreError: 'reject',
      queueTimeout: 3000,
    });
    const [a, b] = workers as [Worker, Worker];
    expect(await ask(a)).toMatchObject({ status: 200 });

    redis.pause();
    expect(await ask(a)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    expect(await ask(b)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    redis.resume();
    await servedOnceBack(a);
    await servedOnceBack(b);

    await redis.kill();
    expect(await ask(a)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    expect(await ask(b)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    await redis.restart();
    await servedOnceBack(a);
    await servedOnceBack(b);
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    await closeReplicas(workers);
    expect(await leftInRedis(redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 40_000);

  it("onStoreError 'local' (the default): keeps serving under a local share through a pause and a restart, no crash, and the cap holds again after", async () => {
    partner = await startPartner();
    const prefix = 'local:';
    const workers = await startReplicas(3, {
      redisPort: redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
      queueTimeout: 5000,
    });
    workers.forEach((w, i) => {
      w.send({ type: 'load', requests: 300, concurrency: 10, seed: 1200 + i });
    });
    await partner.waitForArrived(200);
    redis.pause();
    const pausedAt = partner.arrived;
    partner.resetPeak();
    // Served through the outage: the fallback admits without Redis.
    await partner.waitForArrived(pausedAt + 100);
    const outagePeak = partner.peak;
    redis.resume();
    await partner.waitForArrived(pausedAt + 200);
    await redis.kill();
    await redis.restart();
    const results = await Promise.all(
      workers.map((w) => w.next<{ other: number }>('loaded', 60_000)),
    );
    expect(results.map((r) => r.other)).toEqual([0, 0, 0]);
    // The README's bound under 'local': each process admits at most ceil(limit / processes)
    // on its own, on top of leases granted before the outage that are still running.
    expect(outagePeak).toBeLessThanOrEqual(CAP + 3 * Math.ceil(CAP / 3));

    // Gating resumes within a lease on the restarted (empty) Redis.
    for (const w of workers) await servedOnceBack(w);
    partner.resetPeak();
    workers.forEach((w, i) => {
      w.send({ type: 'load', requests: 80, concurrency: 10, seed: 1300 + i });
    });
    await Promise.all(workers.map((w) => w.next('loaded', 30_000)));
    expect(partner.peak).toBeLessThanOrEqual(CAP + 1);
    await closeReplicas(workers);
    expect(await leftInRedis(redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 60_000);
});
