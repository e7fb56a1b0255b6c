/**
 * One adapter per library for the shared-gate benchmark: each gives a caller a permit on a cap
 * shared through one Redis, as that library's README recommends, with no timeout short enough
 * to fail a grant under the benchmark's load.
 */
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Semaphore as RedisSemaphore } from 'redis-semaphore';
import { redisStore } from '../../src/redis/index.js';

export type LibName = 'hostgate' | 'hostgate-leased' | 'redis-semaphore' | 'bottleneck';

export interface GateConfig {
  lib: LibName;
  redisPort: number;
  cap: number;
  /** Which client hostgate uses in this process (the peers take ioredis only). */
  client: 'node-redis' | 'ioredis';
  /** Shared name of the gate in Redis. */
  name: string;
  /** hostgate: the store's lease (and a leased gate's), ms (default: the store's default). */
  leaseMs?: number;
  /** hostgate-leased: the block refresh interval, ms. */
  refreshMs?: number;
  /** hostgate: a request rate on the gate beside the cap (`npm run bench:shared -- --rate`). */
  rate?: { limit: number; per: number; burst: number };
}

export interface SharedGate {
  /** hostgate: the store's process id in Redis. */
  processId?: string;
  /** hostgate: permits this process holds now. */
  held?: () => number;
  /** Resolves with the function that gives the permit back. */
  acquire(): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

/** Long enough that no grant times out in the benchmark: waits are measured, not cut. */
const NO_TIMEOUT_MS = 120_000;

async function hostgateGate(config: GateConfig): Promise<SharedGate> {
  const url = `redis://127.0.0.1:${config.redisPort}`;
  let client: unknown;
  let closeClient: () => Promise<unknown>;
  if (config.client === 'ioredis') {
    const io = new Redis(url, { lazyConnect: true });
    await io.connect();
    client = io;
    closeClient = () => io.quit();
  } else {
    const nodeRedis = await createClient({ url }).connect();
    client = nodeRedis;
    closeClient = () => nodeRedis.close();
  }
  const store = redisStore({
    client,
    prefix: 'bench:',
    ...(config.leaseMs === undefined ? {} : { leaseMs: config.leaseMs }),
  });
  const options = {
    name: config.name,
    limit: config.cap,
    maxQueue: 10_000,
    queueTimeout: NO_TIMEOUT_MS,
    ...(config.rate === undefined ? {} : { rate: config.rate }),
  };
  const gate =
    config.lib === 'hostgate-leased'
      ? store.semaphore({ ...options, mode: 'leased', refreshMs: config.refreshMs })
      : store.semaphore(options);
  return {
    processId: store.processId,
    held: () => gate.held,
    async acquire() {
      const permit = await gate.acquire();
      return async () => permit.release();
    },
    async close() {
      await store.close();
      await closeClient();
    },
  };
}

async function redisSemaphoreGate(config: GateConfig): Promise<SharedGate> {
  const client = new Redis({ host: '127.0.0.1', port: config.redisPort, lazyConnect: true });
  await client.connect();
  return {
    async acquire() {
      // One instance per holder: its identifier is the lease (the library's documented usage).
      const semaphore = new RedisSemaphore(client, config.name, config.cap, {
        acquireTimeout: NO_TIMEOUT_MS,
        lockTimeout: 10_000,
      });
      await semaphore.acquire();
      return () => semaphore.release();
    },
    async close() {
      await client.quit();
    },
  };
}

async function bottleneckGate(config: GateConfig): Promise<SharedGate> {
  const limiter = new Bottleneck({
    id: config.name,
    maxConcurrent: config.cap,
    datastore: 'ioredis',
    clearDatastore: false,
    clientOptions: { host: '127.0.0.1', port: config.redisPort },
  });
  let errors = 0;
  limiter.on('error', (error: unknown) => {
    // The first in full; a flood under load (its clients expire) would bury every other line.
    if (errors++ === 0) console.error('bottleneck error:', error);
  });
  await limiter.ready();
  return {
    acquire() {
      // Bottleneck runs a job instead of handing out a permit: the job holds the slot until the
      // caller's release resolves it.
      return new Promise((granted, failed) => {
        limiter
          .schedule({ expiration: NO_TIMEOUT_MS }, () => {
            return new Promise<void>((done) => {
              granted(async () => done());
            });
          })
          .catch(failed);
      });
    },
    async close() {
      await limiter.disconnect(true);
    },
  };
}

export async function createGate(config: GateConfig): Promise<SharedGate> {
  switch (config.lib) {
    case 'redis-semaphore':
      return redisSemaphoreGate(config);
    case 'bottleneck':
      return bottleneckGate(config);
    case 'hostgate':
    case 'hostgate-leased':
      return hostgateGate(config);
  }
}
