import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { getEventListeners, once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type express from 'express';
import { Registry } from 'prom-client';
import request from 'supertest';
import { Headers, Request } from 'undici';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { type OutboundOptions, outbound, retryAfterSeconds, shed } from '../../middleware/index.js';
import { DeadlineExceededError, DeadlineShedError } from '../../src/common/errors.js';
import { deadlineShedCount } from '../../src/gate/deadline.js';
import type { ShedMessage } from '../../src/gate/diagnostics.js';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { MetricsCollector } from '../../src/observe/collector.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { metricValue } from '../observe/prom-text.js';
import {
  expressVersions,
  type Listening,
  listen,
  Signals,
  until,
  watchProcess,
  watchQueue,
} from './helpers.js';

type Outcome = { ok: true; status: number } | { ok: false; error: unknown };

/** The partner's hold times all past this: a budget under it cannot make it. */
const SLOW_MS = 100;

describe.each(expressVersions)('outbound({ deadline }) on %s', (_name, makeApp) => {
  let partner: Partner;
  let limiter: HostLimiter;
  let gate: Semaphore;
  let service: Listening;
  let outcomes: Signals<Outcome>;
  let signals: Signals<AbortSignal>;
  let proc: ReturnType<typeof watchProcess>;
  let middleware: ReturnType<typeof outbound>;
  let reachedFinalHandler: unknown[];
  const shutdown = new AbortController();

  async function build(
    deadline: OutboundOptions['deadline'],
    limit = 1,
    afterResponse: OutboundOptions['afterResponse'] = undefined,
  ): Promise<void> {
    limiter = new HostLimiter({
      partners: [
        { name: 'partner', hosts: [partner.origin], limit, maxQueue: 10, queueTimeout: 10_000 },
      ],
    });
    gate = limiter.gate('partner')!;
    const app = makeApp();
    middleware = outbound({ limiter, deadline, ...(afterResponse ? { afterResponse } : {}) });
    app.use(middleware);
    app.get('/budget', (req, res) => {
      res.json({ budgetMs: req.outbound.budgetMs ?? null, remaining: req.outbound.remainingMs() });
    });
    app.get('/call', (req, res, next) => {
      const id = String(req.query.id);
      signals.resolve(id, req.outbound.signal);
      const url = partner.url + String(req.query.path);
      const call =
        req.query.via === 'request'
          ? req.outbound.request(url).then(async (r) => {
              await r.body.text();
              return r.statusCode;
            })
          : req.outbound.fetch(url).then(async (r) => {
              await r.text();
              return r.status;
            });
      call.then(
        (status) => {
          outcomes.resolve(id, { ok: true, status });
          res.json({ status });
        },
        (error: unknown) => {
          outcomes.resolve(id, { ok: false, error });
          next(error);
        },
      );
    });
    app.get('/own', async (req, res) => {
      // A long-lived signal of the caller's (a shutdown signal) on every call.
      for (let i = 0; i < 3; i++) {
        const r = await req.outbound.request(`${partner.url}/ok`, { signal: shutdown.signal });
        await r.body.text();
      }
      // Each request() call lets go once its body has closed (a turn or so after text()).
      const listeners = () => getEventListeners(shutdown.signal, 'abort').length;
      await until(() => listeners() === 0, 'detached').catch(() => undefined);
      const afterRequests = listeners();
      const r = await req.outbound.fetch(`${partner.url}/ok`, { signal: shutdown.signal });
      await r.text();
      res.json({ afterRequests });
    });
    app.use(shed());
    app.use(
      (err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
        reachedFinalHandler.push(err);
        res.status(500).end();
      },
    );
    service = await listen(app);
  }

  beforeEach(async () => {
    proc = watchProcess();
    partner = await startPartner();
    outcomes = new Signals();
    signals = new Signals();
    reachedFinalHandler = [];
  });

  afterEach(async () => {
    await service?.close();
    await partner.close();
    await middleware?.close();
    proc.stop();
    expect(proc.warnings).toEqual([]);
    expect(proc.rejections).toEqual([]);
    expect(reachedFinalHandler).toEqual([]);
  });

  function call(id: string, path: string, via = 'fetch', headers: Record<string, string> = {}) {
    return request(service.server)
      .get('/call')
      .set(headers)
      .query({ id, path, via })
      .then(
        (r) => r,
        (e: unknown) => e as request.Response,
      );
  }

  /** Gives the gate a typical hold time above SLOW_MS: `n` calls that each take `ms`. */
  async function warm(n = 1, ms = SLOW_MS): Promise<void> {
    await Promise.all(
      Array.from({ length: n }, (_, i) => call(`warm${i}`, `/ok?delay=${ms}`, 'request')),
    );
    expect(gate.holdTimes.count).toBe(n);
    // The partner's timer counts whole ms on the event loop's clock: by performance.now() it may
    // end up to 1 ms early (Node 24 in CI: holds of 99.95 and 99.998 ms for a 100 ms answer).
    expect(gate.holdTimes.quantile(0.5)).toBeGreaterThanOrEqual(SLOW_MS - 1);
  }

  describe('where the budget comes from', () => {
    test('a number', async () => {
      await build(300);
      const r = await request(service.server).get('/budget').set('x-request-timeout', '5');
      expect(r.body.budgetMs).toBe(300);
      expect(r.body.remaining).toBeLessThanOrEqual(300);
    });

    test('a function of the request', async () => {
      await build((req) => (req.headers['x-tier'] === 'batch' ? 5000 : 250));
      const batch = await request(service.server).get('/budget').set('x-tier', 'batch');
      expect(batch.body.budgetMs).toBe(5000);
      expect((await request(service.server).get('/budget')).body.budgetMs).toBe(250);
    });

    test.each([
      [{ 'x-request-timeout': '120' }, 120],
      [{ 'x-request-timeout': '1.5s' }, 1500],
      [{ 'grpc-timeout': '250m' }, 250],
      [{ 'grpc-timeout': '2S' }, 2000],
      [{ 'grpc-timeout': '1H' }, 3000], // capped by max
      [{ 'x-request-timeout': 'later' }, 400], // bad: ignored, default applies
      [{}, 400],
    ])('headers %j give %d ms', async (headers, ms) => {
      await build({ header: ['x-request-timeout', 'grpc-timeout'], default: 400, max: 3000 });
      const r = await request(service.server).get('/budget').set(headers);
      expect(r.body.budgetMs).toBe(ms);
    });

    test("a bad header under invalid: 'reject' is a 400 that does not echo the value", async () => {
      await build({ header: 'grpc-timeout', max: 1000, invalid: 'reject' });
      const r = await request(service.server).get('/budget').set('grpc-timeout', 'secret-ish');
      expect(r.status).toBe(400);
      expect(r.headers['content-type']).toBe('application/problem+json');
      expect(r.body).toMatchObject({ type: 'urn:hostgate:problem:invalid-deadline', status: 400 });
      expect(r.text).toContain('grpc-timeout');
      expect(r.text).not.toContain('secret-ish');
    });

    test('no deadline: nothing changes, remaining is unbounded', async () => {
      await build({ header: 'x-request-timeout' });
      const r = await request(service.server).get('/budget');
      expect(r.body).toEqual({ budgetMs: null, remaining: null }); // JSON has no Infinity
      expect(partner.arrived).toBe(0);
    });
  });

  describe.each(['fetch', 'request'])('with %s', (via) => {
    test('a queued call waits no longer than the budget left, and never reaches the partner', async () => {
      // No early shed here: the gate has no hold time yet, so the wait itself must be bounded.
      await build({ header: 'x-request-timeout', max: 60_000 });
      const queue = watchQueue(gate);
      const holder = call('holder', '/held', via);
      await partner.waitForActive(1);
      const waiter = call('waiter', '/ok', via, { 'x-request-timeout': '250' });
      await queue.waitForQueued(1);
      expect(gate.queued).toBe(1);

      const outcome = await outcomes.wait('waiter');
      expect(outcome.ok === false && outcome.error).toBeInstanceOf(DeadlineExceededError);
      expect((await signals.wait('waiter')).reason).toBeInstanceOf(DeadlineExceededError);
      const r = await waiter;
      expect(r.status).toBe(504);
      expect(r.headers['retry-after']).toBeUndefined();
      expect(r.body).toMatchObject({
        type: 'urn:hostgate:problem:deadline-exceeded',
        budgetMs: 250,
      });
      expect(gate.queued).toBe(0);
      expect(gate.held).toBe(1); // the holder was never disturbed
      expect(gate.stats().abortedWaiting).toBe(1);
      expectInvariant(gate);

      partner.release();
      expect(await holder).toMatchObject({ status: 200 });
      expect(partner.arrived).toBe(1);
    });

    test('an in-flight call is aborted at the deadline: the partner sees the close, the permit returns', async () => {
      await build(200);
      const caller = call('caller', '/held', via);
      await partner.waitForActive(1);
      expect(gate.held).toBe(1);

      await partner.waitForClosedEarly(1);
      const outcome = await outcomes.wait('caller');
      expect(outcome.ok === false && outcome.error).toBeInstanceOf(DeadlineExceededError);
      expect((await caller).status).toBe(504);
      await until(() => gate.held === 0, 'released');
      expect(gate.stats()).toMatchObject({ held: 0, available: 1, acquired: 1, released: 1 });
      expect(gate.stats().abortedInFlight).toBe(1);
      expectInvariant(gate);
    });

    test('a call that cannot make it is shed at once: no queue slot, no permit, honest Retry-After', async () => {
      await build({ header: 'x-request-timeout', max: 60_000 });
      // Ten releases at a typical hold a little over 100 ms: past 1 s even when the partner's
      // timer ends a hold up to 1 ms early (a p50 of 99.95 ms made 999.5 ms: Retry-After 1).
      await warm(1, SLOW_MS + 10);
      const queue = watchQueue(gate);
      const holder = call('holder', '/held', via);
      await partner.waitForActive(1);
      const queued = Array.from({ length: 9 }, (_, i) => call(`q${i}`, '/ok', via));
      await queue.waitForQueued(9);
      const before = gate.stats();
      expect(before).toMatchObject({ held: 1, queued: 9 });
      // Ten releases ahead at the partner's typical hold: the expected wait alone is past 1 s.
      const p50 = gate.holdTimes.quantile(0.5);
      const expectedWait = ((before.queued + 1) / before.limit) * p50;

      const registry = new Registry();
      registerMetrics(limiter, { registry });
      const published: ShedMessage[] = [];
      const onShed = (m: unknown) => published.push(m as ShedMessage);
      subscribe('hostgate:shed', onShed);
      const r = await call('late', '/ok', via, { 'x-request-timeout': '1000' }).finally(() =>
        unsubscribe('hostgate:shed', onShed),
      );
      expect(r.status).toBe(503);
      expect(published.map((m) => [m.reason, m.partner, m.queued])).toEqual([
        ['deadline', 'partner', 9],
      ]);
      const text = await registry.metrics();
      expect(
        metricValue(text, 'hostgate_shed_total', { partner: 'partner', reason: 'deadline' }),
      ).toBe(1);
      expect(r.body).toMatchObject({ type: 'urn:hostgate:problem:deadline-shed' });
      expect(r.body).not.toHaveProperty('partner'); // a public answer names no upstream
      const outcome = await outcomes.wait('late');
      const error = outcome.ok === false ? outcome.error : undefined;
      expect(error).toBeInstanceOf(DeadlineShedError);
      const shedError = error as DeadlineShedError;
      expect(shedError.retryAfterMs).toBe(Math.ceil(expectedWait));
      expect(shedError.neededMs).toBeCloseTo(expectedWait + p50);
      expect(shedError.remainingMs).toBeLessThanOrEqual(1000);
      expect(r.headers['retry-after']).toBe(String(retryAfterSeconds(expectedWait)));
      expect(Number(r.headers['retry-after'])).toBeGreaterThanOrEqual(2);
      expect(r.body.retryAfter).toBe(Number(r.headers['retry-after']));

      const after = gate.stats();
      expect(after).toMatchObject({
        held: 1,
        queued: 9,
        acquired: before.acquired,
        shedQueueFull: 0,
        abortedWaiting: 0,
      });
      expect(deadlineShedCount(gate)).toBe(1);
      const row = new MetricsCollector(limiter).collect().find((p) => p.partner === 'partner')!;
      expect(row.shedDeadline).toBe(1);
      expect(partner.arrived).toBe(2); // the warm-up call and the holder

      partner.openHeld();
      for (const r of [await holder, ...(await Promise.all(queued))]) {
        expect(r.status).toBe(200);
      }
      expectInvariant(gate);
      expect(gate.held).toBe(0);
    });

    test('a call with enough budget left goes ahead', async () => {
      await build({ header: 'x-request-timeout', max: 60_000 });
      await warm();
      const r = await call('roomy', `/ok?delay=${SLOW_MS}`, via, { 'x-request-timeout': '30000' });
      expect(r.status).toBe(200);
      expect(deadlineShedCount(gate)).toBe(0);
      expect(gate.stats().acquired).toBe(2);
    });

    test('a budget shorter than the typical call is shed even on an idle gate', async () => {
      await build({ header: 'x-request-timeout', max: 60_000 });
      await warm();
      // Under the p50 (> SLOW_MS) from the start, and far from spent when the call is made.
      const r = await call('short', '/ok', via, { 'x-request-timeout': String(SLOW_MS - 10) });
      expect(r.status).toBe(503);
      expect(r.headers['retry-after']).toBe('1'); // nothing queued: retry at once (1 s floor)
      expect(gate.stats()).toMatchObject({ held: 0, queued: 0, acquired: 1 });
      expect(deadlineShedCount(gate)).toBe(1);
    });

    test('shedEarly: false lets the call try (and the deadline ends it)', async () => {
      await build({ header: 'x-request-timeout', max: 60_000, shedEarly: false });
      await warm();
      const r = await call('try', '/held', via, { 'x-request-timeout': '200' });
      expect(r.status).toBe(504);
      expect(deadlineShedCount(gate)).toBe(0);
      await until(() => gate.held === 0, 'released');
      expect(gate.stats().acquired).toBe(2);
    });
  });

  test('a spent budget (0) fails every call at once without touching the gate', async () => {
    await build({ header: 'x-request-timeout', max: 60_000 });
    const r = await call('spent', '/ok', 'request', { 'x-request-timeout': '0' });
    expect(r.status).toBe(504);
    expect(gate.stats()).toMatchObject({ acquired: 0, queued: 0 });
    expect(partner.arrived).toBe(0);
  });

  test('after a call settles no listener is left on the request signal, and the deadline timer is gone', async () => {
    // 'continue': the signal is not aborted for the response having been sent, so a deadline
    // timer left behind would show.
    await build(400, 1, 'continue');
    const r = await call('quick', '/ok', 'request');
    expect(r.status).toBe(200);
    const signal = await signals.wait('quick');
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
    // The response finished before the deadline: its timer was cleared with the response, so
    // the signal never aborts. A later timer runs after it would have fired.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(signal.aborted).toBe(false);
  });

  test("a caller's long-lived signal keeps no listener once its calls settle and the request closes", async () => {
    await build(10_000);
    const r = await request(service.server).get('/own');
    expect(r.body).toEqual({ afterRequests: 0 });
    await until(() => getEventListeners(shutdown.signal, 'abort').length === 0, 'detached');
    // Node 20's AbortSignal.any keeps one entry per call on a source signal until it aborts.
    expect(anyDependants(shutdown.signal)).toBe(0);
    expect(gate.held).toBe(0);
  });

  test('deadline.propagate sends the budget left to the partner, and leaves a header the call set', async () => {
    const seen: Record<string, string | undefined>[] = [];
    const echo = http.createServer((req, res) => {
      seen.push({
        grpc: req.headers['grpc-timeout'] as string | undefined,
        a: req.headers['x-a'] as string | undefined,
      });
      res.end('ok');
    });
    echo.listen(0, '127.0.0.1');
    await once(echo, 'listening');
    const url = `http://127.0.0.1:${(echo.address() as AddressInfo).port}/`;
    try {
      const app = makeApp();
      middleware = outbound({
        limiter: { partners: [] },
        deadline: { default: 5000, propagate: 'grpc-timeout' },
      });
      app.use(middleware);
      app.get('/', async (req, res) => {
        const o = req.outbound;
        const read = async (p: Promise<{ body: { text(): Promise<string> } }>) =>
          (await p).body.text();
        await read(o.request(url));
        await read(o.request(url, { headers: { 'x-a': '1' } }));
        await read(o.request(url, { headers: ['x-a', '2'] }));
        await read(o.request(url, { headers: { 'Grpc-Timeout': '5m' } }));
        await (await o.fetch(url)).text();
        await (await o.fetch(url, { headers: new Headers({ 'x-a': '3' }) })).text();
        await (await o.fetch(new Request(url, { headers: { 'x-a': '4' } }))).text();
        await (await o.fetch(url, { headers: [['grpc-timeout', '7m']] })).text();
        res.end();
      });
      service = await listen(app);
      expect((await request(service.server).get('/')).status).toBe(200);
    } finally {
      await new Promise((resolve) => echo.close(resolve));
    }
    expect(seen.map((h) => h.a)).toEqual([
      undefined,
      '1',
      '2',
      undefined,
      undefined,
      '3',
      '4',
      undefined,
    ]);
    const sent = seen.map((h) => h.grpc);
    expect(sent[3]).toBe('5m');
    expect(sent[7]).toBe('7m');
    for (const value of [...sent.slice(0, 3), ...sent.slice(4, 7)]) {
      expect(value).toMatch(/^\d+m$/);
      expect(Number.parseInt(value!, 10)).toBeLessThanOrEqual(5000);
      expect(Number.parseInt(value!, 10)).toBeGreaterThan(0);
    }
  });
});

/** Entries `AbortSignal.any` left on `signal` (Node's internal set of dependants), 0 if none. */
function anyDependants(signal: AbortSignal): number {
  const key = Object.getOwnPropertySymbols(signal).find(
    (k) => k.description === 'kDependantSignals',
  );
  const set = key === undefined ? undefined : (signal as unknown as Record<symbol, unknown>)[key];
  const size = (set as { size?: unknown } | undefined)?.size; // a primordials SafeSet: no instanceof
  return typeof size === 'number' ? size : 0;
}
