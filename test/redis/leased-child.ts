/**
 * One replica with a leased gate, for the tests that kill or stop a process
 * (leased-faults.test.ts), driven over IPC (bench/lib/fleet.ts).
 *
 * Commands (→ reply): `hold` { n } → `holding` { held } once n more permits are held;
 * `drop` { n } → `dropped` { block, held } (n permits released);
 * `try` { timeout } → `tried` { granted } (a granted permit is released at once);
 * `stats` → `stats` { block, held, acquired };
 * `loop` { origin, callers, delay } → `looping`: `callers` loops calling `origin/ok?delay=`
 * through the gate until the process dies.
 */
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { onParent, toParent, workerConfig } from '../../bench/lib/fleet.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { redisStore } from '../../src/redis/index.js';

export interface LeasedChildConfig {
  redisPort: number;
  client: 'node-redis' | 'ioredis';
  name: string;
  limit: number;
  leaseMs: number;
  refreshMs: number;
  /** The store's policy while Redis is unreachable (default the store's). */
  onStoreError?: 'local' | 'reject';
}

const config = workerConfig<LeasedChildConfig>();
const url = `redis://127.0.0.1:${config.redisPort}`;
let client: unknown;
if (config.client === 'ioredis') {
  const c = new Redis(url, { lazyConnect: true });
  c.on('error', () => {});
  await c.connect();
  client = c;
} else {
  const c = createClient({ url });
  c.on('error', () => {});
  await c.connect();
  client = c;
}
const store = redisStore({
  client,
  prefix: 'test:',
  commandTimeoutMs: 300,
  ...(config.onStoreError === undefined ? {} : { onStoreError: config.onStoreError }),
});
const gate = store.semaphore({
  name: config.name,
  limit: config.limit,
  mode: 'leased',
  leaseMs: config.leaseMs,
  refreshMs: config.refreshMs,
});
const held: Permit[] = [];

onParent<{ n: number }>('hold', ({ n }) => {
  const target = held.length + n;
  for (let i = 0; i < n; i++) {
    void gate.acquire({ timeout: 10_000 }).then((p) => {
      held.push(p);
      if (held.length === target) void toParent({ type: 'holding', held: gate.held });
    });
  }
});
onParent<{ n: number }>('drop', ({ n }) => {
  for (const p of held.splice(0, n)) p.release();
  void toParent({ type: 'dropped', block: gate.block, held: gate.held });
});
onParent<{ timeout: number }>('try', ({ timeout }) => {
  gate.acquire({ timeout }).then(
    (p) => {
      p.release();
      void toParent({ type: 'tried', granted: true });
    },
    () => void toParent({ type: 'tried', granted: false }),
  );
});
onParent('stats', () => {
  const s = gate.stats();
  void toParent({ type: 'stats', block: gate.block, held: s.held, acquired: s.acquired });
});
onParent<{ origin: string; callers: number; delay: number }>(
  'loop',
  ({ origin, callers, delay }) => {
    for (let i = 0; i < callers; i++) {
      void (async () => {
        for (;;) {
          try {
            await gate.run(
              async () => {
                const res = await fetch(`${origin}/ok?delay=${delay}`);
                await res.arrayBuffer();
              },
              { timeout: 30_000 },
            );
          } catch {
            await new Promise((r) => setTimeout(r, 5));
          }
        }
      })();
    }
    void toParent({ type: 'looping' });
  },
);
await gate.ready();
await toParent({ type: 'ready' });
