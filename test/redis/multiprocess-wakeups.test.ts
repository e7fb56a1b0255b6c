import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { killAllWorkers } from '../../bench/lib/fleet.js';
import { connectResp } from '../../bench/lib/resp.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  describeRedis,
  type RedisServer,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';
import { closeReplicas, leftInRedis, startReplicas, untilRedis } from './replicas.js';

const CAP = 4;
const WAITERS = 50;
/** How long the clients' commands are counted while everyone waits. */
const WINDOW_MS = 2000;

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

/** Counts the commands clients send (MONITOR; commands run inside scripts show as `lua`). */
async function countClientCommands(port: number, windowMs: number): Promise<string[]> {
  const monitor = await connectResp(port);
  const seen: string[] = [];
  monitor.onPush((line) => {
    if (typeof line === 'string' && !line.includes(' lua]')) seen.push(line);
  });
  await monitor.command('MONITOR');
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  monitor.close();
  return seen;
}

describeRedis('wake-ups are pushed, not polled', () => {
  it('lets 50 waiters wait quietly and wakes the first within 500 ms of a release', async () => {
    partner = await startPartner();
    const prefix = 'wake:';
    const [holder, waiter] = await startReplicas(2, {
      redisPort: redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
    });
    holder!.send({ type: 'hold', count: CAP });
    await partner.waitForActive(CAP);
    waiter!.send({ type: 'request', count: WAITERS, path: '/ok' });
    await untilRedis(redis, async () => (await leftInRedis(redis, prefix)).tickets === WAITERS);

    const commands = await countClientCommands(redis.port, WINDOW_MS);
    const perSecond = commands.length / (WINDOW_MS / 1000);
    expect(perSecond, commands.slice(0, 20).join('\n')).toBeLessThan(50);
    expect(partner.arrived).toBe(CAP);

    const released = performance.now();
    partner.release(1);
    await partner.waitForArrived(CAP + 1);
    expect(performance.now() - released).toBeLessThan(500);

    partner.openHeld();
    for (let i = 0; i < WAITERS; i++) {
      expect(await waiter!.next('answered', 15_000)).toMatchObject({ status: 200 });
    }
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    await closeReplicas([holder!, waiter!]);
    expect(await leftInRedis(redis, prefix)).toEqual({ leases: 0, tickets: 0 });
  }, 30_000);
});
