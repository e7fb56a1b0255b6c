import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { killAllWorkers, type Worker } from '../../bench/lib/fleet.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  describeRedis,
  type RedisServer,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';
import { closeReplicas, leftInRedis, startReplicas, untilRedis } from './replicas.js';

const CAP = 4;

let redis: RedisServer;
let partner: Partner;

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  await killAllWorkers();
  await partner?.close();
});
afterAll(stopAllRedis);

async function heldBy(worker: Worker): Promise<number> {
  worker.send({ type: 'stats' });
  const { stats } = await worker.next<{ stats: Record<string, { held: number }> }>('stats');
  return stats.billing?.held ?? Number.NaN;
}

describeRedis('waiting on a shared gate is fair across processes', () => {
  it('gives each of 3 contending replicas at least 20% of the grants of a cap of 4', async () => {
    partner = await startPartner();
    const workers = await startReplicas(3, {
      redisPort: redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix: 'fair:',
    });
    for (const w of workers) w.send({ type: 'contend', callers: 6 });
    await partner.waitForArrived(600);
    for (const w of workers) w.send({ type: 'stop' });
    const grants = (
      await Promise.all(workers.map((w) => w.next<{ grants: number }>('contended', 20_000)))
    ).map((r) => r.grants);
    const total = grants.reduce((a, b) => a + b, 0);
    for (const g of grants)
      expect(g / total, `grants ${grants.join(', ')}`).toBeGreaterThanOrEqual(0.2);
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    await closeReplicas(workers);
  }, 30_000);

  it('grants tickets in arrival order across processes (FIFO, no barging)', async () => {
    partner = await startPartner();
    const prefix = 'fifo:';
    const [holder, b, c] = await startReplicas(3, {
      redisPort: redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
    });
    holder!.send({ type: 'hold', count: CAP });
    await partner.waitForActive(CAP);
    // Tickets in order b, c, b, c: each queued in Redis before the next is asked for.
    const order = [b!, c!, b!, c!];
    for (const [i, w] of order.entries()) {
      w.send({ type: 'request', count: 1, path: '/held' });
      await untilRedis(redis, async () => (await leftInRedis(redis, prefix)).tickets === i + 1);
    }
    // Each release at the partner ends one of the holder's requests: its permit goes to the
    // oldest ticket, whose request then parks at the partner.
    const expected = { b: 0, c: 0 };
    for (const [i, w] of order.entries()) {
      partner.release(1);
      await partner.waitForArrived(CAP + i + 1);
      expected[w === b ? 'b' : 'c']++;
      expect({ b: await heldBy(b!), c: await heldBy(c!) }).toEqual(expected);
    }
    partner.openHeld();
    await closeReplicas([holder!, b!, c!]);
    expect(await leftInRedis(redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 30_000);
});
