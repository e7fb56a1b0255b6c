import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import supertest from 'supertest';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import {
  findShedError,
  HostLimiter,
  LimitedHttpAgent,
  limitFetch,
  limitHosts,
  PartnerOpenError,
  type Semaphore,
} from '../../src/index.js';
import { Breaker, parseBreaker } from '../../src/partners/breaker.js';
import { expectInvariant } from '../helpers/invariant.js';
import { get as nodeGet } from '../helpers/node-http.js';
import { prng } from '../helpers/prng.js';
import { until } from '../helpers/until.js';

describe('the breaker’s states (a manual clock)', () => {
  const make = (options: object) => new Breaker('p', parseBreaker('p', options)!);

  it('opens after `failures` in a row; a success in between starts the count again', () => {
    const b = make({ failures: 3, halfOpenAfterMs: 1000 });
    b.onFailure(0, 'ECONNRESET');
    b.onFailure(1, 'ECONNRESET');
    b.onResponse(200, 2);
    b.onFailure(3, 'ECONNRESET');
    b.onFailure(4, 'ECONNRESET');
    expect(b.stats(4).state).toBe('closed');
    b.onResponse(502, 5);
    expect(b.stats(5)).toMatchObject({ state: 'open', opened: 1, halfOpenInMs: 1000 });
    const error = b.refuse(405);
    expect(error).toBeInstanceOf(PartnerOpenError);
    expect(error).toMatchObject({ retryAfterMs: 600, partner: 'p' });
    expect(error!.message).toBe(
      'p is failing (3 failures in a row, the last HTTP 502): its breaker is open; retry after 600 ms',
    );
  });

  it('never counts a 429: it is the rate signal, not an outage', () => {
    const b = make({ failures: 1 });
    for (let i = 0; i < 10; i++) b.onResponse(429, i);
    expect(b.stats(10)).toMatchObject({ state: 'closed', consecutiveFailures: 0 });
  });

  it('half-open lets `probes` through; the first success closes it, a failure opens it again', () => {
    const b = make({ failures: 1, halfOpenAfterMs: 100, probes: 2 });
    b.onFailure(0, 'x');
    expect(b.refuse(99)).toBeInstanceOf(PartnerOpenError);
    expect(b.refuse(100)).toBeUndefined(); // probe 1
    expect(b.refuse(101)).toBeUndefined(); // probe 2
    expect(b.refuse(102)).toMatchObject({ retryAfterMs: 98 }); // every probe out
    b.onFailure(110, 'x');
    expect(b.stats(110)).toMatchObject({ state: 'open', opened: 2, halfOpenInMs: 100 });
    expect(b.refuse(210)).toBeUndefined();
    b.onResponse(200, 220);
    expect(b.stats(220).state).toBe('closed');
    expect(b.refuse(221)).toBeUndefined();
  });

  it('sends new probes when the last ones never reported (shed on the way, aborted)', () => {
    const b = make({ failures: 1, halfOpenAfterMs: 100 });
    b.onFailure(0, 'x');
    expect(b.refuse(100)).toBeUndefined();
    expect(b.refuse(150)).toBeInstanceOf(PartnerOpenError);
    expect(b.refuse(200)).toBeUndefined();
  });

  it('a sampling rule opens on the failure ratio once minCalls are in the window (seeded schedule)', () => {
    const b = make({ threshold: 0.5, minCalls: 20, windowMs: 1000 });
    const random = prng(26);
    let t = 0;
    // 40 % failures: never opens, however long it runs.
    for (let i = 0; i < 200; i++) {
      t += 5;
      if (random() < 0.4 && i % 5 !== 0) b.onFailure(t, 'x');
      else b.onResponse(200, t);
    }
    expect(b.stats(t).state).toBe('closed');
    // A burst of failures: opens as soon as half of the window's calls failed.
    for (let i = 0; i < 200 && b.stats(t).state === 'closed'; i++) {
      t += 5;
      b.onFailure(t, 'x');
    }
    const s = b.stats(t);
    expect(s.state).toBe('open');
    expect(s.windowFailures / s.windowCalls).toBeGreaterThanOrEqual(0.5);
    expect(s.windowCalls).toBeGreaterThanOrEqual(20);
  });

  it('refuses bad options by name', () => {
    expect(() => parseBreaker('partner "p"', { failures: 0 })).toThrow(
      'partner "p": breaker.failures must be a positive integer, got 0',
    );
    expect(() => parseBreaker('partner "p"', { threshold: 2 })).toThrow(RangeError);
    expect(() => parseBreaker('partner "p"', { statuses: [503, 429] })).toThrow(
      /must not hold 429/,
    );
    expect(() => parseBreaker('partner "p"', { halfOpen: 5 })).toThrow(/halfOpen/);
    expect(parseBreaker('p', true)).toMatchObject({
      failures: 5,
      halfOpenAfterMs: 5000,
      probes: 1,
    });
  });
});

