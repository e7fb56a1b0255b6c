/**
 * A fleet of FIFO replicas (fifo-fleet-worker.ts) on one shared gate, and the partner that
 * judges them: it counts its own concurrent requests and logs every arrival and every change of
 * what is in flight, so a test can read the peak, the longest time at 0 while the fleet had
 * demand, and the arrivals in any window.
 */
import { once } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll } from 'vitest';
import { forkWorker, killAllWorkers, type Worker } from '../../bench/lib/fleet.js';
import { bundled } from '../helpers/bundled.js';
import { type RedisServer, startRedis, stopAllRedis } from '../helpers/redis-server.js';
import { maxInWindow } from '../helpers/windows.js';
import type { FleetGate } from './fifo-fleet-worker.js';

const WORKER = new URL('./fifo-fleet-worker.ts', import.meta.url);

export interface CountingPartner {
  origin: string;
  readonly active: number;
  /** The most requests in flight at once, since `from` (ms, performance.now()) if given. */
  peak(from?: number): number;
  /** When in flight first went above `n` (Infinity: never). */
  over(n: number): number;
  /** Arrival times (ms), in order. */
  readonly arrivals: readonly number[];
  /** Longest stretch in [from, to] with nothing in flight (ms). */
  longestIdle(from: number, to: number): number;
  /** The first time at or after `from` with `n` in flight (Infinity: never). */
  reached(n: number, from: number): number;
  /** Mean requests in flight over [from, to]. */
  meanActive(from: number, to: number): number;
  /** The most arrivals in any window of `windowMs` starting at or after `from`. */
  maxArrivals(windowMs: number, from?: number, to?: number): number;
  /** Resolves once `arrivals` reaches n. */
  arrived(n: number): Promise<void>;
  close(): Promise<void>;
}

/** `/ok?delay=ms`: answers after `delay`; every change of the count in flight is logged. */
export async function countingPartner(): Promise<CountingPartner> {
  let active = 0;
  const arrivals: number[] = [];
  /** (time, in flight after the change) */
  const changes: [number, number][] = [[performance.now(), 0]];
  let waiters: { n: number; resolve: () => void }[] = [];
  const server = http.createServer((req, res) => {
    active++;
    const at = performance.now();
    arrivals.push(at);
    changes.push([at, active]);
    waiters = waiters.filter((w) => {
      if (arrivals.length < w.n) return true;
      w.resolve();
      return false;
    });
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      active--;
      changes.push([performance.now(), active]);
    };
    res.on('close', finish);
    req.resume();
    const delay = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('delay') ?? 0);
    setTimeout(() => res.end('ok'), delay);
  });
  server.keepAliveTimeout = 10_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    get active() {
      return active;
    },
    peak(from = 0) {
      let best = 0;
      let level = 0;
      for (const [t, n] of changes) {
        if (t < from) level = n;
        else best = Math.max(best, n);
      }
      return Math.max(best, from > 0 ? level : 0);
    },
    arrivals,
    longestIdle(from, to) {
      let level = 0;
      let idleSince: number | undefined;
      let best = 0;
      for (const [t, n] of changes) {
        if (t > to) break;
        if (t >= from) {
          if (level === 0 && idleSince !== undefined) best = Math.max(best, t - idleSince);
          if (n === 0 && level !== 0) idleSince = t;
        } else idleSince = n === 0 ? from : undefined;
        level = n;
      }
      if (level === 0 && idleSince !== undefined) best = Math.max(best, to - idleSince);
      return best;
    },
    over(n) {
      for (const [t, level] of changes) if (level > n) return t;
      return Number.POSITIVE_INFINITY;
    },
    reached(n, from) {
      for (const [t, level] of changes) if (t >= from && level >= n) return t;
      return Number.POSITIVE_INFINITY;
    },
    meanActive(from, to) {
      let level = 0;
      let last = from;
      let area = 0;
      for (const [t, n] of changes) {
        if (t > to) break;
        if (t > from) area += level * (t - last);
        if (t >= from) last = t;
        level = n;
      }
      area += level * (to - last);
      return area / (to - from);
    },
    maxArrivals(windowMs, from = 0, to = Number.POSITIVE_INFINITY) {
      return maxInWindow(
        arrivals.filter((t) => t >= from && t <= to),
        windowMs,
      );
    },
    arrived(n) {
      if (arrivals.length >= n) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ n, resolve }));
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Forks `count` replicas and waits until each is up (bounded). */
export async function startFleet(count: number): Promise<Worker[]> {
  const script = await bundled(WORKER);
  const workers = Array.from({ length: count }, () => forkWorker(script, {}, { execArgv: [] }));
  await Promise.all(workers.map((w) => w.next('ready', 60_000)));
  return workers;
}

