import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { beforeAll, expect, it, onTestFinished } from 'vitest';
import { type RedisStore, redisStore, type WakeupsDownMessage } from '../../src/redis/index.js';
import { leasedScripts } from '../../src/redis/leased-scripts.js';
import { scripts } from '../../src/redis/scripts.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, type ClientKind, privateRedis, zcard } from './clients.js';

const redis = privateRedis();

/** The rule docs/shared-gates.md tells users to create, exactly as written there. */
const DOCUMENTED = readFileSync(new URL('../../docs/shared-gates.md', import.meta.url), 'utf8')
  .split('\n')
  .find((line) => line.startsWith('ACL SETUSER hostgate '))!;
const PREFIX = 'myapp:hostgate:';

/** `ACL SETUSER <name> …` with the documented rule, optionally without some of its words. */
function setUser(name: string, without: (word: string) => boolean = () => false): string[] {
  const words = DOCUMENTED.split(' ').slice(3);
  return ['ACL', 'SETUSER', name, 'reset', ...words.filter((w) => !without(w))];
}

async function userClient(kind: ClientKind, user: string): Promise<unknown> {
  const { port } = redis();
  if (kind === 'node-redis') {
    const client = createClient({ url: `redis://${user}:change-me@127.0.0.1:${port}` });
    client.on('error', () => {});
    await client.connect();
    onTestFinished(() => client.destroy());
    return client;
  }
  const client = new Redis({
    port,
    host: '127.0.0.1',
    username: user,
    password: 'change-me',
    lazyConnect: true,
  });
  client.on('error', () => {});
  await client.connect();
  onTestFinished(() => client.disconnect());
  return client;
}

async function userStore(kind: ClientKind, user: string): Promise<RedisStore> {
  const client = await userClient(kind, user);
  const store = redisStore({
    client,
    prefix: PREFIX,
    leaseMs: 8000,
    heartbeatMs: 800, // polling every 100 ms without pub/sub
    commandTimeoutMs: 2000,
  });
  onTestFinished(() => store.close());
  return store;
}

/** Two processes on a cap of 1: one holds, one waits (3 s deadline), the holder releases. */
async function handOver(a: RedisStore, b: RedisStore): Promise<void> {
  const ga = a.semaphore({ name: 'acl', limit: 1 });
  const gb = b.semaphore({ name: 'acl', limit: 1, queueTimeout: 3000 });
  const held = await ga.acquire();
  const waiting = gb.acquire();
  await b.settled();
  held.release();
  (await waiting).release(); // before the fix: degraded for good, a local permit or a timeout
  await b.settled();
}

describeRedis('the documented ACL rule', () => {
  it('names every command the scripts of both modes run, and no key or channel outside the prefix', () => {
    expect(DOCUMENTED).toBeDefined();
    const allowed = new Set(DOCUMENTED.split(' ').filter((w) => w.startsWith('+')));
    const used = new Set<string>();
    for (const script of [...Object.values(scripts), ...Object.values(leasedScripts)]) {
      // redis.call('X', …), redis.pcall('X', …) and the chunked('X', …) helper.
      for (const [, name] of script.source.matchAll(/(?:redis\.p?call|chunked)\('([A-Z]+)'/g)) {
        used.add(`+${name!.toLowerCase()}`);
      }
    }
    for (const command of used) expect(allowed, command).toContain(command);
    expect(DOCUMENTED).toContain(` ~${PREFIX}* `);
    expect(DOCUMENTED).toContain(` &${PREFIX}* `);
  });
});

for (const kind of CLIENT_KINDS) {
  describeRedis(`shared gates through an ACL user on ${kind}`, () => {
    beforeAll(async () => {
      await redis().command(...setUser('hostgate'));
      await redis().command(...setUser('nochannels', (w) => w.startsWith('&')));
      await redis().command(...setUser('noinfo', (w) => w === '+info'));
    });

    // The leased script reads INFO server's run_id to tell a restart (includes/leasedGap.lua);
    // refused, it cannot, and works as before it: every outage opens a learning window.
    it('a user without +info runs a leased gate: granted, the server left unnamed (M.ri)', async () => {
      const [a, b] = [await userStore(kind, 'noinfo'), await userStore(kind, 'noinfo')];
      const options = {
        name: 'noinfo',
        limit: 2,
        mode: 'leased',
        leaseMs: 3000,
        queueTimeout: 5000,
      } as const;
      // One process after the other (a first use grants no second process for a refresh).
      for (const gate of [a.semaphore(options), b.semaphore(options)])
        (await gate.acquire()).release();
      expect(a.degraded || b.degraded).toBe(false);
      expect(await redis().command('HEXISTS', `${PREFIX}{noinfo}:m`, 'ri')).toBe(0);
    });

    it('the documented user (no script|load) shares the cap with pushed wake-ups', async () => {
      const warnings: string[] = [];
      const onWarning = (w: Error & { code?: string }) => {
        if (w.code?.startsWith('HOSTGATE_')) warnings.push(w.code);
      };
      process.on('warning', onWarning);
      onTestFinished(() => {
        process.off('warning', onWarning);
      });
      const [a, b] = [await userStore(kind, 'hostgate'), await userStore(kind, 'hostgate')];
      await handOver(a, b);
      expect(a.degraded || b.degraded).toBe(false);
      expect(b.semaphore({ name: 'other', limit: 1 }).stats().shared.wakeups).toBe('push');
      expect(warnings).toEqual([]);
      expect(await zcard(redis(), 'acl', 'h')).toBe(0);
    });

    it('a user without channel permission polls: granted, warned once, and reported', async () => {
      const warnings: string[] = [];
      const onWarning = (w: Error & { code?: string }) => {
        if (w.code === 'HOSTGATE_STORE_NO_WAKEUPS') warnings.push(w.message);
      };
      process.on('warning', onWarning);
      const downs: WakeupsDownMessage[] = [];
      const onDown = (m: unknown) => downs.push(m as WakeupsDownMessage);
      subscribe('hostgate:wakeups-down', onDown);
      onTestFinished(() => {
        process.off('warning', onWarning);
        unsubscribe('hostgate:wakeups-down', onDown);
      });
      const [a, b] = [await userStore(kind, 'nochannels'), await userStore(kind, 'nochannels')];
      await handOver(a, b);
      expect(a.degraded || b.degraded).toBe(false);
      const stats = b.semaphore({ name: 'other', limit: 1 }).stats().shared;
      expect(stats).toMatchObject({ mode: 'redis', wakeups: 'poll' });
      expect(warnings).toHaveLength(2); // one per store (process), not one per wait
      expect(warnings[0]).toMatch(/polling every 100 ms .* &myapp:hostgate:\*/);
      expect(downs.filter((m) => m.store === b)).toMatchObject([{ forbidden: true, pollMs: 100 }]);
      expect(await zcard(redis(), 'acl', 'h')).toBe(0);
    });
  });
}
