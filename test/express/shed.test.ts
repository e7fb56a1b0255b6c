import { performance } from 'node:perf_hooks';
import type express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import {
  admit,
  defaultProblem,
  findClientDisconnected,
  outbound,
  retryAfterSeconds,
  shed,
} from '../../middleware/index.js';
import { ClientDisconnectedError, QueueFullError } from '../../src/common/errors.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { expressVersions, type Listening, listen, Signals, watchQueue } from './helpers.js';

function expectProblem(
  r: request.Response,
  expected: { type: string; partner: string; status?: number },
) {
  const status = expected.status ?? 503;
  expect(r.status).toBe(status);
  expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(r.headers['retry-after']).toMatch(/^[1-9]\d*$/);
  expect(r.headers['cache-control']).toBe('no-store');
  const body = JSON.parse(r.text);
  expect(body).toMatchObject({
    type: expected.type,
    title: expect.any(String),
    status,
    detail: expect.any(String),
    retryAfter: Number(r.headers['retry-after']),
  });
  // A public answer names no upstream (issue 36 item 7); shed({ details: true }) does.
  expect(body).not.toHaveProperty('partner');
  expect(r.text).not.toContain(expected.partner);
  return body;
}

describe.each(expressVersions)('shed() on %s', (_name, makeApp) => {
  let partner: Partner;
  let service: Listening;
  let finalErrors: unknown[];
  let mw: ReturnType<typeof outbound>;

  async function serve(
    gateOptions: { maxQueue: number; queueTimeout: number },
    shedOptions?: Parameters<typeof shed>[0],
    extra?: (app: express.Express) => void,
  ) {
    const limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: [partner.origin], limit: 1, ...gateOptions }],
    });
    const app = makeApp();
    mw = outbound({ limiter });
    app.use(mw);
    extra?.(app);
    app.get('/call', (req, res, next) => {
      const url = `${partner.url}${String(req.query.path)}`;
      const call =
        req.query.via === 'request'
          ? req.outbound.request(url).then((r) => r.body.text())
          : req.outbound.fetch(url).then((r) => r.text());
      call.then((text) => res.send(text), next);
    });
    app.use(shed(shedOptions));
    app.use(
      (err: unknown, _req: express.Request, res: express.Response, _n: express.NextFunction) => {
        finalErrors.push(err);
        if (!res.headersSent) res.status(500).end('final');
        else res.destroy();
      },
    );
    service = await listen(app);
    return limiter.gate('billing')!;
  }

  beforeEach(async () => {
    partner = await startPartner();
    finalErrors = [];
  });
  afterEach(async () => {
    await service?.close();
    await partner.close();
    await mw?.close();
  });

  test.each(['fetch', 'request'])(
    'a full gate with maxQueue 0 answers 503 at once (%s)',
    async (via) => {
      const gate = await serve({ maxQueue: 0, queueTimeout: 10_000 });
      const holder = request(service.server).get('/call').query({ path: '/held', via });
      const holderDone = holder.then((r) => r);
      await partner.waitForActive(1);

      const started = performance.now();
      const r = await request(service.server).get('/call').query({ path: '/ok', via });
      const elapsed = performance.now() - started;
      expectProblem(r, { type: 'urn:hostgate:problem:queue-full', partner: 'billing' });
      expect(elapsed).toBeLessThan(1000); // nowhere near the 10 s deadline
      expect(gate.stats().shedQueueFull).toBe(1);
      expect(finalErrors).toEqual([]);

      partner.release();
      expect((await holderDone).status).toBe(200);
      expect(partner.arrived).toBe(1);
      expect(gate.held).toBe(0);
    },
  );

  test('a full queue answers 503 at once, without waiting for the deadline', async () => {
    const gate = await serve({ maxQueue: 1, queueTimeout: 10_000 });
    const queue = watchQueue(gate);
    const holder = request(service.server).get('/call').query({ path: '/held' });
    const holderDone = holder.then((r) => r);
    await partner.waitForActive(1);
    const waiter = request(service.server).get('/call').query({ path: '/ok' });
    const waiterDone = waiter.then((r) => r);
    await queue.waitForQueued(1);

    const started = performance.now();
    const r = await request(service.server).get('/call').query({ path: '/ok' });
    expect(performance.now() - started).toBeLessThan(1000);
    expectProblem(r, { type: 'urn:hostgate:problem:queue-full', partner: 'billing' });

    partner.release();
    expect((await holderDone).status).toBe(200);
    expect((await waiterDone).status).toBe(200);
    expect(gate.held).toBe(0);
    expect(gate.queued).toBe(0);
  });

  test('a wait past the deadline answers 503 queue-timeout', async () => {
    const gate = await serve({ maxQueue: 5, queueTimeout: 50 });
    const holder = request(service.server).get('/call').query({ path: '/held' });
    const holderDone = holder.then((r) => r);
    await partner.waitForActive(1);
    const r = await request(service.server).get('/call').query({ path: '/ok', via: 'request' });
    expectProblem(r, { type: 'urn:hostgate:problem:queue-timeout', partner: 'billing' });
    expect(gate.stats().shedQueueTimeout).toBe(1);
    partner.release();
    expect((await holderDone).status).toBe(200);
  });

  test('status and body are configurable', async () => {
    await serve(
      { maxQueue: 0, queueTimeout: 1000 },
      {
        status: 429,
        problem: (error, req, status) => ({
          ...defaultProblem(error, req, status),
          instance: req.url ?? '',
        }),
      },
    );
    const holder = request(service.server).get('/call').query({ path: '/held' });
    const holderDone = holder.then((r) => r);
    await partner.waitForActive(1);
    const r = await request(service.server).get('/call').query({ path: '/ok' });
    const body = expectProblem(r, {
      type: 'urn:hostgate:problem:queue-full',
      partner: 'billing',
      status: 429,
    });
    expect(body.instance).toBe('/call?path=%2Fok');
    partner.release();
    await holderDone;
  });

  test('other errors go to next(err) untouched; so do shed errors after headers were sent', async () => {
    const boom = new Error('boom');
    const late = new QueueFullError('billing', 3, 1500);
    await serve({ maxQueue: 0, queueTimeout: 1000 }, undefined, (app) => {
      app.get('/boom', (_req, _res, next) => next(boom));
      app.get('/late', (_req, res, next) => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('partial');
        next(late);
      });
    });
    const r = await request(service.server).get('/boom');
    expect(r.status).toBe(500);
    expect(r.text).toBe('final');
    expect(finalErrors[0]).toBe(boom);
    await request(service.server)
      .get('/late')
      .then(
        () => {},
        () => {},
      );
    expect(finalErrors[1]).toBe(late);
  });

  test('ClientDisconnectedError: nothing is written, nothing reaches the final handler', async () => {
    const seen: ClientDisconnectedError[] = [];
    const reported = new Signals<ClientDisconnectedError>();
    const closed = new Signals<boolean>();
    const entered = new Signals<void>();
    await serve(
      { maxQueue: 0, queueTimeout: 1000 },
      {
        onDisconnect: (error) => {
          seen.push(error);
          reported.resolve('gone', error);
        },
      },
      (app) => {
        app.get('/gone', (req, res, next) => {
          res.once('close', () => closed.resolve('gone', res.writableFinished));
          entered.resolve('gone');
          // A disconnect during an outbound call: fetch rejects with the signal's reason.
          req.outbound.fetch(`${partner.url}/held`).then(() => res.end('?'), next);
        });
      },
    );
    const t = request(service.server).get('/gone');
    t.then(
      () => {},
      () => {},
    );
    await entered.wait('gone');
    await partner.waitForActive(1);
    t.abort();
    expect(await closed.wait('gone')).toBe(false);
    await partner.waitForClosedEarly(1);
    // shed() runs when the rejected fetch reaches next(): wait for that, not for time.
    expect(await reported.wait('gone')).toBeInstanceOf(ClientDisconnectedError);
    expect(seen).toHaveLength(1);
    expect(finalErrors).toEqual([]);
  });

  test('admit() sheds with the same problem format', async () => {
    const gateRelease = new Signals<void>();
    const entered = new Signals<void>();
    const admission = admit({ limit: 1, maxQueue: 0, name: 'reports' });
    await serve({ maxQueue: 0, queueTimeout: 1000 }, undefined, (app) => {
      app.get('/slow', admission, (_req, res) => {
        entered.resolve('slow');
        gateRelease.wait('slow').then(() => res.end('done'));
      });
    });
    const first = request(service.server).get('/slow');
    const firstDone = first.then((r) => r);
    await entered.wait('slow');
    const r = await request(service.server).get('/slow');
    expectProblem(r, { type: 'urn:hostgate:problem:queue-full', partner: 'reports' });
    gateRelease.resolve('slow');
    expect((await firstDone).text).toBe('done');
  });
});

