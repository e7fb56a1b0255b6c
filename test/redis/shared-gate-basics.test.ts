import { expect, it } from 'vitest';
import {
  QueueFullError,
  QueueTimeoutError,
  StoreUnavailableError,
} from '../../src/common/errors.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, privateRedis, untilAsync, useFleet, zcard } from './clients.js';

const redis = privateRedis();

for (const kind of CLIENT_KINDS) {
  describeRedis(`a shared gate on ${kind}`, () => {
    const fleet = useFleet(kind, redis);

    it('grants a free permit in one round trip and gives it back to Redis on release', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'one', limit: 2 });
      const permit = await gate.acquire();
      expect(gate.held).toBe(1);
      expect(gate.stats().shared).toMatchObject({ held: 1, queued: 0, mode: 'redis' });
      expect(await zcard(redis(), 'one', 'h')).toBe(1);
      permit.release();
      await store.settled();
      expect(await zcard(redis(), 'one', 'h')).toBe(0);
      expect(gate.stats()).toMatchObject({ acquired: 1, released: 1, held: 0 });
    });

    it('shares one cap between processes and grants tickets first come, first served', async () => {
      const [a, b] = [await fleet.store(), await fleet.store()];
      const ga = a.semaphore({ name: 'fifo', limit: 1 });
      const gb = b.semaphore({ name: 'fifo', limit: 1 });
      const first = await ga.acquire();
      const order: string[] = [];
      // Interleaved arrivals from two processes; each ticket is queued before the next arrives.
      const waits: Promise<Permit>[] = [];
      for (const [i, [store, gate]] of [
        [b, gb],
        [a, ga],
        [b, gb],
        [a, ga],
      ].entries() as Iterable<[number, [typeof a, typeof ga]]>) {
        waits.push(
          gate.acquire({ timeout: 10_000 }).then((p) => {
            order.push(`w${i}`);
            return p;
          }),
        );
        await store.settled();
      }
      expect(await zcard(redis(), 'fifo', 'q')).toBe(4);
      expect(ga.stats().shared.queued).toBeGreaterThanOrEqual(1);
      first.release();
      for (const wait of waits) (await wait).release();
      expect(order).toEqual(['w0', 'w1', 'w2', 'w3']);
      expect(ga.held + gb.held).toBe(0);
    });

    it('an aborted waiter leaves the Redis queue at once and the next one is served', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'abort', limit: 1 });
      const held = await gate.acquire();
      const controller = new AbortController();
      const aborted = gate.acquire({ signal: controller.signal });
      const next = gate.acquire();
      await store.settled();
      expect(await zcard(redis(), 'abort', 'q')).toBe(2);
      controller.abort(new Error('caller gone'));
      await expect(aborted).rejects.toThrow('caller gone');
      await store.settled();
      expect(await zcard(redis(), 'abort', 'q')).toBe(1);
      held.release();
      (await next).release();
      await store.settled();
      expect(await zcard(redis(), 'abort', 'h')).toBe(0);
      expect(gate.stats().abortedWaiting).toBe(1);
    });

    it('a waiter past its deadline gets QueueTimeoutError and its ticket is withdrawn', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'deadline', limit: 1, queueTimeout: 50 });
      // The holder's own grant is a Redis round trip, which a loaded machine can take past 50 ms
      // (a full suite beside a helper's benchmarks once timed it out): its deadline is its own.
      const held = await gate.acquire({ timeout: 10_000 });
      await expect(gate.acquire()).rejects.toBeInstanceOf(QueueTimeoutError);
      await store.settled();
      expect(await zcard(redis(), 'deadline', 'q')).toBe(0);
      expect(gate.stats().shedQueueTimeout).toBe(1);
      held.release();
    });

    it('sheds past maxQueue in this process without a Redis call', async () => {
      const store = await fleet.store();
      const gate = store.semaphore({ name: 'shed', limit: 1, maxQueue: 1 });
      const held = await gate.acquire();
      const queued = gate.acquire();
      const calls = await evalCalls();
      await expect(gate.acquire()).rejects.toBeInstanceOf(QueueFullError);
      expect(await evalCalls()).toBe(calls);
      held.release();
      (await queued).release();
      expect(gate.stats().shedQueueFull).toBe(1);
    });

    it('run() releases on every exit path', async () => {
      const store = await fleet.store();
      const jobs = store.semaphore({ name: 'jobs', limit: 2, maxQueue: 10, queueTimeout: 5000 });
      const results = await Promise.allSettled(
        [1, 2, 3, 4, 5].map((n) =>
          jobs.run(async () => {
            if (n === 3) throw new Error('boom');
            return n * 2;
          }),
        ),
      );
      expect(results.map((r) => r.status)).toEqual([
        'fulfilled',
        'fulfilled',
        'rejected',
        'fulfilled',
        'fulfilled',
      ]);
      await store.settled();
      expect(jobs.held).toBe(0);
      expect(await zcard(redis(), 'jobs', 'h')).toBe(0);
    });

    // Issue 22 item 3: a lease set with a TTL is what a volatile-* eviction policy drops first.
    it('leases and tickets have no TTL (no volatile-* policy can evict them); the other keys expire after the heartbeat', async () => {
      const [a, b] = [await fleet.store(), await fleet.store()];
      const ga = a.semaphore({ name: 'ttl', limit: 1 });
      const gb = b.semaphore({ name: 'ttl', limit: 1 });
      const ttls = async () => {
        const keys = (await redis().command('KEYS', 'test:{ttl}:*')) as string[];
        const out: Record<string, number> = {};
        for (const key of keys) out[key.slice(-1)] = Number(await redis().command('PTTL', key));
        return out;
      };
      const held = await ga.acquire();
      const waits = [gb.acquire(), ga.acquire(), gb.acquire()];
      await Promise.all([a.settled(), b.settled()]);
      await Promise.all([a.settled(), b.settled()]);
      const contended = await ttls();
      expect(Object.keys(contended).sort()).toEqual(['h', 'm', 'p', 'q', 's']);
      expect(contended).toMatchObject({ h: -1, q: -1 });
      expect(contended.m).toBeGreaterThan(0);
      held.release();
      await Promise.all(waits.map(async (wait) => (await wait).release())); // in grant order
      await Promise.all([a.settled(), b.settled()]);
      const drained = await ttls();
      expect(drained.h).toBeUndefined(); // an empty set is no key at all
      expect(drained.q).toBeUndefined();
      expect(drained.m).toBeGreaterThan(0);
    });

    it('close() is idempotent, sheds waiters, gives back a held permit once it is released (not while its call may run), and leaves the client open', async () => {
      const user = await fleet.client();
      const { redisStore } = await import('../../src/redis/index.js');
      const store = redisStore({ client: user.client, prefix: 'test:' });
      const gate = store.semaphore({ name: 'close', limit: 1 });
      const permit = await gate.acquire();
      const waiting = gate.acquire();
      await store.settled();
      const closing = [store.close(), store.close()];
      await expect(waiting).rejects.toBeInstanceOf(StoreUnavailableError);
      await expect(gate.acquire()).rejects.toBeInstanceOf(StoreUnavailableError);
      await untilAsync(async () => (await zcard(redis(), 'close', 'q')) === 0, 'its ticket gone');
      expect(await zcard(redis(), 'close', 'h')).toBe(1); // still counted: its call may run
      permit.release(); // the drain ends with it
      await Promise.all(closing);
      expect(await zcard(redis(), 'close', 'h')).toBe(0);
      expect(await zcard(redis(), 'close', 'q')).toBe(0);
      expect(await user.ping()).toBe('PONG');
      permit.release(); // again: no Redis call, no error
      await expect(gate.acquire()).rejects.toBeInstanceOf(StoreUnavailableError);
      await store.close();
    });
  });
}

/** EVALSHA and EVAL calls Redis has run (INFO commandstats), to prove a path made none. */
async function evalCalls(): Promise<number> {
  const info = String(await redis().command('INFO', 'commandstats'));
  let total = 0;
  for (const match of info.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g))
    total += Number(match[1]);
  return total;
}