/** Opens the gate in each replica (alternating node-redis and ioredis) and starts its callers. */
export async function openFleet(
  workers: readonly Worker[],
  gate: Omit<FleetGate, 'client'>,
  /** Each replica's Redis port, where it differs from `gate.redisPort` (a proxy's). */
  ports: readonly (number | undefined)[] = [],
  /** Each replica's path, where it differs from `gate.path`. */
  paths: readonly (string | undefined)[] = [],
): Promise<string[]> {
  workers.forEach((w, i) => {
    const client = i % 2 === 0 ? 'node-redis' : 'ioredis';
    const redisPort = ports[i] ?? gate.redisPort;
    w.send({ type: 'open', ...gate, redisPort, path: paths[i] ?? gate.path, client });
  });
  const opened = await Promise.all(
    workers.map((w) => w.next<{ processId: string }>('opened', 15_000)),
  );
  return opened.map((o) => o.processId);
}

/**
 * Stops the callers of every live replica and closes their stores (bounded). Waiters leave at
 * once; calls in flight are aborted, or with `drain` finish first (a graceful deploy).
 */
export async function stopFleet(workers: readonly Worker[], drain = false): Promise<void> {
  const live = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
  for (const w of live) w.send({ type: 'stop', drain });
  await Promise.all(live.map((w) => w.next('stopped', 15_000)));
}

/** Resolves after `ms` of wall time: the length of a fault, never a wait for a state. */
export function faultFor(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A loopback TCP proxy in front of Redis for one replica, that can hold what the replica sends
 * (buffered, in order, on every connection, new ones too) and let it go later: that replica's
 * Redis comes back later than the others' (a slow reconnect, a lagging network path).
 */
export interface HoldingProxy {
  readonly port: number;
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

export async function holdingProxy(targetPort: number): Promise<HoldingProxy> {
  let held = false;
  const flushes = new Set<() => void>();
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: '127.0.0.1', port: targetPort });
    open.add(client);
    open.add(upstream);
    const queue: Buffer[] = [];
    const flush = () => {
      for (const chunk of queue.splice(0)) upstream.write(chunk);
    };
    flushes.add(flush);
    const drop = () => {
      flushes.delete(flush);
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (chunk: Buffer) => {
      if (held) queue.push(chunk);
      else upstream.write(chunk);
    });
    upstream.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as AddressInfo).port,
    hold() {
      held = true;
    },
    release() {
      held = false;
      for (const flush of flushes) flush();
    },
    async close() {
      for (const socket of open) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export interface FleetFile {
  /** The file's private redis-server. */
  redis: RedisServer;
  /** The file's replicas (fifo-fleet-worker.ts), forked once. */
  replicas: Worker[];
}

/**
 * Registers the hooks of a file of fleet tests (call inside `describeRedis`): one private
 * Redis and `count` replicas for the whole file, all ended after it.
 */
export function useFleet(count: number): FleetFile {
  const file = {} as FleetFile;
  beforeAll(async () => {
    file.redis = await startRedis();
    file.replicas = await startFleet(count);
  }, 60_000);
  afterAll(async () => {
    for (const w of file.replicas ?? []) w.send({ type: 'exit' });
    await killAllWorkers();
    await stopAllRedis();
  });
  return file;
}
