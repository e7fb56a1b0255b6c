import { afterAll, afterEach, expect, it } from 'vitest';
import { killAllWorkers } from '../../bench/lib/fleet.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis, startRedis, stopAllRedis } from '../helpers/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { closeReplicas, leftInRedis, startReplicas } from './replicas.js';

const CAP = 6;
const PROCESSES = 3;

let partner: Partner;
let proxy: TcpProxy | undefined;

afterEach(async () => {
  await killAllWorkers();
  await proxy?.close();
  await partner?.close();
});
afterAll(stopAllRedis);

describeRedis('failover to a replica promoted with REPLICAOF NO ONE', () => {
  it('keeps over-admission within the README bound (grants the replica had not received) and the cap afterwards', async () => {
    const primary = await startRedis();
    const replica = await primary.startReplica();
    // The clients know one address, like a DNS name or a Sentinel-aware endpoint.
    proxy = await startTcpProxy(primary.port);
    partner = await startPartner();
    const prefix = 'failover:';
    const workers = await startReplicas(PROCESSES, {
      redisPort: proxy.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
      queueTimeout: 5000,
    });
    workers.forEach((w, i) => {
      w.send({ type: 'load', requests: 300, concurrency: 10, seed: 1400 + i });
    });
    await partner.waitForArrived(200);
    expect(partner.peak).toBeLessThanOrEqual(CAP + 1);

    await primary.kill();
    await replica.promote();
    proxy.switchTo(replica.port);
    partner.resetPeak();
    const results = await Promise.all(
      workers.map((w) => w.next<{ ok: number; other: number }>('loaded', 60_000)),
    );
    expect(results.map((r) => r.other)).toEqual([0, 0, 0]);
    const failoverPeak = partner.peak;
    // The bound the README states for a failover: at most the grants the replica had not
    // received (at most the cap), for at most one lease.
    expect(failoverPeak).toBeLessThanOrEqual(2 * CAP);
    console.log(`failover: partner peak ${failoverPeak} with a shared cap of ${CAP}`);

    // After a lease, the promoted replica gates alone.
    partner.resetPeak();
    workers.forEach((w, i) => {
      w.send({ type: 'load', requests: 80, concurrency: 10, seed: 1500 + i });
    });
    await Promise.all(workers.map((w) => w.next('loaded', 30_000)));
    expect(partner.peak).toBeLessThanOrEqual(CAP + 1);
    await closeReplicas(workers);
    expect(await leftInRedis(replica, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 60_000);
});
