/**
 * One replica of the fault campaign (test/chaos/campaign.ts): a process that serves schedule
 * after schedule, each on a fresh Redis client, store and gate (so one fork serves many
 * schedules; a SIGKILL costs a fork). Bundled to plain JavaScript by the campaign (esbuild,
 * from src/, so it runs the library as it is in the tree) and driven over IPC
 * (bench/lib/fleet.ts).
 *
 * Its callers loop: acquire (weight, cost drawn from the schedule's), call the partner for a
 * drawn length, release. Each call's wait, deadline and outcome is reported when the gate
 * closes, with whether the process's own event loop stalled during the wait (a SIGSTOP or a
 * stall of its own excuses a late answer).
 *
 * Commands (→ reply): `open` OpenGate → `opened` { processId } (or `open-failed`); `go`;
 * `callers` { n }; `stall` { ms } (a synchronous busy loop); `set-limit` { value } and
 * `set-rate` { rate } → `set` { ok, error }; `close` → `closed` { calls, errors, unfinished (the
 * closes the library warned it could not finish: HOSTGATE_STORE_CLOSE_UNFINISHED) }.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { onParent, toParent } from '../../bench/lib/fleet.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { type RedisStore, redisStore } from '../../src/redis/index.js';
import { prng } from '../helpers/prng.js';
import { connectWorkerClient } from '../helpers/worker-client.js';
import type { FleetConfig, Rate } from './plan.js';

export interface OpenGate {
  token: string;
  slot: number;
  redisPort: number;
  partnerPort: number;
  name: string;
  config: FleetConfig;
  callers: number;
  seed: number;
  /** Start calling at once (a new start), or on `go` (the fleet's start). */
  start: boolean;
}

/** One call: [asked (epoch ms), wait ms, deadline ms, outcome, own loop stalled, weight]. */
export type CallRecord = [number, number, number, string, 0 | 1, number];

interface Gate {
  acquire(options: {
    timeout: number;
    weight: number;
    cost?: number;
    signal: AbortSignal;
  }): Promise<Permit>;
  setSharedLimit(limit: number): Promise<void>;
  setSharedRate(rate: Rate): Promise<void>;
}

interface Current {
  open: OpenGate;
  store: RedisStore;
  gate: Gate;
  closeClient: () => Promise<unknown>;
  target: number;
  loops: Set<Promise<void>>;
  calls: CallRecord[];
  errors: Map<string, number>;
  abort: AbortController;
  random: () => number;
}

let current: Current | undefined;
const agent = new http.Agent({ keepAlive: true, maxSockets: 64, timeout: 4000 });

// Own event-loop stalls (a SIGSTOP looks the same from inside): gaps of the 10 ms tick.
const stalls: [number, number][] = [];
let lastTick = performance.now();
setInterval(() => {
  const now = performance.now();
  if (now - lastTick > 150) {
    stalls.push([lastTick, now]);
    if (stalls.length > 200) stalls.shift();
  }
  lastTick = now;
}, 10).unref();
const stalledDuring = (from: number, to: number) =>
  stalls.some(([a, b]) => a < to && b > from) || performance.now() - lastTick > 150;

