/**
 * One FIFO replica for the fault tests of test/redis/fifo-faults*.test.ts, driven over IPC
 * (bench/lib/fleet.ts): a shared gate (a cap, or a cap and a rate) and `callers` loops that
 * each take a permit, call the partner, and go again. The partner in the parent counts.
 *
 * Commands (→ reply): `open` FleetGate → `opened` { processId }; `stop` → `stopped` { calls, shed }
 * (callers stop, the store closes); `exit` → the process exits. Sent once at start: `ready`.
 */
import { Agent, request } from 'undici';
import { onParent, toParent } from '../../bench/lib/fleet.js';
import { type RedisStore, redisStore } from '../../src/redis/index.js';
import { connectWorkerClient } from '../helpers/worker-client.js';

export interface FleetGate {
  redisPort: number;
  origin: string;
  /** Path of each call, e.g. `/ok?delay=30` (the worker adds `&id=`). */
  path: string;
  client: 'node-redis' | 'ioredis';
  prefix: string;
  name: string;
  limit: number;
  callers: number;
  rate?: { limit: number; per: number; burst: number };
  leaseMs?: number;
  heartbeatMs?: number;
  queueTimeout?: number;
  /** The shared mode (the FIFO one unless 'leased'), and a leased gate's refresh interval. */
  mode?: 'fifo' | 'leased';
  refreshMs?: number;
}

let running = false;
let stopping = new AbortController();
/** Aborts the waiters only: a stop that drains lets the calls in flight finish. */
let leaving = new AbortController();
let loops: Promise<void>[] = [];
let store: RedisStore | undefined;
let closeClient: (() => Promise<unknown>) | undefined;
let agent: Agent | undefined;
let calls = 0;
let shed = 0;
let seq = 0;

async function open(config: FleetGate): Promise<void> {
  const { client, close } = await connectWorkerClient(config.redisPort, config.client);
  closeClient = close;
  store = redisStore({
    client,
    prefix: config.prefix,
    ...(config.leaseMs === undefined ? {} : { leaseMs: config.leaseMs }),
    ...(config.heartbeatMs === undefined ? {} : { heartbeatMs: config.heartbeatMs }),
  });
  const gate = store.semaphore({
    name: config.name,
    limit: config.limit,
    maxQueue: 1000,
    ...(config.queueTimeout === undefined ? {} : { queueTimeout: config.queueTimeout }),
    ...(config.rate === undefined ? {} : { rate: config.rate }),
    ...(config.mode === 'leased'
      ? { mode: 'leased' as const, ...(config.refreshMs ? { refreshMs: config.refreshMs } : {}) }
      : {}),
  });
  agent = new Agent({ connections: config.callers + 4 });
  const dispatcher = agent;
  running = true;
  stopping = new AbortController();
  leaving = new AbortController();
  const signal = stopping.signal;
  const leave = leaving.signal;
  const sep = config.path.includes('?') ? '&' : '?';
  const loop = async () => {
    while (running) {
      try {
        // `leave` takes a waiter out of the queue: a replica told to stop (a rolling restart's
        // clean close) gives its tickets back at once instead of waiting for their grants.
        await gate.run(
          async () => {
            const id = `${process.pid}-${++seq}`;
            const response = await request(`${config.origin}${config.path}${sep}id=${id}`, {
              dispatcher,
              signal,
            });
            await response.body.dump();
            calls++;
          },
          { signal: leave },
        );
      } catch {
        if (!running) break;
        shed++;
        // A shed (deadline, outage): a breath before the next try, as a client would back off.
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
  };
  loops = Array.from({ length: config.callers }, loop);
}

onParent<{ type: 'open' } & FleetGate>('open', (m) => {
  void open(m).then(() => toParent({ type: 'opened', processId: store?.processId }));
});

onParent<{ type: 'stop'; drain?: boolean }>('stop', (m) => {
  running = false;
  leaving.abort();
  // A drain is a graceful deploy: the calls in flight finish (an aborted one's close reaches the
  // partner a round trip after its permit is back, and the partner may count one more then).
  if (m.drain !== true) stopping.abort();
  void (async () => {
    await Promise.all(loops);
    await store?.close();
    await agent?.close();
    await closeClient?.();
    await toParent({ type: 'stopped', calls, shed });
  })();
});

onParent('exit', () => process.exit(0));

void toParent({ type: 'ready' });
