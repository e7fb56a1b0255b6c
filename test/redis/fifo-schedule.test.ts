/**
 * Issue 32's FIFO fixes attacked by a seeded schedule: Redis paused for less and for more than
 * every timeout, its clock stepped forward and back (emulated as the campaign does), its keys
 * flushed, a replica closed and opened again at a random moment, all while three replicas (each
 * its own store and client, in this process) keep the cap of 4 busy. `onStoreError: 'reject'`,
 * so no local share adds its documented excess: whatever goes over the cap is Redis's. The
 * oracle counts the permits held across the three between grant and release, and after the
 * schedule every replica must be granted again (nobody stuck). A failure prints its seed and
 * schedule; `FIFO_SEED=<n>` replays it.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { RedisStoreOptions } from '../../src/redis/index.js';
import { redisStore } from '../../src/redis/index.js';
import { prng } from '../helpers/prng.js';
import {
  describeRedis,
  type RedisServer,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';
import { connectClient } from './clients.js';
import { faultFor } from './fifo-fleet.js';
import { CLOCK_STEP } from './fifo-outage-fleet.js';

const CAP = 4;
const STEPS = 6;
const OPTIONS = { prefix: 'sched:', leaseMs: 600, heartbeatMs: 120, commandTimeoutMs: 300 };
const KEYS = ['h', 'p', 'm'].map((k) => `sched:{g}:${k}`);

interface Replica {
  running: boolean;
  grants: number;
  stop: () => Promise<void>;
}

describeRedis('FIFO gates under a seeded schedule of gaps, clock steps, flushes and closes', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(() => stopAllRedis());

  it('never hold more than the cap, and every replica is granted again after', async () => {
    const seed = Number(process.env.FIFO_SEED ?? 3203);
    const random = prng(seed);
    let inUse = 0;
    let peak = 0;
    const schedule: string[] = [];

    async function open(): Promise<Replica> {
      const client = await connectClient('node-redis', redis);
      const store = redisStore({
        client: client.client,
        ...OPTIONS,
        onStoreError: 'reject',
      } as RedisStoreOptions);
      const gate = store.semaphore({ name: 'g', limit: CAP, queueTimeout: 2000 });
      const replica: Replica = { running: true, grants: 0, stop: async () => {} };
      const hold = prng(Math.floor(random() * 2 ** 31));
      const loop = async () => {
        while (replica.running) {
          try {
            const permit = await gate.acquire();
            inUse++;
            peak = Math.max(peak, inUse);
            replica.grants++;
            await faultFor(2 + hold() * 30);
            inUse--;
            permit.release();
          } catch {
            await faultFor(5);
          }
        }
      };
      const loops = [loop(), loop(), loop()];
      replica.stop = async () => {
        replica.running = false;
        await Promise.all(loops);
        await store.close();
        await client.close();
      };
      return replica;
    }

    const replicas = [await open(), await open(), await open()];
    try {
      await faultFor(300);
      for (let step = 0; step < STEPS; step++) {
        const kind = Math.floor(random() * 5);
        if (kind === 0 || kind === 1) {
          // Shorter than a command timeout, or longer than a lease and every timeout.
          const ms = Math.round(kind === 0 ? 50 + random() * 200 : 700 + random() * 1300);
          schedule.push(`pause ${ms} ms`);
          redis.pause();
          await faultFor(ms);
          redis.resume();
        } else if (kind === 2) {
          const ms = Math.round((random() < 0.5 ? -1 : 1) * (500 + random() * 4500));
          schedule.push(`clock step ${ms > 0 ? '+' : ''}${ms} ms`);
          await redis.command('EVAL', CLOCK_STEP, 3, ...KEYS, ms);
        } else if (kind === 3) {
          schedule.push('FLUSHALL');
          await redis.command('FLUSHALL');
        } else {
          const i = Math.floor(random() * replicas.length);
          schedule.push(`replica ${i} closed and opened again`);
          await replicas[i]!.stop();
          replicas[i] = await open();
        }
        await faultFor(400 + random() * 600);
        expect(peak, `seed ${seed}: ${schedule.join(', ')}`).toBeLessThanOrEqual(CAP);
      }
      const before = replicas.map((r) => r.grants);
      await faultFor(2 * OPTIONS.leaseMs + 1000);
      const granted = replicas.map((r, i) => r.grants - before[i]!);
      console.log(`seed ${seed}: ${schedule.join(', ')}; peak ${peak}; grants after ${granted}`);
      expect(peak, `seed ${seed}: ${schedule.join(', ')}`).toBeLessThanOrEqual(CAP);
      expect(
        granted.every((n) => n > 0),
        `seed ${seed}: every replica granted again`,
      ).toBe(true);
    } finally {
      await Promise.all(replicas.map((r) => r.stop()));
    }
  }, 30_000);
});
