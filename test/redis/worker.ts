/**
 * One replica for the multi-process tests, driven by the parent over IPC (bench/lib/fleet.ts).
 * Forking a process costs seconds on a busy machine, so one worker serves every scenario of a
 * test file: each `gate` command builds a fresh Redis client, store and HostLimiter (partner
 * `billing`, a shared gate) on the Redis and partner it names, and `drop` takes it down.
 *
 * Commands (→ reply):
 * - `gate` TestGate → `gate-ready`; `drop` → `dropped` (limiter.close(), its client closed).
 * - `load` { requests, concurrency, seed } → `loaded` { ok, failed, aborted, shed, other }:
 *   seeded mixed traffic through `limitHosts`: fast and slow answers, 500s, resets, aborts.
 * - `hold` { count } → nothing: `count` requests to `/held` (the parent watches the partner).
 * - `request` { count, path } → one `answered` { status | code, error } per request.
 * - `contend` { callers } → `contended` { grants } after `stop`: callers loop on `/ok?delay=2`.
 * - `stats` → `stats` { stats }: the limiter's stats (local and cluster views).
 * - `exit` → `exiting` { unhandled }, then the process exits.
 * Unasked: `store-error` and `store-up` when the current store loses Redis and gets it back.
 */
import { subscribe } from 'node:diagnostics_channel';
import { Agent, request } from 'undici';
import { fromParent, leaveParent, onParent, toParent } from '../../bench/lib/fleet.js';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { type RedisStore, redisStore } from '../../src/redis/index.js';
import { prng } from '../helpers/prng.js';
import { connectWorkerClient } from '../helpers/worker-client.js';

export interface TestGate {
  redisPort: number;
  partnerOrigin: string;
  client: 'node-redis' | 'ioredis';
  limit: number;
  leaseMs: number;
  heartbeatMs: number;
  prefix: string;
  onStoreError?: 'local' | 'reject';
  maxQueue?: number;
  queueTimeout?: number;
}

let unhandled = 0;
process.on('unhandledRejection', (reason) => {
  unhandled++;
  console.error('unhandled rejection in worker:', reason);
});

interface Scenario {
  config: TestGate;
  store: RedisStore;
  limiter: HostLimiter;
  agent: Agent;
  dispatcher: ReturnType<Agent['compose']>;
  closeClient: () => Promise<unknown>;
}
let current: Scenario | undefined;

const forward = (type: string) => (message: unknown) => {
  if ((message as { store?: unknown }).store === current?.store) {
    void toParent({ type }).catch(() => {});
  }
};
subscribe('hostgate:store-error', forward('store-error'));
subscribe('hostgate:store-up', forward('store-up'));

async function open(config: TestGate): Promise<Scenario> {
  const { client, close } = await connectWorkerClient(config.redisPort, config.client);
  const store = redisStore({
    client,
    prefix: config.prefix,
    leaseMs: config.leaseMs,
    heartbeatMs: config.heartbeatMs,
    onStoreError: config.onStoreError ?? 'local',
  });
  const limiter = new HostLimiter({
    store,
    partners: [
      {
        name: 'billing',
        hosts: [config.partnerOrigin],
        limit: config.limit,
        shared: true,
        maxQueue: config.maxQueue ?? 1000,
        queueTimeout: config.queueTimeout ?? 15_000,
      },
    ],
  });
  const agent = new Agent({ connections: 200 });
  return {
    config,
    store,
    limiter,
    agent,
    dispatcher: agent.compose(limitHosts(limiter)),
    closeClient: close,
  };
}

function scenario(): Scenario {
  if (current === undefined) throw new Error('no gate: send `gate` first');
  return current;
}

async function call(path: string, signal?: AbortSignal): Promise<number> {
  const { config, dispatcher } = scenario();
  const response = await request(`${config.partnerOrigin}${path}`, { dispatcher, signal });
  await response.body.dump();
  return response.statusCode;
}

async function load(requests: number, concurrency: number, seed: number) {
  const random = prng(seed);
  const counts = { ok: 0, failed: 0, aborted: 0, shed: 0, other: 0 };
  let next = 0;
  const one = async () => {
    const roll = random();
    const controller = new AbortController();
    let path = `/ok?delay=${Math.floor(random() * 8)}`;
    if (roll < 0.1) path = '/status?code=500';
    else if (roll < 0.15) path = '/reset';
    else if (roll < 0.3) {
      path = `/ok?delay=${20 + Math.floor(random() * 20)}`;
      setTimeout(() => controller.abort(), Math.floor(random() * 25));
    }
    try {
      const status = await call(path, controller.signal);
      if (status === 200) counts.ok++;
      else counts.failed++;
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (controller.signal.aborted) counts.aborted++;
      else if (path === '/reset') counts.failed++;
      else if (code?.startsWith('HOSTGATE_')) counts.shed++;
      else {
        counts.other++;
        console.error('unexpected failure:', error);
      }
    }
  };
  const lane = async () => {
    while (next < requests) {
      next++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return counts;
}

onParent<{ type: 'gate' } & TestGate>('gate', (m) => {
  void open(m).then((opened) => {
    current = opened;
    return toParent({ type: 'gate-ready' });
  });
});

onParent('drop', () => {
  const { limiter, agent, closeClient } = scenario();
  current = undefined;
  void (async () => {
    await limiter.close();
    await agent.close();
    await closeClient();
    await toParent({ type: 'dropped' });
  })();
});

onParent<{ type: 'load'; requests: number; concurrency: number; seed: number }>('load', (m) => {
  void load(m.requests, m.concurrency, m.seed).then((counts) =>
    toParent({ type: 'loaded', ...counts }),
  );
});

onParent<{ type: 'hold'; count: number }>('hold', (m) => {
  for (let i = 0; i < m.count; i++) void call('/held').catch(() => {});
});

onParent<{ type: 'request'; count: number; path: string }>('request', (m) => {
  for (let i = 0; i < m.count; i++) {
    call(m.path).then(
      (status) => toParent({ type: 'answered', status }),
      (error) =>
        toParent({
          type: 'answered',
          code: (error as { code?: string }).code,
          error: String((error as Error).message ?? error),
        }),
    );
  }
});

onParent<{ type: 'contend'; callers: number }>('contend', (m) => {
  let grants = 0;
  let stopped = false;
  void fromParent('stop').then(() => {
    stopped = true;
  });
  const lane = async () => {
    while (!stopped) {
      const status = await call('/ok?delay=2').catch(() => 0);
      if (status === 200) grants++;
    }
  };
  void Promise.all(Array.from({ length: m.callers }, lane)).then(() =>
    toParent({ type: 'contended', grants }),
  );
});

onParent('stats', () => {
  const stats = current?.limiter.stats() ?? {};
  void toParent({ type: 'stats', stats: JSON.parse(JSON.stringify(stats)) });
});

const exiting = fromParent('exit');
await toParent({ type: 'ready' });
await exiting;
await toParent({ type: 'exiting', unhandled });
// No process.exit(): a timer or socket a closed store left behind keeps the process alive, and
// the parent's bounded wait for the exit fails the test.
leaveParent();
