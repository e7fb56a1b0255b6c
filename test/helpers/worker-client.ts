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
  // node-redis 6: close() while it reconnects with a command in its offline queue never settles
  // (the command waits for a connection close() no longer makes; node-redis alone, no hostgate:
  // a PING sent while Redis was down, close() within 50 ms of Redis back). Bounded, then destroy.
  const close = async () => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), 2000);
    });
    const closed = client.close().then(
      () => 'closed' as const,
      () => 'late' as const,
    );
    const how = await Promise.race([closed, late]);
    clearTimeout(timer);
    if (how === 'late') client.destroy();
  };
  return { client, close };
}
