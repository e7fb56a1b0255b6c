import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { expect, it, onTestFinished } from 'vitest';
import type { Permit } from '../../src/gate/semaphore.js';
import { type RedisStore, redisStore, type WakeupsDownMessage } from '../../src/redis/index.js';
import { describeRedis, startRedis } from '../helpers/redis-server.js';
import {
  CLIENT_KINDS,
  type ClientKind,
  deferred,
  Fleet,
  privateRedis,
  useFleet,
  zcard,
} from './clients.js';

const redis = privateRedis();

/**
 * Heartbeats far beyond every deadline here (5 s against 2.5 s; by default the deadline is 1 s
 * and the heartbeat 2 s): a waiter is served by a wake-up, or by what replaces one, never by a
 * heartbeat. Deadlines a little wider than the default hold on a busy machine.
 */
const SLOW_HEARTBEAT = { leaseMs: 20_000, heartbeatMs: 5000, commandTimeoutMs: 2000 } as const;
const DEADLINE_MS = 2500;

/** A user's client, made to reconnect (the default) or not at all; its duplicate inherits that. */
async function userClient(kind: ClientKind, reconnect: boolean): Promise<unknown> {
  const { port, url } = redis();
  if (kind === 'node-redis') {
    const client = createClient({ url, socket: reconnect ? {} : { reconnectStrategy: false } });
    client.on('error', () => {});
    await client.connect();
    onTestFinished(() => client.destroy());
    return client;
  }
  const client = new Redis(port, '127.0.0.1', {
    lazyConnect: true,
    ...(reconnect ? {} : { retryStrategy: () => null }),
  });
  client.on('error', () => {});
  await client.connect();
  onTestFinished(() => client.disconnect());
  return client;
}

/** The next message on a store channel for `store`. */
function next<T>(name: string, store: RedisStore): Promise<T> {
  const { promise, resolve } = deferred<T>();
  const listener = (message: unknown) => {
    if ((message as { store: unknown }).store !== store) return;
    unsubscribe(name, listener);
    resolve(message as T);
  };
  subscribe(name, listener);
  onTestFinished(() => {
    unsubscribe(name, listener);
  });
  return promise;
}

