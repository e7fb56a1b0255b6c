import { type ChildProcess, fork } from 'node:child_process';
import http from 'node:http';
import axios from 'axios';
import express from 'express';
import Fastify from 'fastify';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import hostgate from '../../fastify/index.js';
import { outbound, shed } from '../../middleware/index.js';
import { HostLimiter, LimitedHttpAgent } from '../../src/index.js';
import { bundled } from '../helpers/bundled.js';
import { got } from '../helpers/got.js';
import { type Partner, startPartner } from '../helpers/partner.js';

// Issue 33 item 2: with axios or got, every client hang-up was logged as a server error. The
// pattern of docs/node-http.md (`signal: req.outbound.signal`, the error to `next(error)`, then
// `shed()`): axios's CanceledError has no cause and got 14's AbortError a cause of `{}`, so
// shed() passed them on and Express's final handler printed each (Fastify's logger the same).
// The app runs in its own process, as in production (NODE_ENV unset: Express logs), and its
// stderr is the oracle: nothing for a hang-up, whichever client; a shed is still a 503.

const CLIENTS = ['axios', 'got', 'fetch'] as const;

interface App {
  child: ChildProcess;
  port: number;
  stderr: () => string;
  /** Resolves with the next `{ passed: client }` message. */
  passed: () => Promise<string>;
  /** Resolves once the app's gate holds no permit. */
  idle: () => Promise<void>;
  /** Tells the app to close, waits for it to exit by itself; resolves with its final stats. */
  exit: () => Promise<{ code: number | null; stats: Record<string, number> }>;
}

async function startApp(framework: string, partner: Partner): Promise<App> {
  const script = await bundled(new URL('./hang-up-app.ts', import.meta.url));
  const env = { ...process.env };
  delete env.NODE_ENV; // vitest sets 'test', under which Express's final handler logs nothing
  const child = fork(script, [framework, partner.origin], {
    env,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk) => {
    stderr += chunk;
  });
  child.stdout!.resume();
  const messages: Record<string, unknown>[] = [];
  let wake: (() => void) | undefined;
  child.on('message', (message) => {
    messages.push(message as Record<string, unknown>);
    wake?.();
  });
  const next = async (key: string): Promise<unknown> => {
    for (;;) {
      const index = messages.findIndex((m) => key in m);
      if (index >= 0) return messages.splice(index, 1)[0]![key];
      if (child.exitCode !== null) throw new Error(`the app exited ${child.exitCode}: ${stderr}`);
      await new Promise<void>((resolve) => {
        wake = resolve;
        child.once('exit', () => resolve());
      });
    }
  };
  const port = (await next('port')) as number;
  return {
    child,
    port,
    stderr: () => stderr,
    passed: async () => (await next('passed')) as string,
    idle: async () => {
      child.send('idle');
      await next('idle');
    },
    exit: async () => {
      const exited = new Promise<number | null>((resolve) => {
        if (child.exitCode !== null) resolve(child.exitCode);
        else child.once('exit', (code) => resolve(code));
      });
      child.send('exit');
      const stats = (await next('stats')) as Record<string, number>;
      return { code: await exited, stats };
    },
  };
}

/** GET /call?client=… on the app; `hangUp` destroys the socket once the partner saw the call. */
function get(
  port: number,
  client: string,
): { done: Promise<{ status: number; retryAfter?: string | undefined; body: string }> } & {
  req: http.ClientRequest;
} {
  const req = http.get({ host: '127.0.0.1', port, path: `/call?client=${client}` });
  const done = new Promise<{ status: number; retryAfter?: string | undefined; body: string }>(
    (resolve, reject) => {
      req.on('error', reject);
      req.on('response', (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (chunk) => {
          body += chunk;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode!, retryAfter: res.headers['retry-after'], body }),
        );
      });
    },
  );
  return { req, done };
}

