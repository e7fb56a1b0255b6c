import { afterEach, expect, it } from 'vitest';
import type { Worker } from '../../bench/lib/fleet.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis, startRedis } from '../helpers/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { dropGates, leftInRedis, openGates, useReplicaFleet } from './replicas.js';

/**
 * Redis paused, killed, restarted and failed over under three replicas (forked once for the
 * file; each scenario gives them a fresh client, store and limiter).
 */
const CAP = 6;

let proxy: TcpProxy | undefined;

interface Answer {
  status?: number;
  code?: string;
  error?: string;
}
type Counts = { ok: number; failed: number; aborted: number; shed: number; other: number };

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
  for (let i = 0; i < 10 && (await mode(worker)) !== 'redis'; i++) {
    await worker.next('store-up', 20_000);
  }
  expect(await mode(worker)).toBe('redis');
  expect(await ask(worker)).toMatchObject({ status: 200 });
}

function load(workers: readonly Worker[], requests: number, seed: number): Promise<Counts[]> {
  workers.forEach((w, i) => {
    w.send({ type: 'load', requests, concurrency: 10, seed: seed + i });
  });
  return Promise.all(workers.map((w) => w.next<Counts>('loaded', 60_000)));
}

describeRedis('Redis paused, killed, restarted and failed over under a shared gate', () => {
  const fleet = useReplicaFleet(3);
  const partnerFor = async (): Promise<Partner> => {
    fleet.partner = await startPartner();
    return fleet.partner;
  };
  afterEach(async () => {
    await proxy?.close();
    proxy = undefined;
  });

  it("onStoreError 'reject': sheds with HOSTGATE_STORE_UNAVAILABLE while Redis is paused or gone, and gates again once it is back", async () => {
    const partner = await partnerFor();
    const prefix = 'reject:';
    const [a, b] = fleet.replicas as [Worker, Worker];
    await openGates([a, b], {
      redisPort: fleet.redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
      onStoreError: 'reject',
      queueTimeout: 3000,
    });
    expect(await ask(a)).toMatchObject({ status: 200 });

    fleet.redis.pause();
    expect(await ask(a)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    expect(await ask(b)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    fleet.redis.resume();
    await servedOnceBack(a);
    await servedOnceBack(b);

    await fleet.redis.kill();
    expect(await ask(a)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    expect(await ask(b)).toMatchObject({ code: 'HOSTGATE_STORE_UNAVAILABLE' });
    await fleet.redis.restart();
    await servedOnceBack(a);
    await servedOnceBack(b);
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    await dropGates([a, b]);
    expect(await leftInRedis(fleet.redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 40_000);

  it("onStoreError 'local' (the default): serves a local share through a pause and a restart, no crash, and the cap holds again after", async () => {
    const partner = await partnerFor();
    const prefix = 'local:';
    await openGates(fleet.replicas, {
      redisPort: fleet.redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
      queueTimeout: 5000,
    });
    const loaded = load(fleet.replicas, 300, 1200);
    await partner.waitForArrived(150);
    fleet.redis.pause();
    const pausedAt = partner.arrived;
    partner.resetPeak();
    // Served through the outage: the fallback admits without Redis.
    await partner.waitForArrived(pausedAt + 100);
    const outagePeak = partner.peak;
    fleet.redis.resume();
    await partner.waitForArrived(pausedAt + 200);
    await fleet.redis.kill();
    await fleet.redis.restart();
    expect((await loaded).map((r) => r.other)).toEqual([0, 0, 0]);
    // The README's bound under 'local' with every process cut off: each admits its share,
    // ceil(limit / processes), counting what it still holds from Redis: ≤ limit + R − 1.
    expect(outagePeak).toBeLessThanOrEqual(CAP + fleet.replicas.length - 1);
    console.log(`'local' outage: partner peak ${outagePeak} with a shared cap of ${CAP}`);

    // Gating resumes on the restarted (empty) Redis.
    for (const w of fleet.replicas) await servedOnceBack(w);
    partner.resetPeak();
    await load(fleet.replicas, 80, 1300);
    expect(partner.peak).toBeLessThanOrEqual(CAP + 1);
    await dropGates(fleet.replicas);
    expect(await leftInRedis(fleet.redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 60_000);

  it('failover to a replica promoted with REPLICAOF NO ONE: over-admission within the README bound, the cap after', async () => {
    const primary = await startRedis();
    const standby = await primary.startReplica();
    // The clients know one address, as with a DNS name or a Sentinel-aware endpoint.
    proxy = await startTcpProxy(primary.port);
    const partner = await partnerFor();
    const prefix = 'failover:';
    await openGates(fleet.replicas, {
      redisPort: proxy.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
      queueTimeout: 5000,
    });
    const loaded = load(fleet.replicas, 300, 1400);
    await partner.waitForArrived(100);
    expect(partner.peak).toBeLessThanOrEqual(CAP + 1);

    // The worst case of asynchronous replication: the standby stops receiving while grants go
    // on (every lease it knows of runs out meanwhile), then the primary dies and the standby
    // takes over with none of the current holders.
    standby.pause();
    const pausedAt = partner.arrived;
    await partner.waitForArrived(pausedAt + 100);
    await primary.kill();
    standby.resume();
    await standby.promote();
    proxy.switchTo(standby.port);
    partner.resetPeak();
    expect((await loaded).map((r) => r.other)).toEqual([0, 0, 0]);
    const failoverPeak = partner.peak;
    // The README's bound for a failover: the grants the standby never received (at most the
    // cap) come on top of it until their holders' next heartbeat registers them again.
    expect(failoverPeak).toBeLessThanOrEqual(2 * CAP);
    console.log(`failover: partner peak ${failoverPeak} with a shared cap of ${CAP}`);

    partner.resetPeak();
    await load(fleet.replicas, 80, 1500);
    expect(partner.peak).toBeLessThanOrEqual(CAP + 1);
    await dropGates(fleet.replicas);
    expect(await leftInRedis(standby, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 60_000);
});
