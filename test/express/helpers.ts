import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import express4 from 'express4';
import type { Semaphore } from '../../src/gate/semaphore.js';

/** Both Express majors, built as the same (v5-typed) app shape: the runtime is what differs. */
export const expressVersions: [string, () => express.Express][] = [
  ['Express 5', () => express()],
  ['Express 4', () => express4() as unknown as express.Express],
];

export function jsonParser(factory: () => express.Express): express.RequestHandler {
  // Each major's own body parser, so the Express 4 app runs Express 4's stack end to end.
  return factory === expressVersions[1]![1]
    ? (express4.json() as unknown as express.RequestHandler)
    : express.json();
}

export interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: T) => void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Promises keyed by name, resolvable before or after someone waits on them. */
export class Signals<T = unknown> {
  readonly #map = new Map<string, Deferred<T>>();
  #get(key: string): Deferred<T> {
    let d = this.#map.get(key);
    if (d === undefined) {
      d = deferred<T>();
      this.#map.set(key, d);
    }
    return d;
  }
  resolve(key: string, value: T): void {
    this.#get(key).resolve(value);
  }
  wait(key: string): Promise<T> {
    return this.#get(key).promise;
  }
}

/**
 * Resolves once `n` callers have asked `gate` to queue them: the interceptor takes the
 * synchronous `tryAcquire()` path when a permit is free and otherwise calls `acquire()` or
 * (newer core) `wait()`, which enqueue synchronously, so `gate.queued` is current on resume.
 */
export function watchQueue(gate: Semaphore): { waitForQueued(n: number): Promise<void> } {
  let calls = 0;
  let waiters: { n: number; resolve: () => void }[] = [];
  const called = () => {
    calls++;
    waiters = waiters.filter((w) => {
      if (calls < w.n) return true;
      w.resolve();
      return false;
    });
  };
  const patchable = gate as unknown as Record<string, unknown>;
  for (const method of ['acquire', 'wait']) {
    const original = patchable[method];
    if (typeof original !== 'function') continue;
    patchable[method] = (...args: unknown[]) => {
      const result = original.apply(gate, args);
      called();
      return result;
    };
  }
  return {
    waitForQueued: (n) =>
      calls >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve })),
  };
}

export interface Listening {
  server: http.Server;
  url: string;
  close(): Promise<void>;
}

export async function listen(app: express.Express): Promise<Listening> {
  const server = http.createServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    server,
    url: `http://127.0.0.1:${port}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Collects process warnings (MaxListenersExceededWarning and friends) and unhandled rejections. */
export function watchProcess(): { warnings: Error[]; rejections: unknown[]; stop(): void } {
  const warnings: Error[] = [];
  const rejections: unknown[] = [];
  const onWarning = (w: Error) => warnings.push(w);
  const onRejection = (r: unknown) => rejections.push(r);
  process.on('warning', onWarning);
  process.on('unhandledRejection', onRejection);
  return {
    warnings,
    rejections,
    stop() {
      process.off('warning', onWarning);
      process.off('unhandledRejection', onRejection);
    },
  };
}

/**
 * Resolves once `done()` holds, checking once per event-loop turn for at most `turns` turns
 * (no timers): for state that settles a few turns after the promise a test awaited (a
 * cancelled call's permit returns after undici has closed its socket). Rejects if it never does.
 */
export { released, until } from '../helpers/until.js';
