/**
 * Issue 32, items 1 and 2 (leased mode): a step of Redis's clock, emulated as the campaign does
 * (test/redis/leased-clock.ts: every timestamp the gate stores moved by the step), and Redis
 * back without its data, with a newcomer arriving first. A forward step must admit nobody past
 * the cap (the partner counts); a backward step must not stretch a dead process's lease (Redis's
 * own entry and the survivor's grant). Cap 8, 4 processes × 6 callers, lease 3 s.
 */
import { afterEach, expect, it } from 'vitest';
import type { Permit } from '../../src/gate/semaphore.js';
import { describeRedis } from '../helpers/redis-server.js';
import { Fleet, privateRedis } from './clients.js';
import { emulateClockStep } from './leased-clock.js';
import { afterFault, busyFleet, type LeasedFleet } from './leased-fleet.js';

const redis = privateRedis();
const stores = new Fleet('node-redis', redis);
let fleet: LeasedFleet | undefined;
afterEach(async () => {
  await fleet?.stop();
  fleet = undefined;
  await stores.closeAll();
  await redis().command('FLUSHALL');
});

async function redisNow(): Promise<number> {
  const [s, us] = (await redis().command('TIME')) as string[];
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

describeRedis("a leased gate when Redis's clock steps, or its data is gone (issue 32)", () => {
  it("a forward step of Redis's clock (+5 s, emulated, lease 3 s) admits nobody past the cap", async () => {
    const f = await busyFleet('forward', redis);
    fleet = f;
    await emulateClockStep(redis(), 'forward', 5000);
    await afterFault(f, 8);
  }, 20_000);

  it("a backward step (-5 s, emulated) does not stretch a dead process's lease by the step", async () => {
    const lease = { leaseMs: 1500, refreshMs: 300 } as const;
    const options = { name: 'back', limit: 4, mode: 'leased', ...lease } as const;
    const { client } = await stores.client();
    const { redisStore } = await import('../../src/redis/index.js');
    const dying = redisStore({
      client,
      prefix: 'test:',
      commandTimeoutMs: 300,
      onStoreError: 'reject',
    });
    const a = dying.semaphore(options);
    const held: Permit[] = [];
    for (let i = 0; i < 4; i++) held.push(await a.acquire({ timeout: 5000 }));
    const b = (await stores.store()).semaphore(options);
    const granted = b.acquire({ timeout: 15_000 });
    granted.catch(() => {});
    // a dies: no refresh of it reaches Redis again (its permits stay held).
    await (client as { destroy(): void }).destroy();
    const deadAt = await redisNow();
    const entry = (await redis().command('HGET', 'test:{back}:l', dying.processId)) as string;
    const expiry = Number(entry.split(' ')[0]);
    // Counted a lease and a gap (a refresh and a command timeout, 600 ms here) past its last
    // refresh: the grace of a process whose lease lapsed while Redis refused it (seed 73144).
    expect(expiry - deadAt).toBeLessThanOrEqual(lease.leaseMs + 600);
    await emulateClockStep(redis(), 'back', -5000);
    (await granted).release();
    // Granted when a's lease ended on Redis's clock, not 5 s later (the walk's step and slack).
    expect(await redisNow()).toBeLessThan(expiry + 2000);
    await dying.close();
  }, 20_000);
});
