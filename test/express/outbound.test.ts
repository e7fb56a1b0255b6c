import http from 'node:http';
import type express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import { ClientDisconnectedError } from '../../src/common/errors.js';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  expressVersions,
  jsonParser,
  type Listening,
  listen,
  Signals,
  until,
  watchProcess,
  watchQueue,
} from './helpers.js';

type Outcome = { ok: true; status: number } | { ok: false; error: unknown };

describe.each(expressVersions)('outbound() on %s', (_name, makeApp) => {
  let partner: Partner;
  let limiter: HostLimiter;
  let gate: Semaphore;
  let app: express.Express;
  let service: Listening;
  let outcomes: Signals<Outcome>;
  let entered: Signals<void>;
  let reachedFinalHandler: unknown[];
  let proc: ReturnType<typeof watchProcess>;
  let middleware: ReturnType<typeof outbound>;

  beforeEach(async () => {
    proc = watchProcess();
    partner = await startPartner();
    limiter = new HostLimiter({
      partners: [
        { name: 'partner', hosts: [partner.origin], limit: 1, maxQueue: 10, queueTimeout: 10_000 },
      ],
    });
    gate = limiter.gate('partner')!;
    outcomes = new Signals();
    entered = new Signals();
    reachedFinalHandler = [];
    app = makeApp();
    middleware = outbound({ limiter });
    app.use(middleware);
    const handle = (
      req: express.Request,
      res: express.Response,
      next: express.NextFunction,
      params: { id: string; via: string; path: string },
    ) => {
      entered.resolve(params.id);
      const url = partner.url + params.path;
      const call =
        params.via === 'request'
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
          outcomes.resolve(params.id, { ok: true, status });
          res.json({ status });
        },
        (error: unknown) => {
          outcomes.resolve(params.id, { ok: false, error });
          next(error);
        },
      );
    };
    app.get('/call', (req, res, next) =>
      handle(req, res, next, {
        id: String(req.query.id),
        via: String(req.query.via),
        path: String(req.query.path),
      }),
    );
    app.post('/call', jsonParser(makeApp), (req, res, next) => handle(req, res, next, req.body));
    app.get('/listeners', (req, res) => {
      const socket = req.socket;
      res.json({
        socket: socket.eventNames().map((e) => [String(e), socket.listenerCount(e)]),
        resClose: res.listenerCount('close'),
        localPort: socket.remotePort,
      });
    });
    app.use(shed());
    app.use(
      (err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
        reachedFinalHandler.push(err);
        res.status(500).end();
      },
    );
    service = await listen(app);
  });

  afterEach(async () => {
    await service.close();
    await partner.close();
    await middleware.close();
    proc.stop();
    expect(proc.warnings).toEqual([]);
    expect(proc.rejections).toEqual([]);
  });

  function start(method: 'GET' | 'POST', params: { id: string; via: string; path: string }) {
    const t =
      method === 'GET'
        ? request(service.server).get('/call').query(params)
        : request(service.server).post('/call').send(params);
    const done = t.then(
      (r) => r,
      (e: unknown) => e,
    );
    return { t, done };
  }

  describe.each([
    ['GET', 'fetch'],
    ['GET', 'request'],
    ['POST', 'fetch'],
    ['POST', 'request'],
  ] as const)('%s with %s', (method, via) => {
    test('a call waiting for a permit leaves the queue when its client disconnects', async () => {
      const queue = watchQueue(gate);
      const holder = start('GET', { id: 'holder', via: 'fetch', path: '/held' });
      await partner.waitForActive(1);

      const waiter = start(method, { id: 'waiter', via, path: '/ok' });
      await queue.waitForQueued(1);
      expect(gate.queued).toBe(1);
      waiter.t.abort();

      const outcome = await outcomes.wait('waiter');
      expect(outcome.ok).toBe(false);
      expect(outcome.ok === false && findDisconnect(outcome.error)).toBeInstanceOf(
        ClientDisconnectedError,
      );
      expect(gate.queued).toBe(0);
      expect(gate.held).toBe(1);
      expect(gate.stats().abortedWaiting).toBe(1);
      expectInvariant(gate);

      partner.release();
      const answer = await holder.done;
      expect(answer).toMatchObject({ status: 200 });
      expect(await outcomes.wait('holder')).toEqual({ ok: true, status: 200 });
      expect(partner.arrived).toBe(1); // the cancelled waiter never reached the partner
      expect(gate.held).toBe(0);
      expectInvariant(gate);
      expect(reachedFinalHandler).toEqual([]);
    });

    test('an in-flight call is closed at the partner when its client disconnects', async () => {
      const caller = start(method, { id: 'caller', via, path: '/held' });
      await partner.waitForActive(1);
      expect(gate.held).toBe(1);
      caller.t.abort();

      await partner.waitForClosedEarly(1);
      const outcome = await outcomes.wait('caller');
      expect(outcome.ok === false && findDisconnect(outcome.error)).toBeInstanceOf(
        ClientDisconnectedError,
      );
      // A cancelled call's permit returns once the partner has seen the close (afterTeardown).
      await until(() => gate.held === 0, 'released');
      expect(gate.held).toBe(0);
      expect(gate.available).toBe(1);
      expectInvariant(gate);
      expect(reachedFinalHandler).toEqual([]);

      // The gate works on: the next call gets the freed permit straight away.
      const next = await start(method, { id: 'next', via, path: '/ok' }).done;
      expect(next).toMatchObject({ status: 200, body: { status: 200 } });
      expect(gate.held).toBe(0);
    });
  });

  test('a JSON POST is not mistaken for a disconnect once its body has been read', async () => {
    // req 'close' fires when the body parser finishes; the signal must not abort then.
    const caller = start('POST', { id: 'post', via: 'fetch', path: '/held' });
    await partner.waitForActive(1);
    partner.release();
    expect(await caller.done).toMatchObject({ status: 200, body: { status: 200 } });
    expect(partner.closedEarly).toBe(0);
  });

  test('keep-alive: one socket serves many requests and no listener piles up on it', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const snapshots: { socket: [string, number][]; resClose: number; localPort: number }[] = [];
      for (let i = 0; i < 25; i++) {
        const r = await request(service.server).get('/listeners').agent(agent);
        snapshots.push(r.body);
        const ok = await request(service.server)
          .get('/call')
          .query({ id: `ka${i}`, via: i % 2 ? 'fetch' : 'request', path: '/ok' })
          .agent(agent);
        expect(ok.status).toBe(200);
      }
      const ports = new Set(snapshots.map((s) => s.localPort));
      expect(ports.size).toBe(1); // really the same connection
      expect(snapshots.at(-1)).toEqual(snapshots[0]);
      // A disconnect on a keep-alive connection is seen and cleaned up too.
      const caller = request(service.server)
        .get('/call')
        .query({ id: 'ka-drop', via: 'fetch', path: '/held' })
        .agent(agent);
      caller.then(
        () => {},
        () => {},
      );
      await partner.waitForActive(1);
      caller.abort();
      await partner.waitForClosedEarly(1);
      await outcomes.wait('ka-drop');
      // A cancelled call's permit returns once the partner has seen the close (afterTeardown).
      await until(() => gate.held === 0, 'released');
      expect(gate.held).toBe(0);
    } finally {
      agent.destroy();
    }
  });

  test("a caller's own signal is combined with the request's, not replaced", async () => {
    const own = new AbortController();
    const results = new Signals<unknown>();
    const local = makeApp();
    const mw = outbound({ limiter });
    local.use(mw);
    local.get('/own', (req, res) => {
      req.outbound.fetch(`${partner.url}/held`, { signal: own.signal }).then(
        () => res.end('?'),
        (error: unknown) => {
          results.resolve('own', error);
          res.status(499).end('cancelled');
        },
      );
    });
    const s = await listen(local);
    try {
      const pending = request(s.server).get('/own');
      const done = pending.then((r) => r.status);
      await partner.waitForActive(1);
      own.abort(new Error('caller gave up'));
      expect(await results.wait('own')).toMatchObject({ message: 'caller gave up' });
      await partner.waitForClosedEarly(1);
      expect(await done).toBe(499);
      // A cancelled call's permit returns once the partner has seen the close (afterTeardown).
      await until(() => gate.held === 0, 'released');
      expect(gate.held).toBe(0);
    } finally {
      await s.close();
      await mw.close();
    }
  });

  test('a signal read after the client left is already aborted', async () => {
    const local = makeApp();
    const mw = outbound({ limiter });
    const seen = new Signals<AbortSignal>();
    const closed = new Signals<void>();
    local.use(mw);
    local.get('/late', (req, res) => {
      res.once('close', () => closed.resolve('late'));
      entered.resolve('late');
      // Reads the signal only after the client has gone.
      closed.wait('late').then(() => seen.resolve('late', req.outbound.signal));
    });
    const s = await listen(local);
    try {
      const t = request(s.server).get('/late');
      t.then(
        () => {},
        () => {},
      );
      await entered.wait('late');
      t.abort();
      const signal = await seen.wait('late');
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(ClientDisconnectedError);
    } finally {
      await s.close();
      await mw.close();
    }
  });
});

function findDisconnect(error: unknown): unknown {
  let current = error;
  for (let i = 0; i < 8 && current != null; i++) {
    if (current instanceof ClientDisconnectedError) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return error;
}
