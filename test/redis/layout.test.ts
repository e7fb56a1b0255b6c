/**
 * The versioned key layout (issue 25 item 4): a gate's meta hash carries `v`, and a process
 * that finds another layout there (another hostgate version, or the leased mode, on the same
 * prefix) refuses the gate with `SharedLayoutError` and leaves Redis exactly as it was. The
 * oracle is Redis's own state: every key's DUMP before and after.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { expect, it, onTestFinished } from 'vitest';
import { SharedLayoutError } from '../../src/redis/index.js';
import { LAYOUT } from '../../src/redis/scripts.js';
import { describeRedis, type RedisServer } from '../helpers/redis-server.js';
import { until } from '../helpers/until.js';
import { CLIENT_KINDS, privateRedis, useFleet } from './clients.js';

const redis = privateRedis();

/** Every key of the prefix with its serialized value: what a refused call must not change. */
async function snapshot(server: RedisServer): Promise<Map<string, unknown>> {
  const keys = ((await server.command('KEYS', 'test:*')) as string[]).sort();
  const values = await Promise.all(keys.map((key) => server.command('DUMP', key)));
  return new Map(keys.map((key, i) => [key, values[i]]));
}

function layoutWarnings(): string[] {
  const seen: string[] = [];
  const listener = (warning: Error & { code?: string }) => {
    if (warning.code === 'HOSTGATE_SHARED_LAYOUT') seen.push(warning.message);
  };
  process.on('warning', listener);
  onTestFinished(() => {
    process.off('warning', listener);
  });
  return seen;
}

for (const kind of CLIENT_KINDS) {
  describeRedis(`the versioned key layout, on ${kind}`, () => {
    const fleet = useFleet(kind, redis);

    it(`writes v = '${LAYOUT}' in the meta hash, and refuses a gate another layout keeps: SharedLayoutError from acquire, a warning, no outage, Redis untouched`, async () => {
      const options = { leaseMs: 3000, heartbeatMs: 100, commandTimeoutMs: 1000 };
      const a = await fleet.store(options);
      const ga = a.semaphore({ name: 'layout', limit: 2 });
      const held = await ga.acquire();
      expect(await redis().command('HGET', 'test:{layout}:m', 'v')).toBe(LAYOUT);
      held.release();
      await a.settled();
      // Listened to first: a's heartbeat (every 100 ms) can be refused before b calls at all.
      const warnings = layoutWarnings();
      // What a process of the other layout (the leased mode) writes in the same field.
      await redis().command('HSET', 'test:{layout}:m', 'v', 'leased/1');
      const before = await snapshot(redis());
      let storeErrors = 0;
      const onError = () => {
        storeErrors++;
      };
      subscribe('hostgate:store-error', onError);
      onTestFinished(() => {
        unsubscribe('hostgate:store-error', onError);
      });

      const b = await fleet.store(options);
      const gb = b.semaphore({ name: 'layout', limit: 2 });
      const refused = await gb.acquire().catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(SharedLayoutError);
      expect(refused).toMatchObject({
        code: 'HOSTGATE_SHARED_LAYOUT',
        found: 'leased/1',
        expected: LAYOUT,
        partner: 'layout',
      });
      expect((refused as Error).message).toMatch(/another `prefix`.*finish the rollout/);
      await expect(gb.run(() => 1)).rejects.toBeInstanceOf(SharedLayoutError);
      await expect(gb.setSharedLimit(3)).rejects.toBeInstanceOf(SharedLayoutError);
      // a's heartbeat on the gate is refused too (a second warning, a's), and changes nothing.
      await until(() => warnings.length === 2, "refused a's heartbeat");
      // Once per gate of each process, however many refusals (b's heartbeats go on failing).
      expect(warnings).toEqual([
        expect.stringMatching(/"leased\/1".*"fifo\/1"/),
        expect.stringMatching(/"leased\/1".*"fifo\/1"/),
      ]);
      // Refused, not an outage: no degraded mode, no local grants, nothing counted as an error.
      expect(b.degraded).toBe(false);
      expect(gb.stats().shared.mode).toBe('redis');
      expect(b.errors).toBe(0);
      expect(storeErrors).toBe(0);
      expect(gb.held).toBe(0);
      expect(await snapshot(redis())).toEqual(before);
    });

    it(`adopts the layout before versions (a meta hash with a cap and no v): v is written, the gate works`, async () => {
      await redis().command('HSET', 'test:{unversioned}:m', 'c', 2, 'r', 0);
      const a = await fleet.store();
      const gate = a.semaphore({ name: 'unversioned', limit: 2 });
      (await gate.acquire()).release();
      await a.settled();
      expect(await redis().command('HGET', 'test:{unversioned}:m', 'v')).toBe(LAYOUT);
      expect(await redis().command('ZCARD', 'test:{unversioned}:h')).toBe(0);
    });
  });
}
