/**
 * Grant latency of a free permit: `await gate.acquire()` then `release()`, one at a time, on a
 * local `Semaphore` and on a leased shared gate holding a block (no Redis call on this path),
 * in interleaved rounds in one process so a busy spell hits both alike.
 */
import { performance } from 'node:perf_hooks';
import { createClient } from 'redis';
import { Semaphore } from '../../src/gate/semaphore.js';
import { redisStore } from '../../src/redis/index.js';
import { startRedis } from '../lib/redis-server.js';

export interface Latency {
  gate: string;
  /** µs */
  p50: number;
  /** µs */
  p99: number;
}

const PER_ROUND = 5000;

export async function freeLatency(rounds: number): Promise<Latency[]> {
  const redis = await startRedis();
  const client = await createClient({ url: redis.url }).connect();
  const store = redisStore({ client, prefix: 'latency:' });
  try {
    const local = new Semaphore({ limit: 100, name: 'local' });
    const leased = store.semaphore({ name: 'free', limit: 100, mode: 'leased' });
    // A first use waits out the recovery window; then a block sized by this loop's demand.
    (await leased.acquire({ timeout: 10_000 })).release();
    const gates = [
      ['local Semaphore', local],
      ['leased shared gate', leased],
    ] as const;
    const samples: number[][] = gates.map(() => []);
    for (let round = -1; round < rounds; round++) {
      for (const [i, [, gate]] of gates.entries()) {
        for (let n = 0; n < PER_ROUND; n++) {
          const t = performance.now();
          const permit = await gate.acquire();
          const dt = performance.now() - t;
          permit.release();
          if (round >= 0) samples[i]!.push(dt * 1000);
        }
      }
    }
    return gates.map(([name], i) => {
      const sorted = samples[i]!.sort((a, b) => a - b);
      const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
      return { gate: name, p50: at(0.5), p99: at(0.99) };
    });
  } finally {
    await store.close();
    await client.close();
    await redis.close();
  }
}
