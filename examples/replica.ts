/**
 * One replica of the demo's replicas act: `callers` concurrent calls to billing through
 * `limitHosts`, with billing's cap of 20 either per process (a plain HostLimiter) or shared
 * by every replica through Redis (`redisStore` + `shared: true`).
 *
 * Messages (bench/lib/fleet.ts): → ready; ← go { mode, partnerUrl } → done { served, refused,
 * failed }; ← close → closed.
 */
import { createClient } from 'redis';
import { Agent, request } from 'undici';
import { fromParent, leaveParent, onParent, toParent, workerConfig } from '../bench/lib/fleet.js';
import { HostLimiter, limitHosts } from '../src/index.js';
import { redisStore } from '../src/redis/index.js';

interface ReplicaConfig {
  redisUrl: string;
  /** Key prefix of this run's shared gates. */
  prefix: string;
  cap: number;
  callers: number;
  requests: number;
}

const config = workerConfig<ReplicaConfig>();
const client = createClient({ url: config.redisUrl });
client.on('error', (error) => console.error('replica: redis client:', error));
await client.connect();

async function run(mode: 'per-process' | 'shared', partnerUrl: string) {
  // A generous Redis timeout: on a loaded machine a 1 s stall would switch the store to its
  // local fallback (a share of the cap per process), which is not what this act shows.
  const store =
    mode === 'shared'
      ? redisStore({ client, prefix: config.prefix, commandTimeoutMs: 5000 })
      : undefined;
  const billing = { name: 'billing', hosts: [partnerUrl], limit: config.cap, queueTimeout: 10_000 };
  const limiter = new HostLimiter({
    partners: [store ? { ...billing, shared: true } : billing],
    ...(store ? { store } : {}),
  });
  const agent = new Agent({ connections: config.callers });
  const dispatcher = agent.compose(limitHosts(limiter));
  const counts = { served: 0, refused: 0, failed: 0, firstError: undefined as string | undefined };
  let next = 0;
  const caller = async () => {
    while (next < config.requests) {
      next++;
      try {
        const response = await request(`${partnerUrl}/invoices`, { dispatcher });
        await response.body.dump();
        if (response.statusCode === 200) counts.served++;
        else if (response.statusCode === 503) counts.refused++;
        else counts.failed++;
      } catch (error) {
        counts.failed++;
        counts.firstError ??= (error as { code?: string }).code ?? String(error);
      }
    }
  };
  await Promise.all(Array.from({ length: config.callers }, caller));
  await limiter.close();
  await agent.close();
  return counts;
}

onParent<{ type: 'go'; mode: 'per-process' | 'shared'; partnerUrl: string }>('go', (m) => {
  void run(m.mode, m.partnerUrl).then((counts) => toParent({ type: 'done', ...counts }));
});
const closing = fromParent('close');
await toParent({ type: 'ready' });
await closing;
await client.close();
await toParent({ type: 'closed' });
leaveParent();