function callPartner(port: number, query: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: `/call?${query}`, agent }, (res) => {
      res.resume();
      res.on('end', resolve);
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function outcomeOf(error: unknown): string {
  const code = (error as { code?: string }).code ?? '';
  if (code === 'HOSTGATE_QUEUE_TIMEOUT') return 'timeout';
  if (code === 'HOSTGATE_STORE_UNAVAILABLE') return 'unavailable';
  if (code === 'HOSTGATE_RATE_LIMITED') return 'rate';
  if (code === 'HOSTGATE_QUEUE_FULL') return 'full';
  if (code === 'HOSTGATE_QUEUE_CLEARED') return 'cleared';
  if ((error as Error).name === 'AbortError') return 'aborted';
  return `other:${code || String((error as Error).message ?? error).slice(0, 80)}`;
}

async function caller(c: Current, index: number): Promise<void> {
  const { config } = c.open;
  while (index < c.target && !c.abort.signal.aborted) {
    const weight = config.weights[Math.floor(c.random() * config.weights.length)]!;
    const cost = config.costs[Math.floor(c.random() * config.costs.length)]!;
    const delay = Math.floor(config.callMs[0] + c.random() * (config.callMs[1] - config.callMs[0]));
    const asked = performance.now();
    const askedEpoch = Date.now();
    let permit: Permit | undefined;
    try {
      permit = await c.gate.acquire({
        timeout: config.queueTimeout,
        weight,
        ...(config.rate ? { cost } : {}),
        signal: c.abort.signal,
      });
    } catch (error) {
      const outcome = outcomeOf(error);
      const waited = performance.now() - asked;
      // (aborted: still waiting when the replica closed; the oracle's fairness check counts it)
      c.calls.push([
        askedEpoch,
        Math.round(waited),
        config.queueTimeout,
        outcome,
        stalledDuring(asked, asked + waited) ? 1 : 0,
        weight,
      ]);
      // A shed comes at once: back off a little instead of spinning.
      if (outcome !== 'timeout') await pause(20 + Math.floor(c.random() * 30));
      continue;
    }
    const waited = performance.now() - asked;
    c.calls.push([
      askedEpoch,
      Math.round(waited),
      config.queueTimeout,
      'ok',
      stalledDuring(asked, asked + waited) ? 1 : 0,
      weight,
    ]);
    try {
      await callPartner(
        c.open.partnerPort,
        `g=${c.open.token}&s=${c.open.slot}&w=${weight}&c=${cost}&d=${delay}&t=${Date.now()}`,
      );
    } catch (error) {
      c.errors.set(
        `http:${(error as { code?: string }).code}`,
        (c.errors.get(`http:${(error as { code?: string }).code}`) ?? 0) + 1,
      );
    }
    permit.release();
  }
}

function setCallers(c: Current, n: number): void {
  const before = c.target;
  c.target = n;
  for (let i = before; i < n; i++) {
    const loop = caller(c, i);
    c.loops.add(loop);
    void loop.finally(() => c.loops.delete(loop));
  }
}

async function open(m: OpenGate): Promise<void> {
  const { config } = m;
  // A replica started while Redis is down (a restart under way) connects once it is back, as a
  // service's client would retry: ioredis's first connect otherwise fails at once (seed 90095).
  const until = performance.now() + 15_000;
  let connected: Awaited<ReturnType<typeof connectWorkerClient>> | undefined;
  while (connected === undefined) {
    try {
      connected = await connectWorkerClient(m.redisPort, config.client);
    } catch (error) {
      if (performance.now() > until) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const { client, close } = connected;
  const store = redisStore({
    client,
    prefix: 'chaos:',
    leaseMs: config.leaseMs,
    ...(config.heartbeatMs === undefined ? {} : { heartbeatMs: config.heartbeatMs }),
    commandTimeoutMs: config.commandTimeoutMs,
    onStoreError: config.onStoreError,
  });
  const common = {
    name: m.name,
    limit: config.cap,
    maxQueue: 10_000,
    queueTimeout: config.queueTimeout,
    ...(config.rate ? { rate: config.rate } : {}),
  };
  const gate =
    config.mode === 'leased'
      ? store.semaphore({
          ...common,
          mode: 'leased',
          leaseMs: config.leaseMs,
          ...(config.refreshMs === undefined ? {} : { refreshMs: config.refreshMs }),
        })
      : store.semaphore(common);
  current = {
    open: m,
    store,
    gate: gate as unknown as Gate,
    closeClient: close,
    target: 0,
    loops: new Set(),
    calls: [],
    errors: new Map(),
    abort: new AbortController(),
    random: prng(m.seed),
  };
  // The initial fleet waits for `go` (every replica open, then all start at once).
  if (m.start) setCallers(current, m.callers);
}

onParent<{ type: 'open' } & OpenGate>('open', (m) => {
  open(m).then(
    () => toParent({ type: 'opened', token: m.token, processId: current?.store.processId }),
    (error: unknown) => toParent({ type: 'open-failed', token: m.token, error: String(error) }),
  );
});

onParent('go', () => {
  if (current !== undefined) setCallers(current, current.open.callers);
});

onParent<{ n: number }>('callers', ({ n }) => {
  if (current !== undefined) setCallers(current, n);
});

onParent<{ ms: number }>('stall', ({ ms }) => {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // the event loop blocked: no timer, no socket read, no heartbeat
  }
});

onParent<{ value: number }>('set-limit', ({ value }) => {
  current?.gate.setSharedLimit(value).then(
    () => toParent({ type: 'set', ok: true }),
    (error: unknown) => toParent({ type: 'set', ok: false, error: String(error) }),
  );
});

onParent<{ rate: Rate }>('set-rate', ({ rate }) => {
  current?.gate.setSharedRate(rate).then(
    () => toParent({ type: 'set', ok: true }),
    (error: unknown) => toParent({ type: 'set', ok: false, error: String(error) }),
  );
});

/** Closes the library said it could not finish (Redis unreachable: a gate not left). */
let unfinished = 0;
process.on('warning', (warning) => {
  if ((warning as { code?: string }).code === 'HOSTGATE_STORE_CLOSE_UNFINISHED') unfinished++;
});

onParent('close', () => {
  const c = current;
  if (c === undefined) {
    void toParent({ type: 'closed', calls: [], errors: {}, unfinished: 0 });
    return;
  }
  const before = unfinished;
  current = undefined;
  c.target = 0;
  c.abort.abort();
  void (async () => {
    // Closed as a service's shutdown hook would: while its calls are still at the partner (the
    // close waits for their permits, drainMs; giving them back at once put 9 at cap 8).
    await Promise.all([c.store.close(), ...c.loops]);
    await c.closeClient();
    await toParent({
      type: 'closed',
      calls: c.calls,
      errors: Object.fromEntries(c.errors),
      unfinished: unfinished - before,
    });
  })().catch((error: unknown) =>
    toParent({ type: 'closed', calls: c.calls, errors: { close: String(error) }, unfinished: 0 }),
  );
});

process.on('unhandledRejection', (reason) => {
  console.error('chaos worker: unhandled rejection:', reason);
});

await toParent({ type: 'ready' });
