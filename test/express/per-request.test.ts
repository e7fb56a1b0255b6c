import type express from 'express';
import request from 'supertest';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import { ClientDisconnectedError } from '../../src/common/errors.js';
import { limitHosts } from '../../src/http/limit-hosts.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import {
  expressVersions,
  type Listening,
  listen,
  Signals,
  until,
  watchProcess,
} from './helpers.js';

describe.each(expressVersions)('outbound({ perRequest }) on %s', (_name, makeApp) => {
  let partner: Partner;
  let service: Listening | undefined;
  let proc: ReturnType<typeof watchProcess>;
  let outcomes: Signals<PromiseSettledResult<number>[]>;
  let closers: (() => Promise<void>)[];

  beforeEach(async () => {
    proc = watchProcess();
    partner = await startPartner();
    outcomes = new Signals();
    closers = [];
  });
  afterEach(async () => {
    await service?.close();
    service = undefined;
    for (const close of closers) await close();
    await partner.close();
    proc.stop();
    expect(proc.warnings).toEqual([]);
    expect(proc.rejections).toEqual([]);
  });

  /** `/fan?n=12&path=/held&via=request`: n parallel calls, answered with their statuses. */
  async function serve(options: Parameters<typeof outbound>[0], limiter: HostLimiter) {
    const app = makeApp();
    const mw = outbound(options);
    closers.push(() => mw.close());
    app.use(mw);
    app.get('/fan', (req: express.Request, res, next) => {
      const n = Number(req.query.n);
      const url = `${partner.url}${String(req.query.path)}`;
      const calls = Array.from({ length: n }, (_, i) =>
        req.query.via === 'fetch' || (req.query.via === 'mixed' && i % 2)
          ? req.outbound.fetch(url).then(async (r) => {
              await r.text();
              return r.status;
            })
          : req.outbound.request(url).then(async (r) => {
              await r.body.text();
              return r.statusCode;
            }),
      );
      Promise.allSettled(calls).then((settled) => {
        outcomes.resolve(String(req.query.id), settled);
        const failed = settled.find((s) => s.status === 'rejected');
        if (failed) next(failed.reason);
        else res.json(settled.map((s) => (s as PromiseFulfilledResult<number>).value));
      });
    });
    app.use(shed());
    service = await listen(app);
    return limiter.gate('partner')!;
  }

  function limiterFor(limit: number, maxQueue = 1000) {
    return new HostLimiter({
      partners: [
        { name: 'partner', hosts: [partner.origin], limit, maxQueue, queueTimeout: 10_000 },
      ],
    });
  }

  test('one request fanning out 12 calls has at most perRequest of them at the partner', async () => {
    const limiter = limiterFor(20);
    const gate = await serve({ limiter, perRequest: 3 }, limiter);
    const done = request(service!.server)
      .get('/fan')
      .query({ id: 'a', n: 12, path: '/held', via: 'mixed' })
      .then((r) => r);
    for (let wave = 1; wave <= 4; wave++) {
      await partner.waitForArrived(wave * 3);
      await partner.waitForActive(3);
      expect(partner.active).toBe(3);
      expect(gate.held).toBe(3);
      expect(gate.queued).toBe(0); // the other calls wait in the per-request gate, not here
      partner.release();
    }
    const r = await done;
    expect(r.status).toBe(200);
    expect(r.body).toEqual(Array(12).fill(200));
    expect(partner.peak).toBe(3);
    expect(partner.arrived).toBe(12);
    expect(gate.held).toBe(0);
    expectInvariant(gate);
  });

  test('many fanning requests against a tight partner gate all finish (no deadlock)', async () => {
    const limiter = limiterFor(3);
    const gate = await serve({ limiter, perRequest: 2 }, limiter);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        request(service!.server)
          .get('/fan')
          .query({ id: `r${i}`, n: 6, path: '/ok?delay=1', via: i % 2 ? 'fetch' : 'request' }),
      ),
    );
    for (const r of results) expect(r.status).toBe(200);
    expect(partner.peak).toBeLessThanOrEqual(3);
    expect(partner.arrived).toBe(120);
    expect(gate.held).toBe(0);
    expect(gate.queued).toBe(0);
    expectInvariant(gate);
  });

  test('a disconnect cancels the calls waiting in the per-request gate and those in flight', async () => {
    const limiter = limiterFor(20);
    const gate = await serve({ limiter, perRequest: 3 }, limiter);
    const t = request(service!.server)
      .get('/fan')
      .query({ id: 'gone', n: 12, path: '/held', via: 'mixed' });
    t.then(
      () => {},
      () => {},
    );
    await partner.waitForActive(3);
    t.abort();
    const settled = await outcomes.wait('gone');
    await partner.waitForClosedEarly(3);
    expect(settled).toHaveLength(12);
    for (const s of settled) {
      expect(s.status).toBe('rejected');
      const reason = (s as PromiseRejectedResult).reason;
      expect(
        reason instanceof ClientDisconnectedError ||
          reason?.cause instanceof ClientDisconnectedError,
      ).toBe(true);
    }
    expect(partner.arrived).toBe(3);
    // A cancelled call's permit returns once the partner has seen the close (afterTeardown).
    await until(() => gate.held === 0, 'released');
    expect(gate.held).toBe(0);
    expectInvariant(gate);
  });

  test("works with a user's own composed dispatcher", async () => {
    const limiter = limiterFor(2);
    const agent = new Agent();
    closers.push(() => agent.close());
    const gate = await serve(
      { dispatcher: agent.compose(limitHosts(limiter)), perRequest: 4 },
      limiter,
    );
    const r = await request(service!.server)
      .get('/fan')
      .query({ id: 'own', n: 15, path: '/ok?delay=1', via: 'fetch' });
    expect(r.status).toBe(200);
    expect(partner.peak).toBeLessThanOrEqual(2);
    expect(gate.stats().acquired).toBe(15);
    expect(gate.held).toBe(0);
  });

  test('a fan-out wider than 10 on one signal prints no MaxListeners warning (no perRequest)', async () => {
    const limiter = limiterFor(50);
    await serve({ limiter }, limiter);
    const r = await request(service!.server)
      .get('/fan')
      .query({ id: 'wide', n: 40, path: '/ok', via: 'request' });
    expect(r.status).toBe(200);
    // afterEach checks proc.warnings is empty
  });
});
