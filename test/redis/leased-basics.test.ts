import { expect, it } from 'vitest';
import { QueueTimeoutError } from '../../src/common/errors.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { type LeasedSemaphore, SharedLayoutError } from '../../src/redis/index.js';
import type { RedisServer } from '../helpers/redis-server.js';
import { describeRedis } from '../helpers/redis-server.js';
import { until } from '../helpers/until.js';
import { CLIENT_KINDS, privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
/** Short leases and intervals: every step here waits on a refresh, never on a sleep. */
const LEASE = { leaseMs: 1000, refreshMs: 100 } as const;

/** Every live entry of a leased gate as Redis holds it: process -> block, held, wants. */
async function blocks(server: RedisServer, gate: string) {
  const flat = (await server.command('HGETALL', `test:{${gate}}:l`)) as string[];
  const now = Number(((await server.command('TIME')) as string[])[0]) * 1000;
  const out: { block: number; held: number; wants: number }[] = [];
  for (let i = 0; i < flat.length; i += 2) {
    const [expiry, block, held, wants] = flat[i + 1]!.split(' ').map(Number) as number[];
    if (expiry! > now) out.push({ block: block!, held: held!, wants: wants! });
  }
  return out;
}
const committed = (entries: { block: number; held: number }[]) =>
  entries.reduce((sum, e) => sum + Math.max(e.block, e.held), 0);

async function evalsha(server: RedisServer): Promise<number> {
  const info = String(await server.command('INFO', 'commandstats'));
  const calls = (name: string) =>
    Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  return calls('evalsha') + calls('eval');
}

for (const kind of CLIENT_KINDS) {
  describeRedis(`a leased shared gate on ${kind}`, () => {
    const fleet = useFleet(kind, redis);

    it('grants from its block with no Redis call per request', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'steady', limit: 10, mode: 'leased', ...LEASE });
      // The first use of a gate grants nothing beyond held for one window (refresh + timeout).
      const first = await gate.acquire({ timeout: 5000 });
      first.release();
      const before = await evalsha(redis());
      for (let i = 0; i < 500; i++) (await gate.acquire()).release();
      const scripts = (await evalsha(redis())) - before;
      expect(scripts).toBeLessThan(50); // refreshes on the clock, not per request
      expect(gate.stats().shared).toMatchObject({ sharing: 'leased', mode: 'redis' });
      expect(gate.held + gate.available).toBe(gate.block);
    });

    it('keeps the sum of blocks within the cap in Redis after every refresh, and moves free permits to the busy process', async () => {
      const [a, b] = [await fleet.store(), await fleet.store()];
      const ga = a.semaphore({ name: 'shift', limit: 6, mode: 'leased', ...LEASE });
      const gb = b.semaphore({ name: 'shift', limit: 6, mode: 'leased', ...LEASE });
      const held: Permit[] = [];
      const grab = (gate: LeasedSemaphore, n: number) => {
        for (let i = 0; i < n; i++)
          void gate.acquire({ timeout: 5000 }).then(
            (p) => held.push(p),
            () => {},
          );
      };
      grab(ga, 6);
      await until(() => ga.held === 6, 'a holding the whole cap');
      expect(committed(await blocks(redis(), 'shift'))).toBeLessThanOrEqual(6);
      grab(gb, 3);
      // A holds all 6 and cannot be made to give any back: b waits for releases.
      await until(() => gb.stats().shared.processes === 2, 'b registered');
      expect(gb.held).toBe(0);
      for (const p of held.splice(0, 6)) p.release();
      await until(() => gb.held === 3, 'the freed permits moved to b');
      // Redis's own state over a few refreshes (each read is a round trip; a refresh is 100 ms).
      const refreshesFrom = Date.now();
      while (Date.now() - refreshesFrom < 5 * LEASE.refreshMs) {
        const entries = await blocks(redis(), 'shift');
        expect(committed(entries)).toBeLessThanOrEqual(6);
        expect(ga.held + gb.held).toBeLessThanOrEqual(6);
      }
      for (const p of held.splice(0)) p.release();
    });

    it('weighted acquires: a weight-3 permit waits for a block of 3 and counts 3 in Redis', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'weights', limit: 4, mode: 'leased', ...LEASE });
      const heavy = await gate.acquire({ weight: 3, timeout: 5000 });
      expect(gate.held).toBe(3);
      await until(() => gate.stats().shared.held === 3, 'Redis counting the weight');
      const light = await gate.acquire({ timeout: 5000 });
      await expect(gate.acquire({ weight: 2, timeout: 300 })).rejects.toBeInstanceOf(
        QueueTimeoutError,
      );
      heavy.release();
      light.release();
      expect(gate.held + gate.available).toBe(gate.block);
    });

    it('a FIFO process and a leased process refuse each other on one gate', async () => {
      const [a, b] = [await fleet.store(), await fleet.store()];
      const fifo = a.semaphore({ name: 'mixed', limit: 2 });
      (await fifo.acquire()).release();
      await a.settled();
      const leased = b.semaphore({ name: 'mixed', limit: 2, mode: 'leased', ...LEASE });
      const error = await leased.acquire({ timeout: 2000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SharedLayoutError);
      expect((error as Error).message).toMatch(/fifo\/1.*leased\/1/);
      // And the FIFO process refuses the leased gate.
      const other = a.semaphore({ name: 'mixed-leased', limit: 2, mode: 'leased', ...LEASE });
      (await other.acquire({ timeout: 5000 })).release();
      const fifoOnLeased = b.semaphore({ name: 'mixed-leased', limit: 2 });
      await expect(fifoOnLeased.acquire({ timeout: 2000 })).rejects.toThrow(/leased\/1.*fifo\/1/);
      // FIFO keys that appear beside a leased gate (a process of an unversioned FIFO layout):
      // the next leased process to register refuses the gate.
      const c = await fleet.store();
      const first = c.semaphore({ name: 'mixed2', limit: 2, mode: 'leased', ...LEASE });
      (await first.acquire({ timeout: 5000 })).release();
      await redis().command('ZADD', 'test:{mixed2}:h', '1', 'x');
      const d = await fleet.store();
      const next = d.semaphore({ name: 'mixed2', limit: 2, mode: 'leased', ...LEASE });
      await expect(next.acquire({ timeout: 2000 })).rejects.toBeInstanceOf(SharedLayoutError);
      // A layout of a later version is refused by name.
      await redis().command('HSET', 'test:{mixed3}:m', 'v', 'leased/2', 'c', 2);
      const later = d.semaphore({ name: 'mixed3', limit: 2, mode: 'leased', ...LEASE });
      await expect(later.acquire({ timeout: 2000 })).rejects.toThrow(/leased\/2.*leased\/1/);
    });

    it('rejects bad options with the option and the value named', async () => {
      const store = await fleet.store();
      expect(() =>
        store.semaphore({ name: 'x', limit: 2, mode: 'leased', refreshMs: 600, leaseMs: 1000 }),
      ).toThrow(/refreshMs.*600/);
      expect(() => store.semaphore({ name: 'x', limit: 2, mode: 'other' as 'leased' })).toThrow(
        /mode.*other/,
      );
      expect(() => store.semaphore({ name: 'x', limit: 2, refreshMs: 100 } as never)).toThrow(
        /refreshMs/,
      );
    });
  });
}