describe.each(['express5', 'express4', 'fastify'])('%s: a client hang-up is quiet', (framework) => {
  let partner: Partner;
  let app: App | undefined;
  beforeEach(async () => {
    partner = await startPartner();
  });
  afterEach(async () => {
    if (app !== undefined && app.child.exitCode === null) app.child.kill('SIGKILL');
    app = undefined;
    await partner.close();
  });

  it('axios, got and fetch with req.outbound.signal: nothing on stderr, counted once each; a shed is still a 503', async () => {
    app = await startApp(framework, partner);
    let arrived = 0;
    let closedEarly = 0;
    for (const client of CLIENTS) {
      // A hang-up while the call is in flight at the partner.
      const gone = get(app.port, client);
      gone.done.catch(() => {}); // the socket is destroyed below: its error is ours
      await partner.waitForArrived(++arrived);
      gone.req.destroy();
      expect(await app.passed()).toBe(client);
      await partner.waitForClosedEarly(++closedEarly);
      await app.idle(); // the partner may see the close before the app's socket 'close' event

      // Two calls hold the gate's two permits (maxQueue 0): the third is shed as a 503.
      const held = [get(app.port, client), get(app.port, client)];
      arrived += 2;
      await partner.waitForArrived(arrived);
      const shed = await get(app.port, client).done;
      expect(shed.status).toBe(503);
      expect(Number(shed.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(JSON.parse(shed.body)).toMatchObject({ status: 503 });
      expect(await app.passed()).toBe(client);
      partner.release();
      for (const call of held) expect((await call.done).status).toBe(200);
    }
    console.log('step exit');
    const { code, stats } = await app.exit();
    expect(app.stderr()).toBe('');
    expect(code).toBe(0);
    expect(stats).toEqual({ held: 0, acquired: 9, released: 9, disconnects: 3 });
  }, 90_000); // a bound for a hang: three clients through a forked app, on a loaded machine
});

// The same rule for the request's deadline: the outbound signal aborts with
// DeadlineExceededError, axios and got wrap it in errors that do not say so, and the answer
// must still be the 504 of a passed deadline, not Express's or Fastify's 500.
describe('a passed deadline under axios and got is a 504', () => {
  let partner: Partner;
  let limiter: HostLimiter;
  let agent: LimitedHttpAgent;
  beforeEach(async () => {
    partner = await startPartner();
    limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: [partner.origin], limit: 4 }],
    });
    agent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
  });
  afterEach(async () => {
    partner.openHeld();
    agent.destroy();
    await limiter.close();
    await partner.close();
  });
  const call = (client: 'axios' | 'got', signal: AbortSignal) =>
    client === 'axios'
      ? axios.get(`${partner.url}/held`, { httpAgent: agent, signal })
      : got(`${partner.url}/held`, { agent: { http: agent }, signal, retry: { limit: 0 } });

  it.each(['axios', 'got'] as const)('Express 5, %s', async (client) => {
    const app = express();
    const middleware = outbound({ limiter, deadline: { default: 100 } });
    app.use(middleware);
    app.get('/call', async (req, res, next) => {
      try {
        await call(client, req.outbound.signal);
        res.send('late');
      } catch (error) {
        next(error);
      }
    });
    app.use(shed());
    const res = await request(app).get('/call');
    await middleware.close();
    expect(res.status).toBe(504);
    expect(JSON.parse(res.text)).toMatchObject({ type: 'urn:hostgate:problem:deadline-exceeded' });
  });

  it.each(['axios', 'got'] as const)('Fastify 5, %s', async (client) => {
    const app = Fastify();
    await app.register(hostgate, { limiter, deadline: { default: 100 } });
    app.get('/call', async (req) => {
      await call(client, req.outbound.signal);
      return 'late';
    });
    const res = await app.inject({ method: 'GET', url: '/call' });
    await app.close();
    expect(res.statusCode).toBe(504);
    expect(res.json()).toMatchObject({ type: 'urn:hostgate:problem:deadline-exceeded' });
  });
});