/** A partner that can be taken down (every connection reset) and brought back; it logs arrivals. */
interface Flaky {
  origin: string;
  down: boolean;
  arrived: number;
  close(): Promise<void>;
}

async function startFlaky(): Promise<Flaky> {
  const flaky: Flaky = { origin: '', down: false, arrived: 0, close: async () => {} };
  const server = http.createServer((req, res) => {
    flaky.arrived++;
    if (flaky.down) {
      req.socket.destroy(); // a partner that is down: the connection drops, no answer
      return;
    }
    req.resume();
    res.end('ok');
  });
  server.keepAliveTimeout = 10_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  flaky.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  flaky.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return flaky;
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

type Call = (url: string) => Promise<number>;

/** One call per entry point: resolves with the status, rejects with what the caller sees. */
function entryPoints(limiter: HostLimiter): Record<string, Call> {
  const agent = new Agent({ keepAliveTimeout: 10_000 });
  const dispatcher = agent.compose(limitHosts(limiter));
  const fetchLimited = limitFetch(fetch, limiter);
  const nodeAgent = new LimitedHttpAgent(new http.Agent({ keepAlive: true }), limiter);
  closers.push(
    () => agent.close(),
    async () => nodeAgent.destroy(),
  );
  return {
    limitHosts: async (url) => {
      const res = await request(url, { dispatcher });
      await res.body.text();
      return res.statusCode;
    },
    limitFetch: async (url) => {
      const res = await fetchLimited(url);
      await res.text();
      return res.status;
    },
    'node:http': async (url) => {
      const outcome = await nodeGet(url, nodeAgent).outcome;
      if (!outcome.ok) throw outcome.error;
      return outcome.status;
    },
  };
}

async function outcome(promise: Promise<number>): Promise<number | Error> {
  try {
    return await promise;
  } catch (error) {
    return (findShedError(error) ?? error) as Error;
  }
}

function expectNoLeak(gate: Semaphore): void {
  expectInvariant(gate);
  const s = gate.stats();
  expect(s.held).toBe(0);
  expect(s.acquired).toBe(s.released); // every permit back
  expect(s.doubleReleases).toBe(0); // and exactly once
}

describe.each(['limitHosts', 'limitFetch', 'node:http'])(
  'a partner that is down, through %s',
  (via) => {
    it('opens after the failures, sheds without queueing while open, and the first probe after it returns closes it, leaking nothing', async () => {
      const partner = await startFlaky();
      closers.push(partner.close);
      const limiter = new HostLimiter({
        partners: [
          {
            name: 'flaky',
            hosts: [partner.origin],
            limit: 2,
            breaker: { failures: 3, halfOpenAfterMs: 1000 },
          },
        ],
        unknownHosts: 'reject',
      });
      const gate = limiter.gate('flaky')!;
      const call = entryPoints(limiter)[via]!;
      const url = `${partner.origin}/x`;

      expect(await call(url)).toBe(200);
      partner.down = true;
      for (let i = 0; i < 3; i++) {
        const result = await outcome(call(url));
        expect(result).toBeInstanceOf(Error);
        expect(result).not.toBeInstanceOf(PartnerOpenError);
        expectInvariant(gate);
      }
      expect(limiter.stats().flaky!.breaker).toMatchObject({ state: 'open', opened: 1 });
      expect(partner.arrived).toBe(4);

      // Open: shed at once, never queued, never at the partner.
      const acquired = gate.stats().acquired;
      const micros: number[] = [];
      // While it is surely still open (a busy machine may take long over these calls).
      const open = () => limiter.stats().flaky!.breaker!.halfOpenInMs > 200;
      for (let i = 0; i < 20 && open(); i++) {
        const started = process.hrtime.bigint();
        const result = await outcome(call(url));
        micros.push(Number(process.hrtime.bigint() - started) / 1000);
        expect(result).toBeInstanceOf(PartnerOpenError);
        expect((result as PartnerOpenError).retryAfterMs).toBeGreaterThan(0);
        expect((result as PartnerOpenError).retryAfterMs).toBeLessThanOrEqual(1000);
        expect(gate.queued).toBe(0);
        expectInvariant(gate);
      }
      // The gate's own refusal, without the HTTP client's error path around it.
      let refused = 0;
      const target = { granted: () => {}, rejected: () => refused++ };
      const started = process.hrtime.bigint();
      for (let i = 0; i < 1000; i++) gate.wait(target);
      const gateMicros = Number(process.hrtime.bigint() - started) / 1000 / 1000;
      expect(refused).toBe(1000);
      expect(gate.stats().acquired).toBe(acquired);
      expect(partner.arrived).toBe(4);
      expect(micros.length).toBeGreaterThanOrEqual(5);
      micros.sort((a, b) => a - b);
      const median = micros[micros.length >> 1]!;
      console.log(
        `breaker shed via ${via}: median ${median.toFixed(0)} µs, max ${micros.at(-1)!.toFixed(0)} µs (caller's view, ${micros.length} calls); the gate's refusal ${gateMicros.toFixed(2)} µs (1000 calls)`,
      );

      // Back up: once half-open, one probe goes through and closes it; the others are shed meanwhile.
      partner.down = false;
      await until(() => limiter.stats().flaky!.breaker!.halfOpenInMs === 0, 'half-open');
      const [probe, other] = await Promise.all([outcome(call(url)), outcome(call(url))]);
      expect(probe).toBe(200);
      expect(other).toBeInstanceOf(PartnerOpenError);
      expect(limiter.stats().flaky!.breaker).toMatchObject({ state: 'closed', opened: 1 });
      expect(partner.arrived).toBe(5);
      expect(await Promise.all([call(url), call(url), call(url)])).toEqual([200, 200, 200]);
      expectNoLeak(gate);
    });
  },
);

describe('what is not a failure', () => {
  it('a call its caller aborted, and a 429, leave the breaker closed', async () => {
    const sockets = new Set<http.ServerResponse>();
    const server = http.createServer((req, res) => {
      if (req.url === '/429') res.writeHead(429).end();
      else sockets.add(res); // hangs until the client leaves
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    closers.push(
      () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    );
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [origin], limit: 4, breaker: { failures: 1 } }],
    });
    const gate = limiter.gate('p')!;
    const fetchLimited = limitFetch(fetch, limiter);
    const controller = new AbortController();
    const hanging = Array.from({ length: 3 }, () =>
      fetchLimited(`${origin}/hang`, { signal: controller.signal }).catch((e: unknown) => e),
    );
    await until(() => sockets.size === 3, 'three calls at the partner');
    controller.abort();
    await Promise.all(hanging);
    const res = await fetchLimited(`${origin}/429`);
    await res.text();
    expect(res.status).toBe(429);
    expect(limiter.stats().p!.breaker).toMatchObject({ state: 'closed', consecutiveFailures: 0 });
    await until(() => gate.held === 0, 'permits back');
    expectNoLeak(gate);
  });
});

describe('shed() answers an open breaker', () => {
  it('with 503, Retry-After and a problem body', async () => {
    const partner = await startFlaky();
    closers.push(partner.close);
    partner.down = true;
    const limiter = new HostLimiter({
      partners: [{ name: 'flaky', hosts: [partner.origin], limit: 2, breaker: { failures: 1 } }],
    });
    const app = express();
    app.use(outbound({ limiter }));
    app.get('/call', (req, res, next) => {
      req.outbound
        .fetch(`${partner.origin}/x`)
        .then((r) => r.text())
        .then((text) => res.send(text), next);
    });
    app.use(shed());
    const first = await supertest(app).get('/call');
    expect(first.status).toBe(500); // the failure itself: not a shed
    const r = await supertest(app).get('/call');
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toBe('5');
    expect(JSON.parse(r.text)).toMatchObject({
      type: 'urn:hostgate:problem:partner-open',
      title: 'Upstream is failing',
    });
    expect(r.text).not.toContain('flaky'); // a public answer names no upstream
  });
});
