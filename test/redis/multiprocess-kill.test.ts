import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { killAllWorkers } from '../../bench/lib/fleet.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  describeRedis,
  type RedisServer,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';
import {
  closeReplicas,
  leftInRedis,
  startReplicas,
  TEST_HEARTBEAT_MS,
  TEST_LEASE_MS,
  untilRedis,
} from './replicas.js';

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

describeRedis('a replica killed with SIGKILL', () => {
  it('loses every permit it held once its leases run out: another replica is served within lease + heartbeat', async () => {
    partner = await startPartner();
    const prefix = 'kill:';
    const [holder, other] = await startReplicas(2, {
      redisPort: redis.port,
      partnerOrigin: partner.origin,
      limit: CAP,
      prefix,
    });
    holder!.send({ type: 'hold', count: CAP });
    await partner.waitForActive(CAP);
    other!.send({ type: 'request', count: 1, path: '/ok' });
    // The other replica's ticket is queued in Redis behind the held cap.
    await untilRedis(redis, async () => (await leftInRedis(redis, prefix)).tickets === 1);
    expect(partner.arrived).toBe(CAP);

    const killedAt = performance.now();
    holder!.kill('SIGKILL');
    await holder!.exited;
    const answered = await other!.next<{ status?: number; error?: string }>('answered', 10_000);
    const servedAfterMs = performance.now() - killedAt;
    expect(answered).toMatchObject({ status: 200 });
    expect(partner.arrived).toBe(CAP + 1);
    // A lease runs out leaseMs after its last renewal, and the waiter's next heartbeat (or the
    // expiry sweep any script runs) hands the permit on; a second of slack for a busy machine.
    expect(servedAfterMs).toBeLessThan(TEST_LEASE_MS + TEST_HEARTBEAT_MS + 1000);
    await closeReplicas([other!]);
  }, 30_000);
});
