import type express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import { QueueFullError } from '../../src/common/errors.js';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  expressVersions,
  type Listening,
  listen,
  Signals,
  watchProcess,
  watchQueue,
} from './helpers.js';

type Outcome = { ok: true; status: number } | { ok: false; error: unknown };

const PRIORITIES = [
  { name: 'interactive', share: 0.75 },
  { name: 'batch', share: 0.25 },
];

describe.each(expressVersions)('outbound({ priority }) on %s', (_name, makeApp) => {
  let partner: Partner;
  let plain: Partner;
  let limiter: HostLimiter;
  let gate: Semaphore;
  let service: Listening;
  let outcomes: Signals<Outcome>;
  let served: string[];
  let proc: ReturnType<typeof watchProcess>;
  let middleware: ReturnType<typeof outbound>;

  beforeEach(async () => {
    proc = watchProcess();
    partner = await startPartner();
    plain = await startPartner();
    limiter = new HostLimiter({
      partners: [
        {
          name: 'classed',
          hosts: [partner.origin],
          limit: 1,
          maxQueue: 2,
          queueTimeout: 10_000,
          priorities: PRIORITIES,
        },
        { name: 'plain', hosts: [plain.origin], limit: 1 },
      ],
    });
    gate = limiter.gate('classed')!;
    outcomes = new Signals();
    served = [];
    const app = makeApp();
    middleware = outbound({
      limiter,
      priority: (req) => req.headers['x-class'] as string | undefined,
    });
    app.use(middleware);
    app.get('/call', (req, res, next) => {
      const id = String(req.query.id);
      const base = req.query.to === 'plain' ? plain.url : partner.url;
      const url = base + String(req.query.path ?? '/ok');
      const own = req.query.own === undefined ? {} : { priorityClass: String(req.query.own) };
      const call =
        req.query.via === 'request'
          ? req.outbound.request(url, own).then(async (r) => {
              await r.body.text();
              return r.statusCode;
            })
          : req.outbound.fetch(url, own).then(async (r) => {
              await r.text();
              return r.status;
            });
      call.then(
        (status) => {
          served.push(id);
          outcomes.resolve(id, { ok: true, status });
          res.json({ status });
        },
        (error: unknown) => {
          outcomes.resolve(id, { ok: false, error });
          next(error);
        },
      );
    });
    app.use(shed());
    app.use(
      (err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
        res
          .status(500)
          .json({ message: (err as Error).message, cause: String((err as Error).cause) });
      },
    );
    service = await listen(app);
  });

  afterEach(async () => {
    await service.close();
    await partner.close();
    await plain.close();
    await middleware.close();
    proc.stop();
    expect(proc.warnings).toEqual([]);
    expect(proc.rejections).toEqual([]);
  });

  function call(id: string, query: Record<string, string>, cls?: string) {
    const t = request(service.server)
      .get('/call')
      .query({ id, ...query });
    if (cls !== undefined) t.set('x-class', cls);
    return t.then(
      (r) => r,
      (e: unknown) => e as request.Response,
    );
  }

  describe.each(['fetch', 'request'])('with %s', (via) => {
    test('a full queue sheds the newest batch call for an interactive one, which is served first', async () => {
      const queue = watchQueue(gate);
      const holder = call('holder', { via, path: '/held' });
      await partner.waitForActive(1);
      const b0 = call('b0', { via }, 'batch');
      const b1 = call('b1', { via }, 'batch');
      await queue.waitForQueued(2); // the holder took the free permit without waiting
      expect(gate.stats().priorities).toMatchObject({ batch: { queued: 2 } });

      const i0 = call('i0', { via }, 'interactive'); // the queue is full: b1 makes room
      const shedB1 = await b1;
      expect(shedB1.status).toBe(503);
      expect(shedB1.headers['retry-after']).toBeDefined();
      const b1Outcome = await outcomes.wait('b1');
      expect(b1Outcome.ok).toBe(false);
      expect(b1Outcome.ok === false && findCause(b1Outcome.error)).toBeInstanceOf(QueueFullError);
      expect(gate.stats().priorities).toMatchObject({
        interactive: { queued: 1, shedQueueFull: 0 },
        batch: { queued: 1, shedQueueFull: 1 },
      });

      partner.openHeld();
      for (const r of [await holder, await i0, await b0]) expect(r.status).toBe(200);
      expect(served).toEqual(['holder', 'i0', 'b0']);
      expect(gate.stats().priorities).toMatchObject({
        interactive: { acquired: 2 },
        batch: { acquired: 1 },
      });
      expect(gate.held).toBe(0);
      expectInvariant(gate);
    });

    test("a call's own priorityClass wins over the request's", async () => {
      const r = await call('own', { via, own: 'batch' }, 'interactive');
      expect(r.status).toBe(200);
      expect(gate.stats().priorities).toMatchObject({
        interactive: { acquired: 0 },
        batch: { acquired: 1 },
      });
    });

    test('a gate without classes ignores the class', async () => {
      const r = await call('plain', { via, to: 'plain' }, 'batch');
      expect(r.status).toBe(200);
      expect(limiter.gate('plain')!.stats()).toMatchObject({ acquired: 1, held: 0 });
    });

    test('an unknown class on a gate with classes fails the call with a TypeError naming them', async () => {
      const r = await call('typo', { via }, 'bulk');
      expect(r.status).toBe(500);
      expect(`${r.body.message} ${r.body.cause}`).toMatch(
        /priority must be one of interactive, batch, got "bulk"/,
      );
      expect(gate.stats()).toMatchObject({ acquired: 0, held: 0, queued: 0 });
      expect(partner.arrived).toBe(0);
    });
  });

  test('without a class a request waits in the first one', async () => {
    expect((await call('none', { via: 'fetch' })).status).toBe(200);
    expect(gate.stats().priorities).toMatchObject({ interactive: { acquired: 1 } });
  });
});

test('outbound({ priority }) rejects what is not a class name or a function', () => {
  expect(() => outbound({ limiter: { partners: [] }, priority: 5 as never })).toThrow(
    /outbound: priority must be a class name or a function of the request, got 5/,
  );
  expect(() => outbound({ limiter: { partners: [] }, priority: '' })).toThrow(TypeError);
});

function findCause(error: unknown): unknown {
  let current = error;
  for (let i = 0; i < 4 && current != null; i++) {
    if (current instanceof QueueFullError) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return current;
}