for (const kind of CLIENT_KINDS) {
  describeRedis(`wake-ups when the subscription dies, on ${kind}`, () => {
    const fleet = useFleet(kind, redis);

    for (const reconnect of [false, true]) {
      const client = reconnect
        ? 'a client that reconnects'
        : 'a client configured not to reconnect';
      it(`CLIENT KILL TYPE pubsub on ${client}: waiters are still granted before their deadline, and the outage shows`, async () => {
        const waiterStore = redisStore({
          client: await userClient(kind, reconnect),
          prefix: 'test:',
          ...SLOW_HEARTBEAT,
        });
        onTestFinished(() => waiterStore.close());
        const holderStore = await fleet.store(SLOW_HEARTBEAT);
        const waiterGate = waiterStore.semaphore({
          name: 'wk',
          limit: 2,
          queueTimeout: DEADLINE_MS,
        });
        const holderGate = holderStore.semaphore({ name: 'wk', limit: 2 });
        const held: Permit[] = [await holderGate.acquire(), await holderGate.acquire()];
        const waiting = [waiterGate.acquire(), waiterGate.acquire()];
        await waiterStore.settled();
        expect(await zcard(redis(), 'wk', 'q')).toBe(2);
        const down = next<WakeupsDownMessage>('hostgate:wakeups-down', waiterStore);
        const up = next<unknown>('hostgate:wakeups-up', waiterStore);
        const errors = waiterStore.errors;
        await redis().command('CLIENT', 'KILL', 'TYPE', 'pubsub');
        const message = await down;
        // Reported: on the channel, in stats and in the error count (before: healthy, 0 errors).
        expect(message).toMatchObject({ forbidden: false, pollMs: 625 });
        expect(waiterGate.stats().shared.wakeups).toBe('poll');
        expect(waiterStore.errors).toBeGreaterThan(errors);
        // Both grants are published while (or right after) the subscription is gone.
        for (const permit of held) permit.release();
        const permits = await Promise.all(waiting); // before the fix: QueueTimeoutError
        expect(waiterGate.stats()).toMatchObject({ held: 2, shedQueueTimeout: 0 });
        expect(await zcard(redis(), 'wk', 'h')).toBe(2);
        for (const permit of permits) permit.release();
        // Subscribed again on a fresh connection, whatever the client's reconnect setting.
        await up;
        expect(waiterGate.stats().shared.wakeups).toBe('push');
        await waiterStore.settled();
        expect(await zcard(redis(), 'wk', 'h')).toBe(0);
        // Pushed again: a waiter is woken well inside its deadline, with no heartbeat due.
        const again = await holderGate.acquire();
        const woken = waiterGate.acquire({ timeout: 3000 });
        const third = waiterGate.acquire({ timeout: 3000 });
        await waiterStore.settled();
        again.release();
        for (const permit of await Promise.all([woken, third])) permit.release();
      });
    }

    it('a waiter re-checks Redis before its deadline, which is sooner than the next poll', async () => {
      // Polls every 2.5 s, heartbeats every 20 s.
      const slower = { leaseMs: 60_000, heartbeatMs: 20_000, commandTimeoutMs: 3000 } as const;
      const waiterStore = await fleet.store(slower);
      const holderStore = await fleet.store(slower);
      const waiterGate = waiterStore.semaphore({ name: 'late', limit: 1 });
      const holderGate = holderStore.semaphore({ name: 'late', limit: 1 });
      (await waiterGate.acquire()).release(); // subscribed
      const held = await holderGate.acquire();
      // The subscription dies and cannot come back (channel permission revoked): polling, every
      // 2.5 s from this moment on.
      await redis().command('ACL', 'SETUSER', 'default', 'resetchannels');
      onTestFinished(async () => {
        await redis().command('ACL', 'SETUSER', 'default', 'allchannels');
      });
      const forbidden = next<WakeupsDownMessage>('hostgate:wakeups-down', waiterStore);
      await redis().command('CLIENT', 'KILL', 'TYPE', 'pubsub');
      await forbidden;
      // Its deadline (2 s) comes before the first poll (2.5 s) and the heartbeat (20 s): only
      // the re-check 500 ms before the deadline can find the grant.
      const waiting = waiterGate.acquire({ timeout: 2000 });
      await waiterStore.settled();
      held.release();
      const permit = await waiting; // before the fix: QueueTimeoutError
      expect(waiterGate.stats().shared.wakeups).toBe('poll');
      permit.release();
    });
  });
}

// A Redis before 7.0 has no SSUBSCRIBE/SPUBLISH; a Redis 7 with both commands renamed away
// answers exactly as one does ("unknown command").
describeRedis('a Redis without sharded pub/sub (before 7.0)', () => {
  it('polls for good and says so once per store (HOSTGATE_STORE_NO_WAKEUPS), and its waiters are still granted', async () => {
    const server = await startRedis({
      args: ['--rename-command', 'SSUBSCRIBE', '', '--rename-command', 'SPUBLISH', ''],
    });
    onTestFinished(() => server.close());
    const warnings: string[] = [];
    const onWarning = (warning: Error & { code?: string }) => {
      if (warning.code === 'HOSTGATE_STORE_NO_WAKEUPS') warnings.push(warning.message);
    };
    process.on('warning', onWarning);
    onTestFinished(() => {
      process.off('warning', onWarning);
    });
    const fleet = new Fleet('node-redis', () => server);
    onTestFinished(() => fleet.closeAll());
    const options = { leaseMs: 5000, heartbeatMs: 800, commandTimeoutMs: 2000 };
    const holder = (await fleet.store(options)).semaphore({ name: 'old', limit: 1 });
    const waiterStore = await fleet.store(options);
    const waiter = waiterStore.semaphore({ name: 'old', limit: 1 });
    const held = await holder.acquire();
    const waiting = waiter.acquire({ timeout: 3000 });
    await waiterStore.settled();
    held.release();
    (await waiting).release(); // found by a poll (every 100 ms here), not a wake-up
    expect(waiter.stats().shared.wakeups).toBe('poll');
    expect(warnings).toEqual([
      expect.stringMatching(/no sharded pub\/sub \(SSUBSCRIBE, Redis 7\.0 and later\)/),
      expect.stringMatching(/no sharded pub\/sub/),
    ]);
  });
});