describe('helpers and option checks', () => {
  test('retryAfterSeconds rounds up to whole seconds, at least 1', () => {
    expect(retryAfterSeconds(0)).toBe(1);
    expect(retryAfterSeconds(1)).toBe(1);
    expect(retryAfterSeconds(1000)).toBe(1);
    expect(retryAfterSeconds(1001)).toBe(2);
    expect(retryAfterSeconds(59_500)).toBe(60);
    expect(retryAfterSeconds(Number.NaN)).toBe(1);
  });

  test('findClientDisconnected follows the cause chain', () => {
    const gone = new ClientDisconnectedError();
    expect(findClientDisconnected(gone)).toBe(gone);
    expect(findClientDisconnected(new TypeError('fetch failed', { cause: gone }))).toBe(gone);
    expect(findClientDisconnected(new Error('x'))).toBeUndefined();
    expect(findClientDisconnected('a string')).toBeUndefined();
  });

  test('bad options throw a TypeError naming the option', () => {
    expect(() => shed({ status: 200 })).toThrow(/status/);
    expect(() => shed({ nope: 1 } as never)).toThrow(/nope/);
    expect(() => outbound({})).toThrow(/limiter.*dispatcher/);
    expect(() => outbound({ limiter: {}, dispatcher: {} as never })).toThrow(/not both/);
    expect(() => outbound({ dispatcher: {} as never })).toThrow(/Dispatcher/);
    expect(() => outbound({ limiter: {}, perRequest: 0 })).toThrow(/perRequest.*limit/);
    expect(() => admit({ limit: 0 })).toThrow(/limit/);
    expect(() => admit({ limit: 1, queueTimeout: -1 })).toThrow(/queueTimeout/);
  });
});
