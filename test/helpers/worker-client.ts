/**
 * A Redis client for a replica process (test/redis/worker.ts, fifo-fleet-worker.ts,
 * test/chaos/worker.ts): node-redis or ioredis on the Redis at 127.0.0.1:`port`, connected,
 * reconnecting on its own, its errors left to the store (which reports its own), and a `close`
 * that falls back to a hard disconnect when Redis cannot answer.
 */
import { Redis } from 'ioredis';
import { createClient } from 'redis';

export async function connectWorkerClient(port: number, kind: 'node-redis' | 'ioredis') {
  const url = `redis://127.0.0.1:${port}`;
  if (kind === 'ioredis') {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    await client.connect();
    return { client, close: () => client.quit().catch(() => client.disconnect()) };
  }
  const client = createClient({ url, socket: { reconnectStrategy: () => 100 } });
  client.on('error', () => {});
  await client.connect();
  return { client, close: () => client.close().catch(() => client.destroy()) };
}
