import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, afterEach, expect, it, onTestFinished } from 'vitest';
import { redisStore } from '../../src/redis/index.js';
import {
  describeRedis,
  freePort,
  type RedisServer,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';
import { until } from '../helpers/until.js';
import { CLIENT_KINDS, connectClient, deferred } from './clients.js';

const CODE = 'HOSTGATE_STORE_UNAVAILABLE';

/** Every HOSTGATE_STORE_UNAVAILABLE warning this test sees, and a promise of the next one. */
function storeWarnings() {
  const seen: { message: string; at: number }[] = [];
  let next = deferred<void>();
  const listener = (warning: Error & { code?: string }) => {
    if (warning.code !== CODE) return;
    seen.push({ message: warning.message, at: performance.now() });
    next.resolve();
    next = deferred<void>();
  };
  process.on('warning', listener);
  onTestFinished(() => {
    process.off('warning', listener);
  });
  return { seen, next: () => next.promise };
}

/** Resolves on the next message of a store channel. */
function nextOn(name: string): Promise<number> {
  const { promise, resolve } = deferred<number>();
  const listener = () => {
    unsubscribe(name, listener);
    resolve(performance.now());
  };
  subscribe(name, listener);
  return promise;
}

describeRedis('redisStore refuses a client that cannot work', () => {
  let server: RedisServer;
  afterAll(stopAllRedis);

  it('a node-redis client never connected (or closed) is a TypeError at redisStore()', async () => {
    server = await startRedis();
    const never = createClient({ url: server.url });
    expect(() => redisStore({ client: never })).toThrow(
      /client must be a connected node-redis client.*await client\.connect\(\)/,
    );
    const closed = createClient({ url: server.url });
    await closed.connect();
    closed.destroy();
    expect(() => redisStore({ client: closed })).toThrow(TypeError);
  });

  it('an ioredis client closed for good is a TypeError; a lazyConnect one connects on first use', async () => {
    const ended = new Redis(server.port, '127.0.0.1', { lazyConnect: true });
    await ended.connect();
    const end = once(ended, 'end');
    ended.disconnect();
    await end;
    expect(() => redisStore({ client: ended })).toThrow(/closed \(status "end"/);
    const lazy = new Redis(server.port, '127.0.0.1', { lazyConnect: true });
    onTestFinished(() => lazy.disconnect());
    const store = redisStore({ client: lazy, prefix: 'lazy:' });
    onTestFinished(() => store.close());
    const gate = store.semaphore({ name: 'g', limit: 1 });
    (await gate.acquire()).release();
    expect(store.degraded).toBe(false);
  });
});

for (const kind of CLIENT_KINDS) {
  describeRedis(`an unreachable Redis is a process warning on ${kind}`, () => {
    afterEach(stopAllRedis);

    it('warns at once when Redis cannot be reached at start, once for the whole outage', async () => {
      const warnings = storeWarnings();
      let client: unknown;
      if (kind === 'ioredis') {
        // Pointed at a port nobody listens on: ioredis keeps retrying, every call times out.
        const io = new Redis(await freePort(), '127.0.0.1', { lazyConnect: true });
        io.on('error', () => {});
        onTestFinished(() => io.disconnect());
        client = io;
      } else {
        // Connected, then its Redis is gone before the store's first call.
        const server = await startRedis();
        const c = await connectClient(kind, server);
        onTestFinished(() => c.close());
        await server.kill();
        client = c.client;
      }
      const store = redisStore({ client, prefix: 't:', heartbeatMs: 100, commandTimeoutMs: 200 });
      onTestFinished(() => store.close());
      const gate = store.semaphore({ name: 'g', limit: 2, queueTimeout: 5000 });
      const warned = warnings.next();
      const permit = await gate.acquire(); // the local share (1: Redis never told the fleet size)
      await warned;
      expect(warnings.seen[0]!.message).toMatch(/Redis cannot be reached .*local share/);
      expect(store.degraded).toBe(true);
      // Later failures of the same outage (a heartbeat's probe each 100 ms) stay quiet.
      const errors = store.errors;
      await until(() => store.errors >= errors + 3, 'failing three more heartbeat probes');
      permit.release();
      expect(warnings.seen).toHaveLength(1);
    });

    it('warns once an outage outlasts a heartbeat, and again for the next outage', async () => {
      const server = await startRedis();
      const c = await connectClient(kind, server);
      onTestFinished(async () => {
        server.resume();
        await c.close();
      });
      const heartbeatMs = 1000;
      const store = redisStore({
        client: c.client,
        prefix: 't:',
        leaseMs: 10_000,
        heartbeatMs,
        commandTimeoutMs: 500,
      });
      onTestFinished(() => store.close());
      const gate = store.semaphore({ name: 'g', limit: 2, queueTimeout: 5000 });
      (await gate.acquire()).release();
      const warnings = storeWarnings();
      for (const _outage of [1, 2]) {
        // A loaded machine can time out a call of a healthy Redis: that outage ends first.
        if (store.degraded) await nextOn('hostgate:store-up');
        const before = warnings.seen.length;
        const down = nextOn('hostgate:store-error');
        const warned = warnings.next();
        server.pause();
        const downAt = await down;
        expect(warnings.seen).toHaveLength(before); // one late reply is no warning yet
        await warned;
        const warning = warnings.seen[before]!;
        expect(warning.at - downAt).toBeGreaterThanOrEqual(heartbeatMs - 20);
        expect(warning.message).toMatch(/has not answered for \d+ ms/);
        const up = nextOn('hostgate:store-up');
        server.resume();
        await up;
        expect(warnings.seen).toHaveLength(before + 1); // once for the whole outage
      }
    });
  });
}
