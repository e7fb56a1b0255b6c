import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { type RedisStore, type RedisStoreOptions, redisStore } from '../../src/redis/index.js';
import { type RedisServer, startRedis, stopAllRedis } from '../helpers/redis-server.js';

/** The two clients hostgate/redis supports; every store test runs on both. */
export const CLIENT_KINDS = ['node-redis', 'ioredis'] as const;
export type ClientKind = (typeof CLIENT_KINDS)[number];

export interface TestClient {
  client: unknown;
  /** One command on this client (to check that the store left it open). */
  ping(): Promise<unknown>;
  close(): Promise<void>;
}

/** How a test's client reconnects: `reconnectMs`, a fixed wait (default: the client's backoff). */
export interface ClientOptions {
  reconnectMs?: number;
}

/**
 * A user's client, as a user would make it. Its own error listener: a test that kills Redis
 * must see the store's behaviour, not the client's unhandled 'error' event.
 */
export async function connectClient(
  kind: ClientKind,
  server: RedisServer,
  { reconnectMs }: ClientOptions = {},
): Promise<TestClient> {
  if (kind === 'node-redis') {
    const socket = reconnectMs === undefined ? {} : { reconnectStrategy: () => reconnectMs };
    const client = createClient({ url: server.url, socket });
    client.on('error', () => {});
    await client.connect();
    return {
      client,
      ping: () => client.ping(),
      close: async () => {
        if (client.isOpen) client.destroy();
      },
    };
  }
  const client = new Redis(server.port, '127.0.0.1', {
    lazyConnect: true,
    ...(reconnectMs === undefined ? {} : { retryStrategy: () => reconnectMs }),
  });
  client.on('error', () => {});
  await client.connect();
  return {
    client,
    ping: () => client.ping(),
    close: async () => client.disconnect(),
  };
}

/** Opens clients and stores, and closes every one of them in `closeAll()` (afterEach). */
export class Fleet {
  readonly #clients: TestClient[] = [];
  readonly #stores: RedisStore[] = [];
  constructor(
    readonly kind: ClientKind,
    readonly server: () => RedisServer,
  ) {}

  async client(options: ClientOptions = {}): Promise<TestClient> {
    const c = await connectClient(this.kind, this.server(), options);
    this.#clients.push(c);
    return c;
  }

  /** A store on a client of its own: in these tests, one store stands for one process. */
  async store(
    options: Omit<RedisStoreOptions, 'client'> = {},
    clientOptions: ClientOptions = {},
  ): Promise<RedisStore> {
    const { client } = await this.client(clientOptions);
    const store = redisStore({ client, prefix: 'test:', commandTimeoutMs: 500, ...options });
    this.#stores.push(store);
    return store;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.#stores.splice(0).map((s) => s.close()));
    await Promise.all(this.#clients.splice(0).map((c) => c.close()));
  }
}

export { deferred } from '../express/helpers.js';

/**
 * Calls through a gate to `partner` at `path` (`/held`, `/ok`, …), each call's settled promise
 * kept in `calls` (a failure is its value: the test awaits them all when it ends).
 */
export function caller(partner: { origin: string }, calls: Promise<unknown>[]) {
  return (gate: { run<T>(fn: () => Promise<T>): Promise<T> }, path: string): Promise<unknown> => {
    const p = gate
      .run(async () => {
        const res = await fetch(`${partner.origin}${path}`);
        await res.arrayBuffer();
      })
      .catch((e: unknown) => e);
    calls.push(p);
    return p;
  };
}

/** A private redis-server for this test file: started before its tests, killed after them. */
export function privateRedis(): () => RedisServer {
  let server: RedisServer | undefined;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(stopAllRedis);
  return () => server!;
}

/** Members of one of a gate's sorted sets: `h` leases, `q` tickets (prefix `test:`). */
export async function zcard(server: RedisServer, gate: string, suffix: 'h' | 'q'): Promise<number> {
  return Number(await server.command('ZCARD', `test:{${gate}}:${suffix}`));
}

/** Σ max(block, held) over a leased gate's entries live on Redis's clock (prefix `test:`). */
export async function leasedCounted(server: RedisServer, gate: string): Promise<number> {
  const [s, us] = (await server.command('TIME')) as string[];
  const now = Number(s) * 1000 + Math.floor(Number(us) / 1000);
  const flat = (await server.command('HGETALL', `test:{${gate}}:l`)) as string[];
  let sum = 0;
  for (let i = 0; i < flat.length; i += 2) {
    if (flat[i]!.startsWith('_')) continue;
    const [e, b, h] = flat[i + 1]!.split(' ').map(Number) as [number, number, number];
    if (e > now) sum += Math.max(b, h);
  }
  return sum;
}

/** A fleet for one describe block: every store and client closed, and Redis emptied, after each test. */
export function useFleet(kind: ClientKind, server: () => RedisServer): Fleet {
  const fleet = new Fleet(kind, server);
  afterEach(async () => {
    await fleet.closeAll();
    await server().command('FLUSHALL');
  });
  return fleet;
}

/** Resolves once `done()` holds, asked of Redis every 5 ms; rejects after 10 s (a hang, not a slow machine). */
export async function untilAsync(done: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = performance.now() + 10_000;
  while (!(await done())) {
    if (performance.now() > deadline) throw new Error(`still not ${what} after 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/**
 * SAVEs `server` and keeps its dump in `dir` (the caller's): what a restart from it loads
 * (`startRedis({ port, args: ['--dir', dir] })`), whatever the server does after.
 */
export async function keepDump(server: RedisServer, dir: string): Promise<void> {
  const [, own] = (await server.command('CONFIG', 'GET', 'dir')) as string[];
  await server.command('SAVE');
  copyFileSync(join(own!, 'dump.rdb'), join(dir, 'dump.rdb'));
}
